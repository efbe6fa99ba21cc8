"""The declared interface of the native modules: every entry, its arguments named once.

WHAT IT IS
    Each native module (the CPU builds `_native_amx`, `_native_v4`, `_native_v3`, and
    the GPU build `_native_gpu`) registers entries that take ONE tuple of plain
    Python ints (addresses, sizes, flags) that the Python layer has validated. This
    table names each entry's tuple items, in order; the `.pyi` stubs beside the
    modules are rendered from it (`python -m mojolearn._core.api --write-stubs`),
    and tests/test_native_api.py checks that every CPU build and the GPU module's
    source register exactly the entries declared here, that the Mojo docstrings give
    the same number of arguments, and that the stubs are not stale.

WHERE
    "both"  the CPU builds and the GPU module (the same tuple on both: the calls do
            not know which backend serves them)
    "cpu"   the CPU builds only (the model ops, test support: MXCSR, the block
            table, the CPU run of the GPU bodies as gpu_ref_*, which is also the
            reference backend of the GPU model driver)
    "gpu"   the GPU module only
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

_GEMM_TAIL = ("tasks", "sabotage", "ws_addr", "ws_bytes")


@dataclass(frozen=True)
class Entry:
    name: str
    args: tuple
    where: str  # "both", "cpu" or "gpu"
    returns: str = "None"
    doc: str = ""


ENTRIES = (
    # converters (contract L-1 .. L-6, W-1 .. W-3)
    Entry("to_bf16", ("src_f32", "dst_u16", "n", "tasks"), "both", doc="L-2 narrow"),
    Entry("from_bf16", ("src_u16", "dst_f32", "n", "tasks"), "both", doc="L-1 widen"),
    Entry("quantize_int8", ("src_f32", "codes_i8", "exps_i32", "m", "k", "tasks"), "both"),
    Entry("quantize_int15", ("src_f32", "hi_i8", "lo_i8", "exps_i32", "m", "k", "tasks"), "both"),
    Entry("dequantize_int8", ("codes_i8", "exps_i32", "dst_f32", "m", "k", "tasks"), "both"),
    Entry("dequantize_int15", ("hi_i8", "lo_i8", "exps_i32", "dst_f32", "m", "k", "tasks"), "both"),
    # GEMMs: return the workspace bytes the call needed (0 on the GPU)
    Entry("gemm_f32", ("a", "b", "c", "m", "n", "k", "trans_a", "trans_b", "a_bf16", "b_bf16",
                       "mode") + _GEMM_TAIL, "both", "int",
          "fp32.v1 / bf16f32.v1 (mode: the numeric mode, 0 identical 1 deterministic 2 fast, "
          "3 fast with TF32 allowed (the GPU build's cuBLAS; the CPU runs it as 2); "
          "-L: leaves of exactly L, a k-split piece, rule 6.7)"),
    Entry("gemm_int8", ("a_codes", "a_exps", "b_codes", "b_exps", "c", "m", "n", "k")
          + _GEMM_TAIL, "both", "int", "int8i32.v1"),
    Entry("gemm_int15", ("a_hi", "a_lo", "a_exps", "b_hi", "b_lo", "b_exps", "c", "m", "n", "k")
          + _GEMM_TAIL, "both", "int", "int15i64.v1"),
    # prepared weights (linalg.prepare): B packed once, then multiplied as gemm_f32 would
    Entry("gemm_f32_pack", ("b", "dst", "n", "k", "trans_b", "b_bf16", "tasks"), "cpu",
          doc="pack B for gemm_f32_packed: ceil(n / NR) * NR * k float32"),
    Entry("gemm_f32_packed", ("a", "b_packed", "c", "m", "n", "k", "trans_a", "a_bf16", "b_fmt",
                              "b_scales", "mode") + _GEMM_TAIL, "cpu", "int",
          "fp32.v1 / bf16f32.v1, B prepared (b_fmt 0 float32, 1 bf16, 2 int8 panels)"),
    Entry("gemm_f32_pack_lowbit", ("b", "exps", "dst", "scales", "n", "k", "trans_b", "fmt",
                                   "tasks"), "cpu",
          doc="pack bf16 bits (fmt 1) or int8 codes (fmt 2) into gemm_f32_packed's panels"),
    Entry("gemm_int_pack_words", ("n", "k", "int15"), "cpu", "int",
          "32-bit words gemm_int_pack writes on this build"),
    Entry("gemm_int_pack", ("b_hi", "b_lo", "n", "k", "int15", "dst", "tasks"), "cpu",
          doc="pack B's codes once for gemm_int8_packed / gemm_int15_packed"),
    Entry("gemm_int8_packed", ("a_codes", "a_exps", "b_codes", "b_exps", "b_packed", "c", "m", "n",
                               "k") + _GEMM_TAIL, "cpu", "int", "int8i32.v1, B prepared"),
    Entry("gemm_int15_packed", ("a_hi", "a_lo", "a_exps", "b_hi", "b_lo", "b_exps", "b_packed", "c",
                                "m", "n", "k") + _GEMM_TAIL, "cpu", "int", "int15i64.v1, B prepared"),
    # the k-split (contract 6.7, L-8): pieces of a product over a range of k and their folds
    Entry("f32_leaf", ("k", "mode"), "cpu", "int", "the leaf size a product over k runs (6.2)"),
    Entry("f32_tree_add", ("x", "y", "out", "count", "tasks"), "cpu",
          doc="ftz(x + y) element by element (6.4's tree sum)"),
    Entry("int_sums", ("a_hi", "a_lo", "b_hi", "b_lo", "out_i64", "m", "n", "k", "int15", "tasks"),
          "cpu", doc="exact int64 sums of code products, NT (L-8)"),
    Entry("int_sums_add", ("x_i64", "y_i64", "out_i64", "count"), "cpu"),
    Entry("int_epilogue", ("s_i64", "ea", "eb", "c", "m", "n", "tasks"), "cpu",
          doc="ftz(f32(S) * pow2f(ea[i] + eb[j])) (L-5, W-3)"),
    Entry("row_absmax", ("src_f32", "out_u32", "m", "k", "tasks"), "cpu",
          doc="the quantizers' absmax of each row, as bits (L-3)"),
    Entry("quantize_int8_part", ("src_f32", "absmax_u32", "codes_i8", "exps_i32", "m", "k",
                                 "tasks"), "cpu"),
    Entry("quantize_int15_part", ("src_f32", "absmax_u32", "hi_i8", "lo_i8", "exps_i32", "m",
                                  "k", "tasks"), "cpu"),
    Entry("strided_copy", ("src", "dst", "itemsize", "ndim", "shape", "byte_strides"), "both"),
    Entry("mxcsr", (), "both", "int", "the calling thread's MXCSR"),
    # CPU builds only
    Entry("mxcsr_set", ("value",), "cpu", "int", "tests only: set MXCSR, return the old value"),
    Entry("isa", (), "cpu", "str", "the instruction sets of this build"),
    Entry("blocking", (), "cpu", "str", "the block-size table, 'NAME=value;...'"),
    Entry("fma_peak", ("iters", "tasks", "x_bits", "y_bits", "out_f32"), "cpu",
          doc="the FMA-peak loop (gemm/cpu/peak.mojo): each task's checksum to out[t]"),
    Entry("set_cache_sizes", ("l1d", "l2", "l3"), "cpu", "None",
          "make the process's cache plan for these sizes in bytes (0: unknown)"),
    Entry("nn_gather", ("table_f32", "ids_i64", "out_f32", "rows", "d", "tasks"), "cpu"),
    Entry("nn_gather_panels", ("panels", "fmt", "scales", "ids_i64", "out_f32", "rows", "d",
                               "nr", "tasks"),
          "cpu", doc="M-2 from a table held as prepared fp32.v1 panels (float32, bf16, int8)"),
    Entry("nn_rmsnorm", ("x", "ldx", "w", "out", "ldo", "rows", "d", "eps_bits", "tasks"), "cpu"),
    Entry("nn_rope_table", ("cos_f32", "sin_f32", "positions", "head_dim", "theta_bits", "tasks"), "cpu"),
    Entry("nn_rope", ("src", "lds", "dst", "ldd", "dst_head_stride", "n_heads", "head_dim", "cos",
                      "sin", "pos0", "length", "rows", "transposed", "tmax", "tasks", "rot_dim"),
          "cpu"),
    Entry("nn_silu_mul", ("g", "u", "ld_in", "out", "ld_out", "n", "rows", "tasks"), "cpu"),
    Entry("nn_add", ("x", "ldx", "y", "ldy", "out", "ldo", "n", "rows", "tasks"), "cpu"),
    Entry("nn_attention", ("q", "ldq", "kt", "v", "out", "batch", "length", "n_heads", "n_kv",
                           "head_dim", "pos0", "tmax", "fixed15", "tasks"), "cpu"),
    Entry("nn_elementwise", ("op", "src", "dst", "n"), "cpu"),
    Entry("nn_attn_scale", ("head_dim",), "cpu", "int"),
    Entry("nn_softmax", ("x", "out", "rows", "n", "log", "tasks"), "cpu"),
    Entry("nn_mean", ("x", "out", "rows", "n", "tasks"), "cpu"),
    Entry("nn_sample_rows", ("x", "rows", "n", "r", "out"), "cpu"),
    # the state-space ops (contracts/ops/IDENTICAL_SSM_CONTRACT.md, rules S-*)
    Entry("ssm_norm_lanes", ("x", "ldx", "w", "out", "ldo", "rows", "n", "eps_bits", "tasks"),
          "cpu", doc="S-10: 32 lanes, then a pairwise tree"),
    Entry("ssm_conv", ("x", "ldx", "w", "bias", "window", "out", "ldo", "batch", "length",
                       "channels", "silu", "tasks"), "cpu",
          doc="S-13 over the window, SiLU after when silu != 0"),
    Entry("ssm_softplus", ("x", "ldx", "bias", "out", "ldo", "rows", "n", "clamp", "lo_bits",
                           "hi_bits", "tasks"), "cpu", doc="S-14 of x + bias; S-19's clamp"),
    Entry("ssm_neg_exp", ("x", "out", "n"), "cpu", doc="S-15: A = neg(expf(A_log))"),
    Entry("mamba1_scan", ("u", "ldu", "delta", "ldd", "a", "bc", "ldbc", "b_off", "c_off", "d",
                          "z", "ldz", "h", "out", "ldo", "batch", "length", "di", "tasks"),
          "cpu", doc="S-17, S-18 up to the gate; h in place"),
    Entry("mamba2_ssd", ("xbc", "ldx", "dt", "a", "d", "z", "ldz", "h", "open_x", "open_dt",
                         "seg", "cs", "out", "ldo", "batch", "length", "heads", "di", "q0",
                         "tasks"), "cpu",
          doc="S-19 .. S-28 from the conv output to the gate; the state in place"),
    # the training primitives (training-arithmetic-v1, rules T-*; mojo/train/cpu/entry.mojo)
    Entry("train_rms_norm_backward", ("dy", "x", "w", "dx", "dw", "rows", "d", "eps_bits", "tasks"),
          "cpu", doc="T-9 .. T-11: dx, and dw = fold(k = rows) per column"),
    Entry("train_fold_rows", ("x", "out", "rows", "n", "tasks"), "cpu",
          doc="T-2: out[c] = fold(k = rows) of column c"),
    Entry("train_gather", ("table", "ids_i64", "out", "rows", "d", "tasks"), "cpu",
          doc="T-12: the gather, every value flushed"),
    Entry("train_embedding_backward", ("dy", "ids_i64", "acc", "tokens", "d", "tasks"), "cpu",
          doc="T-13: one chain per vocab row, t ascending, into acc in place"),
    Entry("train_ce_rows", ("logits", "targets_i64", "rows_out", "grad_out", "n", "v",
                            "ignore_index", "smoothing_bits", "d_bits", "tasks"), "cpu",
          doc="T-14 .. T-16 row losses; T-18 gradient when grad_out != 0"),
    Entry("train_scalar", ("op", "a_bits", "b_bits"), "cpu", "int",
          "one flushed float32 operation as bits: op 0 div, 1 add, 2 sub, 3 mul"),
    Entry("train_clip", ("addrs_i64", "sizes_i64", "count", "norms_out", "max_norm_bits", "tasks"),
          "cpu", "int", "T-23 .. T-25: norms, total, rescale in place; the coefficient's bits, "
          "-1 when the total is not finite (nothing rescaled)"),
    Entry("train_tree_sum", ("addrs_i64", "count", "out", "n", "tasks"), "cpu",
          doc="T-26: the balanced pairwise tree over count arrays"),
    Entry("train_adam", ("p_addrs", "g_addrs", "sizes", "count", "m_flat", "v_flat", "t",
                         "lr_bits", "b1_bits", "b2_bits", "eps_bits", "wd_bits", "decoupled",
                         "maximize", "tasks"), "cpu",
          doc="T-29 .. T-32, T-34: one Adam (decoupled 0) / AdamW (1) step in place"),
    Entry("train_sgd", ("p_addrs", "g_addrs", "sizes", "count", "buf_flat", "flags_i32",
                        "lr_bits", "momentum_bits", "dampening_bits", "wd_bits", "nesterov",
                        "maximize", "tasks"), "cpu",
          doc="T-33, T-34: one SGD step in place"),
    Entry("train_first_nonfinite", ("x", "n", "tasks"), "cpu", "int",
          doc="T-41: the flat index of the first NaN or inf, or -1"),
    Entry("train_neg", ("x", "out", "n", "tasks"), "cpu", doc="T-1's neg: every sign bit flipped"),
    Entry("train_bias_backward", ("dy", "out", "rows", "n", "tasks"), "cpu",
          doc="T-7: per column the chain over rows ascending of add(acc, dy[r])"),
    Entry("train_lm_head", ("h", "w", "targets_i64", "dh", "dw", "rows", "width", "v", "tasks"),
          "cpu", "int", "T-19 .. T-21: the chunked LM-head mean loss's bits; dh, dw when dh != 0"),
    # the model backward (contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, rules T-47 ..)
    Entry("train_attn_probs", ("q", "ldq", "kt", "p", "batch", "length", "n_heads", "n_kv",
                               "head_dim", "tasks"), "cpu",
          doc="T-47: the forward's attention weights (batch, n_heads, length, length)"),
    Entry("train_softmax_bwd", ("p", "dp", "ds", "rows", "n", "scale_bits", "tasks"), "cpu",
          doc="T-49: the softmax backward, times the attention scale"),
    Entry("train_silu_mul_bwd", ("gu", "ldgu", "dp", "ldp", "dgu", "rows", "ff", "tasks"), "cpu",
          doc="T-52: the gated MLP's (dg, du)"),
    Entry("train_fold_div", ("x", "n", "d_bits"), "cpu", "int",
          "T-17, T-58: the float32 bits of div(fold(k = n)(x), d)"),
    Entry("train_rmsnorm_terms", ("dy", "x", "out", "rows", "d", "eps_bits", "tasks"), "cpu",
          doc="T-11's terms mul(dy, mul(x, rstd)), folded in parts by data-parallel ranks"),
    Entry("train_head_norm_backward", ("dy", "x", "w", "dx", "terms", "tokens", "heads", "hd",
                                       "eps_bits", "tasks"), "cpu",
          doc="T-62: qwen3's per-head norm, dx per (token, head) row and one weight term a token"),
    # the state-space backward (rules T-63 .. T-71; mojo/train/cpu/ssm_entry.mojo)
    Entry("train_ssm_norm_backward", ("dy", "ldy", "x", "ldx", "w", "dx", "ldo", "terms", "ldt",
                                      "rows", "n", "eps_bits", "tasks"), "cpu",
          doc="T-63, T-64: S-10's lane norm backward, dx and one weight term a row"),
    Entry("train_ssm_silu_backward", ("x", "ldx", "dy", "ldy", "out", "ldo", "rows", "n", "tasks"),
          "cpu", doc="T-66: mul(dy, silu'(x))"),
    Entry("train_ssm_softplus_backward", ("raw", "ldr", "bias", "dy", "ldy", "out", "ldo", "rows",
                                          "n", "clamp", "lo_bits", "hi_bits", "tasks"), "cpu",
          doc="T-67: softplus backward at add(raw, bias); +0 where S-19's clamp replaced it"),
    Entry("train_ssm_conv_backward", ("x", "ldx", "w", "dc", "lddc", "dx", "lddx", "terms",
                                      "batch", "length", "channels", "tasks"), "cpu",
          doc="T-65: the causal conv's dx and its weight terms a token"),
    Entry("train_mamba1_scan_backward", ("u", "ldu", "delta", "ldd", "a", "xp", "ldxp", "b_off",
                                         "c_off", "d", "z", "ldz", "dg", "ldg", "du", "ddelta",
                                         "dz", "lddz", "tb", "tc", "ta", "td", "batch", "length",
                                         "di", "tasks"), "cpu",
          doc="T-68 .. T-71: the Mamba-1 scan backward and its per-token terms"),
    Entry("train_ssd_forward", ("xbc", "ldx", "dt", "a", "d", "s", "lds", "hs", "batch", "length",
                                "heads", "di", "tasks"), "cpu",
          doc="T-75: Mamba-2's SSD up to the skip, keeping the state entering every chunk"),
    Entry("train_ssd_backward", ("xbc", "ldx", "dt", "a", "d", "hs", "ds", "ldds", "dxbc", "lddx",
                                 "ddt", "ta", "td", "batch", "length", "heads", "di", "tasks"), "cpu",
          doc="T-77 .. T-85: the SSD's backward (dx, dB, dC, ddt, A_log and D terms a token)"),
    Entry("train_ssd_dt_clamp_bwd", ("g", "v", "out", "n", "lo_bits", "hi_bits", "tasks"), "cpu",
          doc="T-76: the dt clamp's backward"),
    # CPU builds only: the GPU bodies run on the CPU (test support, tests/test_gpu*.py)
    Entry("gpu_ref_gemm_f32", ("a", "b", "c", "m", "n", "k", "trans_a", "trans_b", "a_bf16",
                               "b_bf16"), "cpu"),
    Entry("gpu_ref_gemm_f32_route", ("a", "b", "c", "m", "n", "k", "trans_a", "trans_b", "a_bf16",
                                     "b_bf16", "kernel", "run_leaves", "grid", "route"), "cpu",
          "ints", "(kernel, route, run_leaves, nruns, grid) as run; -1 / 0 arguments: the plan's"),
    Entry("gpu_ref_gemm_int8", ("a_codes", "a_exps", "b_codes", "b_exps", "c", "m", "n", "k"), "cpu"),
    Entry("gpu_ref_gemm_int15", ("a_hi", "a_lo", "a_exps", "b_hi", "b_lo", "b_exps", "c", "m", "n",
                                 "k"), "cpu"),
    Entry("gpu_ref_gemm_int", ("a_hi", "a_lo", "a_exps", "b_hi", "b_lo", "b_exps", "c", "m", "n", "k",
                               "planes", "backend"), "cpu",
          doc="planes 1 int8 / 2 int15; backend 0 SIMT, 1 NVIDIA mma, 2 AMD MFMA (emulated)"),
    Entry("gpu_ref_to_bf16", ("src_f32", "dst_u16", "n"), "cpu"),
    Entry("gpu_ref_from_bf16", ("src_u16", "dst_f32", "n"), "cpu"),
    Entry("gpu_ref_quantize_int8", ("src_f32", "codes_i8", "exps_i32", "m", "k"), "cpu"),
    Entry("gpu_ref_quantize_int15", ("src_f32", "hi_i8", "lo_i8", "exps_i32", "m", "k"), "cpu"),
    Entry("gpu_ref_dequantize_int8", ("codes_i8", "exps_i32", "dst_f32", "m", "k"), "cpu"),
    Entry("gpu_ref_dequantize_int15", ("hi_i8", "lo_i8", "exps_i32", "dst_f32", "m", "k"), "cpu"),
    Entry("gpu_ref_nn_rmsnorm", ("x", "w", "out", "rows", "d", "eps_bits"), "cpu"),
    Entry("gpu_ref_nn_silu_mul", ("g", "u", "ld_in", "out", "ld_out", "rows", "n"), "cpu"),
    Entry("gpu_ref_nn_add", ("x", "ldx", "y", "ldy", "out", "ldo", "rows", "n"), "cpu"),
    Entry("gpu_ref_nn_rope_table", ("cos", "sin", "npos", "head_dim", "theta_bits"), "cpu"),
    Entry("gpu_ref_nn_rope", ("src", "lds", "dst", "ldd", "dhs", "n_heads", "head_dim", "cos",
                              "sin", "pos0", "length", "rows", "transposed", "tmax", "rot_dim"),
          "cpu"),
    Entry("gpu_ref_nn_attention", ("q", "ldq", "kt", "v", "out", "ws", "batch", "length",
                                   "n_heads", "n_kv", "head_dim", "pos0", "tmax", "fixed15"), "cpu"),
    Entry("gpu_ref_nn_gather", ("table", "ids", "out", "rows", "d"), "cpu"),
    Entry("gpu_ref_nn_kv_append", ("src", "lds", "dst", "n_heads", "head_dim", "pos0", "length",
                                   "rows", "tmax"), "cpu"),
    Entry("gpu_ref_nn_sample", ("x", "rows", "n", "r", "out"), "cpu"),
    Entry("gpu_ref_nn_argmax", ("x", "rows", "n", "out"), "cpu"),
    Entry("gpu_ref_ssm_norm_lanes", ("x", "ldx", "w", "out", "ldo", "rows", "n", "eps_bits"),
          "cpu", doc="S-10 by the GPU body (mojo/ssm/gpu/threads.mojo)"),
    Entry("gpu_ref_ssm_conv", ("x", "ldx", "w", "bias", "window", "out", "ldo", "batch", "length",
                               "channels", "silu"), "cpu", doc="S-13 by the GPU body"),
    Entry("gpu_ref_ssm_softplus", ("x", "ldx", "bias", "out", "ldo", "rows", "n", "clamp",
                                   "lo_bits", "hi_bits"), "cpu", doc="S-14 / S-19 by the GPU body"),
    Entry("gpu_ref_ssm_neg_exp", ("x", "out", "n"), "cpu", doc="S-15 by the GPU body"),
    Entry("gpu_ref_ssm_mamba1_scan", ("u", "ldu", "delta", "ldd", "a", "bc", "ldbc", "b_off",
                                      "c_off", "d", "z", "ldz", "h", "out", "ldo", "batch",
                                      "length", "di", "sabotage"), "cpu",
          doc="S-17, S-18 by the GPU body; sabotage 1: the y chain descending (test support)"),
    Entry("gpu_ref_ssm_mamba2_ssd", ("xbc", "ldx", "dt", "a", "d", "z", "ldz", "h", "open_x",
                                     "open_dt", "seg", "cs", "out", "ldo", "batch", "length",
                                     "heads", "di", "q0"), "cpu",
          doc="S-19 .. S-28 by the GPU bodies (gram, unit, store_open)"),
    Entry("gpu_ref_ssm_mamba2_ssd_ws", ("xbc", "ldx", "dt", "a", "d", "z", "ldz", "h", "open_x",
                                        "open_dt", "seg", "cs", "out", "ldo", "batch", "length",
                                        "heads", "di", "q0", "gmat", "ws"), "cpu",
          doc="gpu_ref_ssm_mamba2_ssd with the caller's scratch (the GPU Mamba program's op)"),
    # the training ops' GPU bodies run on the CPU (mojo/train/gpu/cpu_run.mojo; the CPU
    # entries' tuples without tasks)
    Entry("gpu_ref_train_rms_norm_backward", ("dy", "x", "w", "dx", "dw", "rows", "d", "eps_bits"),
          "cpu", doc="T-9 .. T-11"),
    Entry("gpu_ref_train_fold_rows", ("x", "out", "rows", "n"), "cpu", doc="T-2 per column"),
    Entry("gpu_ref_train_rmsnorm_terms", ("dy", "x", "out", "rows", "d", "eps_bits"), "cpu",
          doc="T-11's terms"),
    Entry("gpu_ref_train_embedding_backward", ("dy", "ids_i64", "acc", "tokens", "vocab", "d"),
          "cpu", doc="T-13 into acc in place"),
    Entry("gpu_ref_train_ce_rows", ("logits", "targets_i64", "rows_out", "grad_out", "n", "v",
                                    "ignore_index", "smoothing_bits", "d_bits"), "cpu",
          doc="T-14 .. T-16 row losses; T-18 gradient when grad_out != 0"),
    Entry("gpu_ref_train_clip", ("addrs_i64", "sizes_i64", "count", "norms_out", "max_norm_bits"),
          "cpu", "int", "T-23 .. T-25 as train_clip: the coefficient's bits, or -1"),
    Entry("gpu_ref_train_tree_sum", ("addrs_i64", "count", "out", "n"), "cpu", doc="T-26"),
    Entry("gpu_ref_train_adam", ("p_addrs", "g_addrs", "sizes", "count", "m_flat", "v_flat", "t",
                                 "lr_bits", "b1_bits", "b2_bits", "eps_bits", "wd_bits",
                                 "decoupled", "maximize"), "cpu",
          doc="T-29 .. T-32, T-34"),
    Entry("gpu_ref_train_sgd", ("p_addrs", "g_addrs", "sizes", "count", "buf_flat", "flags_i32",
                                "lr_bits", "momentum_bits", "dampening_bits", "wd_bits", "nesterov",
                                "maximize"), "cpu", doc="T-33, T-34"),
    Entry("gpu_ref_train_softmax_bwd", ("p", "dp", "ds", "rows", "n", "scale_bits"), "cpu",
          doc="T-49"),
    Entry("gpu_ref_train_silu_mul_bwd", ("gu", "ldgu", "dp", "ldp", "dgu", "rows", "ff"), "cpu",
          doc="T-52"),
    Entry("gpu_ref_train_attn_probs", ("q", "ldq", "kt", "p", "batch", "length", "n_heads", "n_kv",
                                       "head_dim"), "cpu", doc="T-47"),
    Entry("gpu_ref_train_fold_div", ("x", "n", "d_bits"), "cpu", "int",
          "T-17, T-58: the float32 bits of div(fold(k = n)(x), d)"),
    Entry("gpu_ref_train_fold_div_into", ("x", "n", "d_bits", "dst"), "cpu",
          doc="T-17, T-58: dst[0] = div(fold(k = n)(x), d) (the training program's loss op)"),
    Entry("gpu_ref_train_neg", ("x", "out", "n"), "cpu",
          doc="T-1's neg: every sign bit flipped (the RoPE backward's sine table)"),
    # GPU module only
    Entry("device_info", (), "gpu", "tuple", "(api, device name)"),
    Entry("gemm_f32_resident", ("a", "b", "c", "m", "n", "k", "trans_a", "trans_b", "a_bf16",
                                "b_bf16", "mode", "sabotage"), "gpu", "int",
          "gemm_f32 on device-resident operands (DLPack device tensors): no copies; mode as "
          "gemm_f32's"),
    Entry("vendor_blas", (), "gpu", "strs",
          "(library, file, reason): the vendor BLAS numeric_mode fast runs on this build "
          "(\"cuBLAS\", \"rocBLAS\", \"\" for none), the file loaded or \"\" and why not"),
    Entry("gemm_int8_resident", ("a_codes", "a_exps", "b_codes", "b_exps", "c", "m", "n", "k"), "gpu",
          doc="int8i32.v1, every address in device memory"),
    Entry("gemm_int15_resident", ("a_hi", "a_lo", "a_exps", "b_hi", "b_lo", "b_exps", "c", "m", "n",
                                  "k"), "gpu", doc="int15i64.v1, every address in device memory"),
    Entry("gemm_int15_quant_a_resident", ("a", "b_hi", "b_lo", "b_exps", "c", "m", "n", "k"), "gpu",
          doc="fixed15_v1's projection: float32 a quantized on the device, then int15i64.v1"),
    Entry("nn_add_resident", ("x", "ldx", "y", "ldy", "out", "ldo", "n", "rows"), "gpu",
          doc="ftz(x + y) row by row on device-resident operands (torch mode's bias add)"),
    # the GPU model (mojo/transformer/gpu/model_entry.mojo): device memory and programs
    Entry("dev_alloc", ("nbytes",), "gpu", "int", "a new device allocation; its address"),
    Entry("dev_free", ("address", "nbytes"), "gpu"),
    Entry("dev_upload", ("dst_dev", "src_host", "nbytes"), "gpu"),
    Entry("dev_download", ("dst_host", "src_dev", "nbytes"), "gpu"),
    Entry("dev_zero", ("address", "nbytes"), "gpu"),
    Entry("dev_memory", (), "gpu", "ints", "(free, total) bytes of device memory"),
    Entry("nn_program_dev", ("ops",), "gpu",
          doc="ops: (name, *args) tuples, each a gpu_ref_* entry's name without the prefix "
              "and its arguments (device addresses), run in order on one device context"),
)

BY_NAME = {e.name: e for e in ENTRIES}
LIST_ARGS = {"shape": "list[int]", "byte_strides": "list[int]", "ops": "list[tuple]"}  # every other item is an int
CPU_MODULES = ("_native_amx", "_native_v4", "_native_v3")
GPU_MODULE = "_native_gpu"


def entries(kind: str) -> tuple:
    """The entries a module of this kind ('cpu' or 'gpu') registers."""
    return tuple(e for e in ENTRIES if e.where in ("both", kind))


def render_stub(kind: str) -> str:
    """The .pyi text of a native module of this kind, rendered from the table."""
    lines = [
        f'"""Type stub of a mojolearn native module ({kind}); rendered from',
        'mojolearn/_core/api.py by `python -m mojolearn._core.api --write-stubs`."""',
        "",
    ]
    for e in entries(kind):
        types = [LIST_ARGS.get(a, "int") for a in e.args]
        items = ", ".join(f"{a}: {t}" for a, t in zip(e.args, types))
        tup = f"tuple[{', '.join(types)}]" if e.args else "tuple[()]"
        ret = {"None": "None", "int": "int", "str": "str", "tuple": "tuple[str, str]",
               "strs": "tuple[str, str, str]", "ints": "tuple[int, ...]"}[e.returns]
        note = f"  # ({items})" if items else ""
        lines.append(f"def {e.name}(args: {tup}, /) -> {ret}: ...{note}")
    return "\n".join(lines) + "\n"


def stub_paths() -> dict:
    here = Path(__file__).resolve().parents[1]  # the package folder, beside the modules
    out = {here / f"{m}.pyi": "cpu" for m in CPU_MODULES}
    out[here / f"{GPU_MODULE}.pyi"] = "gpu"
    return out


def main(argv) -> int:
    if argv != ["--write-stubs"]:
        print("usage: python -m mojolearn._core.api --write-stubs", file=sys.stderr)
        return 2
    for path, kind in stub_paths().items():
        path.write_text(render_stub(kind))
        print(f"wrote {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Offline compile of EVERY GPU kernel for every vendor we ship, without a GPU.

    .venv/bin/mojo run -I mojo mojo/compile_all_gpu.mojo      (make gpu-compile)

Targets: sm_80 and sm_90 (PTX), gfx942 (AMDGCN), apple-m3 (LLVM IR for AIR).
One line per target, e.g. `sm_90: 14 kernels ok (PTX, 123456 bytes)`; any
failure raises (non-zero exit).

WHAT IS CHECKED BEYOND "IT COMPILES"
    PTX     no `.ftz` (hardware flush decides before rounding on some parts and
            the contract flushes explicitly), no `.approx`, no tf32.
    AMDGCN  every kernel runs with `.amdhsa_float_denorm_mode_32 3` (f32
            denormals kept in and out: our explicit flush is the only flush).
    IR      no fast-math flag on any instruction but `contract` (which only
            matters for a multiply feeding an add; these kernels have none:
            every product is an explicit fma or is flushed/rounded before use).
    The Apple toolchain itself marks kernels with fast-math function attributes
    and `air.compile.denorms_disable`: printed as a NOTE, since the bits on
    Apple hardware cannot be checked here.
"""
from max.gpu.host import get_gpu_target
from max.gpu.host.compile import _compile_code
from gemm.gpu.kernels import (
    exponent_min_kernel,
    route_kernel,
    route_flushing_kernel,
    f32_tiled_kernel,
    f32_tree_kernel,
    int_simt_kernel,
    int_mma_kernel,
    int_mfma_kernel,
)
from gemm.gpu.threads import BIG_BM, BIG_BN, BIG_BK, BIG_TM, BIG_TN, THIN_BN, THIN_BK
from gemm.gpu.threads import SMALL_BM, SMALL_BN, SMALL_BK, SMALL_TM, SMALL_TN
from convert.gpu.kernels import (
    to_bf16_kernel,
    from_bf16_kernel,
    row_exponent_kernel,
    quantize_int8_kernel,
    quantize_int15_kernel,
    dequantize_int8_kernel,
    dequantize_int15_kernel,
)

from transformer.gpu.kernels import (
    rmsnorm_kernel,
    silu_mul_kernel,
    add_kernel,
    rope_table_kernel,
    rope_kernel,
    attention_kernel,
)
from transformer.gpu.model_kernels import gather_kernel, kv_append_kernel, sample_kernel, argmax_kernel
from ssm.gpu.kernels import (
    ssm_norm_lanes_kernel,
    ssm_conv_kernel,
    ssm_softplus_kernel,
    ssm_neg_exp_kernel,
    mamba1_scan_kernel,
    ssd_gram_kernel,
    ssd_unit_kernel,
    ssd_store_open_kernel,
)
from train.gpu.kernels import (
    rms_rows_kernel,
    rms_dw_kernel,
    fold_rows_kernel,
    rmsnorm_terms_kernel,
    embedding_bwd_kernel,
    ce_row_kernel,
    ce_grad_kernel,
    clip_leaf_kernel,
    clip_norm_kernel,
    clip_scale_kernel,
    tree_sum_kernel,
    adam_kernel,
    sgd_kernel,
    softmax_bwd_c_kernel,
    softmax_bwd_kernel,
    silu_mul_bwd_kernel,
    attn_probs_kernel,
    fold_div_kernel, neg_kernel,
)

comptime F32 = DType.float32
comptime BF = DType.uint16


struct Tally(Movable):
    var kernels: Int
    var bytes: Int
    var notes: List[String]

    def __init__(out self):
        self.kernels = 0
        self.bytes = 0
        self.notes = List[String]()


def _count(s: String, sub: String) -> Int:
    var n = 0
    var at = s.find(sub)
    while at >= 0:
        n += 1
        at = s.find(sub, at + sub.byte_length())
    return n


def _check(asm: String, kind: String, name: String, tgt: String, mut t: Tally) raises:
    if asm.byte_length() == 0:
        raise Error(String(tgt, ": ", name, ": empty output"))
    if kind == "PTX":
        if asm.find(".entry") < 0:
            raise Error(String(tgt, ": ", name, ": no .entry in the PTX"))
        for bad in [".ftz", ".approx", "tf32"]:
            if asm.find(bad) >= 0:
                raise Error(String(tgt, ": ", name, ": PTX contains ", bad, " (hardware flush / approximate / TF32 arithmetic)"))
    elif kind == "AMDGCN":
        var modes = _count(asm, ".amdhsa_float_denorm_mode_32")
        var keep = _count(asm, ".amdhsa_float_denorm_mode_32 3")
        if modes == 0 or modes != keep:
            raise Error(String(tgt, ": ", name, ": f32 denormal mode is not 3 (preserve) in every kernel"))
    else:
        if asm.find("define") < 0:
            raise Error(String(tgt, ": ", name, ": no function in the IR"))
        for bad in [" fast ", " nnan ", " ninf ", " nsz ", " arcp ", " afn ", " reassoc "]:
            if asm.find(bad) >= 0:
                raise Error(String(tgt, ": ", name, ": an instruction carries the fast-math flag", bad))
        if asm.find("denorms_disable") >= 0 and len(t.notes) == 0:
            t.notes.append(
                "the Apple toolchain marks kernels air.compile.denorms_disable and fast-math"
                " function attributes: bits on Apple hardware are unverified here"
            )
    t.kernels += 1
    t.bytes += asm.byte_length()


def _one[func_type: TrivialRegisterPassable, //, func: func_type, tgt: StaticString](
    name: String, kind: String, mut t: Tally
) raises:
    var info = _compile_code[func, target=get_gpu_target[tgt]()]()
    _check(String(info.asm), kind, name, String(tgt), t)


def _tiled[adt: DType, bdt: DType, tgt: StaticString](dts: String, kind: String, mut t: Tally) raises:
    """The four shapes of the fp32.v1 tiled kernel (threads.mojo) for one operand pair."""
    _one[f32_tiled_kernel[adt, bdt, BIG_BM, BIG_BN, BIG_BK, BIG_TM, BIG_TN], tgt](
        String("f32_tiled_big[", dts, "]"), kind, t)
    _one[f32_tiled_kernel[adt, bdt, 1, THIN_BN, THIN_BK, 1, 1], tgt](
        String("f32_tiled_thin1[", dts, "]"), kind, t)
    _one[f32_tiled_kernel[adt, bdt, 16, THIN_BN, THIN_BK, 16, 1], tgt](
        String("f32_tiled_thin16[", dts, "]"), kind, t)
    _one[f32_tiled_kernel[adt, bdt, SMALL_BM, SMALL_BN, SMALL_BK, SMALL_TM, SMALL_TN], tgt](
        String("f32_tiled_small[", dts, "]"), kind, t)


def compile_target[tgt: StaticString](kind: String) raises -> Tally:
    """Every kernel (every instantiation the host side launches) for one target."""
    var t = Tally()
    _one[exponent_min_kernel[F32], tgt]("exponent_min[f32]", kind, t)
    _one[exponent_min_kernel[BF], tgt]("exponent_min[bf16]", kind, t)
    _one[route_kernel, tgt]("route", kind, t)
    _one[route_flushing_kernel, tgt]("route_flushing", kind, t)
    _tiled[F32, F32, tgt]("f32,f32", kind, t)
    _tiled[F32, BF, tgt]("f32,bf16", kind, t)
    _tiled[BF, F32, tgt]("bf16,f32", kind, t)
    _tiled[BF, BF, tgt]("bf16,bf16", kind, t)
    _one[f32_tree_kernel, tgt]("f32_tree", kind, t)
    # integer profiles: planes 1 (int8) and 2 (int15); the tensor-core kernels compile
    # to their matrix instructions for their own vendor and to an empty body elsewhere
    _one[int_simt_kernel[1], tgt]("int8_simt", kind, t)
    _one[int_simt_kernel[2], tgt]("int15_simt", kind, t)
    _one[int_mma_kernel[1], tgt]("int8_mma", kind, t)
    _one[int_mma_kernel[2], tgt]("int15_mma", kind, t)
    _one[int_mfma_kernel[1], tgt]("int8_mfma", kind, t)
    _one[int_mfma_kernel[2], tgt]("int15_mfma", kind, t)
    _one[to_bf16_kernel, tgt]("to_bf16", kind, t)
    _one[from_bf16_kernel, tgt]("from_bf16", kind, t)
    _one[row_exponent_kernel, tgt]("row_exponent", kind, t)
    _one[quantize_int8_kernel, tgt]("quantize_int8", kind, t)
    _one[quantize_int15_kernel, tgt]("quantize_int15", kind, t)
    _one[dequantize_int8_kernel, tgt]("dequantize_int8", kind, t)
    _one[dequantize_int15_kernel, tgt]("dequantize_int15", kind, t)
    # the transformer ops (contracts/ops)
    _one[rmsnorm_kernel, tgt]("rmsnorm", kind, t)
    _one[silu_mul_kernel, tgt]("silu_mul", kind, t)
    _one[add_kernel, tgt]("add", kind, t)
    _one[rope_table_kernel, tgt]("rope_table", kind, t)
    _one[rope_kernel, tgt]("rope", kind, t)
    _one[attention_kernel, tgt]("attention", kind, t)
    # the model ops (transformer/gpu/model_kernels.mojo)
    _one[gather_kernel, tgt]("gather", kind, t)
    _one[kv_append_kernel, tgt]("kv_append", kind, t)
    _one[sample_kernel, tgt]("sample", kind, t)
    _one[argmax_kernel, tgt]("argmax", kind, t)
    # the state-space ops (contracts/ops/IDENTICAL_SSM_CONTRACT.md; launched by the GPU Mamba model)
    _one[ssm_norm_lanes_kernel, tgt]("ssm_norm_lanes", kind, t)
    _one[ssm_conv_kernel, tgt]("ssm_conv", kind, t)
    _one[ssm_softplus_kernel, tgt]("ssm_softplus", kind, t)
    _one[ssm_neg_exp_kernel, tgt]("ssm_neg_exp", kind, t)
    _one[mamba1_scan_kernel, tgt]("mamba1_scan", kind, t)
    _one[ssd_gram_kernel, tgt]("ssd_gram", kind, t)
    _one[ssd_unit_kernel, tgt]("ssd_unit", kind, t)
    _one[ssd_store_open_kernel, tgt]("ssd_store_open", kind, t)
    # the training ops (train/gpu/kernels.mojo, contracts/ops/IDENTICAL_TRAIN_CONTRACT.md)
    _one[rms_rows_kernel, tgt]("train_rms_rows", kind, t)
    _one[rms_dw_kernel, tgt]("train_rms_dw", kind, t)
    _one[fold_rows_kernel, tgt]("train_fold_rows", kind, t)
    _one[rmsnorm_terms_kernel, tgt]("train_rmsnorm_terms", kind, t)
    _one[embedding_bwd_kernel, tgt]("train_embedding_bwd", kind, t)
    _one[ce_row_kernel, tgt]("train_ce_row", kind, t)
    _one[ce_grad_kernel, tgt]("train_ce_grad", kind, t)
    _one[clip_leaf_kernel, tgt]("train_clip_leaf", kind, t)
    _one[clip_norm_kernel, tgt]("train_clip_norm", kind, t)
    _one[clip_scale_kernel, tgt]("train_clip_scale", kind, t)
    _one[tree_sum_kernel, tgt]("train_tree_sum", kind, t)
    _one[adam_kernel, tgt]("train_adam", kind, t)
    _one[sgd_kernel, tgt]("train_sgd", kind, t)
    _one[softmax_bwd_c_kernel, tgt]("train_softmax_bwd_c", kind, t)
    _one[softmax_bwd_kernel, tgt]("train_softmax_bwd", kind, t)
    _one[silu_mul_bwd_kernel, tgt]("train_silu_mul_bwd", kind, t)
    _one[attn_probs_kernel, tgt]("train_attn_probs", kind, t)
    _one[fold_div_kernel, tgt]("train_fold_div", kind, t)
    _one[neg_kernel, tgt]("train_neg", kind, t)
    if String(tgt) == "apple-m3":
        t.notes.append(
            "sample: M-32 sums in float64, which Metal lacks; the Apple build of the kernel"
            " computes nothing and the GPU model samples the logits on the host (CPU kernel)"
        )
    return t^


def _report(tgt: String, kind: String, t: Tally):
    print(String(tgt, ": ", t.kernels, " kernels ok (", kind, ", ", t.bytes, " bytes)"))
    for n in t.notes:
        print(String("  NOTE ", tgt, ": ", n))


def main() raises:
    _report("sm_80", "PTX", compile_target["sm_80"]("PTX"))
    _report("sm_90", "PTX", compile_target["sm_90"]("PTX"))
    _report("gfx942", "AMDGCN", compile_target["gfx942"]("AMDGCN"))
    _report("apple-m3", "LLVM IR", compile_target["apple-m3"]("LLVM IR"))

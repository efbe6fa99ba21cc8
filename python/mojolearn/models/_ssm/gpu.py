"""The GPU Mamba model: a Mamba-1 / Mamba-2 MambaLM's weights and decode state in a
backend's memory, and its forward written as a PROGRAM of device ops, run by the
backend (models/_exec/device.py: the GPU build's nn_program_dev, or the CPU run of
the same GPU bodies in the tests), with the CPU model's bits (rules S-* of
contracts/ops/IDENTICAL_SSM_CONTRACT.md).

WHAT LIVES ON THE DEVICE
    Uploaded once at load (fp32_v1 only, S-32): the embedding, the final norm, per
    layer the norm, the conv weights and bias, dt's bias, D, Mamba-2's gate norm,
    float32; the block projections in their stored form (S-30: float32, bf16 bits or
    int8 codes with row exponents; models/_gpu/program.DevProj, as the transformer's);
    the head float32 (a tied head reads the embedding's buffer). A = neg(expf(A_log))
    is computed on the device by the S-15 body (ssm_neg_exp) from the uploaded A_log.
    A decode state on the device (``DeviceMambaState``) holds the conv windows, h and
    Mamba-2's open chunk in the CPU state's layout (config.state_shapes), zeroed at
    allocation, so a state saved from either side is the same file.

THE PROGRAM (one per call; MambaLM's _Layer.forward, op for op)
    nn_gather -> per layer: ssm_norm_lanes (S-10); in_proj product; then
      Mamba-1: ssm_conv (+SiLU, the window advanced in place, S-13); x_proj product;
        dt_low copied out of its rows by an nn_add of -0 (exact: the CPU model's
        contiguous copy); dt_proj product; ssm_softplus with the bias (S-14), in place;
        ssm_mamba1_scan (S-17, S-18 up to the gate; h in place);
      Mamba-2: ssm_conv on xBC; ssm_softplus of dt (+ S-7's clamp, S-19);
        ssm_mamba2_ssd_ws (S-20 .. S-28: gram, unit, store_open, on a Gram buffer and
        per-thread scratch this driver allocates as device buffers); ssm_norm_lanes of
        the gated rows (S-25), in place;
    out_proj product; nn_add residual (S-9) -> (the last row of each sequence for
    step) -> nn_rmsnorm (S-11) -> head product. Greedy and sampled generation choose on
    the device, as the transformer's (program.DeviceOutputs).

Python validates, holds the bookkeeping (addresses, lengths, layouts) and names the
ops; every value is computed by a kernel.
"""
from __future__ import annotations

import numpy as np

from .._exec import kernels as K
from .._exec.device import DevBuf, upload
from .._gpu.program import DeviceOutputs, DevProj, _Scratch
from .config import EPS, Q, MambaConfig, state_shapes

__all__ = ["GpuMamba", "DeviceMambaState", "plan_bytes", "check_fits", "SSD_WS_FLOATS"]

_EPS_BITS = K.f32_bits(EPS)
# the SSD unit kernel's scratch of one (batch row, head) thread (mojo/ssm/gpu/threads.mojo:
# Xd (256, 64), then cs, dA, the segment-sum row, Mx and the decay, 256 floats each)
SSD_WS_FLOATS = Q * 64 + 5 * Q


class DeviceMambaState:
    """A Mamba decode state (S-26, S-27) whose parts lie in a GPU model's device memory:
    ``conv``, ``h`` and (Mamba-2) ``open_x``, ``open_dt``, ``seg``, ``cs`` are device
    buffers in the CPU state's layout (config.state_shapes); ``length`` tokens so far.
    Made by allocate_state / resume of a model on the GPU; refused by a CPU model
    (save_state, then resume on the other model, moves a state across)."""

    device = "gpu"

    def __init__(self, backend, key, profile, cfg: MambaConfig, batch, max_tokens):
        self.model_key, self.numeric_profile = key, profile
        self.batch_size, self.max_tokens, self.length = batch, max_tokens, 0
        self.numeric_mode = "identical"
        self.family = cfg.family
        self._backend = backend
        self.open_x = self.open_dt = self.seg = self.cs = None
        for name, shape in state_shapes(cfg, batch).items():
            buf = backend.alloc(shape, np.float32)
            backend.zero(buf)
            setattr(self, name[len("state."):], buf)

    def arrays(self) -> dict:
        """name -> device buffer of every part of the state (save_state's tensors)."""
        out = {"state.conv": self.conv, "state.h": self.h}
        if self.family == "mamba2":
            out.update({"state.open_x": self.open_x, "state.open_dt": self.open_dt,
                        "state.seg": self.seg, "state.cs": self.cs})
        return out

    def __repr__(self):
        return (f"MambaState(family={self.family!r}, batch_size={self.batch_size}, "
                f"length={self.length}, max_tokens={self.max_tokens}, device='gpu')")


def _stored_bytes(kind, n, k):
    return {"float32": 4 * n * k, "bfloat16": 2 * n * k, "int8": n * k + 4 * n}[kind]


def _is_proj(name):
    return name.endswith(("in_proj.weight", "out_proj.weight", "x_proj.weight", "dt_proj.weight"))


def plan_bytes(shapes: dict, weight_format: str) -> dict:
    """Device bytes a model holds, by part, from its tensors' shapes (model.expected_shapes)
    before anything is read or uploaded (the memory check of the load)."""
    out = {"float32": 0, "projections": 0}
    widest = 0
    for name, shape in shapes.items():
        if _is_proj(name):
            n, k = shape
            out["projections"] += _stored_bytes(weight_format, n, k)
            widest = max(widest, n * k)
        else:
            out["float32"] += 4 * int(np.prod(shape))
    if weight_format == "int8":
        out["int8 widening panel"] = 4 * widest
    return out


def check_fits(shapes, lm, backend, source):
    """Refuse, before anything is read or uploaded, a model whose weights (in their
    stored format) do not fit the device's free memory."""
    plan = plan_bytes(shapes, lm.weight_format)
    need = sum(plan.values())
    free, total = backend.memory()
    if need > free:
        parts = ", ".join(f"{k} {v}" for k, v in plan.items())
        raise MemoryError(
            f"mojolearn: CausalLM: {source} needs {need} bytes of GPU memory for its weights "
            f"({parts}; weight_format={lm.weight_format!r}), and the device ({backend.name}) "
            f"has {free} free of {total}; nothing was uploaded: use weight_format='int8' or "
            f"'bfloat16', free device memory, or device='cpu'")


class _DevLayer:
    """One block's weights on the device (MambaLM's _Layer, S-4 / S-5)."""

    def __init__(self, backend, get, prefix, cfg: MambaConfig, weight_format):
        p, m = prefix, prefix + "mixer."
        f32 = lambda n: upload(backend, get(n))  # noqa: E731
        self.norm = f32(p + "norm.weight")
        self.in_proj = DevProj(backend, get(m + "in_proj.weight"), "fp32_v1", weight_format)
        self.conv_w = upload(backend, np.ascontiguousarray(get(m + "conv1d.weight").reshape(-1, 4)))
        self.conv_b = f32(m + "conv1d.bias")
        a_log = f32(m + "A_log")
        self.a = backend.alloc(a_log.shape, np.float32)
        backend.run([("ssm_neg_exp", a_log.addr, self.a.addr, int(np.prod(a_log.shape)))])  # S-15
        a_log.free()
        self.d = f32(m + "D")
        self.out_proj = DevProj(backend, get(m + "out_proj.weight"), "fp32_v1", weight_format)
        self.projs = [self.in_proj, self.out_proj]
        self.vecs = [self.norm, self.conv_w, self.conv_b, self.a, self.d]
        if cfg.family == "mamba1":
            self.x_proj = DevProj(backend, get(m + "x_proj.weight"), "fp32_v1", weight_format)
            self.dt_proj = DevProj(backend, get(m + "dt_proj.weight"), "fp32_v1", weight_format)
            self.dt_bias = f32(m + "dt_proj.bias")
            self.projs += [self.x_proj, self.dt_proj]
            self.vecs.append(self.dt_bias)
        else:
            self.dt_bias = f32(m + "dt_bias")
            self.gnorm = f32(m + "norm.weight")
            self.vecs += [self.dt_bias, self.gnorm]
            lim = cfg.time_step_limit
            self.clamp = (0, 0, 0) if lim is None else (1, K.f32_bits(lim[0]), K.f32_bits(lim[1]))

    def held(self, out):
        out["float32"] = out.get("float32", 0) + sum(b.nbytes for b in self.vecs)
        for pr in self.projs:
            out[pr.kind] = out.get(pr.kind, 0) + pr.nbytes()


class GpuMamba(DeviceOutputs):
    """The device half of a MambaLM made with device='gpu' (see the module docstring).
    ``get(name)`` hands each checked float32 tensor once; it is let go after upload."""

    def __init__(self, lm, backend, get):
        cfg = self.cfg = lm.config
        self.backend = backend
        self.profile = lm.numeric_profile
        self.scratch = _Scratch(backend)
        self.embed = upload(backend, get("backbone.embeddings.weight"))
        if cfg.tie_word_embeddings:
            self.head = DevProj(backend, None, "fp32_v1", "float32", shared=self.embed)
        else:
            self.head = DevProj(backend, get("lm_head.weight"), "fp32_v1", "float32")
        self.norm = upload(backend, get("backbone.norm_f.weight"))
        self.layers = [_DevLayer(backend, get, f"backbone.layers.{i}.", cfg, lm.weight_format)
                       for i in range(cfg.num_hidden_layers)]
        self.negzero = None
        if cfg.family == "mamba1":
            # a row of -0.0: add(x, -0) is x exactly, so an nn_add with it copies dt_low
            # (the first time_step_rank columns of x_proj's rows) to contiguous rows
            self.negzero = upload(backend, np.full(cfg.time_step_rank, -0.0, dtype=np.float32))

    # ------------------------------------------------------------ bookkeeping
    def held(self) -> dict:
        out = {"float32": self.embed.nbytes + self.norm.nbytes
               + (self.negzero.nbytes if self.negzero is not None else 0)}
        out[self.head.kind] = out.get(self.head.kind, 0) + self.head.nbytes()
        for layer in self.layers:
            layer.held(out)
        return out

    def new_state(self, model_key, batch, max_tokens) -> DeviceMambaState:
        need = sum(4 * int(np.prod(s)) for s in state_shapes(self.cfg, batch).values())
        free, total = self.backend.memory()
        if need > free:
            raise MemoryError(
                f"mojolearn: CausalLM.allocate_state: a state of batch_size {batch} needs "
                f"{need} bytes of GPU memory; the device has {free} free of {total}: use a "
                f"smaller batch")
        return DeviceMambaState(self.backend, model_key, self.profile, self.cfg, batch, max_tokens)

    def state_array_ok(self, a, shape) -> bool:
        """A device state's part as this model's allocate_state made it."""
        return (isinstance(a, DevBuf) and a.alive and a.backend is self.backend
                and a.dtype == np.float32 and a.shape == tuple(shape))

    def state_to_host(self, state) -> dict:
        return {nm: self.backend.read(b) for nm, b in state.arrays().items()}

    def state_from_host(self, model_key, batch, tmax, arrays: dict) -> DeviceMambaState:
        st = self.new_state(model_key, batch, tmax)
        for nm, b in st.arrays().items():
            self.backend.write(b, np.ascontiguousarray(arrays[nm], dtype=np.float32))
        return st

    # ------------------------------------------------------------ the forward program
    def _layer_ops(self, ops, i, layer, x, B, L, st, q0):
        c, sc = self.cfg, self.scratch
        rows, d, di = B * L, c.hidden_size, c.intermediate_size
        h = sc.get("h", rows * d)
        o = sc.get("o", rows * d)
        g = sc.get("g", rows * di)
        n = st.batch_size
        conv = st.conv.at(i * n * c.conv_channels * 4)
        ops.append(("ssm_norm_lanes", x, d, layer.norm.addr, h.addr, d, rows, d, _EPS_BITS))
        if c.family == "mamba1":
            r = c.time_step_rank
            xz = sc.get("xz", rows * 2 * di)
            u = sc.get("u", rows * di)
            xp = sc.get("xp", rows * (r + 32))
            dtl = sc.get("dt_low", rows * r)
            dt = sc.get("dt", rows * di)
            layer.in_proj.ops(ops, h.addr, rows, xz.addr, sc)
            ops.append(("ssm_conv", xz.addr, 2 * di, layer.conv_w.addr, layer.conv_b.addr, conv,
                        u.addr, di, B, L, di, 1))
            layer.x_proj.ops(ops, u.addr, rows, xp.addr, sc)
            ops.append(("nn_add", xp.addr, r + 32, self.negzero.addr, 0, dtl.addr, r, rows, r))
            layer.dt_proj.ops(ops, dtl.addr, rows, dt.addr, sc)
            ops.append(("ssm_softplus", dt.addr, di, layer.dt_bias.addr, dt.addr, di, rows, di,
                        0, 0, 0))
            ops.append(("ssm_mamba1_scan", u.addr, di, dt.addr, di, layer.a.addr, xp.addr, r + 32,
                        r, r + 16, layer.d.addr, xz.at(di), 2 * di, st.h.at(i * n * di * 16),
                        g.addr, di, B, L, di, 0))
        else:
            H, cd = c.num_heads, c.conv_channels
            W = di + cd + H
            zx = sc.get("zx", rows * W)
            xbc = sc.get("xbc", rows * cd)
            dt = sc.get("dt", rows * H)
            nch = (q0 + L + Q - 1) // Q
            gmat = sc.get("ssd_gram", B * nch * Q * Q)
            ws = sc.get("ssd_ws", B * H * SSD_WS_FLOATS)
            layer.in_proj.ops(ops, h.addr, rows, zx.addr, sc)
            ops.append(("ssm_conv", zx.at(di), W, layer.conv_w.addr, layer.conv_b.addr, conv,
                        xbc.addr, cd, B, L, cd, 1))
            ops.append(("ssm_softplus", zx.at(di + cd), W, layer.dt_bias.addr, dt.addr, H, rows, H)
                       + layer.clamp)
            ops.append(("ssm_mamba2_ssd_ws", xbc.addr, cd, dt.addr, layer.a.addr, layer.d.addr,
                        zx.addr, W, st.h.at(i * n * H * 64 * 128), st.open_x.at(i * n * Q * cd),
                        st.open_dt.at(i * n * Q * H), st.seg.at(i * n * H * Q), st.cs.at(i * n * H),
                        g.addr, di, B, L, H, di, q0, gmat.addr, ws.addr))
            ops.append(("ssm_norm_lanes", g.addr, di, layer.gnorm.addr, g.addr, di, rows, di,
                        _EPS_BITS))
        layer.out_proj.ops(ops, g.addr, rows, o.addr, sc)
        ops.append(("nn_add", x, d, o.addr, d, x, d, rows, d))

    def forward(self, ids, state, last_only) -> DevBuf:
        """Run ids (B, L) after the state's tokens (the caller checked the state and
        moves its length); returns the logits buffer (B * L or B rows, vocab)."""
        c, be, sc = self.cfg, self.backend, self.scratch
        B, L = ids.shape
        rows, d, V = B * L, c.hidden_size, c.vocab_size
        q0 = state.length % Q
        ids_buf = upload(be, np.ascontiguousarray(ids, dtype=np.int64))
        x = sc.get("x", rows * d)
        ops = [("nn_gather", self.embed.addr, ids_buf.addr, x.addr, rows, d)]
        for i, layer in enumerate(self.layers):
            self._layer_ops(ops, i, layer, x.addr, B, L, state, q0)
        return self._finish(ops, x, B, L, d, V, last_only, _EPS_BITS)  # S-11 norm

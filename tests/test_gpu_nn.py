"""The GPU kernels of the transformer ops, run on the CPU: the very bodies the device
kernels call (mojo/transformer/gpu/threads.mojo), looped under IEEE mode (no DAZ), give
the bits of the numpy oracle and of the CPU kernels (contracts/ops)."""
import numpy as np
import pytest

import model_oracle as MO
from bits import assert_same_bits
from mojolearn._core.loader import native
from mojolearn.models._exec import kernels as K
from test_models import _attn_case


def a(x):
    return x.ctypes.data


def test_rmsnorm_silu_add_bodies():
    """M-4 M-16 M-17: row and element bodies on random rows with signed zeros and
    subnormals, against the oracle."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 40)).astype(np.float32)
    x[0, :5] = [-0.0, 1e-40, -1e-39, 0.0, 3e-38]
    w = (1 + rng.standard_normal(40) * 0.1).astype(np.float32)
    out = np.empty_like(x)
    native().gpu_ref_nn_rmsnorm((a(x), a(w), a(out), 7, 40, K.f32_bits(1e-5)))
    assert_same_bits(out, MO.rmsnorm(x, w, np.float32(1e-5)), "rmsnorm")
    gu = (rng.standard_normal((5, 24)) * 4).astype(np.float32)
    gu[0, 0], gu[1, 1] = 100.0, -100.0
    o2 = np.empty((5, 12), dtype=np.float32)
    native().gpu_ref_nn_silu_mul((a(gu), a(gu) + 48, 24, a(o2), 12, 5, 12))
    assert_same_bits(o2, MO.silu_mul(gu[:, :12], gu[:, 12:]), "silu")
    bias = rng.standard_normal(40).astype(np.float32)
    o3 = np.empty_like(x)
    native().gpu_ref_nn_add((a(x), 40, a(bias), 0, a(o3), 40, 7, 40))
    assert_same_bits(o3, MO.add(x, bias[None, :]), "bias add")


@pytest.mark.parametrize("hd,theta", [(64, 100000.0), (24, 10000.0)])
def test_rope_table_and_rotation_bodies(hd, theta):
    """M-7 M-8 M-9 M-10 M-14: the table (powf, logf, expf, sin/cos) and the rotation."""
    npos = 300
    c = np.empty((npos, hd // 2), dtype=np.float32)
    s = np.empty_like(c)
    native().gpu_ref_nn_rope_table((a(c), a(s), npos, hd, K.f32_bits(theta)))
    wc, ws = MO.rope_table(npos, hd, np.float32(theta))
    assert_same_bits(c, wc, "cos")
    assert_same_bits(s, ws, "sin")
    cpu_c, cpu_s = K.rope_table(npos, hd, K.f32_bits(theta))
    assert_same_bits(c, cpu_c, "cos vs cpu")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 2 * hd)).astype(np.float32)
    dst = np.empty_like(x)
    native().gpu_ref_nn_rope((a(x), 2 * hd, a(dst), 2 * hd, hd, 2, hd, a(c), a(s), 10, 3, 6, 0, 0, hd))
    pos = 10 + np.arange(6) % 3
    for h in range(2):
        assert_same_bits(dst[:, h * hd:(h + 1) * hd],
                         MO.rope(x[:, h * hd:(h + 1) * hd], wc, ws, pos), "rope")


@pytest.mark.parametrize("profile", ["fp32_v1", "fixed15_v1"])
@pytest.mark.parametrize("case", ["plain", "inf_value_masked", "cached_prefix"])
def test_attention_body(profile, case):
    """M-11 M-12 M-13 M-15 M-21 M-24: the attention body (every key computed, explicit
    flushes) against the oracle and the CPU kernel."""
    B, L, nh, kvh, hd, pos0 = 2, 5, 4, 2, 32, (4 if case == "cached_prefix" else 0)
    edit = None
    if case == "inf_value_masked":
        def edit(q, k, v):
            v[1, 0, 4, 7] = np.inf
    q, k, v = _attn_case(B, L, nh, kvh, hd, pos0, seed=17, edit=edit)
    T = pos0 + L
    kt = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
    v = np.ascontiguousarray(v)
    out = np.empty((B * L, nh * hd), dtype=np.float32)
    ws = np.empty(B * nh * L * T, dtype=np.float32)
    native().gpu_ref_nn_attention((a(q), nh * hd, a(kt), a(v), a(out), a(ws), B, L, nh, kvh, hd,
                                   pos0, T, int(profile == "fixed15_v1")))
    cpu = np.empty_like(out)
    K.attention(q, nh * hd, kt, v, cpu, B, L, nh, kvh, hd, pos0, T, profile == "fixed15_v1")
    assert_same_bits(out, cpu, "gpu body vs cpu kernel")
    want = np.empty_like(out)
    for b in range(B):
        for h in range(nh):
            g = h // (nh // kvh)
            want[b * L:(b + 1) * L, h * hd:(h + 1) * hd] = MO.attention(
                q[b * L:(b + 1) * L, h * hd:(h + 1) * hd], k[b, g], v[b, g], pos0, profile, hd)
    assert_same_bits(out, want, "gpu body vs oracle")

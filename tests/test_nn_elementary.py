"""The arithmetic layer's elementary functions (contracts/ops rules M-5, M-6, M-8,
M-9, M-14) against the independent oracle in tests/model_oracle.py, on edge values
and sweeps."""
import numpy as np
import pytest

import model_oracle as MO
from bits import assert_same_bits
from mojolearn.models._exec import kernels as K

F = np.float32


def _bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def _check(op, x, want):
    got = MO.ftz(K.elementwise(op, x))
    want = MO.ftz(want)
    g, w = _bits(got), _bits(want)
    nan = np.isnan(got) & np.isnan(want)
    bad = np.nonzero((g != w) & ~nan)[0]
    assert bad.size == 0, (
        f"{op}: {bad.size} of {x.size} differ, first x bits {_bits(x)[bad[0]]:#010x}: "
        f"got {g[bad[0]]:#010x} want {w[bad[0]]:#010x}"
    )


def test_sqrt_equals_ieee_on_all_of_1_to_4():
    """M-5: the portable sqrt is the correctly rounded one on every input of [1, 4)."""
    x = np.arange(0x3F800000, 0x40800000, dtype=np.uint32).view(np.float32)
    _check("sqrt", x, np.sqrt(x))


def test_sqrt_random_exponents():
    """M-5: across every normal exponent."""
    rng = np.random.default_rng(5)
    b = rng.integers(0x00800000, 0x7F800000, size=200_000, dtype=np.uint32)
    x = b.view(np.float32)
    _check("sqrt", x, np.sqrt(x))


def test_sqrt_outside_the_positive_normals():
    """M-5: zeros keep their sign (subnormals are read as zeros), +inf -> +inf,
    negatives (-inf included) and NaN -> the quiet NaN 0x7FC00000."""
    x = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000,
                  0x7FC00000, 0xFFC00001, 0x7F800001, 0xBF800000, 0x80800000, 0xFF7FFFFF],
                 dtype=np.uint32).view(np.float32)
    want = [0x00000000, 0x80000000, 0x00000000, 0x80000000, 0x7F800000] + [0x7FC00000] * 7
    assert _bits(K.elementwise("sqrt", x)).tolist() == want


def _exp_inputs():
    rng = np.random.default_rng(14)
    edge = np.array([0.0, -0.0, 1.0, -1.0, 88.722835, 88.72284, 88.7228, -87.33655,
                     -87.33654, -87.3366, 1e-30, -1e-30, 0.5, -0.5, 0.34657359, 87.0,
                     -87.0, -86.9, np.inf, -np.inf, np.nan, 2.0 ** -130, -(2.0 ** -130),
                     -103.0, 100.0], dtype=np.float32)
    dense = np.linspace(-90, 90, 400_001, dtype=np.float32)
    rnd = rng.uniform(-20, 20, 200_000).astype(np.float32)
    sm = (rng.standard_normal(50_000) * 1e-3).astype(np.float32)
    return np.concatenate([edge, dense, rnd, sm])


def test_expf_rule_m14():
    """M-14: expf on edges (overflow/underflow bounds, NaN, inf, subnormals) and sweeps."""
    x = _exp_inputs()
    _check("expf", x, MO.expf(x))


def test_expf_daz_is_the_rule():
    """M-14 in the form the CPU kernels run under the contract floating-point state
    (arith.elementary.expf_daz: the intermediates' flushes left to DAZ; the softmaxes,
    SiLU, the cross entropy and sampling store its result with no flush of their own):
    the oracle's bits on the edges and sweeps above and on every 997th float32 bit
    pattern, as expf itself."""
    x = np.concatenate([_exp_inputs(),
                        np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32).view(F)])
    want = MO.expf(x)
    _check("expf_daz", x, want)
    _check("expf", x, want)


def test_logf_rule_m8():
    """M-8: logf across every normal exponent and at the sqrt(1/2) split."""
    rng = np.random.default_rng(8)
    b = rng.integers(0x00800000, 0x7F800000, size=200_000, dtype=np.uint32)
    x = np.concatenate([b.view(np.float32), np.array(
        [1.0, 2.0, 0.5, 0.70710677, 0.70710683, 1.4142135, 10000.0, 100000.0, 500000.0,
         1e6, 3.4e38, 1.2e-38, np.inf, 0.0, -0.0, -1.0, np.nan, -np.inf], dtype=np.float32)])
    _check("logf", x, MO.logf(x))


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sincos_rule_m9(op):
    """M-9: sin and cos over the RoPE angle range [0, 8192) and negatives."""
    rng = np.random.default_rng(9)
    x = np.concatenate([
        np.linspace(0, 8192, 300_001, dtype=np.float32),
        rng.uniform(-100, 100, 100_000).astype(np.float32),
        np.array([0.0, -0.0, 0.7853982, 1.5707964, 3.1415927, 4.712389, 6.2831855,
                  8191.0, 8191.999, 1e-5, -1e-5], dtype=np.float32),
    ])
    s, c = MO.sincos(x)
    _check(op, x, s if op == "sin" else c)


@pytest.mark.parametrize("hd,bits", [(24, 0x3E5105EB), (96, 0x3DD105EB)])
def test_attention_scale_rule_m6(hd, bits):
    """M-6: div(1, sqrt(f32(head_dim))) is one ulp below f32(head_dim ** -0.5) here."""
    assert K.attn_scale_bits(hd) == bits
    assert int(_bits(MO.attn_scale(hd))) == bits
    assert int(_bits(np.float32(hd ** -0.5))) == bits + 1


@pytest.mark.parametrize("hd", [8, 16, 32, 64, 80, 128, 256])
def test_attention_scale_matches_oracle(hd):
    """M-6: the scale for usual head sizes."""
    assert K.attn_scale_bits(hd) == int(_bits(MO.attn_scale(hd)))

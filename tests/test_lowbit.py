"""Tests for mojolearn.lowbit: low-bit weight STORAGE (profiles-spec, "Low-bit storage").

Each test's docstring names the rule it checks. The converters themselves
(rules L-1..L-6 of arithmetic-v1) are tested with mojolearn.linalg; here they
are the oracle that lowbit must call.
"""

import array
import subprocess
import sys
import os

import numpy as np
import pytest

from mojolearn._data import array as _array
from mojolearn import lowbit
from mojolearn.lowbit import (FORMATS, BF16Weight, Int8Weight, format_of, is_packed, materialize, materialize_one, pack, pack_one, unpack, widen_bf16)

linalg = pytest.importorskip("mojolearn.linalg", reason="mojolearn.linalg not built yet")

RNG = np.random.default_rng(20240515)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def special_matrix():
    """Rows that exercise the converters' edges: NaN, inf, -0.0, zeros, huge, tiny."""
    m = f32(8, 13)
    m[0, 3] = np.nan
    m[1, :] = 0.0
    m[1, 2] = -0.0
    m[2, 5] = np.inf
    m[3, 0] = -np.inf
    m[4, :] *= np.float32(1e-37)           # tiny row (exponent below -120)
    m[5, :] *= np.float32(1e30)            # huge row
    m[6, :] = np.nan                       # all-NaN row
    m[7, 1] = np.float32(3.4e38)           # rounds to inf in bf16
    return m


def bits32(a):
    return np.asarray(a).view(np.uint32)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def block_converters(monkeypatch):
    """Make every converter raise: any float32 round trip would then fail."""
    def boom(*a, **k):
        raise AssertionError("a converter was called")
    from mojolearn._ops import convert  # the converters linalg re-exports and lowbit calls

    for n in ("to_bf16", "from_bf16", "quantize_int8", "dequantize_int8"):
        monkeypatch.setattr(convert, n, boom)
        monkeypatch.setattr(linalg, n, boom)


def assert_mojolearn_msg(excinfo, *parts):
    msg = str(excinfo.value)
    assert msg.startswith("mojolearn:"), msg
    for p in parts:
        assert p in msg, (p, msg)


# ---------------------------------------------------------------------------
# FORMATS
# ---------------------------------------------------------------------------


def test_formats_table():
    """Rule FORMATS: exactly ("float32", "bfloat16", "int8")."""
    assert FORMATS == ("float32", "bfloat16", "int8")


# ---------------------------------------------------------------------------
# BF16Weight
# ---------------------------------------------------------------------------


def test_bf16weight_zero_copy_keeps_caller_buffer():
    """Rule BF16Weight: a C-contiguous 2-D uint16 buffer is kept without a copy;
    .bits / .shape / .format; .bits readable through memoryview and numpy."""
    bits = RNG.integers(0, 2**16, size=(5, 7), dtype=np.uint16)
    w = BF16Weight(bits)
    assert w.bits is bits
    assert w.shape == (5, 7)
    assert w.format == "bfloat16"
    assert np.shares_memory(np.asarray(w.bits), bits)
    assert memoryview(w.bits).tobytes() == bits.tobytes()
    bits[0, 0] ^= 1  # zero copy: the weight sees the caller's write
    assert np.asarray(w.bits)[0, 0] == bits[0, 0]


def test_bf16weight_accepts_any_buffer():
    """Rule BF16Weight: any 2-D uint16 buffer (mojolearn.Array, memoryview) is accepted."""
    arr = linalg.to_bf16(f32(3, 4))
    w = BF16Weight(arr)
    assert w.bits is arr and w.shape == (3, 4)
    mv = memoryview(np.zeros((2, 3), np.uint16))
    assert BF16Weight(mv).shape == (2, 3)


def test_bf16weight_non_contiguous_is_copied_bit_for_bit():
    """Rule BF16Weight: zero-copy only when C-contiguous; otherwise an exact copy."""
    base = RNG.integers(0, 2**16, size=(4, 10), dtype=np.uint16)
    view = base[:, ::2]
    w = BF16Weight(view)
    assert w.shape == (4, 5)
    assert np.array_equal(np.asarray(w.bits), view)
    assert not np.shares_memory(np.asarray(w.bits), base)


@pytest.mark.parametrize("bad, why", [
    (np.zeros((2, 2), np.float32), "float32"),
    (np.zeros((2, 2), np.int16), "int16"),
    (np.zeros(4, np.uint16), "1-D"),
    (np.zeros((2, 2, 2), np.uint16), "3-D"),
    (array.array("H", [1, 2]), "1-D"),
    ([[1, 2], [3, 4]], "nested list"),
])
def test_bf16weight_refuses_non_2d_uint16(bad, why):
    """Rule BF16Weight: anything but a 2-D uint16 buffer is a TypeError naming it."""
    with pytest.raises(TypeError) as e:
        BF16Weight(bad)
    assert_mojolearn_msg(e, "BF16Weight", "bits", "uint16", why)


# ---------------------------------------------------------------------------
# Int8Weight
# ---------------------------------------------------------------------------


def test_int8weight_holds_codes_and_exponents():
    """Rule Int8Weight: 2-D int8 codes + int32 (rows,) exponents; .format == "int8"; zero copy."""
    codes = RNG.integers(-128, 128, size=(3, 5), dtype=np.int8)
    exps = np.array([-3, 0, 7], np.int32)
    w = Int8Weight(codes, exps)
    assert w.format == "int8" and w.shape == (3, 5)
    assert w.codes is codes and w.exponents is exps


@pytest.mark.parametrize("codes, exps, part", [
    (np.zeros((2, 3), np.uint8), np.zeros(2, np.int32), "uint8"),
    (np.zeros((2, 3), np.int8), np.zeros(2, np.int64), "int64"),
    (np.zeros(6, np.int8), np.zeros(6, np.int32), "1-D"),
    (np.zeros((2, 3), np.int8), np.zeros(3, np.int32), "(2,)"),
    (np.zeros((2, 3), np.int8), np.zeros((2, 1), np.int32), "2-D"),
])
def test_int8weight_refuses_bad_parts(codes, exps, part):
    """Rule Int8Weight: wrong dtype, rank or exponent shape is a TypeError naming it."""
    with pytest.raises(TypeError) as e:
        Int8Weight(codes, exps)
    assert_mojolearn_msg(e, "Int8Weight", part)


def test_is_packed():
    """Rule is_packed: True for BF16Weight / Int8Weight only."""
    assert is_packed(BF16Weight(np.zeros((1, 1), np.uint16)))
    assert is_packed(Int8Weight(np.zeros((1, 1), np.int8), np.zeros(1, np.int32)))
    assert not is_packed(np.zeros((1, 1), np.float32))
    assert not is_packed([[1.0]])


# ---------------------------------------------------------------------------
# pack_one
# ---------------------------------------------------------------------------


def test_pack_one_bfloat16_uses_the_converter():
    """Rule pack_one: "bfloat16" gives a BF16Weight whose bits are linalg.to_bf16's."""
    x = special_matrix()
    w = pack_one(x, "bfloat16")
    assert isinstance(w, BF16Weight) and w.shape == x.shape
    assert same_bits(w.bits, linalg.to_bf16(x))


def test_pack_one_int8_uses_the_converter():
    """Rule pack_one: "int8" gives an Int8Weight equal to linalg.quantize_int8's codes/exponents."""
    x = special_matrix()
    w = pack_one(x, "int8")
    codes, exps = linalg.quantize_int8(x)
    assert isinstance(w, Int8Weight) and w.shape == x.shape
    assert same_bits(w.codes, codes) and same_bits(w.exponents, exps)


def test_pack_one_float32_returns_a_copy():
    """Rule pack_one: "float32" returns a copy (bit for bit, not the caller's memory)."""
    x = special_matrix()
    y = pack_one(x, "float32")
    assert isinstance(y, _array.Array) and y.dtype == "float32"
    assert same_bits(y, x)
    assert not np.shares_memory(np.asarray(y), x)


def test_pack_one_accepts_nested_lists():
    """Rule pack_one / pack: nested lists are accepted (read as float32)."""
    rows = [[1.0, -2.5, 0.0], [3.0, 4.0, -0.0]]
    w = pack_one(rows, "bfloat16")
    assert same_bits(w.bits, linalg.to_bf16(np.array(rows, np.float32)))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint16])
def test_pack_one_refuses_other_dtypes(dtype):
    """Rule pack_one: 2-D float32 only; another dtype is a TypeError naming the dtype."""
    x = np.zeros((2, 2), dtype)
    with pytest.raises(TypeError) as e:
        pack_one(x, "bfloat16", name="q_proj")
    assert_mojolearn_msg(e, "pack_one", "q_proj", np.dtype(dtype).name, "float32")


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2), ()])
def test_pack_one_refuses_non_2d(shape):
    """Rule pack_one: a non-2-D tensor is a ValueError (pack() carries those as float32)."""
    with pytest.raises(ValueError) as e:
        pack_one(np.zeros(shape, np.float32), "int8")
    assert_mojolearn_msg(e, "pack_one", "weight", f"{len(shape)}-D", "pack(")


@pytest.mark.parametrize("fmt", ["bf16", "fp32", "int4", "", None, 8])
def test_pack_one_refuses_unknown_format(fmt):
    """Rule pack_one: an unknown fmt is a ValueError listing FORMATS."""
    with pytest.raises(ValueError) as e:
        pack_one(np.zeros((2, 2), np.float32), fmt)
    assert_mojolearn_msg(e, "fmt", repr(fmt), *FORMATS)


def test_pack_one_same_format_copies_without_float32_round_trip(monkeypatch):
    """Rule pack: an already packed tensor in the same format is copied bit for bit,
    with no converter call (no float32 round trip); a signalling-NaN payload survives."""
    bits = np.array([[0x7F81, 0x8000, 0x0001], [0xFFC1, 0x3F80, 0x7F80]], np.uint16)
    w = BF16Weight(bits)
    q = Int8Weight(np.array([[-128, 5]], np.int8), np.array([-200], np.int32))
    block_converters(monkeypatch)
    w2 = pack_one(w, "bfloat16")
    q2 = pack_one(q, "int8")
    assert same_bits(w2.bits, bits) and not np.shares_memory(np.asarray(w2.bits), bits)
    assert same_bits(q2.codes, q.codes) and same_bits(q2.exponents, q.exponents)
    assert not np.shares_memory(np.asarray(q2.codes), q.codes)


def test_pack_one_other_format_materializes_then_packs():
    """Rule pack: a packed tensor in another format is materialized then packed."""
    x = special_matrix()
    w = pack_one(x, "bfloat16")
    q = pack_one(w, "int8")
    codes, exps = linalg.quantize_int8(linalg.from_bf16(w.bits))
    assert same_bits(q.codes, codes) and same_bits(q.exponents, exps)
    back = pack_one(q, "bfloat16")
    assert same_bits(back.bits, linalg.to_bf16(linalg.dequantize_int8(codes, exps)))
    f = pack_one(q, "float32")
    assert same_bits(f, linalg.dequantize_int8(codes, exps))


# ---------------------------------------------------------------------------
# pack
# ---------------------------------------------------------------------------


def test_pack_selects_by_rank_not_name():
    """Rule pack: every 2-D tensor is packed whatever its name; 1-D and 3-D pass
    through as float32 copies."""
    w = {
        "bias": f32(3, 4),            # 2-D named like a bias: packed
        "layer.weight": f32(6),       # 1-D named like a weight: carried
        "stack": f32(2, 3, 4),        # 3-D: carried
    }
    for fmt, kind in (("bfloat16", BF16Weight), ("int8", Int8Weight)):
        p = pack(w, fmt)
        assert list(p) == list(w)
        assert isinstance(p["bias"], kind)
        for k in ("layer.weight", "stack"):
            assert isinstance(p[k], _array.Array) and p[k].dtype == "float32"
            assert same_bits(p[k], w[k])
            assert not np.shares_memory(np.asarray(p[k]), w[k])


def test_pack_float32_materializes_everything():
    """Rule pack: fmt "float32" leaves every tensor a float32 copy (packed ones widened)."""
    x = special_matrix()
    p = pack({"a": x, "b": pack_one(x, "bfloat16")}, "float32")
    assert same_bits(p["a"], x)
    assert same_bits(p["b"], linalg.from_bf16(linalg.to_bf16(x)))


def test_pack_accepts_nested_lists():
    """Rule pack: nested lists are accepted, packed by rank."""
    p = pack({"w": [[1.0, 2.0], [3.0, 4.0]], "b": [0.5, -0.5]}, "int8")
    assert isinstance(p["w"], Int8Weight)
    assert np.asarray(p["b"]).tolist() == [0.5, -0.5]


def test_pack_copies_packed_same_format_without_round_trip(monkeypatch):
    """Rule pack: already packed tensors in the same format are copied, never widened."""
    w = {"a": pack_one(special_matrix(), "int8"), "b": f32(4)}
    block_converters(monkeypatch)
    p = pack(w, "int8")
    assert same_bits(p["a"].codes, w["a"].codes)
    assert same_bits(p["a"].exponents, w["a"].exponents)
    assert p["a"] is not w["a"]


@pytest.mark.parametrize("bad", [[("w", np.zeros((2, 2), np.float32))], None, np.zeros((2, 2))])
def test_pack_refuses_non_dict(bad):
    """Rule pack: a dict only, else TypeError."""
    with pytest.raises(TypeError) as e:
        pack(bad, "int8")
    assert_mojolearn_msg(e, "pack", "dict", "pack_one")


def test_pack_refuses_bad_format_and_dtype():
    """Rule pack: unknown fmt ValueError listing FORMATS; a non-float32 tensor
    (any rank) is a TypeError naming the tensor and its dtype."""
    with pytest.raises(ValueError) as e:
        pack({}, "fixed15")
    assert_mojolearn_msg(e, "fixed15", *FORMATS)
    with pytest.raises(TypeError) as e:
        pack({"ids": np.arange(4)}, "int8")
    assert_mojolearn_msg(e, "pack", "'ids'", "int64")


# ---------------------------------------------------------------------------
# unpack / materialize / materialize_one
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_unpack_pack_unpack_is_identity(fmt):
    """Rule unpack: unpack(pack(unpack(p)[0], fmt)) == unpack(p), bit for bit
    (NaN, inf, -0.0, zero and huge rows; tiny int8 rows: see the next test)."""
    w = special_matrix()
    w[4, :] = f32(13) * np.float32(1e-36)   # smallest rows whose int8 exponent is >= -126
    src = {"w": w, "v": f32(2, 3, scale=1e-3), "b": f32(5), "c": f32(2, 2, 2)}
    p = pack(src, fmt)
    first, f1 = unpack(p)
    again, f2 = unpack(pack(first, fmt))
    assert f1 == f2 == fmt
    assert list(first) == list(again)
    for k in first:
        assert isinstance(first[k], _array.Array) and first[k].dtype == "float32"
        assert same_bits(first[k], again[k]), k


def test_unpack_pack_unpack_tiny_int8_rows_equal_as_values():
    """Rule unpack (documented edge of v1): an int8 row with exponent < -126
    dequantizes to signed zeros; packed again they read +0.0 - equal as values."""
    x = np.array([[1e-37, -5e-38, 0.0], [1.0, -2.0, 3.0]], np.float32)
    p = pack({"w": x}, "int8")
    assert np.asarray(p["w"].exponents)[0] < -126
    first, _ = unpack(p)
    again, _ = unpack(pack(first, "int8"))
    a, b = np.asarray(first["w"]), np.asarray(again["w"])
    assert np.array_equal(a, b)                       # == holds
    assert same_bits(a[1], b[1])                      # ordinary rows: bit for bit
    assert bits32(a[0]).tolist() == [0, 0x80000000, 0] and bits32(b[0]).tolist() == [0, 0, 0]


def test_unpack_widens_exactly():
    """Rule unpack: bf16 bits widen as bits << 16; int8 as linalg.dequantize_int8."""
    x = special_matrix()
    p = {"a": pack_one(x, "bfloat16")}
    out, fmt = unpack(p)
    assert fmt == "bfloat16"
    assert np.array_equal(bits32(out["a"]), np.asarray(p["a"].bits).astype(np.uint32) << 16)
    q = pack_one(x, "int8")
    out, fmt = unpack({"a": q})
    assert fmt == "int8"
    assert same_bits(out["a"], linalg.dequantize_int8(q.codes, q.exponents))


def test_materialize_is_unpack_alias():
    """Rule unpack: materialize is an alias of unpack."""
    assert materialize is unpack


def test_unpack_refuses_non_dict_naming_what():
    """Rule unpack: a non-dict is a TypeError naming the `what` argument."""
    with pytest.raises(TypeError) as e:
        unpack([1, 2], what="state_dict")
    assert_mojolearn_msg(e, "unpack", "state_dict", "dict")


def test_materialize_one():
    """Rule materialize_one: packed -> float32 widened exactly; float32 -> copy;
    another dtype -> TypeError naming it."""
    x = special_matrix()
    w = pack_one(x, "bfloat16")
    assert same_bits(materialize_one(w), linalg.from_bf16(w.bits))
    y = materialize_one(x)
    assert same_bits(y, x) and not np.shares_memory(np.asarray(y), x)
    with pytest.raises(TypeError) as e:
        materialize_one(np.zeros(3, np.float64), name="emb")
    assert_mojolearn_msg(e, "materialize_one", "emb", "float64")


# ---------------------------------------------------------------------------
# widen_bf16
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 5), (0, 4)])
def test_widen_bf16_any_rank_exact(shape):
    """Rule widen_bf16: any rank, float32 bits == bf16 bits << 16 (NaN payloads,
    -0.0 and subnormal bits kept)."""
    bits = RNG.integers(0, 2**16, size=shape, dtype=np.uint16)
    if bits.size >= 4:
        bits.flat[:4] = [0x7F81, 0x8000, 0x0001, 0xFFFF]
    out = widen_bf16(bits)
    assert out.shape == shape and out.dtype == "float32"
    assert np.array_equal(bits32(out), bits.astype(np.uint32) << 16)


def test_widen_bf16_accepts_weight_and_refuses_other_dtypes():
    """Rule widen_bf16: a BF16Weight is accepted; non-uint16 input is a TypeError."""
    w = BF16Weight(np.array([[0x3F80]], np.uint16))
    assert np.asarray(widen_bf16(w)).tolist() == [[1.0]]
    with pytest.raises(TypeError) as e:
        widen_bf16(np.zeros(3, np.float32))
    assert_mojolearn_msg(e, "widen_bf16", "bits", "float32", "uint16")


# ---------------------------------------------------------------------------
# format_of
# ---------------------------------------------------------------------------


def test_format_of():
    """Rule format_of: the packed format of a dict, "float32" when nothing is packed;
    a mix of bf16 and int8 is a ValueError; a non-dict a TypeError."""
    x = f32(2, 3)
    assert format_of({"a": x, "b": f32(3)}) == "float32"
    assert format_of({}) == "float32"
    assert format_of(pack({"a": x, "b": f32(3)}, "bfloat16")) == "bfloat16"
    assert format_of(pack({"a": x}, "int8")) == "int8"
    mixed = {"a": pack_one(x, "bfloat16"), "b": pack_one(x, "int8")}
    with pytest.raises(ValueError) as e:
        format_of(mixed)
    assert_mojolearn_msg(e, "format_of", "bfloat16", "int8", "pack(")
    assert format_of(pack(mixed, "int8")) == "int8"  # pack makes it uniform
    with pytest.raises(TypeError) as e:
        format_of(x)
    assert_mojolearn_msg(e, "format_of", "dict")


# ---------------------------------------------------------------------------
# No extension: ImportError naming what is missing
# ---------------------------------------------------------------------------


def test_missing_linalg_is_import_error(monkeypatch):
    """Rule (conversion runs in the extension): without mojolearn.linalg the
    converting functions raise ImportError naming it; non-converting ones work."""
    monkeypatch.setitem(sys.modules, "mojolearn._ops.convert", None)  # linalg's converters
    x = f32(2, 3)
    for call in (lambda: pack_one(x, "bfloat16"), lambda: pack({"w": x}, "int8"),
                 lambda: widen_bf16(np.zeros(2, np.uint16)),
                 lambda: unpack({"w": BF16Weight(np.zeros((1, 1), np.uint16))})):
        with pytest.raises(ImportError) as e:
            call()
        assert_mojolearn_msg(e, "lowbit.", "mojolearn.linalg", "mojolearn._native")
    assert same_bits(pack_one(x, "float32"), x)
    assert is_packed(BF16Weight(np.zeros((1, 1), np.uint16)))


def test_missing_native_extension_is_import_error(monkeypatch):
    """Rule (conversion runs in the extension): without the compiled extension
    (mojolearn._native_<isa>, the build this CPU runs), converting raises ImportError
    naming it."""
    import mojolearn
    from mojolearn._core import loader as _native_loader, cpu as _cpu
    name = _cpu.choose()[1]
    monkeypatch.setattr(_native_loader, "_mod", None)
    monkeypatch.setitem(sys.modules, f"mojolearn.{name}", None)
    monkeypatch.delattr(mojolearn, name, raising=False)
    with pytest.raises(ImportError) as e:
        pack_one(f32(2, 3), "int8")
    assert_mojolearn_msg(e, "lowbit.pack_one", f"mojolearn.{name}")


# ---------------------------------------------------------------------------
# NumPy is not required
# ---------------------------------------------------------------------------


def test_lowbit_and_checkpoint_do_not_import_numpy(tmp_path):
    """Rule (NumPy is not required): importing and using lowbit and checkpoint
    never imports numpy; results are mojolearn.Array."""
    code = f"""
import sys
from mojolearn import lowbit, checkpoint
w = lowbit.pack({{"a": [[1.0, -2.0], [0.5, 3.0]], "b": [1.0]}}, "bfloat16")
q = lowbit.pack_one([[1.0, -2.0]], "int8")
f, fmt = lowbit.unpack(w)
checkpoint.save({str(tmp_path / 'x.safetensors')!r}, {{"a": w["a"], "q": q, "b": w["b"]}})
ck = checkpoint.load({str(tmp_path / 'x.safetensors')!r})
assert fmt == "bfloat16" and f["a"].tolist() == [[1.0, -2.0], [0.5, 3.0]], f["a"].tolist()
assert sorted(ck.weights) == ["a", "b", "q"]
assert "numpy" not in sys.modules, "numpy was imported"
print("ok")
"""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), "..", "python"), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr

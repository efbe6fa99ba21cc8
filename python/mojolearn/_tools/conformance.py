"""The implementation of ``mojolearn.conformance``: what it computes and promises is
that public module's docstring (python/mojolearn/conformance.py), which re-exports
this module's public names."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import struct
import sys
import time
from pathlib import Path

from .._data import array as _array
from .. import linalg
from .._core.device import vendor
from .._core.cpu import cpu_isa
from .._core.box import box

HERE = Path(__file__).resolve().parents[1]  # the package folder
GOLDEN_CANDIDATES = (
    HERE / "_golden" / "v1.json",
    HERE.parents[1] / "contracts" / "golden" / "v1.json",
)
"""Where ``load_golden`` looks: the copy installed with the package, then the
repository's contracts/golden/v1.json.
"""


# ------------------------------------------------------------------ hashing
def part_hash(*arrays) -> str:
    """First 16 hex digits of sha256 over (str(dtype), str(shape), bytes) per array."""
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, _array.Array):
            dtype, shape, data = a.dtype, tuple(a.shape), a.tobytes()
        else:  # numpy arrays (the oracle side)
            dtype, shape, data = str(a.dtype), tuple(a.shape), a.tobytes(order="C")
        h.update(str(dtype).encode())
        h.update(str(shape).encode())
        h.update(data)
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ fixtures
def _f32_from_bits(bits):
    return struct.unpack(f"<{len(bits)}f", struct.pack(f"<{len(bits)}I", *bits))


def _rand_bits(rng: random.Random, count: int, kind: str):
    out = []
    for _ in range(count):
        sign = rng.getrandbits(1) << 31
        mant = rng.getrandbits(23)
        if kind == "standard":
            exp = 127 + rng.choice((-4, -3, -2, -2, -1, -1, -1, 0, 0, 0, 1, 1))
        elif kind == "negative":
            sign = 1 << 31
            exp = 127 + rng.choice((-3, -2, -1, 0, 0, 1))
        elif kind == "wide_range":
            exp = 127 + rng.randint(-60, 60)
        elif kind == "subnormal":
            r = rng.random()
            if r < 0.4:
                exp = 0  # subnormal (or zero when mant == 0)
            elif r < 0.5:
                exp, mant = 0, 0  # signed zero
            elif r < 0.8:
                exp = rng.randint(1, 4)  # just above 2**-126
            else:
                exp = 127 + rng.randint(-2, 1)
        elif kind == "model":  # weights of the tiny model fixture: |w| in [2**-8, 2**-2)
            exp = 127 + rng.randint(-8, -3)
        elif kind == "integer_ties":
            v = rng.randint(-16, 16) / 2.0  # halves: ties for the quantizers
            out.append(struct.unpack("<I", struct.pack("<f", v))[0])
            continue
        else:
            raise ValueError(kind)
        out.append(sign | (exp << 23) | mant)
    return out


def matrix(seed: int, kind: str, rows: int, cols: int) -> _array.Array:
    """A seeded float32 (rows, cols) fixture built from integer bit patterns."""
    rng = random.Random(f"{seed}:{kind}:{rows}x{cols}")
    arr = _array.empty("float32", (rows, cols))
    if rows * cols:
        flat = memoryview(arr).cast("B").cast("I")
        flat[:] = __import__("array").array("I", _rand_bits(rng, rows * cols, kind))
    return arr


def bf16_matrix(seed: int, kind: str, rows: int, cols: int) -> _array.Array:
    """The fixture matrix ``matrix(seed, kind, rows, cols)`` as bf16 bits."""
    return linalg.to_bf16(matrix(seed, kind, rows, cols))


FIXTURES = {
    # name: (kind, m, n, k)
    "standard": ("standard", 33, 47, 300),
    "integer_ties": ("integer_ties", 16, 20, 129),
    "wide_range": ("wide_range", 9, 35, 257),
    "subnormal": ("subnormal", 13, 33, 140),
    "negative": ("negative", 7, 64, 256),
    "odd_shapes": ("standard", 61, 73, 79),
    "decode_rows": ("standard", 3, 70, 1000),
    "large_k": ("standard", 2, 3, 131073),
}
"""Fixture name -> (kind, m, n, k) of the GEMM and converter lanes."""
INT_LARGE_K = {"int8i32.v1": 131072, "int15i64.v1": 65536}
"""The largest k of each integer profile, used by the large-k fixture."""


def _transpose(x: _array.Array) -> _array.Array:
    """A C-contiguous transposed copy (byte moves only, through the strided copy)."""
    from .._data.buffers import Buf, to_array

    r, c = x.shape
    isz = _array.itemsize(x.dtype)
    view = Buf(x.address, x.dtype, (c, r), (isz, c * isz), False, x)
    return to_array(_StridedView(view), func="conformance", arg="fixture")


class _StridedView:
    """Exposes a Buf through __array_interface__ (used to build transposed copies)."""

    def __init__(self, b):
        self._b = b
        ts = {"float32": "<f4", "uint16": "<u2", "int8": "|i1", "int32": "<i4"}[b.dtype]
        self.__array_interface__ = {
            "version": 3, "shape": b.shape, "typestr": ts,
            "data": (b.addr, True), "strides": b.strides,
        }


def lanes():
    """(lane, fixture, thunk) for every check; thunks return a tuple of Arrays."""
    out = []
    for fx, (kind, m, n, k) in FIXTURES.items():
        a = lambda kind=kind, m=m, k=k: matrix(1, kind, m, k)
        b_kn = lambda kind=kind, n=n, k=k: matrix(2, kind, k, n)
        # fp32.v1 in the three layouts (the same product: same golden)
        out.append(("fp32.v1/NN", fx, lambda a=a, b=b_kn: (linalg.matmul(a(), b()),)))
        out.append(("fp32.v1/NT", fx, lambda a=a, b=b_kn: (
            linalg.matmul(a(), _transpose(b()), transpose_b=True),)))
        out.append(("fp32.v1/TN", fx, lambda a=a, b=b_kn: (
            linalg.matmul(_transpose(a()), b(), transpose_a=True),)))
        if k <= 70000:
            ab = lambda a=a: linalg.to_bf16(a())
            bb = lambda b=b_kn: linalg.to_bf16(b())
            out.append(("bf16f32.v1/NN", fx, lambda ab=ab, bb=bb: (linalg.matmul_bf16(ab(), bb()),)))
            out.append(("bf16f32.v1/NT", fx, lambda ab=ab, bb=bb: (
                linalg.matmul_bf16(ab(), _transpose(bb()), transpose_b=True),)))
            out.append(("bf16f32.v1/TN", fx, lambda ab=ab, bb=bb: (
                linalg.matmul_bf16(_transpose(ab()), bb(), transpose_a=True),)))
        ki8 = min(k, INT_LARGE_K["int8i32.v1"])
        ki15 = min(k, INT_LARGE_K["int15i64.v1"])
        a8 = lambda kind=kind, m=m, k=ki8: matrix(1, kind, m, k)
        b8 = lambda kind=kind, n=n, k=ki8: matrix(3, kind, n, k)
        a15 = lambda kind=kind, m=m, k=ki15: matrix(1, kind, m, k)
        b15 = lambda kind=kind, n=n, k=ki15: matrix(3, kind, n, k)
        out.append(("int8i32.v1", fx, lambda a=a8, b=b8: (linalg.matmul_int8(a(), b()),)))
        out.append(("int15i64.v1", fx, lambda a=a15, b=b15: (linalg.matmul_int15(a(), b()),)))
        if k <= 1000:
            out.append(("convert/to_bf16", fx, lambda a=a: (linalg.to_bf16(a()),)))
            out.append(("convert/from_bf16", fx, lambda a=a: (
                linalg.from_bf16(_bits16(a())),)))
            out.append(("convert/quantize_int8", fx, lambda a=a: linalg.quantize_int8(a())))
            out.append(("convert/dequantize_int8", fx, lambda a=a: (
                linalg.dequantize_int8(*linalg.quantize_int8(a())),)))
            out.append(("convert/quantize_int15", fx, lambda a=a: linalg.quantize_int15(a())))
            out.append(("convert/dequantize_int15", fx, lambda a=a: (
                linalg.dequantize_int15(*linalg.quantize_int15(a())),)))
    return out + model_lanes()


# ------------------------------------------------------------------ the model lanes
MODEL_CONFIG = dict(model_type="llama", vocab_size=53, hidden_size=64, intermediate_size=96,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=32,
                    tie_word_embeddings=False, hidden_act="silu")
"""The config of the tiny fixture model of the model lanes."""
MODEL_LANES = (("fp32_v1", "float32"), ("fixed15_v1", "float32"), ("fp32_v1", "bfloat16"),
               ("fixed15_v1", "int8"))
"""(numeric profile, weight format) of each model lane."""
MODEL_IDS = ((3, 17, 52, 0, 9), (41, 41, 7, 30, 12))  # batch 2, length 5
"""The token ids the model lanes run: batch 2, length 5."""


def model_weights():
    """The tiny model fixture's weights (name -> float32 Array), from integers only;
    norm weights are 1 + a small value (bits of [1, 2))."""
    c = MODEL_CONFIG
    d, ff, hd = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    nq, nk = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], d), "model.norm.weight": (1, d),
              "lm_head.weight": (c["vocab_size"], d)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (1, d), p + "post_attention_layernorm.weight": (1, d),
                       p + "self_attn.q_proj.weight": (nq, d), p + "self_attn.k_proj.weight": (nk, d),
                       p + "self_attn.v_proj.weight": (nk, d), p + "self_attn.o_proj.weight": (d, nq),
                       p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                       p + "mlp.down_proj.weight": (d, ff)})
    out = {}
    for i, (name, (r, k)) in enumerate(sorted(shapes.items())):
        w = matrix(100 + i, "model", r, k)
        if name.endswith("norm.weight"):
            u = memoryview(w).cast("B").cast("I")
            for j in range(k):  # 1 + m: exponent field of 1.0, the fixture's mantissa
                u[j] = (u[j] & 0x007FFFFF) | 0x3F800000
            w = w.reshape(k)
        out[name] = w
    return out


def model_logits(profile, fmt, ids=MODEL_IDS):
    """The tiny fixture model (MODEL_CONFIG, seeded weights) run under ``profile`` with
    weight format ``fmt`` on ``ids``; returns (model, logits).
    """
    import numpy as np
    from ..models import CausalLM
    from ..models._base.config import ModelConfig

    w = {k: np.array(np.asarray(v), copy=True) for k, v in model_weights().items()}
    # the CPU model, whatever the process device: the GPU model's bits are checked by
    # bench/device_check.sh step 8 (bench/device_model_check.py)
    lm = CausalLM(ModelConfig.from_dict(MODEL_CONFIG), w, numeric_profile=profile,
                  weight_format=fmt, source="conformance model fixture", device="cpu")
    return lm, lm.forward(np.array(ids, dtype=np.int64))


def model_lanes():
    """The model lanes: the tiny fixture model's logits under each (profile, weight
    format) of MODEL_LANES (none without numpy, which the models need).
    """
    try:
        import numpy  # noqa: F401  (mojolearn.models holds its weights in numpy arrays)
    except ImportError:
        return []
    return [(f"model/{p}/{f}", "tiny", lambda p=p, f=f: (model_logits(p, f)[1],)) for p, f in MODEL_LANES]


def model_identity_checks(results):
    """The model lanes again: threads 1/2/3/7, a sequence alone vs the batch, prefill of
    n-1 then one step. Returns mismatches as (key, expected, got)."""
    import numpy as np
    from .._core import threads as _threads

    bad = []
    prev = _threads.get_num_threads()
    try:
        for nt in IDENTITY_THREADS:
            _threads.set_num_threads(nt)
            for p, f in MODEL_LANES[:2]:
                key = f"model/{p}/{f}:tiny"
                h = part_hash(model_logits(p, f)[1])
                if h != results.get(key):
                    bad.append((f"identity/threads={nt}/{key}", results.get(key), h))
    finally:
        _threads.set_num_threads(prev)
    for p, f in MODEL_LANES[:2]:
        lm, full = model_logits(p, f)
        ids = np.array(MODEL_IDS, dtype=np.int64)
        alone = lm.forward(ids[1:2])
        if part_hash(alone) != part_hash(np.ascontiguousarray(full[1:2])):
            bad.append((f"identity/sequence-alone/model/{p}", part_hash(full[1:2]), part_hash(alone)))
        st = lm.allocate_state(2, ids.shape[1])
        lm.forward(ids[:, :-1], st)
        last = lm.step(ids[:, -1:], st)
        if part_hash(last) != part_hash(np.ascontiguousarray(full[:, -1, :])):
            bad.append((f"identity/prefill-then-step/model/{p}", part_hash(full[:, -1, :]), part_hash(last)))
    return bad


def _bits16(x: _array.Array) -> _array.Array:
    """Every float32's low 16 bits as a bf16 pattern (all 65536 patterns appear over
    the fixtures, NaNs and subnormals included): a byte view, no arithmetic."""
    out = _array.empty("uint16", x.shape)
    src = memoryview(x).cast("B").cast("H")
    memoryview(out).cast("B").cast("H")[:] = src[0::2]
    return out


# ------------------------------------------------------------------ the run
def load_golden(path=None) -> dict:
    """The golden hashes: the file at ``path``, or the first of GOLDEN_CANDIDATES that
    exists; FileNotFoundError naming where it looked otherwise.
    """
    cands = [Path(path)] if path else list(GOLDEN_CANDIDATES)
    for p in cands:
        if p.exists():
            with open(p) as f:
                return json.load(f)
    raise FileNotFoundError(
        "mojolearn: conformance: no golden file found (looked at "
        + ", ".join(str(c) for c in cands) + "); pass --golden FILE"
    )


def run(golden: dict | None, quiet=False, sabotage=False, stream=sys.stdout):
    """Run every lane (and the identity checks) on the build this process loads and
    compare with ``golden`` (None: compute only). Returns (results: lane/fixture ->
    hash, mismatches); prints a summary unless ``quiet``.
    """
    from .._ops import calls as _calls

    results, mismatches = {}, []
    # the sabotage reaches this run's own calls only (a per-call argument taken from
    # this thread's context), never another thread's products
    with _calls.sabotaged(sabotage):
        todo = lanes()
        t0 = time.time()
        for i, (lane, fx, thunk) in enumerate(todo, 1):
            key = f"{lane}:{fx}"
            h = part_hash(*thunk())
            results[key] = h
            want = golden["hashes"].get(key) if golden else None
            status = "ok" if want == h else ("NEW" if want is None else "MISMATCH")
            if status != "ok":
                mismatches.append((key, want, h))
            if not quiet:
                print(f"[{i:3d}/{len(todo)}] {key:45s} {h} {status} ({time.time() - t0:.1f}s)",
                      file=stream, flush=True)
        mismatches += identity_checks(results, quiet, stream)
    return results, mismatches


IDENTITY_THREADS = (1, 2, 3, 7)
"""The thread counts the identity checks run each chosen lane under."""
IDENTITY_LANES = ("fp32.v1/NN", "fp32.v1/NT", "bf16f32.v1/TN", "int8i32.v1", "int15i64.v1",
                  "convert/quantize_int15")
"""The lanes the identity checks repeat."""
IDENTITY_FIXTURES = ("standard", "odd_shapes", "decode_rows", "subnormal")
"""The fixtures the identity checks repeat them on."""


def _row(x: _array.Array, r: int) -> _array.Array:
    """Row r of a 2-D Array as a (1, k) Array (a byte copy)."""
    cols = x.shape[1]
    out = _array.empty(x.dtype, (1, cols))
    isz = _array.itemsize(x.dtype)
    memoryview(out).cast("B")[:] = memoryview(x).cast("B")[r * cols * isz:(r + 1) * cols * isz]
    return out


def identity_checks(results: dict, quiet=False, stream=sys.stdout):
    """Rule 6.5 inside the run: the same lanes under other thread counts give the
    golden-checked hashes again, and one row computed alone equals that row of the
    batch. Returns mismatches as (key, expected, got)."""
    from .._core import threads as _threads

    bad = []
    by_key = {f"{lane}:{fx}": thunk for lane, fx, thunk in lanes()}
    prev = _threads.get_num_threads()
    try:
        for nt in IDENTITY_THREADS:
            _threads.set_num_threads(nt)
            for lane in IDENTITY_LANES:
                for fx in IDENTITY_FIXTURES:
                    key = f"{lane}:{fx}"
                    if key not in by_key:
                        continue
                    h = part_hash(*by_key[key]())
                    if h != results[key]:
                        bad.append((f"identity/threads={nt}/{key}", results[key], h))
    finally:
        _threads.set_num_threads(prev)
    # a row alone equals the same row inside the batch (fp32.v1 and int15i64.v1)
    for fx in IDENTITY_FIXTURES:
        kind, m, n, k = FIXTURES[fx]
        a, b = matrix(1, kind, m, k), matrix(2, kind, k, n)
        full = linalg.matmul(a, b)
        r = m // 2
        if part_hash(linalg.matmul(_row(a, r), b)) != part_hash(_row(full, r)):
            bad.append((f"identity/row-alone/fp32.v1:{fx}", part_hash(_row(full, r)), "differs"))
        k15 = min(k, INT_LARGE_K["int15i64.v1"])
        a15, b15 = matrix(1, kind, m, k15), matrix(3, kind, n, k15)
        full15 = linalg.matmul_int15(a15, b15)
        if part_hash(linalg.matmul_int15(_row(a15, r), b15)) != part_hash(_row(full15, r)):
            bad.append((f"identity/row-alone/int15i64.v1:{fx}", part_hash(_row(full15, r)), "differs"))
    n_model = 0
    if model_lanes():
        bad += model_identity_checks(results)
        n_model = 2 * len(IDENTITY_THREADS) + 4
    if not quiet:
        n_checks = len(IDENTITY_THREADS) * len(IDENTITY_LANES) * len(IDENTITY_FIXTURES) + 2 * len(IDENTITY_FIXTURES) + n_model
        print(f"identity: {n_checks} checks (threads {IDENTITY_THREADS}, row alone vs batch), "
              f"{len(bad)} differ", file=stream, flush=True)
    return bad


def column(results: dict) -> dict:
    """This box's column for ``--export``: vendor, box, build, versions and the hashes."""
    import importlib.metadata as md

    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return None

    from .._core.loader import native

    return {
        "vendor": vendor(), "box": box(), "native": native().__name__, "isa": cpu_isa(),
        "versions": {"mojolearn": "0.1.0", "max": ver("max"), "python": platform.python_version()},
        "convention": "sha256(str(dtype) + str(shape) + C-order bytes per array)[:16]",
        "hashes": results,
    }


def diff(a_path, b_path, stream=sys.stdout) -> int:
    """Compare two exported columns (``--export``); prints each lane that differs and
    returns 1 if any does, else 0.
    """
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    ha, hb = a["hashes"], b["hashes"]
    bad = 0
    for key in sorted(set(ha) | set(hb)):
        if ha.get(key) != hb.get(key):
            bad += 1
            print(f"DIFFER {key}: {a.get('vendor')}/{a.get('box')}={ha.get(key)} "
                  f"{b.get('vendor')}/{b.get('box')}={hb.get(key)}", file=stream)
    print(f"{len(set(ha) | set(hb)) - bad} lanes identical, {bad} differ", file=stream)
    return 1 if bad else 0


def every_isa(child_args) -> int:
    """The conformance run once per CPU build this CPU can run (a child process each,
    MOJOLEARN_ISA=<name>); the others are named with the reason they are skipped."""
    import subprocess

    from .._core import cpu as _cpu

    worst, ran, skipped = 0, [], []
    for name in _cpu.isa_names():
        why = _cpu.refusal(name)
        if why:
            skipped.append(name)
            print(f"SKIPPED isa={name}: {why}", flush=True)
            continue
        env = {k: v for k, v in os.environ.items() if k != _cpu.NATIVE_ENV}
        env[_cpu.ENV] = name
        env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        print(f"== isa={name}", flush=True)
        r = subprocess.run([sys.executable, "-m", "mojolearn", "conformance", *child_args],
                           env=env)
        ran.append(f"{name}:{'ok' if r.returncode == 0 else f'exit {r.returncode}'}")
        worst = max(worst, r.returncode)
    print(f"every isa: ran {', '.join(ran) or 'none'}; skipped {', '.join(skipped) or 'none'}")
    return worst if ran else 2


def main(argv=None) -> int:
    """The command line (``python -m mojolearn conformance ...``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "diff":
        if len(argv) != 3:
            print("usage: python -m mojolearn conformance diff A.json B.json", file=sys.stderr)
            return 2
        try:
            return diff(argv[1], argv[2])
        except (OSError, ValueError, KeyError) as e:
            print(f"mojolearn: conformance diff: {e}", file=sys.stderr)
            return 2
    ap = argparse.ArgumentParser(prog="python -m mojolearn conformance")
    ap.add_argument("--golden", default=None)
    ap.add_argument("--export", default=None)
    ap.add_argument("--sabotage", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--every-isa", action="store_true")
    args = ap.parse_args(argv)
    if args.every_isa:
        if args.export:
            print("mojolearn: conformance: --export writes one build's column; run it with "
                  "MOJOLEARN_ISA=<name> instead of --every-isa", file=sys.stderr)
            return 2
        return every_isa([a for a in argv if a != "--every-isa"])
    try:
        golden = load_golden(args.golden)
        results, mism = run(golden, quiet=args.quiet, sabotage=args.sabotage)
    except Exception as e:  # an error is exit 2, never a crash without a message
        print(f"mojolearn: conformance: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.export:
        with open(args.export, "w") as f:
            json.dump(column(results), f, indent=1, sort_keys=True)
    from .._core.loader import native

    lane_bad = sum(1 for key, _, _ in mism if not key.startswith("identity/"))
    id_bad = len(mism) - lane_bad
    print(f"conformance ({native().__name__}, isa {cpu_isa()}, {vendor()}, {box()}): "
          f"{len(results) - lane_bad} lanes match, {lane_bad} mismatch; "
          f"identity checks: {id_bad} differ")
    for key, want, got in mism:
        if ":" in key:
            lane, fx = key.rsplit(":", 1)
            print(f"MISMATCH lane={lane} fixture={fx} golden={want} got={got}")
        else:  # an identity check (identity/...): one name, the two hashes it compares
            print(f"MISMATCH check={key} expected={want} got={got}")
    return 1 if mism else 0

__all__ = ["run", "main", "diff", "lanes", "model_lanes", "load_golden", "column", "box",
           "part_hash", "matrix", "bf16_matrix", "identity_checks", "model_identity_checks",
           "model_logits", "model_weights", "FIXTURES", "IDENTITY_THREADS", "IDENTITY_LANES",
           "IDENTITY_FIXTURES", "MODEL_CONFIG", "MODEL_LANES", "MODEL_IDS", "INT_LARGE_K",
           "GOLDEN_CANDIDATES"]

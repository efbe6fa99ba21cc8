"""Write contracts/golden/v1.json: the expected hash of every conformance lane,
computed by the independent numpy oracle (tests/oracle.py) from the contract -
never by the kernels under test. The fixtures are the conformance run's own
(integer-built, identical on every machine).

    .venv/bin/python contracts/golden/make_golden.py [--check]

--check recomputes and compares with the committed file (exit 1 on a difference).
"""
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import oracle  # noqa: E402
from mojolearn import conformance as C  # noqa: E402

OUT = Path(__file__).resolve().parent / "v1.json"


def fixture(seed, kind, rows, cols):
    return np.array(np.asarray(C.matrix(seed, kind, rows, cols)), copy=True)


def expected():
    h = {}
    for fx, (kind, m, n, k) in C.FIXTURES.items():
        a = fixture(1, kind, m, k)
        b = fixture(2, kind, k, n)
        r = oracle.gemm_fp32_v1(a, b)
        for lay in ("NN", "NT", "TN"):
            h[f"fp32.v1/{lay}:{fx}"] = oracle.part_hash(r)
        if k <= 70000:
            ab, bb = oracle.to_bf16(a), oracle.to_bf16(b)
            rb = oracle.gemm_bf16f32_v1(ab, bb)
            for lay in ("NN", "NT", "TN"):
                h[f"bf16f32.v1/{lay}:{fx}"] = oracle.part_hash(rb)
        k8 = min(k, C.INT_LARGE_K["int8i32.v1"])
        k15 = min(k, C.INT_LARGE_K["int15i64.v1"])
        h[f"int8i32.v1:{fx}"] = oracle.part_hash(
            oracle.gemm_int8_f32(fixture(1, kind, m, k8), fixture(3, kind, n, k8)))
        h[f"int15i64.v1:{fx}"] = oracle.part_hash(
            oracle.gemm_int15_f32(fixture(1, kind, m, k15), fixture(3, kind, n, k15)))
        if k <= 1000:
            h[f"convert/to_bf16:{fx}"] = oracle.part_hash(oracle.to_bf16(a))
            lo16 = np.ascontiguousarray(a.view(np.uint16)[:, 0::2])
            h[f"convert/from_bf16:{fx}"] = oracle.part_hash(oracle.from_bf16(lo16))
            q8 = oracle.quantize_int8(a)
            h[f"convert/quantize_int8:{fx}"] = oracle.part_hash(*q8)
            h[f"convert/dequantize_int8:{fx}"] = oracle.part_hash(oracle.dequantize_int8(*q8))
            q15 = oracle.quantize_int15(a)
            h[f"convert/quantize_int15:{fx}"] = oracle.part_hash(*q15)
            h[f"convert/dequantize_int15:{fx}"] = oracle.part_hash(oracle.dequantize_int15(*q15))
    import model_oracle
    w = {k: np.array(np.asarray(v), copy=True) for k, v in C.model_weights().items()}
    ids = np.array(C.MODEL_IDS)
    for prof, fmt in C.MODEL_LANES:
        h[f"model/{prof}/{fmt}:tiny"] = oracle.part_hash(
            model_oracle.forward(w, C.MODEL_CONFIG, ids, prof, fmt))
    return h


def main():
    data = {
        "profile_set": "v1",
        "convention": "sha256 over str(dtype), str(shape), C-order bytes per array; first 16 hex digits",
        "source": "tests/oracle.py via contracts/golden/make_golden.py (independent of the kernels)",
        "hashes": expected(),
    }
    if "--check" in sys.argv:
        old = json.loads(OUT.read_text())
        if old["hashes"] != data["hashes"]:
            diff = sorted(k for k in set(old["hashes"]) | set(data["hashes"])
                          if old["hashes"].get(k) != data["hashes"].get(k))
            print("golden differs from the oracle for:", ", ".join(diff))
            return 1
        print(f"golden matches the oracle ({len(data['hashes'])} lanes)")
        return 0
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(data['hashes'])} lanes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

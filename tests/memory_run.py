"""Resident memory over many small native calls (issue: a native leak per product
call). Run as a script in a fresh process: ``python tests/memory_run.py N``; prints one
JSON line per entry with the RSS (MiB) after 10^4 warm-up calls and after N more.
tests/test_memory.py runs it with N = 10^5 (make test); make fuzz with N = 10^6."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

from mojolearn import linalg  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def entries():
    a = np.ones((2, 3), np.float32)
    b = np.ones((2, 3), np.float32)
    bt = np.ones((3, 2), np.float32)
    pb = linalg.prepare(b, transpose_b=True)
    z = np.ones((2, 0), np.float32)
    return {
        "matmul": lambda: linalg.matmul(a, bt),
        "matmul k=0": lambda: linalg.matmul(z, np.ones((0, 2), np.float32)),
        "matmul prepared": lambda: linalg.matmul(a, pb, transpose_b=True),
        "matmul_int8": lambda: linalg.matmul_int8(a, b),
        "matmul_int15": lambda: linalg.matmul_int15(a, b),
    }


def main():
    n = int(sys.argv[1])
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    for name, f in entries().items():
        if only and name not in only:
            continue
        for _ in range(10_000):
            f()
        r0 = rss_mib()
        for _ in range(n):
            f()
        print(json.dumps({"entry": name, "calls": n, "rss_warm": round(r0, 3),
                          "rss_after": round(rss_mib(), 3)}), flush=True)


if __name__ == "__main__":
    main()

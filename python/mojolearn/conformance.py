"""The conformance run: every lane of this build against the committed golden hashes.

    python -m mojolearn conformance [--golden FILE] [--export FILE] [--sabotage] [--quiet]
    python -m mojolearn conformance --every-isa [--golden FILE] [--sabotage] [--quiet]
    python -m mojolearn conformance diff A.json B.json

EVERY CPU BUILD
    A run checks the build this process loads (mojolearn.cpu_isa(); MOJOLEARN_ISA
    forces one). --every-isa runs the whole check once per CPU build in a child
    process each (v3, v4, amx: python/mojolearn/_core/isa.py), and names every build it
    skipped and why (the features this CPU lacks). `make conformance` does this.

WHAT IT CHECKS
    Each lane (a GEMM profile in one layout, or a converter) runs over seeded
    fixtures; each result is hashed with the published convention (sha256 over the
    dtype string, the shape string and the C-order bytes of each array, first 16
    hex digits) and compared with contracts/golden/v1.json. The golden hashes are
    computed by the independent numpy oracle (tests/oracle.py) from the contract,
    not by these kernels (contracts/golden/make_golden.py).

FIXTURES ARE PORTABLE
    Inputs are built from integers only (Python's seeded Mersenne Twister and bit
    patterns), so every machine builds the same bits without numpy or libm.

EXIT STATUS
    0 every lane matches; 1 a mismatch (each one named: lane and fixture);
    2 an error (missing golden file, a lane that raised, ...).

MODEL LANES: the logits of a tiny fixture model (contracts/ops, M-1..M-27) under
fp32_v1 and fixed15_v1 and two weight formats, golden from tests/model_oracle.py.

IDENTITY (rule 6.5) is checked in the same run: chosen lanes again under 1, 2, 3
and 7 threads, and a row computed alone against the same row of the batch.

--sabotage perturbs the kernels (one leaf summed in reverse order for the float
profiles, one low bit for the integer ones): the run MUST then fail; a test
checks that it does. It is a per-call argument of the kernels that only this run's
own calls carry (taken from the calling thread's context, `_calls.sabotaged()`), so
other threads' products are never perturbed while a sabotaged run is in progress.
"""
from ._tools.conformance import (
    run, main, diff, lanes, model_lanes, load_golden, column, box, part_hash, matrix,
    bf16_matrix, identity_checks, model_identity_checks, model_logits, model_weights, FIXTURES,
    IDENTITY_THREADS, IDENTITY_LANES, IDENTITY_FIXTURES, MODEL_CONFIG, MODEL_LANES, MODEL_IDS,
    INT_LARGE_K, GOLDEN_CANDIDATES,
)
from ._tools.conformance import HERE, every_isa  # noqa: F401  (public names outside __all__)

__all__ = [
    "run", "main", "diff", "lanes", "model_lanes", "load_golden", "column", "box", "part_hash",
    "matrix", "bf16_matrix", "identity_checks", "model_identity_checks", "model_logits",
    "model_weights", "FIXTURES", "IDENTITY_THREADS", "IDENTITY_LANES", "IDENTITY_FIXTURES",
    "MODEL_CONFIG", "MODEL_LANES", "MODEL_IDS", "INT_LARGE_K", "GOLDEN_CANDIDATES",
]


def __dir__():
    """dir() shows the public API (__all__), not the module's imports."""
    return sorted(__all__)

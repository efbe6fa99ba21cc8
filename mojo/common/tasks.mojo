"""How work is split across tasks and run. Splits depend on sizes and the task count
only; no result depends on them (every kernel's order is fixed by its contract)."""
from std.python import Python
from max.algorithm import parallelize
from common.fpstate import enter_contract_mode, leave_contract_mode


@always_inline
def chunk_bounds(n: Int, parts: Int, t: Int, align: Int) -> Tuple[Int, Int]:
    """The t-th of `parts` contiguous ranges of [0, n), boundaries multiples of align."""
    var units = (n + align - 1) // align
    var per = units // parts
    var extra = units % parts
    var s = t * per + min(t, extra)
    var e = s + per + (1 if t < extra else 0)
    return (min(s * align, n), min(e * align, n))


def run_tasks[F: def(Int) -> None](work: F, tasks: Int):
    """The one way an entry runs its tasks: release the GIL, run work(0) .. work(tasks - 1)
    on MAX's worker pool (inline when tasks == 1), each task under the contract's
    floating-point state (DAZ on, FTZ off, round to nearest; the previous MXCSR is
    restored after), then take the GIL back."""
    ref cpy = Python().cpython()
    var st = cpy.PyEval_SaveThread()

    def task(t: Int) {imm work}:
        var old = enter_contract_mode()
        work(t)
        leave_contract_mode(old)

    if tasks == 1:
        task(0)
    else:
        parallelize(task, tasks)
    cpy.PyEval_RestoreThread(st)

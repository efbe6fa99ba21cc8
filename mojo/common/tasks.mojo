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


@always_inline
def nothing():
    """A step that does nothing (the default prepare / finish of run_tasks)."""
    pass


def run_tasks[
    P: def() -> None, F: def(Int) -> None, A: def() -> None
](prepare: P, work: F, tasks: Int, finish: A):
    """The one way an entry runs its kernels: release the GIL; prepare() on the calling
    thread; work(0) .. work(tasks - 1) on MAX's worker pool (inline when tasks == 1);
    finish() on the calling thread once every task has returned; then take the GIL
    back. Every step runs under the contract's floating-point state (common.fpstate:
    DAZ on, or off in the explicit-flush build, FTZ off, round to nearest, exceptions
    masked; the thread's previous MXCSR / FPCR is restored after). prepare and finish are for the serial steps around the parallel one (a
    shared operand made once, the root of a split reduction), so the GIL is released
    once per call."""
    ref cpy = Python().cpython()
    var st = cpy.PyEval_SaveThread()

    def task(t: Int) {imm work}:
        var old = enter_contract_mode()
        work(t)
        leave_contract_mode(old)

    var old = enter_contract_mode()
    prepare()
    if tasks == 1:
        work(0)
    else:
        parallelize(task, tasks)
    finish()
    leave_contract_mode(old)
    cpy.PyEval_RestoreThread(st)


def run_tasks[F: def(Int) -> None](work: F, tasks: Int):
    """run_tasks(nothing, work, tasks, nothing)."""
    run_tasks(nothing, work, tasks, nothing)

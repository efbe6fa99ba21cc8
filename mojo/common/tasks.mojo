"""How work is split across tasks and run. Splits depend on sizes and the task count
only; no result depends on them (every kernel's order is fixed by its contract)."""
from std.python import Python
from std.runtime._asyncrt import TaskGroup
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
    thread; work(0) .. work(tasks - 1) as tasks of one TaskGroup on the Mojo runtime's
    worker pool, the caller waiting (inline when tasks == 1);
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
        # A bare TaskGroup, not max.algorithm.parallelize: parallelize makes a CPU
        # DeviceContext, a trace scope and a denormal-flush scope around every call
        # and task. On a 2-core Zen 5, in one process with the same bits, the bare
        # group ran a 1x576x576 prepared product in 0.062 ms against 0.079 ms and
        # SmolLM2-135M greedy decode in 20.3 against 21.7 ms a token on a quiet
        # machine; 0.19 against 0.52 ms and 26.7 against 39.2 ms while other jobs
        # loaded it.
        @__parameter
        @always_inline
        def one(i: Int):
            task(i)

        @always_inline
        @__parameter
        __async def as_task(i: Int):
            one(i)

        var group = TaskGroup()
        for i in range(tasks):
            group.create_task(as_task(i))
        group.wait()
        _ = task  # alive until every task has run (the closure reads it by reference)
    finish()
    leave_contract_mode(old)
    cpy.PyEval_RestoreThread(st)


def run_tasks[F: def(Int) -> None](work: F, tasks: Int):
    """run_tasks(nothing, work, tasks, nothing)."""
    run_tasks(nothing, work, tasks, nothing)

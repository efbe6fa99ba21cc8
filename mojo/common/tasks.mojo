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


@fieldwise_init
struct PanelShare(ImplicitlyCopyable, Movable):
    """One task's share of a column split (panel_share): the whole panels [j_lo, j_hi)
    over every row, and the leftover columns [j_left, n) over rows [r_lo, r_hi)
    (an empty row range when the panels divide evenly)."""
    var j_lo: Int
    var j_hi: Int
    var j_left: Int
    var r_lo: Int
    var r_hi: Int


def _block_edge(x: Int, m: Int, blk: Int) -> Int:
    """x rounded to the nearest multiple of blk, within [0, m]."""
    return min(m, (x + blk // 2) // blk * blk)


def panel_share(n: Int, m: Int, parts: Int, t: Int, nr: Int, blk: Int) -> PanelShare:
    """Task t's share of an m x n output split over `parts` tasks by columns, in panels
    of nr columns. When the panel count is not a multiple of parts, each task takes
    panels // parts whole panels, and the last panels % parts panels (the leftover, the
    last one possibly narrower) are split by rows, at multiples of blk nearest to
    m * t / parts: with 43 panels, 1024 rows in blocks of 224 and 2 tasks, the tasks
    compute 21 panels and 448 or 576 rows of the 43rd, instead of 22 and 21 panels.
    Where the largest task's share of the leftover is not at most 7/8 of a whole panel
    (few rows in blocks of blk, many tasks; a second call for no gain) it is
    chunk_bounds' split of whole panels."""
    var npan = (n + nr - 1) // nr
    var q = npan // parts
    var r = npan - q * parts
    var most = 0  # the largest row share of the leftover
    if r > 0:
        for u in range(parts):
            var ru = _rows_of(m, parts, u, blk)
            most = max(most, ru[1] - ru[0])
    if r == 0 or 8 * r * most > 7 * m:
        var b = chunk_bounds(n, parts, t, nr)
        return PanelShare(b[0], b[1], n, 0, 0)
    var rows = _rows_of(m, parts, t, blk)
    return PanelShare(t * q * nr, (t + 1) * q * nr, q * parts * nr, rows[0], rows[1])


def _rows_of(m: Int, parts: Int, t: Int, blk: Int) -> Tuple[Int, Int]:
    """Task t's rows of the leftover panels (panel_share)."""
    var lo = 0 if t == 0 else _block_edge(m * t // parts, m, blk)
    var hi = m if t == parts - 1 else _block_edge(m * (t + 1) // parts, m, blk)
    return (lo, max(lo, hi))


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

"""How work is split across tasks. Splits depend on sizes and the task count only;
no result depends on them (every kernel's order is fixed by its contract)."""


@always_inline
def chunk_bounds(n: Int, parts: Int, t: Int, align: Int) -> Tuple[Int, Int]:
    """The t-th of `parts` contiguous ranges of [0, n), boundaries multiples of align."""
    var units = (n + align - 1) // align
    var per = units // parts
    var extra = units % parts
    var s = t * per + min(t, extra)
    var e = s + per + (1 if t < extra else 0)
    return (min(s * align, n), min(e * align, n))

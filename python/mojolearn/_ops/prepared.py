"""Prepared weights: ``linalg.prepare(b)`` packs a right-hand operand ONCE into the
layout the CPU kernels of this build stream, and the products take the result in
place of ``b`` and skip the packing they would otherwise do on every call:
  - float32: ``matmul`` (mojo/gemm/cpu/pack_f32.mojo, ``pack_b_all``: NR-column panels
    over all of k, NR from this build's block table), 4 bytes a weight;
  - bf16 bits (uint16, or a ``lowbit.BF16Weight``): ``matmul_bf16``, the same panels
    holding the bits as stored (mojo/gemm/cpu/pack_lowbit.mojo), 2 bytes a weight,
    widened exactly (rule L-1) as the kernels read them;
  - a ``lowbit.Int8Weight`` (int8 codes, one row exponent per stored row, (n, k)):
    ``matmul`` with ``transpose_b=True`` on the float32 weight it materializes
    (rule L-6, ``dequantize_int8``), the same panels holding the codes, 1 byte a
    weight plus a float32 scale per row, widened as the kernels read them;
  - a quantized tuple, (codes, exponents) or (hi, lo, exponents): ``matmul_int8`` /
    ``matmul_int15`` (``gemm_int_pack``: the integer kernel's own B layout over all n,
    AMX units, VNNI panels with column sums or AVX2 k-pair panels, by build). The
    object also keeps a copy of the codes and exponents as given: the decode rows
    (m <= 4) read B as stored.
The bits are those of the raw call: packing copies bits (bf16 widened exactly, rule
L-1; codes regrouped, never changed), and the products run the same leaves, chains
and tree (contract 6.5: the order depends on k only) or the same exact integer sums.

The object records what it was made for: the CPU build (``mojolearn.cpu_isa()``) and
its panel width, the profile (fp32.v1 for a float32 ``b``, bf16f32.v1 for bf16 bits),
the stored shape, the layout (``transpose_b``) and the layout version. A call that
does not match any of these (another build, e.g. an object unpickled in a process
running another ``MOJOLEARN_ISA``; the other profile's function; another k; the other
transpose flag; a released object; one made by another layout version; a call served
by a GPU) is refused by name. It is a copy: later changes to the source array do not
reach it.
"""
from __future__ import annotations

import ctypes

from .._core import cpu as _cpu
from .._core.loader import blocking, cpu_native, native
from .._core.threads import tasks
from .._data.validate import buf, contiguous
from . import lowbit
from .operands import flag, int_operand, no_extra, stored_transposed

LAYOUT = "nr-panels/1"  # pack_b_all: panel q = columns [q*NR, q*NR+NR) for kk in 0..k
# the same panels holding each stored format (pack_lowbit.mojo); format -> layout
LAYOUTS = {"float32": LAYOUT, "bfloat16": "nr-panels-bf16/1", "int8": "nr-panels-i8/1"}
FMT_CODES = {"float32": 0, "bfloat16": 1, "int8": 2}  # gemm_f32_packed's b_fmt
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "int8": 1}
INT_LAYOUT = "int-b/1"  # gemm_int_pack's layout, then the codes and exponents as given
PROFILES = {"float32": "mojolearn.identical.gemm.fp32.v1",
            "uint16": "mojolearn.identical.gemm.bf16f32.v1"}
INT_PROFILES = {1: "mojolearn.identical.gemm.int8i32.v1", 2: "mojolearn.identical.gemm.int15i64.v1"}
FUNCS = {"mojolearn.identical.gemm.fp32.v1": "matmul",
         "mojolearn.identical.gemm.bf16f32.v1": "matmul_bf16",
         "mojolearn.identical.gemm.int8i32.v1": "matmul_int8",
         "mojolearn.identical.gemm.int15i64.v1": "matmul_int15"}
_TAKES = {"matmul": "the float32 weight", "matmul_bf16": "the bf16 bits (uint16) weight",
          "matmul_int8": "the (codes, exponents) tuple of quantize_int8",
          "matmul_int15": "the (hi, lo, exponents) tuple of quantize_int15"}
_ALIGN = 64
_HUGE = 2 * 1024 * 1024


def _alloc(nbytes: int):
    """Anonymous memory for the panels: ((mmap, its ctypes view), aligned address).
    Large blocks are asked for as transparent huge pages (as numpy does for its large
    arrays) and aligned to 2 MiB: a prepared weight is read front to back on every
    call, and 4 KiB pages would cost a TLB miss every 4 KiB of the stream. The mapping
    is private: Python's mmap maps anonymous memory SHARED by default, and Linux gives
    shared anonymous memory huge pages only under its shmem setting (usually "never"),
    so a shared mapping silently got 4 KiB pages whatever madvise asked."""
    import mmap

    align = _HUGE if nbytes >= _HUGE else _ALIGN
    mm = mmap.mmap(-1, nbytes + align, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = (ctypes.c_byte * (nbytes + align)).from_buffer(mm)
    base = ctypes.addressof(view)
    start = base + (-base) % align
    if align == _HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        # only the whole huge pages of the block: asked for the whole mapping, the last
        # huge page is faulted in whole however little of it the block uses (up to
        # 2 MiB a weight: about 100 MB over SmolLM2-135M's 121 prepared matrices)
        whole = nbytes // _HUGE * _HUGE
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, start - base, whole)
        except OSError:  # pragma: no cover - a kernel without THP: 4 KiB pages, same bits
            pass
    return (mm, view), start
_NR = []


def build_nr() -> int:
    """The panel width (NR) of the CPU build serving this process (its block table)."""
    if not _NR:
        _NR.append(blocking()["NR"])
    return _NR[0]


class PreparedWeight:
    """A right-hand GEMM operand packed once for this CPU build (see ``linalg.prepare``).

    Attributes: ``shape`` (the stored shape of b: (k, n), or (n, k) when
    ``transpose_b``), ``transpose_b``, ``profile`` (the profile name of the function
    that takes it), ``format`` (how the weights are held: "float32", "bfloat16" or
    "int8" panels; None for the integer profiles' codes), ``isa`` (the CPU build it
    was packed for), ``nr`` (its panel width), ``layout``, ``nbytes`` (memory held).
    ``release()`` frees the memory; a released object is refused by every product."""

    __slots__ = ("shape", "transpose_b", "profile", "format", "isa", "nr", "layout", "n", "k",
                 "_mem", "_addr", "_floats", "_int", "_scales")

    def __init__(self):  # made by prepare() or unpickling only
        raise TypeError("mojolearn: PreparedWeight: make one with mojolearn.linalg.prepare(b, "
                        "transpose_b=...)")

    @classmethod
    def _new(cls, shape, transpose_b, profile, isa, nr, layout, floats, fmt=None):
        """floats: the 4-byte words of the block (panels, then the int8 scales)."""
        self = object.__new__(cls)
        self.shape, self.transpose_b, self.profile = tuple(shape), bool(transpose_b), profile
        self.isa, self.nr, self.layout, self.format = isa, int(nr), layout, fmt
        if transpose_b:
            self.n, self.k = self.shape
        else:
            self.k, self.n = self.shape
        self._floats = int(floats)
        self._mem, self._addr = _alloc(4 * max(self._floats, 1))
        self._int = _int_parts(self) if profile in INT_PROFILES.values() else None
        self._scales = 0
        if fmt == "int8":
            self._scales = self._addr + _up(_panel_elems(self.n, self.k, self.nr))
        return self

    def _kernel_args(self):
        """(panels address, b_fmt, scales address) for gemm_f32_packed."""
        return self._addr, FMT_CODES[self.format], self._scales

    @property
    def nbytes(self) -> int:
        """Bytes held by the packed panels (0 once released)."""
        return 0 if self._mem is None else 4 * self._floats

    @property
    def released(self) -> bool:
        """True once ``release()`` has freed the panels; a released object is refused."""
        return self._mem is None

    def release(self) -> int:
        """Free the packed panels; returns the bytes released. Later use is refused."""
        n = self.nbytes
        mem, self._mem, self._addr = self._mem, None, 0
        if mem is not None:
            mm = mem[0]
            del mem  # the ctypes view goes with it, then the mapping can close
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view still held: freed when dropped
                pass
        return n

    def __repr__(self):
        state = "released" if self._mem is None else f"{self.nbytes} bytes"
        return (f"PreparedWeight(shape={self.shape}, transpose_b={self.transpose_b}, "
                f"profile={self.profile!r}, isa={self.isa!r}, layout={self.layout!r}, {state})")

    def __reduce__(self):
        if self._mem is None:
            raise ValueError("mojolearn: PreparedWeight: a released prepared weight cannot be "
                             "pickled; prepare the weight again")
        data = ctypes.string_at(self._addr, 4 * self._floats)
        return (_restore, ((self.shape, self.transpose_b, self.profile, self.isa, self.nr,
                            self.layout, self._floats, self.format), data))

    def check(self, func: str, transpose_b: bool) -> None:
        """Refuse, by name, a use this object was not made for (see the module doc)."""
        if self._mem is None:
            raise ValueError(f"mojolearn: {func}: this prepared weight was released; prepare "
                             "the weight again with linalg.prepare")
        layout = INT_LAYOUT if self.profile in INT_PROFILES.values() else LAYOUTS.get(self.format)
        if self.layout != layout:
            raise ValueError(
                f"mojolearn: {func}: this prepared weight is stale: its layout is "
                f"{self.layout!r}, this mojolearn packs {layout!r}; prepare the weight again")
        want = FUNCS.get(self.profile)
        if want != func:
            raise TypeError(
                f"mojolearn: {func}: this weight was prepared for {want} ({self.profile}); "
                f"pass it to {want}, or prepare {_TAKES.get(func, 'the weight')} for {func}")
        isa = _cpu.cpu_isa()
        if self.isa != isa or self.nr != build_nr():
            raise ValueError(
                f"mojolearn: {func}: this weight was prepared for the {self.isa} CPU build "
                f"(panels of {self.nr} columns); this process runs the {isa} build "
                f"(MOJOLEARN_ISA / mojolearn.cpu_isa()); prepare the weight again here")
        if bool(transpose_b) != self.transpose_b:
            raise ValueError(
                f"mojolearn: {func}: this weight was prepared with transpose_b="
                f"{self.transpose_b} (b stored {self.shape}) but the call passes transpose_b="
                f"{bool(transpose_b)}; pass the flag it was prepared with")
        if native() is not cpu_native():
            raise ValueError(
                f"mojolearn: {func}: prepared weights are a CPU kernel layout and this call "
                "runs on the GPU; pass the raw weight, or mojolearn.set_device('cpu')")


def _int_layout(n: int, k: int, nplanes: int) -> tuple:
    """A prepared integer weight's block: the packed B (the words gemm_int_pack writes),
    then the planes as given ((n, k) int8 each) and the exponents (n int32), each
    64-byte aligned. Returns (words, [plane offsets], exps offset, total 4-byte words)."""
    words = int(cpu_native().gemm_int_pack_words((n, k, int(nplanes == 2))))
    at = _up(4 * words)
    planes = []
    for _ in range(nplanes):
        planes.append(at)
        at += _up(n * k)
    return words, planes, at, (at + _up(4 * n)) // 4


def _int_parts(p):
    """Addresses inside p's block (_int_layout): {"packed", "words", "planes", "exps"}."""
    nplanes = 1 if p.profile == INT_PROFILES[1] else 2
    words, planes, exps, _ = _int_layout(p.n, p.k, nplanes)
    return {"packed": p._addr, "words": words, "planes": [p._addr + o for o in planes],
            "exps": p._addr + exps}


def _up(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


def _prepare_int(b, transpose_b):
    """prepare() for a quantized tuple: (codes, exponents) -> int8i32.v1, (hi, lo,
    exponents) -> int15i64.v1; b as the integer GEMMs take it, (n, k)."""
    func = "prepare"
    if len(b) not in (2, 3):
        raise ValueError(
            f"mojolearn: {func}: a quantized b is (codes, exponents) from quantize_int8 or "
            f"(hi, lo, exponents) from quantize_int15, got a tuple of {len(b)}")
    if transpose_b is False:
        raise ValueError(
            f"mojolearn: {func}: a quantized b is stored (n, k) and multiplied as a @ b.T, "
            "as matmul_int8 / matmul_int15 take it; drop transpose_b=False (or pass True)")
    nplanes = len(b) - 1
    n, k, named, _ = int_operand(func, b, "b", nplanes)
    bufs = [contiguous(x, func, nm) for nm, x in named]
    isa = _cpu.cpu_isa()
    p = PreparedWeight._new((n, k), True, INT_PROFILES[nplanes], isa, build_nr(), INT_LAYOUT,
                            _int_layout(n, k, nplanes)[3])
    parts = p._int
    for src, dst in zip(bufs[:-1], parts["planes"]):
        ctypes.memmove(dst, src.addr, n * k)
    ctypes.memmove(parts["exps"], bufs[-1].addr, 4 * n)
    if n and k:
        pl = parts["planes"]
        cpu_native().gemm_int_pack((pl[0], pl[-1], n, k, int(nplanes == 2), parts["packed"],
                                    tasks()))
    del bufs  # alive until copied
    return p


def _restore(meta, data):
    if len(meta) == 7:  # pickled before the format was recorded: float32 panels (a bf16
        # weight widened) or an integer profile's codes
        meta = tuple(meta) + (None if meta[2] in INT_PROFILES.values() else "float32",)
    shape, transpose_b, profile, isa, nr, layout, floats, fmt = meta
    p = PreparedWeight._new(shape, transpose_b, profile, isa, nr, layout, floats, fmt)
    if len(data) != 4 * floats:
        raise ValueError("mojolearn: PreparedWeight: the pickled panels have the wrong size")
    ctypes.memmove(p._addr, data, len(data))
    return p


_UNSET = object()  # transpose_b not given (an explicit None is refused like any non-bool)


def prepare(b, *, transpose_b=_UNSET, **unexpected):
    """Pack the right-hand operand ``b`` once for this CPU build; returns a
    ``PreparedWeight`` that ``matmul`` (b float32), ``matmul_bf16`` (b bf16 bits,
    uint16), ``matmul_int8`` (b the (codes, exponents) tuple of quantize_int8) or
    ``matmul_int15`` (b the (hi, lo, exponents) tuple of quantize_int15) accept in
    place of ``b``, with the same bits as the raw call.

    A weight kept low-bit (``lowbit.BF16Weight``, ``lowbit.Int8Weight``) stays in its
    format: the panels hold the bf16 bits or the int8 codes (with a float32 scale per
    row) and the kernels widen them as they read, with the bits of the float32 weight
    the format materializes (``lowbit.materialize_one``): a BF16Weight goes to
    ``matmul_bf16``, an Int8Weight (stored (n, k), one exponent per row) to
    ``matmul`` with ``transpose_b=True``.

    ``transpose_b`` names the layout a float b is stored in, as in those calls: False
    (the default) for (k, n) (``a @ b``), True for (n, k) (``a @ b.T``, how checkpoints
    store weights); the call must pass the same flag. A quantized b is always (n, k)
    (the integer GEMMs compute ``a @ b.T``). The object is a copy tied to this
    process's CPU build, in the bytes of the stored format (columns padded to the panel
    width): 4 a weight for float32, 2 for bf16 bits, 1 (plus 4 a row) for int8
    storage; for a quantized tuple, the codes packed for this build's integer kernel
    plus the codes and exponents as given (about twice the codes' bytes)."""
    func = "prepare"
    no_extra(func, unexpected, "(b, *, transpose_b=False)")
    transpose_b = None if transpose_b is _UNSET else flag(func, "transpose_b", transpose_b)
    if isinstance(b, tuple):
        return _prepare_int(b, transpose_b)
    if isinstance(b, lowbit.Int8Weight):
        return _prepare_int8_storage(b, transpose_b)
    transpose_b = bool(transpose_b)
    if isinstance(b, lowbit.BF16Weight):
        b = b.bits
    bb = buf(b, func, "b", ("float32", "uint16"), ndim=2, copy=False)
    shape = bb.shape
    n, k = shape if transpose_b else shape[::-1]
    # a column-major b (numpy's w.T) is packed from where it lies, read as the
    # C-contiguous transpose it is (the panels are the same; no copy)
    stored, pack_t = stored_transposed(bb), not transpose_b
    if stored is None:
        stored, pack_t = contiguous(bb, func, "b"), transpose_b
    bb = stored
    isa = _cpu.cpu_isa()
    nr = build_nr()
    fmt = "bfloat16" if bb.dtype == "uint16" else "float32"
    p = PreparedWeight._new(shape, transpose_b, PROFILES[bb.dtype], isa, nr, LAYOUTS[fmt],
                            _panel_words(n, k, nr, fmt), fmt)
    if n and k:
        if fmt == "float32":
            cpu_native().gemm_f32_pack((bb.addr, p._addr, n, k, int(pack_t), 0, tasks()))
        else:
            cpu_native().gemm_f32_pack_lowbit((bb.addr, 0, p._addr, 0, n, k, int(pack_t),
                                               FMT_CODES[fmt], tasks()))
    del bb  # alive until the packing returned
    return p


def _panel_elems(n: int, k: int, nr: int) -> int:
    """Weights the panels hold: n padded to the panel width, times k."""
    return (n + nr - 1) // nr * nr * k


def _panel_words(n: int, k: int, nr: int, fmt: str) -> int:
    """4-byte words of a panel block of format fmt (int8: the codes, 64-byte aligned,
    then one float32 scale per padded column)."""
    if fmt == "int8":
        return (_up(_panel_elems(n, k, nr)) + 4 * ((n + nr - 1) // nr * nr)) // 4
    return (_panel_elems(n, k, nr) * ELEM_BYTES[fmt] + 3) // 4


def _prepare_int8_storage(w, transpose_b):
    """prepare() for a lowbit.Int8Weight: int8 panels + column scales, for matmul's
    fp32.v1 on the weight dequantize_int8 materializes (a @ w.T)."""
    func = "prepare"
    if transpose_b is False:
        raise ValueError(
            f"mojolearn: {func}: an Int8Weight is stored (n, k) with one exponent per "
            "stored row, and is multiplied as a @ w.T; pass transpose_b=True (or leave "
            "it unset)")
    codes = contiguous(buf(w.codes, func, "b codes", ("int8",), ndim=2, copy=False), func, "b codes")
    exps = contiguous(buf(w.exponents, func, "b exponents", ("int32",), ndim=1, copy=False),
                      func, "b exponents")
    n, k = codes.shape
    if exps.shape != (n,):
        raise ValueError(f"mojolearn: {func}: an Int8Weight of {n} rows needs {n} exponents, "
                         f"got shape {exps.shape}")
    nr = build_nr()
    p = PreparedWeight._new((n, k), True, PROFILES["float32"], _cpu.cpu_isa(), nr,
                            LAYOUTS["int8"], _panel_words(n, k, nr, "int8"), "int8")
    if n and k:
        cpu_native().gemm_f32_pack_lowbit((codes.addr, exps.addr, p._addr, p._scales, n, k, 1,
                                           FMT_CODES["int8"], tasks()))
    del codes, exps  # alive until the packing returned
    return p

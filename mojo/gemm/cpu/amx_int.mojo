"""int8i32.v1 and int15i64.v1 on the AMX tile unit (Sapphire Rapids and newer; only
the `amx` build compiles this, under `CompilationTarget.has_intel_amx()`). Lowbit
contract L-5/L-7, W-3/W-4. Called by gemm/cpu/entry.mojo for each task's rectangle.

TILES
    All eight tiles are 16 rows x 64 bytes. tdpbssd multiplies signed x signed bytes
    (no +128 offset, no column sums), 4 per int32 lane, wrapping int32 sums: exact,
    since every true piece sum lies inside int32 by L-7 / W-4.
      A tile: 16 rows x 64 k-bytes (row-major).
      B tile: 16 k-groups x 16 columns x 4 k-bytes (the k-group "VNNI" layout).
    One step of the kernel is a 2 x 2 block of output tiles: tmm0-3 accumulate, tmm4-5
    hold the two A tiles of an A unit, tmm6-7 the two B tiles of a B unit.
      int8:  an A unit is 32 rows (tiles: rows 0-15, rows 16-31), a B unit 32 columns;
             the step makes a 32 x 32 block of int32 sums.
      int15: an A unit is 16 rows of both planes (tiles: hi, lo), a B unit 16 columns
             of both planes; the four tiles are HH, HL, LH, LL of one 16 x 16 block,
             combined in int64 as on every build, S = HH * 2**14 + (HL + LH) * 2**7 + LL.
    k is taken in chunks of KC_BLOCKS k-blocks (64 bytes each) so that the B unit of
    a chunk (2 x KC_BLOCKS KiB) stays in L1 while the A units of the block stream
    past it from L2; a unit's int32 sums wait in a buffer between chunks (wrapping
    int32 adds: the order changes nothing).

PACKING (every tile load is one contiguous KiB, stride 64)
    k is padded with zero codes to a multiple of 64, rows and columns to whole units
    (zero codes add nothing; their outputs are not stored).
    A block: chunk-major, so that the units of one chunk are one sequential stream:
      byte offset of (unit P, k-block kb, tile h) =
        kb0 * units * 2048 + P * kbc * 2048 + (kb - kb0) * 2048 + h * 1024
      where kb0 is the first k-block of kb's chunk and kbc that chunk's length.
    B chunk: unit-major, (unit Q, k-block kb, tile h) at word
      Q * kbn * 512 + kb * 512 + h * 256; word (group G, column c) of a tile at
      G * 16 + c holds B[j, 4G : 4G + 4] of the tile's column j.
    A prepared B (amx_pack_all: the same unit layout over all n, made once by
    linalg.prepare) is read in place: chunk jc starts at unit jc / 32 (int8) or
    jc / 16 (int15).
"""
from std.sys import llvm_intrinsic
from std.sys.info import CompilationTarget
from std.sys.intrinsics import prefetch, PrefetchOptions
from std.memory import bitcast
from common.ptr import I8Ptr, I32Ptr, U32Ptr
from gemm.cpu.blocking import round_up
from gemm.cpu.blocking import AMX_KB as KB  # k-bytes per tile row
from gemm.cpu.blocking import AMX_TILE_BYTES as TILE_BYTES
from gemm.cpu.blocking import CachePlan  # blocks: the plan's amx_a_block_bytes (L2) / amx_b_chunk_bytes
from gemm.cpu.blocking import AMX_KC_BLOCKS as KC_BLOCKS  # k-blocks per k-chunk: the B unit of a chunk in L1
from gemm.cpu.blocking import AMX_PF_BYTES as PF_BYTES  # software prefetch distance in the A stream
from gemm.cpu.int_gemm import IntArgs, store_scaled
from gemm.cpu.ukernel_int import IW
from gemm.cpu.pack_f32 import transpose16
from std.collections import Array
from arith.quant import join15_products

comptime CFG_WORDS = 16  # 64-byte tile configuration
comptime UNIT_BYTES = 2 * TILE_BYTES  # the two tiles of a unit in one k-block
comptime CBUF_WORDS = 32 * 32  # one step's 2 x 2 tiles of int32


@always_inline
def _kblocks(k: Int) -> Int:
    return (k + KB - 1) // KB


@always_inline
def unit_lines(int15: Bool) -> Int:
    """Rows of an A unit, columns of a B unit."""
    return 16 if int15 else 32


def amx_mc(p: CachePlan, k: Int, rows: Int, int15: Bool) -> Int:
    """Rows of one packed A block (whole units, at most the plan's amx_a_block_bytes)."""
    var u = unit_lines(int15)
    var per_unit = _kblocks(k) * UNIT_BYTES
    var units = max(1, p.amx_a_block_bytes // per_unit)
    return min(units * u, round_up(rows, u))


def amx_nc(p: CachePlan, k: Int, cols: Int, int15: Bool) -> Int:
    """Columns of one packed B chunk (whole units, at most the plan's amx_b_chunk_bytes)."""
    var u = unit_lines(int15)
    var per_unit = _kblocks(k) * UNIT_BYTES
    var units = max(1, p.amx_b_chunk_bytes // per_unit)
    return min(units * u, round_up(cols, u))


def amx_ws(g: IntArgs, rows: Int, cols: Int) -> Int:
    """Workspace (32-bit words) of one task: packed A block, B chunk, the tile
    configuration and the sums of every unit of the A block."""
    var u = unit_lines(g.int15)
    var per_unit = _kblocks(g.k) * UNIT_BYTES
    var mu = amx_mc(g.plan, g.k, rows, g.int15) // u
    var nu = amx_nc(g.plan, g.k, cols, g.int15) // u
    return (mu + nu) * per_unit // 4 + CFG_WORDS + mu * CBUF_WORDS


@always_inline
def _load_row_block(s: I8Ptr, k0: Int, k: Int) -> SIMD[DType.int8, KB]:
    """Bytes [k0, k0 + 64) of a row of k codes, zeros past k."""
    if k0 + KB <= k:
        return s.unsafe_load[width=KB](k0)
    var v = SIMD[DType.int8, KB](0)
    for q in range(k - k0):
        v[q] = s.unsafe_load(k0 + q)
    return v


def pack_a_amx(src0: I8Ptr, src1: I8Ptr, ld: Int, i0: Int, mc: Int, k: Int, int15: Bool, dst: I8Ptr):
    """Rows [i0, i0 + mc) of A (int8: src0; int15: hi plane src0, lo plane src1) into
    the chunk-major unit layout (rows past mc up to whole units are zeros)."""
    var kbn = _kblocks(k)
    var u = unit_lines(int15)
    var units = (mc + u - 1) // u
    for p in range(units):
        for h in range(2):
            var src = src1 if (int15 and h == 1) else src0
            for t in range(16):
                var r = p * u + (0 if int15 else h * 16) + t
                var s = src.unsafe_offset((i0 + r) * ld)
                var kb0 = 0
                while kb0 < kbn:
                    var kbc = min(KC_BLOCKS, kbn - kb0)
                    var d = dst.unsafe_offset(kb0 * units * UNIT_BYTES + p * kbc * UNIT_BYTES + h * TILE_BYTES + t * KB)
                    for q in range(kbc):
                        var v = _load_row_block(s, (kb0 + q) * KB, k) if r < mc else SIMD[DType.int8, KB](0)
                        d.unsafe_store(q * UNIT_BYTES, v)
                    kb0 += kbc


def pack_b_amx(src0: I8Ptr, src1: I8Ptr, ld: Int, j0: Int, nc: Int, k: Int, int15: Bool, dst: U32Ptr):
    """Columns [j0, j0 + nc) of B (rows of the stored (n, k) arrays; int8: src0; int15:
    hi plane src0, lo plane src1) into the unit layout (columns past nc are zeros).
    A tile is the 16 x 16 transpose of its 16 columns' 4-byte groups: 16 rows of 64
    bytes are loaded and transposed in registers (transpose16)."""
    var kbn = _kblocks(k)
    var u = unit_lines(int15)
    var units = (nc + u - 1) // u
    var blk = Array[SIMD[DType.uint32, 16], 16](fill=SIMD[DType.uint32, 16](0))
    for q in range(units):
        for h in range(2):
            var src = src1 if (int15 and h == 1) else src0
            var j_first = q * u + (0 if int15 else h * 16)  # the tile's first column
            var d = dst.unsafe_offset(q * kbn * 512 + h * 256)
            for kb in range(kbn):
                comptime for c in range(16):
                    var j = j_first + c
                    var v = SIMD[DType.int8, KB](0)
                    if j < nc:
                        v = _load_row_block(src.unsafe_offset((j0 + j) * ld), kb * KB, k)
                    blk[c] = bitcast[DType.uint32, 16](v)  # little-endian: byte 4G + q is bits 8q
                transpose16(blk)
                comptime for gi in range(16):
                    d.unsafe_store(kb * 512 + gi * 16, blk[gi])


@always_inline
def _tile_config(cfg: U32Ptr):
    """Palette 1, eight tiles of 16 rows x 64 bytes."""
    var b = cfg.unsafe_bitcast[UInt8]()
    for i in range(64):
        b.unsafe_store(i, UInt8(0))
    b.unsafe_store(0, UInt8(1))
    for t in range(8):
        b.unsafe_store(16 + 2 * t, UInt8(64))
        b.unsafe_store(48 + t, UInt8(16))
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.ldtilecfg", NoneType](b)


@always_inline
def _tile_release():
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.tilerelease", NoneType]()


@always_inline
def _tload[t: Int](p: I8Ptr, stride: Int):
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(t), p, Int64(stride))


@always_inline
def _at[t: Int](c: I32Ptr) -> I32Ptr:
    """Where accumulator tile t (0-3) lies in a unit's 32 x 32 sums buffer c (row
    stride 32 words): tiles (0,0) (0,1) / (1,0) (1,1)."""
    return c.unsafe_offset((t // 2) * 16 * 32 + (t % 2) * 16)


@always_inline
def _tstore[t: Int](c: I32Ptr):
    """Accumulator tile t into its place in the sums buffer c."""
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.tilestored64", NoneType](Int8(t), _at[t](c), Int64(128))


@always_inline
def _tzero[t: Int]():
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.tilezero", NoneType](Int8(t))


@always_inline
def _tdp[c: Int, a: Int, b: Int]():
    comptime if CompilationTarget.has_intel_amx():
        llvm_intrinsic["llvm.x86.tdpbssd", NoneType](Int8(c), Int8(a), Int8(b))


@always_inline
def _c_in[t: Int](c: I32Ptr, first: Bool):
    """Accumulator tile t (0-3, its place in the 2 x 2 block) resumed from c, or zero."""
    if first:
        _tzero[t]()
    else:
        _tload[t](_at[t](c).unsafe_bitcast[Int8](), 128)


@always_inline
def _prefetch_a(ak: I8Ptr):
    """The A stream PF_BYTES ahead of the k-block at ak (the next unit follows this one)."""
    comptime for l in range(UNIT_BYTES // 64):
        prefetch[PrefetchOptions().for_read().high_locality()](ak.unsafe_offset(PF_BYTES + l * 64))


@always_inline
def _kblock(ak: I8Ptr, bk: U32Ptr):
    """One k-block of a step: A tiles tmm4/5 (ak), B tiles tmm6/7 (bk), into tmm0-3."""
    _prefetch_a(ak)
    _tload[4](ak, 64)
    _tload[6](bk.unsafe_bitcast[Int8](), 64)
    _tdp[0, 4, 6]()
    _tload[7](bk.unsafe_offset(256).unsafe_bitcast[Int8](), 64)
    _tdp[1, 4, 7]()
    _tload[5](ak.unsafe_offset(TILE_BYTES), 64)
    _tdp[2, 5, 6]()
    _tdp[3, 5, 7]()


@always_inline
def _chunk(
    g: IntArgs, ach: I8Ptr, bq: U32Ptr, units: Int, kbc: Int, cbuf: I32Ptr, first: Bool, last: Bool,
    ea: I32Ptr, eb: I32Ptr, i0: Int, mc: Int, j0: Int, cols: Int,
):
    """One k-chunk (kbc k-blocks) of one B unit (bq) against every A unit of the block
    (ach: the chunk's units, kbc x 2 KiB each). Unit p's four sums tiles are resumed
    from cbuf + p * CBUF_WORDS (or zeroed when first) and stored back there; when last,
    the epilogue writes its outputs (rows i0 + p * u, columns j0, j0 + cols).
    Software-pipelined across units: unit p's tiles are stored one at a time between
    the products of unit p + 1's first k-block (the tile unit keeps working while
    each store waits for its tile's last product), and unit p's epilogue comes after
    that k-block is issued, so its vector work overlaps those products."""
    var u = unit_lines(g.int15)
    comptime for t in range(4):
        _c_in[t](cbuf, first)
    for kb in range(kbc):
        _kblock(ach.unsafe_offset(kb * UNIT_BYTES), bq.unsafe_offset(kb * 512))
    for p in range(1, units):
        var cp = cbuf.unsafe_offset((p - 1) * CBUF_WORDS)
        var cn = cbuf.unsafe_offset(p * CBUF_WORDS)
        var ap = ach.unsafe_offset(p * kbc * UNIT_BYTES)
        # the boundary: unit p - 1's tiles out, unit p's in, around unit p's first k-block
        _prefetch_a(ap)
        _tstore[0](cp)
        _c_in[0](cn, first)
        _tload[4](ap, 64)
        _tload[6](bq.unsafe_bitcast[Int8](), 64)
        _tdp[0, 4, 6]()
        _tstore[1](cp)
        _c_in[1](cn, first)
        _tload[7](bq.unsafe_offset(256).unsafe_bitcast[Int8](), 64)
        _tdp[1, 4, 7]()
        _tstore[2](cp)
        _c_in[2](cn, first)
        _tload[5](ap.unsafe_offset(TILE_BYTES), 64)
        _tdp[2, 5, 6]()
        _tstore[3](cp)
        _c_in[3](cn, first)
        _tdp[3, 5, 7]()
        if last:  # unit p - 1's epilogue while unit p's first products run
            _store_unit(g, cp, ea, eb, i0 + (p - 1) * u, min(u, mc - (p - 1) * u), j0, cols)
        for kb in range(1, kbc):
            _kblock(ap.unsafe_offset(kb * UNIT_BYTES), bq.unsafe_offset(kb * 512))
    var cl = cbuf.unsafe_offset((units - 1) * CBUF_WORDS)
    comptime for t in range(4):
        _tstore[t](cl)
    if last:
        _store_unit(g, cl, ea, eb, i0 + (units - 1) * u, min(u, mc - (units - 1) * u), j0, cols)


@always_inline
def _store_unit(g: IntArgs, cb: I32Ptr, ea: I32Ptr, eb: I32Ptr, r0: Int, rows: Int, j0: Int, cols: Int):
    """The epilogue of one unit's sums (cb): rows [r0, r0 + rows) x columns
    [j0, j0 + cols) of C (int8: a 32 x 32 block; int15: a 16 x 16 block from its four
    plane products)."""
    if not g.int15:
        for i in range(rows):
            var r = r0 + i
            var ea_r = ea.unsafe_load(r)
            comptime for v in range(2):
                if v * 16 < cols:
                    var s = cb.unsafe_load[width=IW](i * 32 + v * 16)
                    store_scaled(g, s.cast[DType.float32](), ea_r, eb, r, j0 + v * 16, cols - v * 16)
    else:
        for i in range(rows):
            var r = r0 + i
            var hh = cb.unsafe_load[width=IW](i * 32).cast[DType.int64]()
            var hl = cb.unsafe_load[width=IW](i * 32 + 16).cast[DType.int64]()
            var lh = cb.unsafe_load[width=IW]((16 + i) * 32).cast[DType.int64]()
            var ll = cb.unsafe_load[width=IW]((16 + i) * 32 + 16).cast[DType.int64]()
            var s = join15_products[IW](hh, hl, lh, ll)
            store_scaled(g, s.cast[DType.float32](), ea.unsafe_load(r), eb, r, j0, cols)


def amx_packed_words(n: Int, k: Int, int15: Bool) -> Int:
    """32-bit words of B prepared for amx_block: the unit layout over all n."""
    var u = unit_lines(int15)
    return ((n + u - 1) // u) * _kblocks(k) * 512


def amx_pack_all(b_hi: Int, b_lo: Int, n: Int, k: Int, int15: Bool, j0: Int, j1: Int, dst: U32Ptr):
    """Columns [j0, j1) (j0 a multiple of 32) of B into the prepared unit layout."""
    var u = unit_lines(int15)
    pack_b_amx(I8Ptr(unsafe_from_address=b_hi), I8Ptr(unsafe_from_address=b_lo), k, j0, j1 - j0, k, int15,
               dst.unsafe_offset((j0 // u) * _kblocks(k) * 512))


def amx_block(g: IntArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: U32Ptr):
    """Output rows [i_lo, i_hi) x columns [j_lo, j_hi) on the tile unit: per B chunk,
    per A block, per B unit, per k-chunk, every A unit of the block."""
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var k = g.k
    var kbn = _kblocks(k)
    var u = unit_lines(g.int15)
    var per_unit = kbn * UNIT_BYTES
    var mc_max = amx_mc(g.plan, k, i_hi - i_lo, g.int15)
    var nc_max = amx_nc(g.plan, k, j_hi - j_lo, g.int15)
    var a_pk = ws.unsafe_bitcast[Int8]()
    var b_pk = ws.unsafe_offset((mc_max // u) * per_unit // 4)
    var cfg = b_pk.unsafe_offset((nc_max // u) * per_unit // 4)
    var cbuf = cfg.unsafe_offset(CFG_WORDS).unsafe_bitcast[Int32]()
    var a0 = I8Ptr(unsafe_from_address=g.a_hi)
    var a1 = I8Ptr(unsafe_from_address=g.a_lo)
    var b0 = I8Ptr(unsafe_from_address=g.b_hi)
    var b1 = I8Ptr(unsafe_from_address=g.b_lo)
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    _tile_config(cfg)
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        if g.bpre != 0:
            b_pk = U32Ptr(unsafe_from_address=g.bpre).unsafe_offset((jc // u) * kbn * 512)
        else:
            pack_b_amx(b0, b1, k, jc, nc, k, g.int15, b_pk)
        var ic = i_lo
        while ic < i_hi:
            var mc = min(mc_max, i_hi - ic)
            var units = (mc + u - 1) // u
            pack_a_amx(a0, a1, k, ic, mc, k, g.int15, a_pk)
            for jp in range(0, nc, u):
                var bq = b_pk.unsafe_offset((jp // u) * kbn * 512)
                var kb0 = 0
                while kb0 < kbn:
                    var kbc = min(KC_BLOCKS, kbn - kb0)
                    var last = kb0 + kbc == kbn
                    _chunk(g, a_pk.unsafe_offset(kb0 * units * UNIT_BYTES), bq.unsafe_offset(kb0 * 512), units, kbc,
                           cbuf, kb0 == 0, last, ea, eb, ic, mc, jc + jp, min(u, nc - jp))
                    kb0 += kbc
            ic += mc_max
        jc += nc_max
    _tile_release()

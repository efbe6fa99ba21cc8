"""int8i32.v1 and int15i64.v1 on the AMX tile unit (Sapphire Rapids and newer; only
the `amx` build compiles this, under `CompilationTarget.has_intel_amx()`). Lowbit
contract L-5/L-7, W-3/W-4. Called by gemm/cpu/entry.mojo for each task's rectangle.

TILES
    All eight tiles are 16 rows x 64 bytes. tdpbssd multiplies signed x signed bytes
    (no +128 offset, no column sums), 4 per int32 lane, wrapping int32 sums: exact,
    since every true piece sum lies inside int32 by L-7 / W-4.
      A tile: 16 rows x 64 k-bytes (row-major).
      B tile: 16 k-groups x 16 columns x 4 k-bytes (the k-group "VNNI" layout).
    int8: a 2 x 2 block of output tiles (32 x 32) per k-step: tmm0-3 accumulate,
    tmm4-5 hold two A tiles, tmm6-7 two B tiles. k is taken in chunks of KC_BLOCKS
    k-blocks so that the B pair (32 columns x KC bytes) stays in L1 while the A block
    streams past it from L2; the int32 partial sums of a 32-column strip wait in a
    buffer between chunks (wrapping int32 adds: the order changes nothing).
    int15: one 16 x 16 output and its four int8 pieces per k-step: tmm0 = HH, tmm1 =
    HL, tmm2 = LH, tmm3 = LL, from A hi/lo (tmm4/5) and B hi/lo (tmm6/7); the pieces
    are combined in int64, S = HH * 2**14 + (HL + LH) * 2**7 + LL, as on every build.

PACKING
    k is padded with zero codes to a multiple of 64; rows and columns to a multiple
    of 32 (zero codes: they add nothing and their outputs are not stored). A block:
    16-row panels, each k-block's 16 x 64 bytes contiguous (1 KiB); B chunk: 16-column
    panels, each k-block's 16 x 16 words contiguous (1 KiB). Every tile load is one
    contiguous KiB (stride 64).
"""
from std.sys import llvm_intrinsic
from std.sys.info import CompilationTarget
from common.ptr import I8Ptr, I32Ptr, U32Ptr, U8Ptr
from gemm.cpu.blocking import round_up
from gemm.cpu.blocking import AMX_KB as KB  # k-bytes per tile row
from gemm.cpu.blocking import AMX_TILE_BYTES as TILE_BYTES
from gemm.cpu.blocking import AMX_A_BLOCK_BYTES as A_BLOCK_BYTES  # packed A block kept in L2
from gemm.cpu.blocking import AMX_B_CHUNK_BYTES as B_CHUNK_BYTES
from gemm.cpu.blocking import AMX_KC_BLOCKS as KC_BLOCKS  # k-blocks (of 64 bytes) per k-chunk: a 16 KiB B pair in L1
from gemm.cpu.int_gemm import IntArgs, store_scaled
from gemm.cpu.ukernel_int import IW
from arith.quant import join15_products

comptime CFG_WORDS = 16  # 64-byte tile configuration
comptime CBUF_WORDS = 32 * 32  # the 32 x 32 int32 output block


@always_inline
def _kblocks(k: Int) -> Int:
    return (k + KB - 1) // KB


def amx_mc(k: Int, rows: Int) -> Int:
    var kp = _kblocks(k) * KB
    var mc = max(32, (A_BLOCK_BYTES // kp) // 32 * 32)
    return min(mc, round_up(rows, 32))


def amx_nc(k: Int, cols: Int) -> Int:
    var kp = _kblocks(k) * KB
    var nc = max(32, (B_CHUNK_BYTES // kp) // 32 * 32)
    return min(nc, round_up(cols, 32))


def amx_ws(g: IntArgs, rows: Int, cols: Int) -> Int:
    """Workspace (32-bit words) of one task: packed A block and B chunk per plane,
    the tile configuration and the output block."""
    var kp = _kblocks(g.k) * KB
    var planes = 2 if g.int15 else 1
    var mc = amx_mc(g.k, rows)
    var words = (mc + amx_nc(g.k, cols)) * kp // 4
    return planes * words + CFG_WORDS + max(CBUF_WORDS, mc * 64)


def pack_a_amx(src: I8Ptr, ld: Int, i0: Int, mc: Int, k: Int, dst: I8Ptr):
    """Rows [i0, i0 + mc) into 16-row panels (round_up(mc, 32) rows; extra rows 0)."""
    var kbn = _kblocks(k)
    var rows = round_up(mc, 32)
    for r in range(rows):
        var d = dst.unsafe_offset((r // 16) * kbn * TILE_BYTES + (r % 16) * KB)
        if r < mc:
            var s = src.unsafe_offset((i0 + r) * ld)
            for kb in range(kbn):
                var k0 = kb * KB
                if k0 + KB <= k:
                    d.unsafe_store(kb * TILE_BYTES, s.unsafe_load[width=KB](k0))
                else:
                    var v = SIMD[DType.int8, KB](0)
                    for q in range(k - k0):
                        v[q] = s.unsafe_load(k0 + q)
                    d.unsafe_store(kb * TILE_BYTES, v)
        else:
            for kb in range(kbn):
                d.unsafe_store(kb * TILE_BYTES, SIMD[DType.int8, KB](0))


def pack_b_amx(src: I8Ptr, ld: Int, j0: Int, nc: Int, k: Int, dst: U32Ptr):
    """Columns [j0, j0 + nc) (rows of the stored (n, k) array) into 16-column panels
    (round_up(nc, 32) columns; extra columns 0): word (group G, column c) of panel q
    at q * kbn * 256 + G * 16 + c, holding B[j, 4G : 4G + 4]."""
    var kbn = _kblocks(k)
    var groups = kbn * 16
    var full = k // 4
    var cols = round_up(nc, 32)
    for j in range(cols):
        var d = dst.unsafe_offset((j // 16) * kbn * 256 + j % 16)
        if j < nc:
            var row = src.unsafe_offset((j0 + j) * ld)
            var w = row.unsafe_bitcast[UInt32]()
            for gi in range(full):
                d.unsafe_store(gi * 16, w.unsafe_load(gi))
            if full < groups:
                var last: UInt32 = 0
                for q in range(k - 4 * full):
                    last |= UInt32(UInt8(row.unsafe_load(4 * full + q))) << UInt32(8 * q)
                d.unsafe_store(full * 16, last)
                for gi in range(full + 1, groups):
                    d.unsafe_store(gi * 16, UInt32(0))
        else:
            for gi in range(groups):
                d.unsafe_store(gi * 16, UInt32(0))


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
def _tiles_2x2(a0: I8Ptr, a1: I8Ptr, b0: U32Ptr, b1: U32Ptr, kbn: Int, c: I32Ptr, first: Bool):
    """c (32 x 32 int32, row stride 32) = (0 if first else c) + [A0; A1] . [B0 B1]
    over kbn k-blocks."""
    comptime if CompilationTarget.has_intel_amx():
        if first:
            llvm_intrinsic["llvm.x86.tilezero", NoneType](Int8(0))
            llvm_intrinsic["llvm.x86.tilezero", NoneType](Int8(1))
            llvm_intrinsic["llvm.x86.tilezero", NoneType](Int8(2))
            llvm_intrinsic["llvm.x86.tilezero", NoneType](Int8(3))
        else:
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(0), c, Int64(128))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(1), c.unsafe_offset(16), Int64(128))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(2), c.unsafe_offset(16 * 32), Int64(128))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(3), c.unsafe_offset(16 * 32 + 16), Int64(128))
        for kb in range(kbn):
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(4), a0.unsafe_offset(kb * TILE_BYTES), Int64(64))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(6), b0.unsafe_offset(kb * 256), Int64(64))
            llvm_intrinsic["llvm.x86.tdpbssd", NoneType](Int8(0), Int8(4), Int8(6))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(7), b1.unsafe_offset(kb * 256), Int64(64))
            llvm_intrinsic["llvm.x86.tdpbssd", NoneType](Int8(1), Int8(4), Int8(7))
            llvm_intrinsic["llvm.x86.tileloadd64", NoneType](Int8(5), a1.unsafe_offset(kb * TILE_BYTES), Int64(64))
            llvm_intrinsic["llvm.x86.tdpbssd", NoneType](Int8(2), Int8(5), Int8(6))
            llvm_intrinsic["llvm.x86.tdpbssd", NoneType](Int8(3), Int8(5), Int8(7))
        llvm_intrinsic["llvm.x86.tilestored64", NoneType](Int8(0), c, Int64(128))
        llvm_intrinsic["llvm.x86.tilestored64", NoneType](Int8(1), c.unsafe_offset(16), Int64(128))
        llvm_intrinsic["llvm.x86.tilestored64", NoneType](Int8(2), c.unsafe_offset(16 * 32), Int64(128))
        llvm_intrinsic["llvm.x86.tilestored64", NoneType](Int8(3), c.unsafe_offset(16 * 32 + 16), Int64(128))


def amx_block(g: IntArgs, i_lo: Int, i_hi: Int, j_lo: Int, j_hi: Int, ws: U32Ptr):
    """Output rows [i_lo, i_hi) x columns [j_lo, j_hi) on the tile unit."""
    if i_hi <= i_lo or j_hi <= j_lo:
        return
    var k = g.k
    var kbn = _kblocks(k)
    var kp = kbn * KB
    var mc_max = amx_mc(k, i_hi - i_lo)
    var nc_max = amx_nc(k, j_hi - j_lo)
    var a_words = mc_max * kp // 4
    var b_words = nc_max * kp // 4
    var planes = 2 if g.int15 else 1
    var a_h = ws.unsafe_bitcast[Int8]()
    var a_l = ws.unsafe_offset(a_words).unsafe_bitcast[Int8]()
    var b_h = ws.unsafe_offset(planes * a_words)
    var b_l = ws.unsafe_offset(planes * a_words + b_words)
    var cfg = ws.unsafe_offset(planes * (a_words + b_words))
    var cbuf = cfg.unsafe_offset(CFG_WORDS).unsafe_bitcast[Int32]()
    var ahp = I8Ptr(unsafe_from_address=g.a_hi)
    var alp = I8Ptr(unsafe_from_address=g.a_lo)
    var bhp = I8Ptr(unsafe_from_address=g.b_hi)
    var blp = I8Ptr(unsafe_from_address=g.b_lo)
    var ea = I32Ptr(unsafe_from_address=g.ea)
    var eb = I32Ptr(unsafe_from_address=g.eb)
    _tile_config(cfg)
    var pstride = kbn * TILE_BYTES  # bytes per 16-row A panel
    var qstride = kbn * 256  # words per 16-column B panel
    var jc = j_lo
    while jc < j_hi:
        var nc = min(nc_max, j_hi - jc)
        pack_b_amx(bhp, k, jc, nc, k, b_h)
        if g.int15:
            pack_b_amx(blp, k, jc, nc, k, b_l)
        var ic = i_lo
        while ic < i_hi:
            var mc = min(mc_max, i_hi - ic)
            pack_a_amx(ahp, k, ic, mc, k, a_h)
            if g.int15:
                pack_a_amx(alp, k, ic, mc, k, a_l)
            # int8: 32 x 32 outputs per step from A panels (p, p+1) and B panels (q, q+1);
            # int15: 16 x 16 outputs per step from A (hi, lo) and B (hi, lo) of panels p, q,
            # the four tiles being HH, HL, LH, LL
            var step = 16 if g.int15 else 32
            var a_next = a_words * 4 if g.int15 else pstride  # bytes to the second A tile
            var b_next = b_words if g.int15 else qstride  # words to the second B tile
            for jp in range(0, nc, step):
                var b0 = b_h.unsafe_offset((jp // 16) * qstride)
                var kb0 = 0
                while kb0 < kbn:
                    var kbc = min(KC_BLOCKS, kbn - kb0)
                    var last = kb0 + kbc == kbn
                    for ip in range(0, mc, step):
                        var a0 = a_h.unsafe_offset((ip // 16) * pstride + kb0 * TILE_BYTES)
                        var cb = cbuf.unsafe_offset((ip // step) * CBUF_WORDS)
                        _tiles_2x2(a0, a0.unsafe_offset(a_next), b0.unsafe_offset(kb0 * 256),
                                   b0.unsafe_offset(b_next + kb0 * 256), kbc, cb, kb0 == 0)
                        if not last:
                            continue
                        if not g.int15:
                            for i in range(min(32, mc - ip)):
                                var r = ic + ip + i
                                var ea_r = ea.unsafe_load(r)
                                comptime for v in range(2):
                                    var jj = jp + v * 16
                                    if jj < nc:
                                        var s = cb.unsafe_load[width=IW](i * 32 + v * 16)
                                        store_scaled(g, s.cast[DType.float32](), ea_r, eb, r, jc + jj, nc - jj)
                        else:
                            for i in range(min(16, mc - ip)):
                                var r = ic + ip + i
                                var hh = cb.unsafe_load[width=IW](i * 32).cast[DType.int64]()
                                var hl = cb.unsafe_load[width=IW](i * 32 + 16).cast[DType.int64]()
                                var lh = cb.unsafe_load[width=IW]((16 + i) * 32).cast[DType.int64]()
                                var ll = cb.unsafe_load[width=IW]((16 + i) * 32 + 16).cast[DType.int64]()
                                var s = join15_products[IW](hh, hl, lh, ll)
                                store_scaled(g, s.cast[DType.float32](), ea.unsafe_load(r), eb, r, jc + jp, nc - jp)
                    kb0 += kbc
            ic += mc_max
        jc += nc_max
    _tile_release()

"""int8i32.v1 / int15i64.v1 on a GPU: the block-tiled kernels' shared pieces (staging
the code tiles in shared memory, the epilogue) and the SIMT compute, as the phases
ONE thread runs between two barriers.

WHAT IT COMPUTES
    C = a @ b.T on codes: S[i][j] = sum over kk of a[i][kk] * b[j][kk], exact, then
    ftz(f32(S) * pow2f(ea[i] + eb[j])) (L-5, W-3). int15 codes arrive as their int8
    planes (W-2: code = hi * 128 + lo, hi in [-128, 127], lo in [0, 127]) and are
    multiplied plane by plane: S = 2**14 HH + 2**7 X + LL with HH = sum ah * bh,
    X = sum (ah * bl + al * bh), LL = sum al * bl (arith.quant.join15_products, in
    int64). Each of HH, X and LL stays exact in int32 over k <= 65536 (W-4):
    |HH| <= 2**14 k, |X| <= 32512 k < 2**31, |LL| <= 16129 k; int8's sum over
    k <= 131072 (L-7) likewise. Exact sums make the order free, so the matrix units
    (int_mma.mojo for NVIDIA, int_mfma.mojo for AMD) and these SIMT loops give the
    same bits.

STAGING (every backend)
    A block owns a BM x BN tile of C (64 x 64) and walks k in BK = 32 steps, double
    buffered like the fp32 kernel: phase t fetches k-tile t + 1 into registers (16 or
    8 bytes of each plane a thread), multiplies tile t, stores tile t + 1 into the
    other buffer. Shared memory holds per buffer and plane A as [BM][BKP] and B as
    [BN][BKP] int8 (k contiguous, rows padded to BKP = 48 bytes so the fragment
    reads of a warp hit distinct banks). Codes outside A, B or k are staged as 0,
    which adds nothing to an exact sum.

SIMT (Apple, and any device the matrix units do not serve): 256 threads, each a
    4 x 4 tile of outputs, int32 multiply-adds on 4-byte words of codes.

Run by kernels.mojo (int_simt_kernel, int_mma_kernel, int_mfma_kernel) and by
cpu_run.mojo (the same phases in loops; the matrix instructions emulated from
their documented fragment layouts).
"""
from std.memory import AddressSpace, bitcast
from common.ptr import F32Ptr, I8Ptr, I32Ptr
from arith.quant import join15_products
from gemm.gpu.arith import int_epilogue

comptime INT_BM = 64
comptime INT_BN = 64
comptime INT_BK = 32
comptime INT_BKP = 48
comptime SIMT_THREADS = 256


@always_inline
def int_smem_bytes(planes: Int) -> Int:
    """Two buffers x planes x (A and B tiles)."""
    return 2 * planes * (INT_BM + INT_BN) * INT_BKP


@always_inline
def int_sums(planes: Int) -> Int:
    """int32 sums an output keeps: S (int8), or HH, X, LL and a fourth never used
    (int15: SIMD widths are powers of two; the unused lanes are never touched)."""
    return 1 if planes == 1 else 4


@fieldwise_init
struct IntCall(ImplicitlyCopyable, Movable):
    """What every block of one launch shares. hi planes are the int8 codes of the
    int8 profile; lo planes are read for int15 only."""
    var a_hi: Int  # addresses (global memory)
    var a_lo: Int
    var b_hi: Int
    var b_lo: Int
    var m: Int
    var n: Int
    var k: Int
    var vec: Bool  # int_vec: rows of 16-byte aligned chunks, loaded whole


@always_inline
def int_vec(a_hi: Int, a_lo: Int, b_hi: Int, b_lo: Int, k: Int) -> Bool:
    """Whether every row chunk a thread stages starts 16-byte aligned: k % 16 == 0 and
    every plane's address 16-byte aligned (device buffers are; a resident tensor's
    view may not be). Otherwise the chunks are read byte by byte: the same codes."""
    return (k % 16 == 0 and a_hi % 16 == 0 and a_lo % 16 == 0 and b_hi % 16 == 0
            and b_lo % 16 == 0)


@always_inline
def _plane_base(planes: Int, buf: Int, p: Int) -> Int:
    return (buf * planes + p) * (INT_BM + INT_BN) * INT_BKP


@always_inline
def _fetch_rows[CH: Int](addr: Int, rows: Int, k: Int, r0: Int, kt0: Int, tid: Int, vec: Bool) -> SIMD[DType.int8, CH]:
    """Bytes [kk0, kk0 + CH) of tile row r (the thread's chunk of a 64 x 32 tile) of
    an (rows, k) code matrix, 0 outside it."""
    var x = I8Ptr(unsafe_from_address=addr)
    var off = tid * CH
    var r = off // INT_BK
    var kk = kt0 + off % INT_BK
    var v = SIMD[DType.int8, CH](0)
    if r0 + r >= rows:
        return v
    var base = (r0 + r) * k + kk
    if vec and kk + CH <= k:
        return x.unsafe_load[width=CH, alignment=CH](base)
    comptime for q in range(CH):
        if kk + q < k:
            v[q] = x.unsafe_load(base + q)
    return v


@always_inline
def int_fetch[planes: Int, NT: Int](call: IntCall, i0: Int, j0: Int, t: Int, tid: Int) -> SIMD[DType.int8, 4 * (INT_BM * INT_BK // NT)]:
    """This thread's share of k-tile t: A hi, B hi, A lo, B lo chunks (the lo ones
    only for int15), each INT_BM * INT_BK / NT bytes."""
    comptime CH = INT_BM * INT_BK // NT
    var kt0 = t * INT_BK
    var v = SIMD[DType.int8, 4 * CH](0)
    var ah = _fetch_rows[CH](call.a_hi, call.m, call.k, i0, kt0, tid, call.vec)
    var bh = _fetch_rows[CH](call.b_hi, call.n, call.k, j0, kt0, tid, call.vec)
    comptime for q in range(CH):
        v[q] = ah[q]
        v[CH + q] = bh[q]
    comptime if planes == 2:
        var al = _fetch_rows[CH](call.a_lo, call.m, call.k, i0, kt0, tid, call.vec)
        var bl = _fetch_rows[CH](call.b_lo, call.n, call.k, j0, kt0, tid, call.vec)
        comptime for q in range(CH):
            v[2 * CH + q] = al[q]
            v[3 * CH + q] = bl[q]
    return v


@always_inline
def int_stash[planes: Int, NT: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], buf: Int, tid: Int,
    v: SIMD[DType.int8, 4 * (INT_BM * INT_BK // NT)],
):
    """int_fetch's chunks into shared buffer `buf`, at [row][kk] of each plane's tiles."""
    comptime CH = INT_BM * INT_BK // NT
    var off = tid * CH
    var r = off // INT_BK
    var kk = off % INT_BK
    comptime for p in range(planes):
        var base = _plane_base(planes, buf, p)
        comptime for q in range(CH):
            smem.unsafe_store(base + r * INT_BKP + kk + q, v[2 * p * CH + q])
            smem.unsafe_store(base + INT_BM * INT_BKP + r * INT_BKP + kk + q, v[(2 * p + 1) * CH + q])


@always_inline
def int_prologue_phase[planes: Int, NT: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], call: IntCall, i0: Int, j0: Int, tid: Int
):
    """Before the first barrier: k-tile 0 into buffer 0 (nothing when k = 0)."""
    if call.k > 0:
        int_stash[planes, NT](smem, 0, tid, int_fetch[planes, NT](call, i0, j0, 0, tid))


@always_inline
def int_tiles(k: Int) -> Int:
    return (k + INT_BK - 1) // INT_BK


@always_inline
def word(smem_val: SIMD[DType.int8, 4]) -> Int32:
    """Four codes as one 32-bit word, the first code in the lowest byte."""
    return bitcast[DType.int32, 1](smem_val)[0]


@always_inline
def int_result(planes: Int, hh: Int32, x: Int32, ll: Int32, ea: Int32, eb: Int32) -> Float32:
    """The epilogue of one output from its int32 sums (L-5, W-3)."""
    if planes == 1:
        return int_epilogue[DType.int32](hh, ea, eb)
    var s = join15_products[1](Int64(hh), Int64(x), Int64(0), Int64(ll))[0]
    return int_epilogue[DType.int64](s, ea, eb)


# ------------------------------------------------------------------ SIMT compute
@always_inline
def _simt_pos(t: Int, r: Int) -> Int:
    """Row (column) of a thread's r-th row (column): 4 adjacent, threads 4 apart."""
    return t * 4 + r


@always_inline
def simt_compute[planes: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], buf: Int, tid: Int,
    mut acc: SIMD[DType.int32, 16 * int_sums(planes)],
):
    """Multiply staged k-tile (buffer buf) into the thread's 4 x 4 sums: acc[s * 16 +
    r * 4 + c], s = 0 (S or HH), 1 (X), 2 (LL)."""
    var tx = tid % 16
    var ty = tid // 16
    comptime for kw in range(INT_BK // 4):
        var a = SIMD[DType.int32, 4 * 4 * planes](0)  # [plane][row][byte]
        var b = SIMD[DType.int32, 4 * 4 * planes](0)
        comptime for p in range(planes):
            var base = _plane_base(planes, buf, p)
            comptime for r in range(4):
                var wa = smem.unsafe_load[width=4](base + _simt_pos(ty, r) * INT_BKP + kw * 4)
                var wb = smem.unsafe_load[width=4](base + INT_BM * INT_BKP + _simt_pos(tx, r) * INT_BKP + kw * 4)
                comptime for q in range(4):
                    a[(p * 4 + r) * 4 + q] = Int32(wa[q])
                    b[(p * 4 + r) * 4 + q] = Int32(wb[q])
        comptime for q in range(4):
            comptime for r in range(4):
                comptime for c in range(4):
                    comptime if planes == 1:
                        acc[r * 4 + c] += a[r * 4 + q] * b[c * 4 + q]
                    else:
                        var ah = a[r * 4 + q]
                        var al = a[(4 + r) * 4 + q]
                        var bh = b[c * 4 + q]
                        var bl = b[(4 + c) * 4 + q]
                        acc[r * 4 + c] += ah * bh
                        acc[16 + r * 4 + c] += ah * bl + al * bh
                        acc[32 + r * 4 + c] += al * bl


@always_inline
def simt_main_phase[planes: Int, AS: AddressSpace](
    smem: Pointer[Int8, MutAnyOrigin, address_space=AS], call: IntCall, i0: Int, j0: Int,
    t: Int, tid: Int, mut acc: SIMD[DType.int32, 16 * int_sums(planes)],
):
    """Between barriers t and t + 1: fetch tile t + 1, multiply tile t, stash t + 1."""
    var nxt = t + 1 < int_tiles(call.k)
    var v = int_fetch[planes, SIMT_THREADS](call, i0, j0, t + 1, tid)  # all 0 past k
    simt_compute[planes](smem, t % 2, tid, acc)
    if nxt:
        int_stash[planes, SIMT_THREADS](smem, (t + 1) % 2, tid, v)


@always_inline
def simt_store[planes: Int](
    call: IntCall, ea: I32Ptr, eb: I32Ptr, c: F32Ptr, i0: Int, j0: Int, tid: Int,
    acc: SIMD[DType.int32, 16 * int_sums(planes)],
):
    """The thread's outputs inside C."""
    var tx = tid % 16
    var ty = tid // 16
    comptime for r in range(4):
        var i = i0 + _simt_pos(ty, r)
        comptime for cc in range(4):
            var j = j0 + _simt_pos(tx, cc)
            if i < call.m and j < call.n:
                var x = Int32(0)
                var ll = Int32(0)
                comptime if planes == 2:
                    x = acc[16 + r * 4 + cc]
                    ll = acc[32 + r * 4 + cc]
                c.unsafe_store(i * call.n + j, int_result(planes, acc[r * 4 + cc], x, ll,
                                                          ea.unsafe_load(i), eb.unsafe_load(j)))

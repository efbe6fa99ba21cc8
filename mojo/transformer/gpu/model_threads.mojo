"""What ONE GPU thread computes for the model ops the first transformer GPU kernels
lacked (contracts/ops): the embedding gather (M-2), the value-cache append (M-18),
sampling a token (M-32) and greedy choice (the first largest logit, M-32's last
sentence).

Like threads.mojo: plain bodies given their coordinates, called by the device
kernels (model_kernels.mojo) and, in loops over the same coordinates, by the CPU run
(model_cpu_run.mojo), so the tests check the kernels' own code. Every rule is the
arithmetic layer's (arith.fp, arith.elementary) at width 1; no rule is written here.

    gather_thread      element (r, j): out[r][j] = table[ids[r]][j], the bits copied
    kv_append_thread   element (r, h, j) of a call's values into the value cache
                       (batch, kv_heads, tmax, head_dim) at the token's position, the
                       bits copied (the cache holds the raw values, M-18)
    sample_thread      row i: M-32 with its float64 draw r[i]
    argmax_thread      row i: the index of the first largest logit, numpy's argmax
                       (the first NaN when the row has one)

The copies move bits (uint32), never floats: nothing is flushed, exactly as the CPU
model's copies (its gather and the cache's value store keep subnormals).
"""
from common.ptr import F32Ptr, U32Ptr, I64Ptr
from arith.fp import ftz, is_nan, widen_exact, sub_unflushed, order_key, of_order_key
from arith.elementary import expf

comptime F1 = SIMD[DType.float32, 1]
comptime F64Ptr = Pointer[Float64, MutAnyOrigin]


@always_inline
def gather_thread(table: U32Ptr, ids: I64Ptr, dst: U32Ptr, d: Int, r: Int, j: Int):
    """M-2: element j of row r, copied from the table's row ids[r]."""
    dst.unsafe_store(r * d + j, table.unsafe_load(Int(ids.unsafe_load(r)) * d + j))


@always_inline
def kv_append_thread(
    src: U32Ptr, lds: Int, dst: U32Ptr, n_heads: Int, head_dim: Int, pos0: Int, length: Int,
    tmax: Int, r: Int, h: Int, j: Int,
):
    """M-18: element j of head h of row r (token r % length of sequence r // length, at
    position pos0 + r % length): src[r * lds + h * head_dim + j] -> the value cache."""
    var b = r // length
    var pos = pos0 + r % length
    dst.unsafe_store(((b * n_heads + h) * tmax + pos) * head_dim + j,
                     src.unsafe_load(r * lds + h * head_dim + j))


@always_inline
def _e(row: F32Ptr, j: Int, mx: F1) -> Float64:
    """e_j of M-32, widened exactly: expf of the unflushed difference, its input read
    flushed (the GPU has no DAZ: the flush is explicit)."""
    var d = sub_unflushed[1](F1(row.unsafe_load(j)), mx)
    return widen_exact[1](expf(ftz(d)))[0]


@always_inline
def sample_thread(x: F32Ptr, n: Int, r: F64Ptr, picks: I64Ptr, i: Int):
    """M-32 for row i of n >= 1 logits: mx the exact maximum (order_key; a NaN anywhere
    gives NaN), c_j the float64 running sum of e_j ascending, u = r[i] * c_{n-1}; the
    first j with u < c_j, else n - 1 (also when u is NaN). e_j is computed twice (for
    the total, then for the running sum): the same bits both times, no scratch row."""
    var row = x.unsafe_offset(i * n)
    var km = Int32.MIN
    var any_nan = False
    for j in range(n):
        var v = F1(row.unsafe_load(j))
        if is_nan(v)[0]:
            any_nan = True
        km = max(km, order_key[1](v)[0])
    var pick = n - 1
    if not any_nan:
        var mx = F1(of_order_key(km))
        var total = Float64(0)
        for j in range(n):
            total = total + _e(row, j, mx)
        var u = r.unsafe_load(i) * total
        if u == u:  # not NaN
            var c = Float64(0)
            for j in range(n):
                c = c + _e(row, j, mx)
                if u < c:
                    pick = j
                    break
    picks.unsafe_store(i, Int64(pick))


@always_inline
def argmax_thread(x: F32Ptr, n: Int, picks: I64Ptr, i: Int):
    """Greedy choice for row i of n >= 1 logits, numpy's argmax: the first index whose
    value no earlier value is >=, i.e. the first maximum (+0 and -0 equal, subnormals
    by their value), or the first NaN. A comparison, no arithmetic."""
    var row = x.unsafe_offset(i * n)
    var best = F1(row.unsafe_load(0))
    var at = 0
    if not is_nan(best)[0]:
        for j in range(1, n):
            var v = F1(row.unsafe_load(j))
            if is_nan(v)[0]:
                at = j
                break
            if v > best:
                best = v
                at = j
    picks.unsafe_store(i, Int64(at))

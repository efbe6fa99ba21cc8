"""Registration of the model-backward entries (attention weights, the softmax backward,
the gated MLP backward, qwen3's per-head norm backward): plain integer arguments from
the Python layer, which has validated them. Each entry releases the GIL, splits its
independent rows over tasks and runs every task under the contract floating-point
state."""
from std.python import PythonObject
from std.python.bindings import PythonModuleBuilder
from std.memory import bitcast
from std.memory.alloc import unsafe_alloc
from common.ptr import F32Ptr, I32Ptr, ptr_f32
from common.tasks import chunk_bounds, run_tasks, nothing
from transformer.cpu.attention import HG, _srow
from train.cpu.model_ops import (
    attn_keys_small, attn_probs_unit, softmax_bwd_rows, silu_mul_bwd_rows, fold_div,
    rmsnorm_terms_rows, head_norm_terms_rows,
)
from train.cpu.ops import rms_backward_rows


def _arg(args: PythonObject, i: Int) raises -> Int:
    return Int(py=args[i])


def _f32(bits: Int) -> Float32:
    return bitcast[DType.float32, 1](SIMD[DType.uint32, 1](UInt32(bits)))[0]


def _tasks(units: Int, tasks: Int, grain: Int) -> Int:
    return max(1, min(tasks, units, (units + grain - 1) // grain))


def train_attn_probs(args: PythonObject) raises -> PythonObject:
    """(q, ldq, kt, p, batch, length, n_heads, n_kv, head_dim, tasks): T-47. A unit is
    one query of one (batch row, key/value head), all the heads that read it
    (attn_probs_unit); task t takes units t, t + tasks, ... (the causal rows grow with
    the query: interleaving balances the tasks). Whether each (batch row, key/value
    head)'s keys are small is decided once, first."""
    var q = ptr_f32(_arg(args, 0))
    var ldq = _arg(args, 1)
    var kt = ptr_f32(_arg(args, 2))
    var p = ptr_f32(_arg(args, 3))
    var batch = _arg(args, 4)
    var L = _arg(args, 5)
    var nh = _arg(args, 6)
    var kvh = _arg(args, 7)
    var hd = _arg(args, 8)
    var nbg = batch * kvh
    var units = nbg * L
    var t_count = _tasks(units, _arg(args, 9), max(1, 65536 // max(1, (nh // kvh) * L * hd)))
    var per = (HG * _srow(L) + 64 + 15) // 16 * 16
    var ws = unsafe_alloc[Float32](per * t_count, alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var small = unsafe_alloc[Int32](max(1, nbg)).unsafe_origin_cast[MutAnyOrigin]()
    var wsa = Int(ws)
    var sa = Int(small)
    def prepare() {imm kt, imm L, imm hd, imm nbg, imm sa}:
        var f = I32Ptr(unsafe_from_address=sa)
        for bg in range(nbg):
            f.unsafe_store(bg, Int32(1) if attn_keys_small(kt, L, hd, bg) else Int32(0))
    def work(t: Int) {imm q, imm ldq, imm kt, imm p, imm L, imm nh, imm kvh, imm hd, imm units, imm t_count, imm per, imm wsa, imm sa}:
        var w = F32Ptr(unsafe_from_address=wsa).unsafe_offset(t * per)
        var f = I32Ptr(unsafe_from_address=sa)
        var u = t
        while u < units:
            attn_probs_unit(q, ldq, kt, p, L, nh, kvh, hd, f.unsafe_load(u // L) != 0, u, w)
            u += t_count

    run_tasks(prepare, work, t_count, nothing)
    ws.unsafe_free()
    small.unsafe_free()
    return PythonObject(None)


def train_softmax_bwd(args: PythonObject) raises -> PythonObject:
    """(p, dp, ds, rows, n, scale f32 bits, tasks): T-49."""
    var pr = ptr_f32(_arg(args, 0))
    var dp = ptr_f32(_arg(args, 1))
    var ds = ptr_f32(_arg(args, 2))
    var rows = _arg(args, 3)
    var n = _arg(args, 4)
    var scale = _f32(_arg(args, 5))
    var t_count = _tasks(rows, _arg(args, 6), max(1, 16384 // max(1, n)))
    def work(t: Int) {imm pr, imm dp, imm ds, imm rows, imm n, imm scale, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        softmax_bwd_rows(pr, dp, ds, n, scale, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def train_silu_mul_bwd(args: PythonObject) raises -> PythonObject:
    """(gu, ldgu, dp, ldp, dgu, rows, ff, tasks): T-52."""
    var gu = ptr_f32(_arg(args, 0))
    var ldgu = _arg(args, 1)
    var dp = ptr_f32(_arg(args, 2))
    var ldp = _arg(args, 3)
    var dgu = ptr_f32(_arg(args, 4))
    var rows = _arg(args, 5)
    var ff = _arg(args, 6)
    var t_count = _tasks(rows, _arg(args, 7), max(1, 8192 // max(1, ff)))
    def work(t: Int) {imm gu, imm ldgu, imm dp, imm ldp, imm dgu, imm rows, imm ff, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        silu_mul_bwd_rows(gu, ldgu, dp, ldp, dgu, ff, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def train_fold_div(args: PythonObject) raises -> PythonObject:
    """(x, n, d f32 bits) -> the float32 bits of div(fold(k = n)(x), d): T-17, T-58."""
    var x = ptr_f32(_arg(args, 0))
    var n = _arg(args, 1)
    var d = _f32(_arg(args, 2))
    var r = fold_div(x, n, d)
    return PythonObject(Int(bitcast[DType.uint32, 1](SIMD[DType.float32, 1](r))[0]))


def train_rmsnorm_terms(args: PythonObject) raises -> PythonObject:
    """(dy, x, out, rows, d, eps f32 bits, tasks): T-11's terms."""
    var dy = ptr_f32(_arg(args, 0))
    var x = ptr_f32(_arg(args, 1))
    var out = ptr_f32(_arg(args, 2))
    var rows = _arg(args, 3)
    var d = _arg(args, 4)
    var eps = _f32(_arg(args, 5))
    var t_count = _tasks(rows, _arg(args, 6), max(1, 8192 // max(1, d)))
    def work(t: Int) {imm dy, imm x, imm out, imm rows, imm d, imm eps, imm t_count}:
        var b = chunk_bounds(rows, t_count, t, 1)
        rmsnorm_terms_rows(dy, x, d, eps, out, b[0], b[1])

    run_tasks(work, t_count)
    return PythonObject(None)


def train_head_norm_backward(args: PythonObject) raises -> PythonObject:
    """(dy, x, w, dx, terms, tokens, heads, hd, eps f32 bits, tasks): T-62, qwen3's
    per-head q / k norm backward. x, dy, dx: (tokens, heads * hd), every (token, head) a
    row of hd: dx by T-9, T-10 (the RMSNorm backward's rows); terms (tokens, hd): per
    token the chain over the heads ascending of T-11's terms (the weight gradient is
    their fold over the tokens, the caller's). Tasks split the tokens; no bit depends on
    the split (every row and token is its own)."""
    var dy = ptr_f32(_arg(args, 0))
    var x = ptr_f32(_arg(args, 1))
    var w = ptr_f32(_arg(args, 2))
    var dx = ptr_f32(_arg(args, 3))
    var terms = ptr_f32(_arg(args, 4))
    var tokens = _arg(args, 5)
    var heads = _arg(args, 6)
    var hd = _arg(args, 7)
    var eps = _f32(_arg(args, 8))
    var t_count = _tasks(tokens, _arg(args, 9), max(1, 4096 // max(1, heads * hd)))
    var rs = unsafe_alloc[Float32](max(1, tokens * heads), alignment=64).unsafe_origin_cast[MutAnyOrigin]()
    var rsa = Int(rs)
    def work(t: Int) {imm dy, imm x, imm w, imm dx, imm terms, imm tokens, imm heads, imm hd, imm eps, imm t_count, imm rsa}:
        var b = chunk_bounds(tokens, t_count, t, 1)
        var rstd = F32Ptr(unsafe_from_address=rsa)
        rms_backward_rows(dy, x, w, dx, rstd, hd, eps, b[0] * heads, b[1] * heads)
        head_norm_terms_rows(dy, x, rstd, heads, hd, terms, b[0], b[1])

    run_tasks(work, t_count)
    rs.unsafe_free()
    return PythonObject(None)


def register_train_model(mut m: PythonModuleBuilder) raises:
    m.def_function[train_attn_probs]("train_attn_probs")
    m.def_function[train_softmax_bwd]("train_softmax_bwd")
    m.def_function[train_silu_mul_bwd]("train_silu_mul_bwd")
    m.def_function[train_fold_div]("train_fold_div")
    m.def_function[train_rmsnorm_terms]("train_rmsnorm_terms")
    m.def_function[train_head_norm_backward]("train_head_norm_backward")

"""Independent numpy oracle of the Mamba-2 SSD training rules T-75 .. T-86
(contracts/ops/IDENTICAL_TRAIN_CONTRACT.md, section "Mamba-2"), written from the
contract text. Slow and plain: float32 numpy arrays, every operand read flushed and every
value written flushed, every serial chain in its rule's order, vectorized only across
independent outputs (heads, positions of other outputs). It imports nothing from
``mojolearn``; the elementary operations (ftz, mul, add, sub, fma -- a true
single-rounding fma --, expf M-14) and fp32.v1's ``_dot_steps`` are the inference
oracle's (tests/mamba_oracle.py).

PUBLIC API
----------
ssd_forward(xbc, dt, A, D) -> (s (B, L, di), hs (B, H, nch, 64, 128))        T-75
ssd_backward(xbc, dt, A, D, ds, variant=()) -> (dxbc, ddt, ta, td)          T-77 .. T-85
    xbc (B, L, di + 256): post-SiLU x, B, C; dt (B, L, H); A, D (H,); ds (B, L, di).
    dxbc (B, L, di + 256) the gradients at x, B, C; ddt (B, L, H); ta, td (B * L, H)
    the per-token terms of A_log and D.
fold_tokens(terms) -> (H,)       T-85: fold(k = tokens) per column (T-2's fold).
dt_clamp_backward(g, v, lo, hi) -> gradient at v                          T-76
variant: deliberate rule changes for the sensitivity tests only:
    "heads_reverse"  T-84's join over the heads descending;
    "seg_diff"       the recomputed segment sums as sub(cs[i], cs[j]) (S-21 forbids);
    "one_leaf"       the masked position dots as one chain of 256 (no position leaves);
    "cs_forward"     T-82's cumulative-sum backward chained ascending over the suffix.
"""
from __future__ import annotations

import numpy as np

try:
    import mamba_oracle as MO
    import oracle as O
except ImportError:  # imported as tests.mamba2_train_oracle
    from tests import mamba_oracle as MO
    from tests import oracle as O

F = np.float32
P, N, Q, HALF = 64, 128, 256, 128
ftz, mul, add, sub, fma, expf = MO.ftz, MO.mul, MO.add, MO.sub, MO.fma, MO.expf
VARIANTS = frozenset({"heads_reverse", "seg_diff", "one_leaf", "cs_forward"})


def _dot(k, term):
    """fp32.v1 over k steps (T-2's dot)."""
    return MO._dot_steps(k, term)


def masked_dot(term, valid, shape, variant=()):
    """The contract's masked dot over the chunk's 256 positions: per position leaf
    ([0, 128), [128, 256)) an ascending fused chain from +0 over the positions where
    valid(k) holds (other positions leave acc unchanged), then add(leaf0, leaf1)."""
    leaves = [(0, Q)] if "one_leaf" in variant else [(0, HALF), (HALF, Q)]
    parts = []
    for lo, hi in leaves:
        acc = np.zeros(shape, dtype=np.float32)
        for k in range(lo, hi):
            v = valid(k)
            if not np.any(v):
                continue
            a, b = term(k)
            acc = np.where(v, fma(a, b, acc), acc).astype(np.float32)
        parts.append(acc)
    return parts[0] if len(parts) == 1 else add(parts[0], parts[1])


class _Chunk:
    """T-75's recomputed forward values of one chunk of one batch row (all heads)."""

    def __init__(self, x, dt, Bm, Cm, A, base, real, h, variant):
        H = A.shape[0]
        sl = slice(base, base + real)
        self.real = real
        self.dt = np.zeros((Q, H), F)
        self.dt[:real] = ftz(dt[sl])
        self.x = np.zeros((Q, H, P), F)
        self.x[:real] = ftz(x[sl])
        self.dA = mul(self.dt, A[None, :])
        self.dA[real:] = 0
        self.Xd = mul(self.x, self.dt[:, :, None])
        self.B = np.zeros((Q, N), F)
        self.B[:real] = ftz(Bm[sl])
        self.C = np.zeros((Q, N), F)
        self.C[:real] = ftz(Cm[sl])
        cs = np.empty((Q, H), F)
        cs[0] = self.dA[0]
        for i in range(1, Q):
            cs[i] = add(cs[i - 1], self.dA[i]) if i < real else cs[i - 1]
        self.cs = cs
        self.ecs = expf(cs)
        seg = np.zeros((Q, Q, H), F)
        if "seg_diff" in variant:
            for i in range(real):
                seg[i, :i] = sub(cs[i][None, :], cs[:i])
        else:
            for i in range(1, real):
                seg[i, :i] = add(seg[i - 1, :i], self.dA[i][None, :])
        tri = np.arange(Q)[None, :] <= np.arange(Q)[:, None]
        self.tri = tri
        self.Lm = np.where(tri[:, :, None], expf(seg), F(0)).astype(F)
        self.G = _dot(N, lambda n: (self.C[:, None, n], self.B[None, :, n]))       # (Q, Q)
        self.Mx = mul(self.G[:, :, None], self.Lm)                                 # (Q, Q, H)
        self.h = h                                                                  # (H, P, N)
        self.CH = _dot(N, lambda n: (self.C[:, n][:, None, None], h[None, :, :, n]))  # (Q, H, P)
        last = cs[Q - 1]
        self.last = last
        self.el = expf(last)
        self.dec = expf(sub(last[None, :], cs))                                     # (Q, H)
        self.Bd = mul(self.B[:, None, :], self.dec[:, :, None])                     # (Q, H, N)


def _row_chunks(x, dt, Bm, Cm, A, variant):
    """The chunks of one batch row, forward, each with the state entering it (T-75)."""
    L = x.shape[0]
    H = A.shape[0]
    h = np.zeros((H, P, N), F)
    out = []
    nch = (L + Q - 1) // Q
    for c in range(nch):
        base = c * Q
        real = min(Q, L - base)
        ch = _Chunk(x, dt, Bm, Cm, A, base, real, h, variant)
        out.append(ch)
        if c + 1 < nch:
            S = _dot(Q, lambda i: (ch.Xd[i][:, :, None], ch.Bd[i][:, None, :]))      # (H, P, N)
            h = fma(ch.el[:, None, None], h, S)
    return out


def _split(xbc, H):
    di = H * P
    return xbc[..., :di], xbc[..., di:di + N], xbc[..., di + N:di + 2 * N]


def ssd_forward(xbc, dt, A, D):
    """T-75: s = add(Y, mul(x, D)) per row from h = 0, and the states entering the chunks."""
    Bn, L, _ = xbc.shape
    H = A.shape[0]
    A = ftz(A)
    D = ftz(D)
    xs, Bs, Cs = _split(xbc, H)
    nch = (L + Q - 1) // Q
    s = np.empty((Bn, L, H * P), F)
    hs = np.empty((Bn, H, nch, P, N), F)
    for b in range(Bn):
        x = xs[b].reshape(L, H, P)
        for c, ch in enumerate(_row_chunks(x, dt[b], Bs[b], Cs[b], A, ())):
            hs[b, :, c] = ch.h
            r = ch.real
            keep = ch.tri[:r]                                                       # j <= i
            Yd = masked_dot(lambda j: (ch.Mx[:r, j, :, None], ch.Xd[j][None]),
                            lambda j: keep[:, j, None, None], (r, H, P))
            Yo = mul(ch.CH[:r], ch.ecs[:r, :, None])
            Y = add(Yd, Yo)
            s[b, c * Q:c * Q + r] = add(Y, mul(ch.x[:r], D[None, :, None])).reshape(r, H * P)
    return s, hs


def ssd_backward(xbc, dt, A, D, ds, variant=()):
    """T-77 .. T-85 (see the module docstring)."""
    assert set(variant) <= VARIANTS, variant
    Bn, L, CD = xbc.shape
    H = A.shape[0]
    A = ftz(A)
    D = ftz(D)
    xs, Bs, Cs = _split(xbc, H)
    dxbc = np.empty((Bn, L, CD), F)
    ddt = np.empty((Bn, L, H), F)
    ta = np.empty((Bn, L, H), F)
    td = np.empty((Bn, L, H), F)
    for b in range(Bn):
        x = xs[b].reshape(L, H, P)
        chunks = _row_chunks(x, dt[b], Bs[b], Cs[b], A, variant)
        nch = len(chunks)
        dBh = np.empty((L, H, N), F)
        dCh = np.empty((L, H, N), F)
        dH = None
        for c in range(nch - 1, -1, -1):
            ch = chunks[c]
            r = ch.real
            nxt = c + 1 < nch
            base = c * Q
            dS = np.zeros((Q, H, P), F)
            dS[:r] = ftz(ds[b, base:base + r].reshape(r, H, P))
            ii = np.arange(Q)
            # T-80: the state pass and the chunk state
            if nxt:
                leaves = _dot(N, lambda n: (dH[:, :, n], ch.h[:, :, n]))             # (H, P)
                parts = [leaves[:, p] for p in range(P)]
                while len(parts) > 1:
                    parts = [add(parts[k], parts[k + 1]) for k in range(0, len(parts), 2)]
                dl_h = parts[0]                                                       # (H,)
                dh_s = mul(dH, ch.el[:, None, None])
                dXd_S = _dot(N, lambda n: (dH[None, :, :, n], ch.Bd[:, :, n][:, :, None]))  # (Q, H, P)
                dBd = _dot(P, lambda p: (ch.Xd[:, :, p][:, :, None], dH[None, :, p, :]))     # (Q, H, N)
                dB_s = mul(dBd, ch.dec[:, :, None])
                ddec = _dot(N, lambda n: (dBd[:, :, n], ch.B[:, n][:, None]))             # (Q, H)
                du = mul(ddec, ch.dec)
                acc = np.zeros(H, F)
                for i in range(Q):
                    acc = add(acc, du[i])
                dlast = add(acc, mul(dl_h, ch.el))
            # T-79: the off-diagonal output
            dCH = mul(dS, ch.ecs[:, :, None])
            dE = _dot(P, lambda p: (dS[:, :, p], ch.CH[:, :, p]))                         # (Q, H)
            dcs_o = mul(dE, ch.ecs)
            dC_o = _dot(P, lambda p: (dCH[:, :, p][:, :, None], ch.h[None, :, p, :]))        # (Q, H, N)
            if c > 0:
                dh_o = masked_dot(lambda i: (dCH[i][:, :, None], ch.C[i][None, None, :]),
                                  lambda i: i < r, (H, P, N), variant)
                dH_new = add(dh_s, dh_o) if nxt else dh_o
            # T-78: the diagonal block
            dMx = _dot(P, lambda p: (dS[:, None, :, p], ch.Xd[None, :, :, p]))             # (Q, Q, H)
            dG = mul(dMx, ch.Lm)
            dseg = mul(mul(dMx, ch.G[:, :, None]), ch.Lm)
            valid_i = lambda i: ((ii <= i) & (i < r))[:, None, None]                      # over j rows
            dXd_Y = masked_dot(lambda i: (ch.Mx[i][:, :, None], dS[i][None]), valid_i, (Q, H, P), variant)
            # T-81: B and C of one head
            valid_j = lambda j: ((j <= ii) & (ii < r))[:, None, None]                     # over i rows
            dC_g = masked_dot(lambda j: (dG[:, j][:, :, None], ch.B[j][None, None, :]), valid_j,
                              (Q, H, N), variant)
            dB_g = masked_dot(lambda i: (dG[i][:, :, None], ch.C[i][None, None, :]), valid_i,
                              (Q, H, N), variant)
            dC_row = add(dC_g, dC_o)
            dB_row = add(dB_g, dB_s) if nxt else dB_g
            # T-82: the cumulative and segment sums
            dcs = dcs_o.copy()
            if nxt:
                dcs = sub(dcs_o, du)
                dcs[Q - 1] = add(dcs[Q - 1], dlast)
            g = np.zeros((Q, H), F)
            acc = np.zeros(H, F)
            if "cs_forward" in variant:
                for i in range(r):
                    acc = np.zeros(H, F)
                    for k in range(i, r):
                        acc = add(acc, dcs[k])
                    g[i] = acc
            else:
                for i in range(r - 1, -1, -1):
                    acc = add(acc, dcs[i])
                    g[i] = acc
            R = np.zeros((Q, Q, H), F)
            rr = np.zeros((Q, H), F)                                                     # per column j
            for i in range(r - 1, 0, -1):
                rr[:i] = add(rr[:i], dseg[i, :i])
                R[i, :i] = rr[:i]
            sg = np.zeros((Q, H), F)
            for j in range(0, r - 1):
                sg[j + 1:r] = add(sg[j + 1:r], R[j + 1:r, j])
            ddA = add(g, sg)
            # T-83: x, dt and the skip
            dXd = add(dXd_Y, dXd_S) if nxt else dXd_Y
            dx = add(mul(dXd, ch.dt[:, :, None]), mul(dS, D[None, :, None]))
            c1 = _dot(P, lambda p: (dXd[:, :, p], ch.x[:, :, p]))
            ddt[b, base:base + r] = add(c1, mul(ddA, A[None, :]))[:r]
            ta[b, base:base + r] = mul(mul(ddA, ch.dt), A[None, :])[:r]
            td[b, base:base + r] = _dot(P, lambda p: (dS[:, :, p], ch.x[:, :, p]))[:r]
            dxbc[b, base:base + r, :H * P] = dx[:r].reshape(r, H * P)
            dBh[base:base + r] = dB_row[:r]
            dCh[base:base + r] = dC_row[:r]
            if c > 0:
                dH = dH_new
        # T-84: the heads joined per token
        order = range(H - 1, -1, -1) if "heads_reverse" in variant else range(H)
        accb = np.zeros((L, N), F)
        accc = np.zeros((L, N), F)
        for hh in order:
            accb = add(accb, dBh[:, hh])
            accc = add(accc, dCh[:, hh])
        dxbc[b, :, H * P:H * P + N] = accb
        dxbc[b, :, H * P + N:] = accc
    return dxbc, ddt, ta.reshape(Bn * L, H), td.reshape(Bn * L, H)


def fold_tokens(terms):
    """T-85: fold(k = tokens) of every column (T-2: per leaf add from +0, the tree)."""
    k = terms.shape[0]
    leaf = O.leaf_size(k)
    parts = []
    for s0 in range(0, k, leaf):
        acc = np.zeros(terms.shape[1:], F)
        for t in range(s0, min(s0 + leaf, k)):
            acc = add(acc, terms[t])
        parts.append(acc)
    while len(parts) > 1:
        nxt = [add(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            nxt.append(parts[-1])
        parts = nxt
    return parts[0]


def _gt(a, b):
    """a > b with -0 below +0 (S-19's total order on flushed operands)."""
    a = ftz(np.asarray(a, F))
    b = ftz(np.asarray(b, F))
    eq = a == b
    tie = eq & (a.view(np.uint32) == 0) & (b.view(np.uint32) == 0x80000000)
    return np.where(eq, tie, a > b)


def dt_clamp_backward(g, v, lo, hi):
    """T-76: g where S-19's clamp kept v (ties pass), +0 where it replaced it."""
    lo = np.full(np.shape(v), F(lo))
    hi = np.full(np.shape(v), F(hi))
    cut = _gt(lo, v) | _gt(v, hi)
    return np.where(cut, F(0), ftz(g)).astype(F)

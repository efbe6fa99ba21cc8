"""Data-parallel training over torch.distributed ranks with one process's bits (T-61):
each rank computes the gradients of its rows of the batch as parts over its range of
the batch's tokens (contract 6.7), every rank gathers every part and folds them in the
tree's order (never an all-reduce sum), runs the embedding's chain over every rank's
tokens in rank order, and takes the same optimizer step."""
from __future__ import annotations

import hashlib
import json

import numpy as np

from .._ops import ksplit as _ksplit
from ..models._transformer.parallel import _Comm, _torch_dist


def _leaf(k: int) -> int:
    return _ksplit.leaf_size(k)


class Ranks(_Comm):
    """The trainer's collectives: ParallelCausalLM's (every operation with the timeout,
    a failure named with the operation and this rank), on a gloo group of its own."""

    def __init__(self, group, timeout):
        _torch, dist = _torch_dist()
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "mojolearn: Trainer: group= needs torch.distributed initialized in this process: "
                "start the program with torchrun and call "
                "torch.distributed.init_process_group('gloo') first")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not np.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"mojolearn: Trainer: timeout must be a positive number of seconds, "
                             f"got {timeout!r}")
        super().__init__(group, timeout)

    def _fail(self, what, e):
        return RuntimeError(
            f"mojolearn: Trainer rank {self.rank} of {self.world}: {what} failed "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): another rank "
            f"died, hung past the timeout of {self.timeout:g} s, or ran another operation")

    def same_text(self, text, what, way_out):
        try:
            self.same_everywhere(text, what, way_out=way_out)
        except ValueError as e:
            raise ValueError(str(e).replace("ParallelCausalLM", "Trainer")) from None

    def _buffer(self, name, n):
        """A float32 buffer of n values kept from step to step (a new 500 MB buffer each
        step costs its page faults again)."""
        bufs = self.__dict__.setdefault("_bufs", {})
        b = bufs.get(name)
        if b is None or b.size != n:
            b = bufs[name] = np.zeros(n, dtype=np.float32)
        return b

    def same_weights(self, params, kind, args, max_norm):
        """Refuse unless every rank starts from the same weights and settings."""
        h = hashlib.sha256()
        for n in params.names:
            h.update(n.encode())
            h.update(np.ascontiguousarray(params.arrays[n]).view(np.uint8))
        text = json.dumps([h.hexdigest(), kind, {k: list(v) if isinstance(v, tuple) else v
                                                  for k, v in args.items()}, max_norm])
        self.same_text(text, "the weights and settings",
                       "every rank must start from the same checkpoint and settings")

    # ------------------------------------------------------------------ the batch
    def layout(self, B, L, count, func):
        """(T, t0, rows of every rank, the batch's count): every rank's rows of L tokens,
        in rank order; refuses ranks whose ranges do not start on leaf boundaries."""
        info = np.array([B, L, count], dtype=np.int64)
        got = self.all_gather(info, self.all, self.world, "the batch shapes")
        Ls = [int(g[1]) for g in got]
        if len(set(Ls)) != 1:
            raise ValueError(f"mojolearn: Trainer.{func}: the ranks' rows have different "
                             f"lengths {Ls}; every rank's ids must be (rows, L) with one L")
        rows = [int(g[0]) for g in got]
        T = sum(rows) * L
        leaf = _leaf(T)
        starts = np.cumsum([0] + rows)[:-1] * L
        bad = [r for r, t in enumerate(starts) if t % leaf]
        if bad:
            raise ValueError(
                f"mojolearn: Trainer.{func}: rank {bad[0]}'s tokens start at {int(starts[bad[0]])} "
                f"of the batch's {T}, not on a multiple of the fp32.v1 leaf {leaf} (contract "
                f"6.7): give every rank a multiple of {leaf} tokens (rows x length), e.g. "
                f"{_hint(L, leaf)}")
        return T, int(starts[self.rank]), rows, int(sum(int(g[2]) for g in got))

    def fold(self, sums, T, starts_stops, losses, dx, ids_flat, d):
        """(every part folded by key, the batch's per-position losses, the embedding's dy and
        ids in the batch's order): one all_gather of this rank's parts, losses, dy and ids."""
        leaf = _leaf(T)
        nleaves = -(-T // leaf)
        keys = list(sums.parts)
        shapes = [(sums.parts[k].m, sums.parts[k].n) for k in keys]
        nodes = [[len(_ksplit._nodes(a // leaf, -(-b // leaf), nleaves)) for k in keys]
                 for a, b in starts_stops]
        sizes = []
        for r, (a, b) in enumerate(starts_stops):
            tok = b - a
            sizes.append(sum(nd * m * n for nd, (m, n) in zip(nodes[r], shapes))
                         + tok + tok * d + tok)  # parts, losses, dy, ids (as float32 words)
        me = self.rank
        buf = self._buffer("send", max(sizes))
        o = 0
        for k in keys:
            v = np.asarray(sums.parts[k].values).reshape(-1)
            buf[o:o + v.size] = v
            o += v.size
        tok = starts_stops[me][1] - starts_stops[me][0]
        buf[o:o + tok] = losses
        o += tok
        buf[o:o + tok * d] = dx.reshape(-1)
        o += tok * d
        buf[o:o + tok] = ids_flat.astype(np.int32).view(np.float32)
        got = [self._buffer(f"recv{r}", buf.size) for r in range(self.world)]
        self.bytes_sent += buf.nbytes
        self._run("the gradients' parts", lambda: self.dist.all_gather(
            [self._t(o) for o in got], self._t(buf), group=self.all, async_op=True))
        folded = {}
        offs = [0] * self.world
        per_key = {k: [] for k in keys}
        for r in range(self.world):
            a, b = starts_stops[r]
            for k, nd, (m, n) in zip(keys, nodes[r], shapes):
                v = got[r][offs[r]:offs[r] + nd * m * n].reshape(nd, m, n)
                offs[r] += nd * m * n
                per_key[k].append(_ksplit.PartialProduct("fp32.v1", v, k=T, k_start=a,
                                                          k_stop=b, leaf=leaf))
        for k in keys:
            folded[k] = np.asarray(_ksplit.fold_parts(per_key[k]))
        all_losses, all_dy, all_ids = [], [], []
        for r in range(self.world):
            a, b = starts_stops[r]
            tok = b - a
            o = offs[r]
            all_losses.append(got[r][o:o + tok])
            all_dy.append(got[r][o + tok:o + tok + tok * d].reshape(tok, d))
            all_ids.append(got[r][o + tok + tok * d:o + 2 * tok + tok * d].view(np.int32))
        return (folded, np.ascontiguousarray(np.concatenate(all_losses)),
                np.ascontiguousarray(np.concatenate(all_dy)),
                np.ascontiguousarray(np.concatenate(all_ids).astype(np.int64)))


def _hint(L, leaf):
    per = -(-leaf // L)
    return f"{per} rows of {L} tokens a rank" if leaf % L == 0 else \
        f"rows of a length that divides {leaf}"

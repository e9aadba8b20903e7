"""First-fit placement of activation groups (the planner's inner loop).

A group goes at the lowest 64-aligned offset where none of its members overlaps, in bytes and
in lifetime, a member already placed -- except that the output of a streaming window op may
overlap its dying input by the allowance lowering granted (planner.members' `pairs`).

The placed members are numpy columns (lifetime, byte range), and each placement compares with
all of them at once. Why not an index by lifetime: in an unrolled sequence model every step's
output waits for the final Concat, so the members live at any instruction grow with the
sequence and every placement meets them all. The Python loop over them (lifetime buckets,
long-lived members filed apart) made the planner 36 of 76 s (cProfile) of a 128-step quantized
Mamba-style scan's compile (2,050 nodes). The offsets are the loop's, every bound being a
multiple of 64 (`_lowest_free`), but for one rule: a streaming op's allowance now applies only
where its output and input would meet at all (an output wholly above its input, less than the
allowance from it, was refused)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.program import ALIGN


def _lowest_free(a: np.ndarray, b: np.ndarray) -> int:
    """The lowest x >= 0, a multiple of ALIGN, with no open interval (a_i, b_i) containing it.

    Such an x is 0 or some b_i rounded up: the point just below it is inside an interval (or
    unaligned), and that interval ends at most at x. A candidate x is free when no interval
    starting below it ends above it: sorted by start, the running maximum of the ends over
    those starting below x is <= x."""
    if not len(a):
        return 0
    order = np.argsort(a, kind="stable")
    a, ends = a[order], np.maximum.accumulate(b[order])
    cand = np.sort(np.concatenate(([0], -(-b // ALIGN) * ALIGN)))  # repeats are harmless
    cand = cand[cand >= 0]
    below = np.searchsorted(a, cand, side="left")  # intervals starting below each candidate
    free = (below == 0) | (ends[np.maximum(below - 1, 0)] <= cand)
    return int(cand[np.argmax(free)])  # the largest b rounded up is always free


def place(groups, order, pairs, ext, mirror: bool = False) -> list[int]:
    """First fit, groups in `order`: each at the lowest 64-aligned offset where it conflicts
    with nothing placed. `ext` is each group's extent in bytes. Returns the offset per group.

    With `mirror` the fit runs from the top of the region down (offsets are computed in the
    mirrored space x -> S - x and flipped back): a chain of streaming ops, each output placed
    just below its input, then has room to grow instead of hitting offset 0."""
    offsets = [0] * len(groups)
    n = sum(len(g) for g in groups)
    start, end, lo_at, hi_at = (np.empty(n, np.int64) for _ in range(4))
    slot: dict = {}  # id(member) -> its row, once placed
    partners: dict = {}  # id(member) -> [(other member's id, d, m is the output)]
    for (i, o), d in pairs.items():
        partners.setdefault(o, []).append((i, d, True))
        partners.setdefault(i, []).append((o, d, False))
    k = 0

    def span(m, g):
        return (ext[g] - m.hi, ext[g] - m.lo) if mirror else (m.lo, m.hi)

    for gi in order:
        fa, fb = [], []
        for m in groups[gi]:
            lo, hi = span(m, gi)
            live = (start[:k] <= m.end) & (end[:k] >= m.start)
            special = {}  # row -> (d, m is the output): a granted overlap with m
            for other, d, m_out in partners.get(id(m), ()):
                r = slot.get(other)
                if r is not None and live[r] and (r not in special or m_out):
                    special[r] = (d, m_out)  # (both ways: m's allowance as the output)
            live[list(special)] = False
            for r, (d, m_out) in special.items():
                clo, chi = int(lo_at[r]), int(hi_at[r])
                if m_out and not mirror:  # m starts |d| or more below its input, or above it
                    a, b = clo + d - lo, chi - lo
                elif not mirror:
                    a, b = clo - hi, clo - d - lo
                elif m_out:  # mirrored: out_m >= in_m + si - so - D, or below
                    a, b = clo - hi, chi - hi - d
                else:
                    a, b = chi - hi + d, chi - lo
                # the allowance matters only where the bytes meet at all
                fa.append([max(a, clo - hi)]), fb.append([min(b, chi - lo)])
            fa.append(lo_at[:k][live] - hi)
            fb.append(hi_at[:k][live] - lo)
        off = _lowest_free(np.concatenate(fa), np.concatenate(fb))
        offsets[gi] = off
        for m in groups[gi]:
            lo, hi = span(m, gi)
            start[k], end[k], lo_at[k], hi_at[k] = m.start, m.end, off + lo, off + hi
            slot[id(m)] = k
            k += 1
    if mirror:
        top = max((o + e for o, e in zip(offsets, ext)), default=0)
        offsets = [top - o - e for o, e in zip(offsets, ext)]
    return offsets

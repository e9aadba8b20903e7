"""The order in which quads16 (groups.Quads16) packs a pointwise QConv's input channels: which
two channels pmaddubsw adds as a pair. A pair of weights whose positive (or negative) parts
add up to more than 128 saturates pmaddubsw's int16 sum and costs its quad a correction, about
2.4 dense quad steps of its output channel. In the model's order the pairs are whatever
neighbours the training left: MobileNetV2 int8's 1x1 layers had 10.7% of their quads corrected
on average (projections 4-5%, expansions 8.5%). Pairing the channels that hold many large
weights with channels that hold few leaves 5.5% (projections about 0, expansions 6.3%), with
the same packed tile (its steps only read from other planes) and the same sums.

The pairing is greedy: the channel with the most weights past 64 (the only ones that can
conflict) takes the remaining partner it conflicts with least among the CANDIDATES lightest,
which bounds the work at C / 2 x CANDIDATES x M comparisons (tens of ms on ResNet-50 int8's
largest 1x1 layers); once every channel left is light, no pair of them conflicts and they pair
in the model's order. The pairs are then ordered by their conflicts, so that the conflicting
ones share quads. A window layer keeps the model's order (its steps are taps x channels)."""
from __future__ import annotations

import weakref

import numpy as np

from glowpy.codegen.kernels.int8.pairs_tiles import pointwise

CANDIDATES = 64  # partners tried a channel: the lightest that are left
_orders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> (weights, order)


def order_of(node) -> np.ndarray | None:
    """The input channels of a pointwise QConv (one group, C a multiple of 4), or the K of a
    QMatMul's constant [N, K] weights, in the order quads16 packs them, or None: the model's
    order (a window layer, or no fewer corrected quads). A QMatMul reads its rows in that
    order from a copy where it has one and it pays (pairs_matmul.place, groups.copy_pays).
    Computed once per node and its weights."""
    if node.op == "QMatMul":
        if node.inputs[1].const is None or node.inputs[1].const.ndim != 2:
            return None
    elif node.op != "QConv" or node.attrs.get("group", 1) != 1 or not pointwise(node):
        return None
    w = node.inputs[1].const
    have = _orders.get(node)
    if have is not None and have[0] is w:
        return have[1]
    order = None if w is None else order_for(w.reshape(w.shape[0], -1))
    _orders[node] = (w, order)
    return order


def order_for(w: np.ndarray) -> np.ndarray | None:
    """The packed order of a 1x1's [M, C] int8 weights (pair_channels) where C is a multiple
    of 4 and it leaves fewer quads corrected than the model's order; else None."""
    if w.shape[1] % 4:
        return None
    p = pair_channels(w)
    return p if corrected(w[:, p]) < corrected(w) else None


def conflicts(w: np.ndarray) -> np.ndarray:
    """[M, K/2] bool: the pairs (w[:, 2i], w[:, 2i + 1]) whose positive parts or negative parts
    add up to more than 128 (pmaddubsw's int16 sum could saturate): |a + b| > 128, as int8
    values of opposite signs add up to at most 128 in magnitude."""
    return np.abs(w[:, 0::2].astype(np.int16) + w[:, 1::2]) > 128


def corrected(w: np.ndarray) -> int:
    """The number of quads (two neighbouring pairs) of [M, K] weights that need a correction
    (K a multiple of 4)."""
    return int(np.count_nonzero(conflicts(w).reshape(w.shape[0], -1, 2).any(axis=2)))


def pair_channels(w: np.ndarray) -> np.ndarray:
    """A permutation of w's K columns (K even): the pairs greedy pairing gives, conflicting
    pairs first, most conflicts first."""
    k = w.shape[1]
    # [K, M] as w + 128 in uint16: a channel's weights in one row, and a pair conflicts where
    # (u_a - 128) + u_b, wrapping below zero, is past 256 (two passes over the candidates)
    wt = np.ascontiguousarray(w.T.astype(np.int16) + 128, np.uint16)
    heavy = np.count_nonzero((wt < 64) | (wt > 192), axis=1)
    left = np.ones(k, bool)
    pairs, costs = [], []
    for i in np.argsort(-heavy, kind="stable"):
        if not left[i]:
            continue
        left[i] = False
        if heavy[i] == 0:  # every channel left is light: no pair of them can conflict
            light = np.flatnonzero(left | (np.arange(k) == i))
            pairs += [(int(a), int(b)) for a, b in zip(light[0::2], light[1::2])]
            costs += [0] * (len(light) // 2)
            break
        rest = np.flatnonzero(left)
        if len(rest) > CANDIDATES:
            rest = rest[np.argsort(heavy[rest], kind="stable")[:CANDIDATES]]
        cost = np.count_nonzero(wt[rest] + (wt[i] - np.uint16(128)) > 256, axis=1)
        j = int(rest[int(np.argmin(cost))])
        left[j] = False
        pairs.append((int(i), j))
        costs.append(int(cost.min()))
    ranked = sorted(range(len(pairs)), key=lambda n: -costs[n])
    return np.array([c for n in ranked for c in pairs[n]], np.int64)

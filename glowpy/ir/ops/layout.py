"""Ops that only move elements: Tile, Expand, DepthToSpace, SpaceToDepth.

Each is described as one strided copy (`copy_plan`): a loop shape, the input's element stride
per loop dim and the output's. The numpy references and the kernel read the same plan."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, broadcast_shapes, ints, register


def contiguous(shape) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


class Copy(Op):
    """An op that is one strided copy; subclasses give copy_plan(node) -> (shape, src, dst)."""

    def copy_plan(self, node):
        raise NotImplementedError

    def reference(self, node, x, *_):
        shape, src, dst = self.copy_plan(node)
        out_shape = self.infer(node)[0][1]
        isz = x.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(np.ascontiguousarray(x), shape,
                                               [s * isz for s in src])
        y = np.empty(int(np.prod(out_shape)), x.dtype)
        np.lib.stride_tricks.as_strided(y, shape, [s * isz for s in dst])[...] = view
        return [y.reshape(out_shape)]


@register
class Tile(Copy):
    inputs = ("input", "repeats")
    const_inputs = (1,)
    since = 6

    def repeats(self, node):
        x = node.inputs[0]
        r = ints(node.const_input(1, "repeats"))
        if len(r) != len(x.shape) or min(r, default=0) < 0:
            raise ModelError(f"node '{node.name}' (Tile): repeats {r} must have one non-negative "
                             f"value per dim of {list(x.shape)}")
        return r

    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, tuple(d * r for d, r in zip(x.shape, self.repeats(node))))]

    def copy_plan(self, node):
        # output dim d = (tile t, element i): loop over [r0, d0, r1, d1, ...]
        x = node.inputs[0]
        reps = self.repeats(node)
        ist, ost = contiguous(x.shape), contiguous([d * r for d, r in zip(x.shape, reps)])
        shape, src, dst = [], [], []
        for d, r, s, o in zip(x.shape, reps, ist, ost):
            shape += [r, d]
            src += [0, s]
            dst += [d * o, o]
        return shape, src, dst


@register
class Expand(Copy):
    inputs = ("input", "shape")
    const_inputs = (1,)
    since = 8

    def infer(self, node):
        x = node.inputs[0]
        shape = tuple(ints(node.const_input(1, "shape")))
        return [(x.dtype, broadcast_shapes(node, x.shape, shape))]

    def copy_plan(self, node):
        x = node.inputs[0]
        out = self.infer(node)[0][1]
        st = contiguous(x.shape)
        pad = len(out) - len(x.shape)
        src = [0] * pad + [0 if d == 1 and o != 1 else s
                           for d, s, o in zip(x.shape, st, out[pad:])]
        return list(out), src, contiguous(out)


class BlockShuffle(Copy):
    """DepthToSpace / SpaceToDepth as numpy's reshape-transpose-reshape: the input viewed as a
    6-D `split` shape is transposed by `perm`."""
    inputs = ("input",)
    attrs = {"blocksize": None, "mode": "DCR"}

    def check(self, node):
        x = node.inputs[0]
        bs, mode = node.attrs["blocksize"], node.attrs["mode"]
        if len(x.shape) != 4:
            raise ModelError(f"node '{node.name}' ({node.op}): input must be 4-D [N, C, H, W], "
                             f"got {list(x.shape)}")
        if bs is None or bs < 1:
            raise ModelError(f"node '{node.name}' ({node.op}): blocksize must be a positive integer")
        if mode not in ("DCR", "CRD"):
            raise ModelError(f"node '{node.name}' ({node.op}): mode '{mode}' is not DCR or CRD")
        return x.shape, bs, mode

    def infer(self, node):
        split, perm = self.split_perm(node)
        out = [split[p] for p in perm]
        return [(node.inputs[0].dtype, self.out_shape(node, out))]

    def copy_plan(self, node):
        split, perm = self.split_perm(node)
        st = contiguous(split)
        shape = [split[p] for p in perm]
        return shape, [st[p] for p in perm], contiguous(shape)


@register
class DepthToSpace(BlockShuffle):
    def split_perm(self, node):
        (n, c, h, w), b, mode = self.check(node)
        if c % (b * b):
            raise ModelError(f"node '{node.name}' (DepthToSpace): channels {c} are not a multiple "
                             f"of blocksize^2 = {b * b}")
        if mode == "DCR":
            return [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
        return [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]

    def out_shape(self, node, t):
        return (t[0], t[1], t[2] * t[3], t[4] * t[5])


@register
class SpaceToDepth(BlockShuffle):
    def split_perm(self, node):
        (n, c, h, w), b, mode = self.check(node)
        if h % b or w % b:
            raise ModelError(f"node '{node.name}' (SpaceToDepth): spatial dims {h}x{w} are not "
                             f"multiples of blocksize {b}")
        split = [n, c, h // b, b, w // b, b]
        return split, ([0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])

    def out_shape(self, node, t):
        return (t[0], t[1] * t[2] * t[3], t[4], t[5])

"""Caffe2's data-movement and shape operators mapped onto the IR: Concat (with its split_info
output), Split, Reshape (with its old-shape output), Flatten, Transpose, NCHW2NHWC/NHWC2NCHW,
Squeeze, ExpandDims, Slice, Gather, ResizeNearest, Cast, Shape."""
from __future__ import annotations

import numpy as np

from glowpy.frontend.caffe2_ctx import axis_of, dtype_of, rank_at_least, to_nhwc


def concat(c, xs):
    x0 = xs[0]
    add_axis = c.args.i("add_axis", 0)
    r = len(x0.shape) + (1 if add_axis else 0)
    axis = c.args.i("axis") if c.args.has("axis") else (1 if c.order() == "NCHW" else r - 1)
    axis = axis_of(c, axis, r)
    if add_axis:
        xs = [c.one("Unsqueeze", [x, c.i64([axis], "axes")]) for x in xs]
    y = c.one("Concat", list(xs), {"axis": axis}, final=True)
    return [y, c.output_const(np.asarray([x.shape[axis] for x in xs], np.int32), 1)]


def split(c, xs):
    x = xs[0]
    r = len(x.shape)
    axis = c.args.i("axis") if c.args.has("axis") else (1 if c.order() == "NCHW" else r - 1)
    axis = axis_of(c, axis, r)
    n = len(c.op.output)
    if c.args.has("split"):
        sizes = c.args.ints("split")
    elif len(xs) > 1:
        if not xs[1].is_const:
            raise c.err("the split sizes (input 1) must be known at compile time")
        sizes = [int(v) for v in xs[1].const.reshape(-1)]
    else:
        if x.shape[axis] % n:
            raise c.err(f"dim {axis} ({x.shape[axis]}) does not split into {n} equal parts")
        sizes = [x.shape[axis] // n] * n
    if len(sizes) != n or sum(sizes) != x.shape[axis]:
        raise c.err(f"split sizes {sizes} do not give {n} outputs adding up to {x.shape[axis]}")
    add_axis = c.args.i("add_axis", 0)
    outs = c.add("Split", [x, c.i64(sizes, "split")], {"axis": axis}, final=not add_axis, n=n)
    if add_axis:
        outs = [c.one("Squeeze", [o, c.i64([axis], "axes")]) for o in outs]
    return outs


def reshape(c, xs):
    x = xs[0]
    if c.args.has("shape"):
        shape = c.args.ints("shape")
    elif len(xs) > 1 and xs[1].is_const:
        shape = [int(v) for v in xs[1].const.reshape(-1)]
    else:
        raise c.err("needs the new shape as argument 'shape' or a constant second input")
    y = c.one("Reshape", [x, c.i64(shape, "shape")], final=True)
    return [y, c.output_const(np.asarray(x.shape, np.int64), 1)]


def flatten(c, xs):
    return [c.one("Flatten", [xs[0]], {"axis": c.args.i("axis", 1)}, final=True)]


def transpose(c, xs):
    x = xs[0]
    axes = c.args.ints("axes") or list(range(len(x.shape)))[::-1]
    return [c.transpose(x, axes, final=True)]


def nchw2nhwc(c, xs):
    rank_at_least(c, xs[0], 3)
    return [to_nhwc(c, xs[0])]


def nhwc2nchw(c, xs):
    rank_at_least(c, xs[0], 3)
    x = xs[0]
    r = len(x.shape)
    return [c.transpose(x, [0, r - 1] + list(range(1, r - 1)), final=True)]


def squeeze(c, xs):
    dims = c.args.ints("dims", [])
    return [c.one("Squeeze", [xs[0]] + ([c.i64(dims, "dims")] if dims else []), final=True)]


def expand_dims(c, xs):
    dims = sorted(set(c.args.ints("dims", [])))
    if not dims:
        raise c.err("argument 'dims' is required")
    return [c.one("Unsqueeze", [xs[0], c.i64(dims, "dims")], final=True)]


def slice_(c, xs):
    x = xs[0]
    if c.args.has("starts"):
        starts, ends = c.args.ints("starts"), c.args.ints("ends", [])
    elif len(xs) >= 3 and xs[1].is_const and xs[2].is_const:
        starts = [int(v) for v in xs[1].const.reshape(-1)]
        ends = [int(v) for v in xs[2].const.reshape(-1)]
    else:
        raise c.err("needs starts and ends as arguments or constant inputs")
    if len(starts) != len(ends) or len(starts) > len(x.shape):
        raise c.err(f"starts {starts} and ends {ends} must have the same length, at most the "
                    f"rank {len(x.shape)}")
    s2, e2 = [], []
    for d, (s, e) in enumerate(zip(starts, ends)):
        n = x.shape[d]
        s = n + 1 + s if s < 0 else s  # Caffe2: -1 is the end, one past the last element
        e = n + 1 + e if e < 0 else e
        if not 0 <= s <= e <= n:
            raise c.err(f"slice [{starts[d]}, {ends[d]}) is out of range for dim {d} of size {n}")
        s2.append(s)
        e2.append(e)
    return [c.one("Slice", [x, c.i64(s2, "starts"), c.i64(e2, "ends"),
                            c.i64(list(range(len(s2))), "axes")], final=True)]


def gather(c, xs):
    if c.args.i("match_outer", 0):
        raise c.err("match_outer=1 is not supported")
    return [c.one("Gather", list(xs[:2]), {"axis": c.args.i("axis", 0)}, final=True)]


def resize_nearest(c, xs):
    """Caffe2: out = int(in * scale), in_index = min(int(out_index / scale), in - 1); a Gather
    of those rows and columns (float32 arithmetic, as Caffe2 does)."""
    x = xs[0]
    if len(x.shape) != 4:
        raise c.err(f"input must be 4-D, got {list(x.shape)}")
    hs, ws = c.args.f("height_scale", 1.0), c.args.f("width_scale", 1.0)
    if len(xs) > 1:
        if not xs[1].is_const or xs[1].size != 2:
            raise c.err("the scales input must be a constant [height_scale, width_scale]")
        hs, ws = (float(v) for v in xs[1].const.reshape(-1))
    h_ax, w_ax = (2, 3) if c.order() == "NCHW" else (1, 2)
    y = x
    for ax, s, last in ((h_ax, hs, False), (w_ax, ws, True)):
        n = x.shape[ax]
        if not 0 < s < float(1 << 16):
            raise c.err(f"scale {s} must be positive and below 65536")
        out = int(np.float32(n) * np.float32(s))
        if out < 1:
            raise c.err(f"scale {s} gives an empty output")
        if out == n and s == 1.0 and not last:
            continue
        idx = np.minimum((np.arange(out, dtype=np.float32) / np.float32(s)).astype(np.int64), n - 1)
        y = c.one("Gather", [y, c.i64(idx, f"index{ax}")], {"axis": ax}, final=last)
    return [y]


def cast(c, xs):
    return [c.one("Cast", [xs[0]], {"to": dtype_of(c.args.i("to", 1), c.where)}, final=True)]


def shape(c, xs):
    s = np.asarray(xs[0].shape, np.int64)
    if c.args.has("axes"):
        s = s[[axis_of(c, a, len(xs[0].shape)) for a in c.args.ints("axes")]]
    return [c.output_const(s, 0)]

"""DeformConv (opset 19: torchvision's deform_conv2d as PyTorch exports it, the DCNv1/v2 layers
of detection and segmentation backbones) as a composite of GridSample and MatMul.

Each output position's kernel taps are moved by the offsets the model computes, so they are
known only at run time: the taps are sampled bilinearly, zero outside X (a corner outside
counts 0), which is GridSample's linear mode with zeros padding. The base positions (the
plain convolution's taps) fold into one constant grid: a sampling coordinate is
offset * (2 / size) + (2 * base + 1) / size - 1 (align_corners=0's normalization, which,
unlike align_corners=1's, also holds for a dim of size 1). GridSample samples every channel
of an offset group at [taps, positions] ([N, C/offset_group, kH*kW, oH*oW]), the mask (DCNv2)
scales the samples, and the columns meet the weights in one MatMul per group, the kernel
taps and the channels of a group forming K. This is the reference's arithmetic (onnx's
reference is GridSample per tap) and onnxruntime's."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import Composite, add
from glowpy.ir.ops.registry import register


def _err(node, msg):
    return ModelError(f"node '{show(node.name)}' (DeformConv): {msg}")


def _geometry(node, x, w, offset, mask):
    """(strides, dilations, pads, group, offset_group, output size), each checked."""
    a = node.attrs
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise _err(node, f"X {list(x.shape)} and W {list(w.shape)}: glowpy computes the 2-D "
                         "form (rank-4 X and W), as onnxruntime does")
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    strides = [int(v) for v in a["strides"] or [1, 1]]
    dil = [int(v) for v in a["dilations"] or [1, 1]]
    pads = [int(v) for v in a["pads"] or [0] * 4]
    group, og = int(a["group"]), int(a["offset_group"])
    if a["kernel_shape"] is not None and [int(v) for v in a["kernel_shape"]] != [kh, kw]:
        raise _err(node, f"kernel_shape {list(a['kernel_shape'])} disagrees with W {list(w.shape)}")
    if len(strides) != 2 or len(dil) != 2 or len(pads) != 4 or min(strides + dil) < 1 \
            or min(pads) < 0:
        raise _err(node, f"strides {strides}, dilations {dil} and pads {pads}: two positive "
                         "strides and dilations, four pads of at least 0")
    if group < 1 or og < 1 or c != cg * group or oc % group or c % og:
        raise _err(node, f"group {group} and offset_group {og} for X's {c} channels and W "
                         f"{list(w.shape)}")
    out = [(size + p0 + p1 - (k - 1) * d - 1) // s + 1 for size, p0, p1, k, d, s in
           zip((h, wd), pads[:2], pads[2:], (kh, kw), dil, strides)]
    if min(out) < 1:
        raise _err(node, f"the window leaves no output for X {list(x.shape)}")
    taps = kh * kw
    if offset.shape != (n, og * taps * 2, *out):
        raise _err(node, f"offset is {list(offset.shape)}; it must be "
                         f"{[n, og * taps * 2, *out]}")
    if mask is not None and mask.shape != (n, og * taps, *out):
        raise _err(node, f"mask is {list(mask.shape)}; it must be {[n, og * taps, *out]}")
    return strides, dil, pads, group, og, out


def _shift(x, strides, dil, pads, kernel, out) -> np.ndarray:
    """The constant part of the sampling grid: [taps, positions, (x, y)] normalized."""
    (h, wd), (kh, kw) = x.shape[2:], kernel
    i, j, oh, ow = np.meshgrid(np.arange(kh), np.arange(kw), np.arange(out[0]),
                               np.arange(out[1]), indexing="ij")
    base_y = oh * strides[0] - pads[0] + i * dil[0]
    base_x = ow * strides[1] - pads[1] + j * dil[1]
    gx = (2.0 * base_x + 1) / wd - 1
    gy = (2.0 * base_y + 1) / h - 1
    return np.stack([gx, gy], -1).reshape(kh * kw, out[0] * out[1], 2).astype(np.float32)


@register
class DeformConv(Composite):
    inputs = ("X", "W", "offset", "B?", "mask?")
    attrs = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1,
             "pads": None, "strides": None}
    since = 19

    def expand(self, g, node, ins, n_out):
        x, w, offset, b, mask = list(ins) + [None] * (5 - len(ins))
        strides, dil, pads, group, og, out = _geometry(node, x, w, offset, mask)
        n, c = x.shape[:2]
        oc, cg, kh, kw = w.shape
        taps, pos = kh * kw, out[0] * out[1]

        def i64(v):
            return g.constant(np.asarray(v, np.int64))
        # offsets [N, og*taps*2, oH, oW] as (dy, dx) pairs -> [N, og, taps, pos, (x, y)]
        o = add(g, node, "Reshape", [offset, i64([n, og, taps, 2, pos])], tag="offsets")[0]
        o = add(g, node, "Gather", [o, i64([1, 0])], {"axis": 3}, tag="offsets_xy")[0]
        o = add(g, node, "Transpose", [o], {"perm": [0, 1, 2, 4, 3]}, tag="offsets_last")[0]
        scale = np.asarray([2.0 / x.shape[3], 2.0 / x.shape[2]], np.float32)
        grid = add(g, node, "Mul", [o, g.constant(scale)], tag="grid_scaled")[0]
        grid = add(g, node, "Add", [grid, g.constant(_shift(x, strides, dil, pads, (kh, kw), out))],
                   tag="grid")[0]
        if mask is not None:
            mask = add(g, node, "Reshape", [mask, i64([n, og, taps, pos])], tag="mask")[0]
        xs = add(g, node, "Split", [x, i64([c // og] * og)], {"axis": 1}, n=og,
                 tag="channels") if og > 1 else [x]
        cols = []
        for k in range(og):
            gk = grid if og == 1 else add(g, node, "Slice", [grid, i64([k]), i64([k + 1]),
                                                             i64([1])], tag=f"grid{k}")[0]
            gk = add(g, node, "Reshape", [gk, i64([n, taps, pos, 2])], tag=f"grid{k}_4d")[0]
            s = add(g, node, "GridSample", [xs[k], gk], {"align_corners": 0, "mode": "linear",
                                                         "padding_mode": "zeros"},
                    tag=f"sample{k}")[0]
            if mask is not None:
                mk = mask if og == 1 else add(g, node, "Slice", [mask, i64([k]), i64([k + 1]),
                                                                 i64([1])], tag=f"mask{k}")[0]
                mk = add(g, node, "Reshape", [mk, i64([n, 1, taps, pos])], tag=f"mask{k}_4d")[0]
                s = add(g, node, "Mul", [s, mk], tag=f"masked{k}")[0]
            cols.append(s)
        col = cols[0] if og == 1 else add(g, node, "Concat", cols, {"axis": 1}, tag="columns")[0]
        # [N, C, taps, pos] -> per group K = (C/group) * taps rows, one MatMul
        shape = [n, cg * taps, pos] if group == 1 else [n, group, cg * taps, pos]
        col = add(g, node, "Reshape", [col, i64(shape)], tag="columns_k")[0]
        wk = add(g, node, "Reshape", [w, i64([oc, cg * taps] if group == 1 else
                                          [group, oc // group, cg * taps])], tag="weights")[0]
        y = add(g, node, "MatMul", [wk, col], tag="products")[0]
        y = add(g, node, "Reshape", [y, i64([n, oc, *out])], tag="output")[0]
        if b is not None:
            b4 = add(g, node, "Reshape", [b, i64([1, oc, 1, 1])], tag="bias")[0]
            y = add(g, node, "Add", [y, b4], tag="biased")[0]
        return [y]

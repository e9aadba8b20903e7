"""3-D windows on the 2-D kernels, which take only 1-D and 2-D windows.

A 3-D float Conv (video and volume models: C3D, R(2+1)D, I3D, 3-D U-Nets) becomes one 2-D Conv
over the output depths: for every output depth the kd input slices its window reads, gathered next
to each other channel by channel, are one 2-D input of C x kd channels, and the weights
(M, C/g, kd, kh, kw) are already the 2-D weights (M, C/g x kd, kh, kw) in that order (groups
stay whole). So:

    x (N, C, D, H, W) -> Pad depth -> Gather the depths (od x sd + t x dd for each output depth
    od, tap t) -> (N, C, OD, kd, H, W) -> Transpose (N, OD, C, kd, H, W) -> Reshape
    (N x OD, C x kd, H, W) -> Conv 2-D (height and width as they were) -> Reshape
    (N, OD, M, OH, OW) -> Transpose (N, M, OD, OH, OW)

and the 2-D Conv runs on the register-tiled kernels. Why: the 3-D Conv took the generic scalar
kernel. Zen 4, AVX2 code, one layer, against onnxruntime's AVX2 kernels: 64 -> 64 3x3x3 on 16x28x28
256.9 ms (onnxruntime 32.1); the R(2+1)D-style stem 3 -> 64 3x7x7 stride (1, 2, 2) on 16x112x112
166.6 ms (37.4). The gathered copy is kd times the input, once; a kernel of depth 1 gathers nothing
(only the transposes).

Ungrouped Convs take the input depth-major instead (`_over_depths`): Transpose x to (N, D, C,
H, W), the depth padding a Concat with zero blocks, the Gather of whole (C, H, W) blocks is
then already the 2-D input (the weights' depth taps ahead of their channels), and the 2-D
output is the output depth-major. That copies the input 1 + kd times instead of 1 + 2 kd (no
Pad, no Transpose of the gathered copy), and between two such Convs the Transpose back and
the next one's Transpose forward cancel across an activation read by nothing else
(`_cancel_between`; the activation then fuses into the Conv). A 3-D U-Net (16-32-64 channels
on 64^3, AVX2 code on a Zen 4): 203 -> 175 ms (onnxruntime 397); its 32 -> 16 3x3x3 layer on
64^3 alone 72 -> 61 ms.

A depthwise 3-D Conv (X3D's 3x3x3 on each channel) of depth stride 1 is kd depthwise 2-D
Convs over depth-major slices, one per depth tap, summed (`_depthwise_taps`): no gathered
copy, and the depthwise 2-D kernels instead of a grouped Conv of kd channels a group.

A window of kd x 1 x 1 with spatial stride 1 and no spatial padding (the temporal half of
R(2+1)D and S3D) needs no gathering at all: it is a 2-D Conv with a kd x 1 window over the
input viewed as (N, C, D, H x W) (`_temporal`).

A 3-D MaxPool or AveragePool of depth 1 (I3D's 1x3x3 / (1, 2, 2)) is a 2-D pool of each
depth slice: the input viewed as (N, C x D, H, W), no copy. One 1x3x3 stride (1, 2, 2) MaxPool
on 64 x 16 x 56 x 56: 1.15 of onnxruntime's time through the generic 3-D loop nest.

An integer 3-D QConv (onnxruntime's QLinearConv over volumes, or a 3-D Conv between
QuantizeLinear pairs) takes the same rewrites onto the integer 2-D kernels (pairs, quads,
quads16): the 2-D node keeps its zero points and requantization, and depth padding is the
input's zero point in its own type (`_pad_value`: the real 0). A depthwise QConv takes the
grouped form, since per-tap outputs, each requantized, cannot be summed. onnxruntime's QOperator
models, AVX2 code against its AVX2 kernels (Zen 4): R(2+1)D 10.2 -> 0.67 of its time (the
temporal 3x1x1 layers had the generic integer loop nest), a 3-D U-Net 4.25 -> 0.34, X3D
1.51 -> 0.63.

Runs after BatchNormalization and per-channel affine ops are folded into the 3-D Conv's
weights (fold_batchnorm, fold_affine), which cannot see through the rewrite."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.epilogue import ELEMENTWISE
from glowpy.ir.passes.util import make_node, only_user, remove, replace_value, users


# the gathered copy at most this many times the larger of the Conv's input and output: kd
# times the input for depth stride 1 (3 for the 3x3x3 layers); a window deep enough to need
# more (a hostile 31-deep kernel) keeps the generic kernel and its memory
MAX_COPIES = 8
DEPTH_MAJOR = [0, 2, 1, 3, 4]  # (N, C, D, H, W) <-> (N, D, C, H, W)


def _pool_applies(n) -> bool:
    """A one-output 3-D pool of kernel depth 1, depth stride 1, no depth padding."""
    if n.op not in ("MaxPool", "AveragePool") or len(n.inputs[0].shape) != 5 or \
            len(n.outputs) != 1 or None in n.inputs[0].shape:
        return False
    win = n.opdef.window(n)
    return win.kernel[0] == 1 and win.strides[0] == 1 and not win.pads_begin[0] and \
        not win.pads_end[0]


def _pool(graph, n):
    """The pool's nodes: a view of the input as (N, C x D, H, W), the 2-D pool, the view back."""
    x, y = n.inputs[0], n.outputs[0]
    win = n.opdef.window(n)
    nb, c, d, h, w = x.shape
    v = make_node(graph, "Reshape", [x, graph.constant(np.array([nb, c * d, h, w], np.int64),
                                                       f"{n.name}_shape4")], {}, f"{n.name}_r4")
    attrs = dict(n.attrs, kernel_shape=list(win.kernel[1:]), strides=list(win.strides[1:]),
                 dilations=list(win.dilations[1:]), auto_pad="NOTSET",
                 pads=[win.pads_begin[1], win.pads_begin[2], win.pads_end[1], win.pads_end[2]])
    p = make_node(graph, n.op, [v.outputs[0]], attrs, f"{n.name}_2d")
    back = make_node(graph, "Reshape", [p.outputs[0], graph.constant(
        np.array(y.shape, np.int64), f"{n.name}_shape5")], {}, f"{n.name}_r5", out=y)
    return [v, p, back]


def _conv3d(n) -> bool:
    """A 3-D Conv of constant weights: a float Conv, or an integer QConv (QLinearConv, the QDQ
    folds) whose 2-D form is the same QConv with the 2-D window (bias, requantization and
    clamp per output channel, unchanged)."""
    return (n.op == "Conv" and n.inputs[0].dtype == np.float32 or n.op == "QConv") and \
        len(n.inputs[0].shape) == 5 and n.inputs[1].const is not None and \
        None not in n.inputs[0].shape


def _pad_value(n):
    """The input's zero in its own type: a QConv pads with its input's zero point."""
    return np.array(n.attrs["x_zp"] if n.op == "QConv" else 0, n.inputs[0].dtype)


def _conv2d(n, **window) -> dict:
    """The 2-D node's attributes: the 3-D node's (a QConv's zero points, requantization and
    clamp) with the 2-D window."""
    return dict(n.attrs, auto_pad="NOTSET", **window)


def _is_temporal(win) -> bool:
    return tuple(win.kernel[1:]) == (1, 1) and tuple(win.strides[1:]) == (1, 1) and \
        not any(win.pads_begin[1:] + win.pads_end[1:])


def _applies(n) -> bool:
    if not _conv3d(n):
        return False
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    gathered = math.prod(x.shape) // x.shape[2] * y.shape[2] * w.shape[2]
    return gathered <= MAX_COPIES * max(math.prod(x.shape), math.prod(y.shape))


def _temporal(graph, n, win) -> list:
    """A kd x 1 x 1 window (R(2+1)D's and S3D's temporal convolutions) with spatial stride 1
    and no spatial padding is a 2-D Conv with a kd x 1 window over the input viewed as
    (N, C, D, H x W): no gathered copy and no transposes, only views. Zen 4, AVX2 code, 3 x
    1 x 1 on 64 channels of 8 x 28 x 28: 1.72 ms through the gathered copy (onnxruntime
    1.75), 1.41 ms as this 2-D Conv (0.81 of onnxruntime's time). No copy, so no MAX_COPIES
    bound either."""
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    (nb, c, d, h, wd), m, kd = x.shape, w.shape[0], w.shape[2]
    v = make_node(graph, "Reshape", [x, graph.constant(np.array([nb, c, d, h * wd], np.int64),
                                                       f"{n.name}_plane4")], {}, f"{n.name}_v4")
    w2 = graph.constant(np.ascontiguousarray(w.const.reshape(m, -1, kd, 1)), f"{w.name}_kd1")
    attrs = _conv2d(n, kernel_shape=[kd, 1], strides=[win.strides[0], 1],
                    dilations=[win.dilations[0], 1],
                    pads=[win.pads_begin[0], 0, win.pads_end[0], 0])
    conv = make_node(graph, n.op, [v.outputs[0], w2] + n.inputs[2:], attrs, f"{n.name}_2d")
    back = make_node(graph, "Reshape", [conv.outputs[0], graph.constant(
        np.array(y.shape, np.int64), f"{n.name}_shape5")], {}, f"{n.name}_r5", out=y)
    return [v, conv, back]


class _Nodes:
    """The nodes a rewrite of node n adds (named after it), ending with the 2-D output
    (N x OD, M, OH, OW) turned back into n's output (N, M, OD, OH, OW)."""

    def __init__(self, graph, n):
        self.graph, self.n, self.new = graph, n, []

    def add(self, op, inputs, attrs, tag):
        node = make_node(self.graph, op, inputs, attrs, f"{self.n.name}_{tag}")
        self.new.append(node)
        return node.outputs[0]

    def const(self, a, tag):
        return self.graph.constant(np.asarray(a), f"{self.n.name}_{tag}")

    def back(self, y, win) -> list:
        nb, m = self.n.inputs[0].shape[0], self.n.inputs[1].shape[0]
        od, oh, ow = win.out_size
        y = self.add("Reshape", [y, self.const(np.array([nb, od, m, oh, ow], np.int64), "shape5")],
                     {}, "r5")
        return self.new + [make_node(self.graph, "Transpose", [y], {"perm": DEPTH_MAJOR},
                                     f"{self.n.name}_t5", out=self.n.outputs[0])]


def _over_depths(graph, n, win, zeros: dict) -> list:
    """The Conv as one 2-D Conv over the output depths. Ungrouped, the input goes depth-major
    (N, D, C, H, W): the kd slices an output depth reads are then kd whole (C, H, W) blocks,
    so the depth padding is a Concat with zero blocks (the Transpose writes straight into its
    slice) and the Gather of whole blocks, (N, OD x kd, C, H, W), is already the 2-D input
    (N x OD, kd x C, H, W) with the weights' depth taps moved ahead of their channels: the
    input copied 1 + kd times. Grouped, a group's channels must stay together, so the depths
    are gathered channel-major, (N, C, OD, kd, H, W), and transposed (the Pad, the Gather and
    a Transpose of the gathered copy: 1 + 2 kd). Either way the 2-D output is the output
    depth-major, turned back by one Transpose."""
    x, w = n.inputs[0], n.inputs[1]
    (nb, c, _, h, wd), m, kd = x.shape, w.shape[0], w.shape[2]
    od, sd, dd = win.out_size[0], win.strides[0], win.dilations[0]
    pb, pe = win.pads_begin, win.pads_end
    g = n.attrs["group"]
    nodes = _Nodes(graph, n)
    add, const = nodes.add, nodes.const
    idx = np.array([o * sd + k * dd for o in range(od) for k in range(kd)], np.int64)
    if g == 1:
        t = add("Transpose", [x], {"perm": DEPTH_MAJOR}, "dm")
        if pb[0] or pe[0]:
            # (one constant of zero blocks per shape in the graph: each Concat copies it)
            zero = _pad_value(n)
            blocks = [zeros.setdefault((nb, p, c, h, wd, zero.dtype.str, int(zero)), graph.constant(
                np.full((nb, p, c, h, wd), zero), f"{n.name}_zeros"))
                for p in (pb[0], pe[0])]
            t = add("Concat", blocks[:1] * bool(pb[0]) + [t] + blocks[1:] * bool(pe[0]),
                    {"axis": 1}, "padded")
        if not np.array_equal(idx, np.arange(t.shape[1])):
            t = add("Gather", [t, const(idx, "depths")], {"axis": 1}, "depths")
        w2 = w.const.transpose(0, 2, 1, 3, 4)
    else:
        t = x
        if pb[0] or pe[0]:
            pads = np.array([0, 0, pb[0], 0, 0, 0, 0, pe[0], 0, 0], np.int64)
            t = add("Pad", [t, const(pads, "pads"), const(_pad_value(n), "pad_value")],
                    {"mode": "constant"}, "pad")
        if kd > 1 or not np.array_equal(idx, np.arange(t.shape[2])):
            t = add("Gather", [t, const(idx, "depths")], {"axis": 2}, "depths")
        t = add("Reshape", [t, const(np.array([nb, c, od, kd, h, wd], np.int64), "shape6")], {}, "r6")
        t = add("Transpose", [t], {"perm": [0, 2, 1, 3, 4, 5]}, "t6")
        w2 = w.const
    t = add("Reshape", [t, const(np.array([nb * od, c * kd, h, wd], np.int64), "shape4")], {}, "r4")
    w2 = graph.constant(np.ascontiguousarray(w2.reshape(m, -1, *w.shape[3:])), f"{w.name}_2d")
    attrs = _conv2d(n, kernel_shape=list(w.shape[3:]), strides=list(win.strides[1:]),
                    dilations=list(win.dilations[1:]), pads=[pb[1], pb[2], pe[1], pe[2]])
    return nodes.back(add(n.op, [t, w2] + n.inputs[2:], attrs, "2d"), win)


def _depthwise_taps(graph, n, win) -> list:
    """A depthwise 3-D Conv (one input channel per group) of depth stride 1 as kd depthwise
    2-D Convs, one per depth tap, summed: over the input turned depth-major and padded in
    depth, (N, Dp, C, H, W), tap k reads the OD whole (C, H, W) blocks from depth k x dd on,
    one contiguous Slice (a view), seen as (N, OD x C, H, W), with the tap's 2-D weights
    repeated for every output depth; each tap's Conv adds the previous taps' sum (fused as its
    residual, accumulated in place). The input is copied twice (the Transpose and the Pad)
    where the gathered form copied it 1 + 2 kd times, and the 2-D Convs are depthwise ones
    (the gathered form was a grouped Conv of kd channels a group). An X3D-S-style network on
    13 x 160 x 160, AVX2 code on a Zen 4: 60.5 -> 37.6 ms (onnxruntime 72); its first 3x3x3
    depthwise layer (108 channels of 13 x 40 x 40) 15.3 -> 4.5 ms in its profile."""
    x, w = n.inputs[0], n.inputs[1]
    (nb, c, _, h, wd), kd = x.shape, w.shape[2]
    od, dd = win.out_size[0], win.dilations[0]
    pb, pe = win.pads_begin, win.pads_end
    nodes = _Nodes(graph, n)
    add, const = nodes.add, nodes.const
    t = add("Transpose", [x], {"perm": DEPTH_MAJOR}, "dm")
    if pb[0] or pe[0]:
        pads = const(np.array([0, pb[0], 0, 0, 0, 0, pe[0], 0, 0, 0], np.int64), "pads")
        t = add("Pad", [t, pads], {"mode": "constant"}, "pad")
    attrs = {"group": od * c, "kernel_shape": list(w.shape[3:]), "strides": list(win.strides[1:]),
             "dilations": list(win.dilations[1:]), "pads": [pb[1], pb[2], pe[1], pe[2]],
             "auto_pad": "NOTSET"}
    acc = None
    for k in range(kd):
        v = add("Slice", [t, const(np.array([k * dd], np.int64), f"start{k}"),
                          const(np.array([k * dd + od], np.int64), f"end{k}"),
                          const(np.array([1], np.int64), "axis")], {}, f"tap{k}")
        v = add("Reshape", [v, const(np.array([nb, od * c, h, wd], np.int64), "planes")], {},
                f"v{k}")
        wk = graph.constant(np.ascontiguousarray(np.tile(w.const[:, :, k], (od, 1, 1, 1))),
                            f"{w.name}_tap{k}")
        bias = [graph.constant(np.tile(n.inputs[2].const, od), f"{n.name}_bias")] \
            if k == 0 and len(n.inputs) > 2 and n.inputs[2] is not None else []
        y = add("Conv", [v, wk] + bias, attrs, f"2d{k}")
        acc = y if acc is None else add("Add", [y, acc], {}, f"sum{k}")
    return nodes.back(acc, win)


def _cancel_between(graph: Graph) -> Graph:
    """Transpose(DEPTH_MAJOR) -> Transpose(DEPTH_MAJOR): the second one's readers read the first
    one's input (the perm is its own inverse). Transpose(DEPTH_MAJOR) -> an elementwise op on
    that value alone -> Transpose(DEPTH_MAJOR):
    the op runs on the first Transpose's input and both go (a 3-D Conv's output turned back to
    channel-major and its activation, read only by the next 3-D Conv, which turns it
    depth-major again). Other operands must be single values (Clip's bounds, LeakyRelu has
    none), so the op means the same in either order."""
    us = users(graph)
    for t2 in list(graph.nodes):
        if t2.op != "Transpose" or t2.attrs.get("perm") != DEPTH_MAJOR:
            continue
        u = t2.inputs[0].producer
        if u is not None and u.op == "Transpose" and u.attrs.get("perm") == DEPTH_MAJOR:
            # nothing between (an integer Conv's activation is its clamp): the pair is no-op
            # (the first one, read by nothing else now, goes with the dead code)
            if replace_value(graph, t2.outputs[0], u.inputs[0]):
                remove(graph, t2)
                us = users(graph)
            continue
        if u is None or u.op not in ELEMENTWISE or len(u.outputs) != 1 or \
                only_user(graph, u.outputs[0], us) is not t2:
            continue
        lead = [v for v in u.inputs if v is not None and math.prod(v.shape) != 1]
        if len(lead) != 1 or lead[0] is not u.inputs[0]:
            continue
        t1 = lead[0].producer
        if t1 is None or t1.op != "Transpose" or t1.attrs.get("perm") != DEPTH_MAJOR or \
                only_user(graph, lead[0], us) is not u:
            continue
        u2 = make_node(graph, u.op, [t1.inputs[0]] + u.inputs[1:], dict(u.attrs), u.name)
        at = graph.nodes.index(u)
        graph.nodes[at] = u2
        if not replace_value(graph, t2.outputs[0], u2.outputs[0]):
            graph.nodes[at] = u
            continue
        remove(graph, t1, t2)
        us = users(graph)
    return graph


def windows3d_as_2d(graph: Graph) -> Graph:
    nodes, zeros = [], {}
    for n in graph.nodes:
        if _pool_applies(n):
            nodes += _pool(graph, n)
            continue
        if _conv3d(n) and _is_temporal(n.opdef.window(n)):
            nodes += _temporal(graph, n, n.opdef.window(n))
            continue
        if not _applies(n):
            nodes.append(n)
            continue
        win = n.opdef.window(n)
        w = n.inputs[1]
        # (the taps' weights, repeated per output depth, must stay small beside the input)
        # (a QConv's taps cannot be summed after each one's requantization: it takes the
        # grouped form)
        dw = n.op == "Conv" and w.shape[1] == 1 and n.attrs["group"] == n.inputs[0].shape[1] and \
            win.strides[0] == 1 and w.shape[2] > 1 and \
            math.prod(w.shape) * win.out_size[0] <= math.prod(n.inputs[0].shape) and \
            (len(n.inputs) < 3 or n.inputs[2] is None or n.inputs[2].const is not None)
        nodes += _depthwise_taps(graph, n, win) if dw else _over_depths(graph, n, win, zeros)
    graph.nodes = nodes
    return _cancel_between(graph)

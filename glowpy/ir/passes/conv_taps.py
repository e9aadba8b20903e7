"""Conv taps that read only padding, dropped: the kernel is cut to the taps that land inside
the input for some output position, and the pads shrink by what was cut, so every output is
the same sum.

Where it happens: atrous convolutions on maps smaller than their dilation. DeepLabV3's ASPP
(torchvision, output stride 8) convolves 3x3 at dilations 12, 24 and 36; at a 224x224 input
its map is 28x28 and at 256x256 32x32, where the rate-36 branch lands only its centre tap (a
1x1 convolution, nine times fewer multiply-adds) and onnxruntime still computes all nine. The
Conv op's window bound (no more than twice the input) applies to the taps that land
(ir/ops/conv.py `Window.trimmed`), so these models compile instead of being refused, while
a hostile dilation of 2^62 still reaches no kernel: its untrimmed window never leaves this
pass.

Required at every optimization level: kernels and the dilated-convolution rewrite
(space to batch) see only trimmed windows. ConvInteger and QLinearConv, whose windows are
the Conv's, are cut the same way. Constant weights are sliced at compile time, a
DequantizeLinear's constant operand likewise (its scales, per tensor or per output or input
channel, are untouched), other weights through a Slice node."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops import get_op
from glowpy.ir.passes.util import insert_node, make_node

# the weights' input of each op whose window is the Conv's (the integer ones infer through it)
WEIGHTS = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}


def _window(n):
    """The Conv window of a Conv, ConvInteger or QLinearConv node."""
    conv = get_op("Conv")
    x, w = n.inputs[0], n.inputs[WEIGHTS[n.op]]
    tmp = Node("Conv", n.name, [Value("x", np.float32, x.shape), Value("w", np.float32, w.shape)],
               [], {k: n.attrs[k] for k in conv.attrs})
    return conv.window(tmp)


def _sliced_weights(graph: Graph, n, cut: tuple, at: int):
    """The node's weights cut to the kept taps: (value, nodes inserted before the Conv)."""
    w = n.inputs[WEIGHTS[n.op]]
    full = (slice(None), slice(None)) + cut
    if w.is_const:
        return graph.constant(np.ascontiguousarray(w.const[full]), f"{n.name}_taps"), 0
    p = w.producer
    if p is not None and p.op == "DequantizeLinear" and p.inputs[0].is_const and \
            p.attrs.get("axis", 1) % len(w.shape) < 2:  # (scales per channel at most)
        q = graph.constant(np.ascontiguousarray(p.inputs[0].const[full]), f"{n.name}_qtaps")
        dq = make_node(graph, "DequantizeLinear", [q] + p.inputs[1:], dict(p.attrs),
                       f"{n.name}_dq_taps")
        graph.nodes.insert(at, dq)
        return dq.outputs[0], 1
    starts = [c.start for c in cut]
    ends = [c.stop for c in cut]
    axes = list(range(2, 2 + len(cut)))
    c = lambda v, what: graph.constant(np.array(v, np.int64), f"{n.name}_taps_{what}")  # noqa: E731
    return insert_node(graph, "Slice", [w, c(starts, "starts"), c(ends, "ends"), c(axes, "axes")],
                       {}, f"{n.name}_taps", at), 1


def trim_conv_taps(graph: Graph) -> Graph:
    i = 0
    while i < len(graph.nodes):
        n = graph.nodes[i]
        i += 1
        if n.op not in WEIGHTS:
            continue
        win = _window(n)
        t, cut = win.trimmed()
        if t.kernel == win.kernel:
            continue
        w, added = _sliced_weights(graph, n, cut, i - 1)
        i += added
        n.inputs = [w if j == WEIGHTS[n.op] else v for j, v in enumerate(n.inputs)]
        n.attrs = dict(n.attrs, kernel_shape=list(t.kernel), dilations=list(t.dilations),
                       auto_pad="NOTSET", pads=list(t.pads_begin) + list(t.pads_end))
        assert _window(n).out_size == win.out_size, (n.name, win, t)
    return graph

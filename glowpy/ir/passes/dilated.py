"""A dilated ('atrous') convolution as an undilated one over the input's phases (space to batch,
as TensorFlow computes atrous convolution).

With dilation d, stride 1 and 'same' padding d*(k-1)/2, output row i*d + a reads only input
rows of the same phase a (rows a, a + d, ...): the d x d phases of the input are independent
images, each convolved by the same kernel undilated with padding (k-1)/2. So the input is
reordered into a batch of d*d phase images, convolved once (every Conv kernel applies: the
register tiles read contiguous rows instead of rows d apart, and 3x3 phases of 14x14 and larger
take Winograd), and the result reordered back. The two reorders are Transposes of the input
and the output, small next to the convolution's C x taps multiply-adds per output; a plane
not divisible by d is padded with zeros at its end first and the output cropped (FCN and
DeepLab at 520x520 have 65x65 features). Per-channel
epilogues (bias, folded BatchNormalization, activations) commute with the reorder and stay on
the Conv; a fused epilogue with a full-size operand (a residual) keeps the layer as it is.

Runs after the pipeline, for the targets catalog.late_rewrites lists."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.util import make_node


def phases(n: Node) -> int | None:
    """d when the node is a 2-D, batch-1, stride-1 Conv with dilation d > 1 along both axes,
    odd kernels and 'same' padding d*(k-1)/2, whose epilogue operands are per-channel or
    scalar; else None."""
    if n.op != "Conv" or len(n.inputs[0].shape) != 4 or n.inputs[0].shape[0] != 1:
        return None
    win = n.opdef.window(n)
    d = win.dilations[0]
    if d < 2 or tuple(win.dilations) != (d, d) or tuple(win.strides) != (1, 1):
        return None
    if any(k % 2 == 0 for k in win.kernel) or \
            tuple(win.pads_begin) != tuple(win.pads_end) or \
            tuple(win.pads_begin) != tuple(d * (k - 1) // 2 for k in win.kernel):
        return None
    m = n.outputs[0].shape[1]
    if not all(v is None or _per_channel(v, m) for v in n.inputs[epilogue.base_count(n):]):
        return None
    return d


def _per_channel(v, m: int) -> bool:
    """A constant that broadcasts along the channel axis only (or a scalar)."""
    s = (1,) * (4 - len(v.shape)) + tuple(v.shape)
    return v.is_const and len(s) == 4 and (math.prod(s) == 1 or s == (1, m, 1, 1))


def _reorder(graph: Graph, v, shape5, perm, shape4, name, out=None):
    """Reshape to shape5, Transpose by perm, Reshape to shape4: [nodes], final value."""
    c = lambda s, what: graph.constant(np.array(s, np.int64), f"{name}_{what}")  # noqa: E731
    r1 = make_node(graph, "Reshape", [v, c(shape5, "split")], {}, name + "_split")
    t = make_node(graph, "Transpose", [r1.outputs[0]], {"perm": list(perm)}, name + "_perm")
    r2 = make_node(graph, "Reshape", [t.outputs[0], c(shape4, "join")], {}, name + "_join", out)
    return [r1, t, r2], r2.outputs[0]


def _rewrite(graph: Graph, n: Node, d: int) -> list[Node]:
    x, y = n.inputs[0], n.outputs[0]
    _, c, h0, w0 = x.shape
    m = y.shape[1]
    h, w = -(-h0 // d) * d, -(-w0 // d) * d  # a plane not divisible by d: zeros at the end
    nodes = []
    if (h, w) != (h0, w0):  # (zeros are what the padding reads there anyway)
        pads = graph.constant(np.array([0, 0, 0, 0, 0, 0, h - h0, w - w0], np.int64),
                              n.name + "_phase_pads")
        nodes.append(make_node(graph, "Pad", [x, pads], {"mode": "constant"}, n.name + "_pad"))
        x = nodes[-1].outputs[0]
    before, xp = _reorder(graph, x, (c, h // d, d, w // d, d), (2, 4, 0, 1, 3),
                          (d * d, c, h // d, w // d), n.name + "_phases")
    win = n.opdef.window(n)
    conv = make_node(graph, "Conv", [xp] + n.inputs[1:3] + [None] * (3 - len(n.inputs[:3])),
                     {"kernel_shape": list(win.kernel), "group": n.attrs.get("group", 1),
                      "pads": [(k - 1) // 2 for k in win.kernel] * 2}, n.name + "_undilated")
    base = epilogue.base_count(n)
    if epilogue.steps(n):  # the same steps, their operands after the three base inputs
        conv.inputs += n.inputs[base:]
        shift = 3 - base
        conv.attrs |= {"_base_inputs": 3, "_epilogue": [
            s | {"args": tuple(a if a is None else a + shift for a in s["args"])}
            for s in epilogue.steps(n)]}
    cropped = (h, w) != (h0, w0)
    after, yp = _reorder(graph, conv.outputs[0], (d, d, m, h // d, w // d), (2, 3, 0, 4, 1),
                         (1, m, h, w), n.name + "_interleave", None if cropped else y)
    if cropped:
        c64 = lambda v, what: graph.constant(np.array(v, np.int64), f"{n.name}_crop_{what}")  # noqa: E731
        after.append(make_node(graph, "Slice", [yp, c64([0, 0], "starts"), c64([h0, w0], "ends"),
                                                c64([2, 3], "axes")], {}, n.name + "_crop", y))
    return nodes + before + [conv] + after


def space_to_batch(graph: Graph, pays=lambda node, d: True) -> Graph:
    """Every dilated Conv `phases` accepts and `pays(node, d)` approves, as an undilated Conv
    over the batch of its input's d x d phases."""
    nodes = []
    for n in graph.nodes:
        d = phases(n)
        nodes += _rewrite(graph, n, d) if d is not None and pays(n, d) else [n]
    graph.nodes = nodes
    return graph

"""ConvTranspose as the ops that have fast kernels.

The ConvTranspose kernel (codegen/kernels/conv/transpose.py) scatters every input channel's
plane into the output once per kernel tap: C x taps passes over an output plane, one
multiply-add per element and no register blocking. Measured against onnxruntime (one thread,
Zen 3, AVX2; `python benchmarks/op_probe.py --probes convT2s2_128x32,convT4s2_256x28`): UNet's
2x2/2 decoder step 128 -> 64 channels on 32x32 2.5 ms against 0.94 (2.6x), a 4x4/2 (pad 1)
upsampling 256 -> 128 on 28x28 48 ms against 12 (4x). Two exact rewrites:

* `as_conv`: with stride 1 a ConvTranspose is a Conv of the same input with the kernel flipped,
  input and output channels swapped per group, and padding dilation*(k-1) - pad: no more
  memory, every Conv kernel and fusion applies. Every target (the graph pipeline).
* `as_product_col2im`: a strided, ungrouped ConvTranspose is a 1x1 Conv to M x taps channels
  (the C-long reductions, on the register-blocked 1x1 kernels) followed by Col2Im, which adds
  each column into its image position (one add per column value), then the bias. The columns
  are taps / stride^2 times the output's size (1x for 2x2/2, 4x for 4x4/2, at most
  COL_GROWTH) and live between the two, so this is the backend's choice where time comes
  before bytes (kernels/catalog.graph_rewrites); memory-first targets keep the scatter kernel.
  Same probes, machine under load from other jobs: 2x2/2 2.5 -> 1.0 ms (1.11-1.16 of
  onnxruntime: the product is the same GEMM as its own), 4x4/2 48 -> 9.4-10.3 ms (0.70-0.90).

Weights computed at run time (StyleGAN2's modulated upsampling) are re-laid out by
Slice/Reshape/Transpose nodes instead of at compile time, and the Conv then packs them
itself (codegen/kernels/conv/runtime_weights.py). AVX2 code: 4x4/2 128 -> 64 on 28x28 10.1
-> 1.95 ms (onnxruntime 2.32), 3x3/2 256 -> 256 on 16x16 43.4 -> 2.96 ms (onnxruntime 3.16)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.util import make_node

COL_GROWTH = 4  # columns at most this many times the output (4x4/2); wider: the scatter kernel


def _candidate(n: Node):
    """(window, weights Value) of a float ConvTranspose, else None."""
    if n.op != "ConvTranspose" or n.inputs[0].dtype != np.float32:
        return None
    return n.opdef.window(n), n.inputs[1]


def _relaid(graph: Graph, w, steps, name: str):
    """The weights after `steps` -- ("flip", axes), ("reshape", shape), ("transpose", perm) --:
    a new constant when they are constant, else the nodes computing them at run time (weights
    a graph computes: StyleGAN2's modulated upsampling); (Value, [nodes])."""
    if w.is_const:
        a = w.const
        for op, arg in steps:
            a = a[tuple(slice(None, None, -1) if i in arg else slice(None) for i in range(a.ndim))] \
                if op == "flip" else a.reshape(arg) if op == "reshape" else a.transpose(arg)
        return graph.constant(np.ascontiguousarray(a), name), []
    nodes, v = [], w
    c = lambda a, what: graph.constant(np.array(a, np.int64), f"{name}_{what}{len(nodes)}")  # noqa: E731
    for op, arg in steps:
        if op == "flip":
            ins = [v, c([-1] * len(arg), "start"), c([np.iinfo(np.int64).min] * len(arg), "end"),
                   c(list(arg), "axes"), c([-1] * len(arg), "step")]
            nodes.append(make_node(graph, "Slice", ins, {}, f"{name}_flip"))
        elif op == "reshape":
            nodes.append(make_node(graph, "Reshape", [v, c(arg, "shape")], {}, f"{name}_reshape"))
        else:
            nodes.append(make_node(graph, "Transpose", [v], {"perm": list(arg)}, f"{name}_perm"))
        v = nodes[-1].outputs[0]
    return v, nodes


def _as_conv(graph: Graph, n: Node) -> list[Node] | None:
    win, w = _candidate(n) or (None, None)
    if win is None or any(s != 1 for s in win.strides):
        return None
    x, y = n.inputs[0], n.outputs[0]
    nd = len(win.in_size)
    kext = [d * (k - 1) for k, d in zip(win.kernel, win.dilations)]
    begin = [e - p for e, p in zip(kext, win.pads_begin)]
    end = [o - i - b + e for o, i, b, e in zip(win.out_size, win.in_size, begin, kext)]
    if min(begin + end) < 0:
        return None
    g = n.attrs["group"]
    c, mg = w.shape[:2]
    k = tuple(w.shape[2:])
    # W [C, M/g, k...] -> [M, C/g, k...] per group, taps reversed
    wc, nodes = _relaid(graph, w, [("flip", tuple(range(2, 2 + nd))), ("reshape", (g, c // g, mg) + k),
                                   ("transpose", (0, 2, 1) + tuple(range(3, 3 + nd))),
                                   ("reshape", (g * mg, c // g) + k)], n.name + "_as_conv_w")
    ins = [x, wc] + ([n.inputs[2]] if n.input(2) is not None else [])
    return nodes + [make_node(graph, "Conv", ins, {
        "group": g, "kernel_shape": list(win.kernel), "dilations": list(win.dilations),
        "strides": [1] * nd, "pads": begin + end}, n.name, y)]


def _as_product_col2im(graph: Graph, n: Node) -> list[Node] | None:
    win, w = _candidate(n) or (None, None)
    if win is None or n.attrs["group"] != 1 or all(s == 1 for s in win.strides):
        return None
    x, y = n.inputs[0], n.outputs[0]
    nd = len(win.in_size)
    # Col2Im's end padding: one whose block grid is exactly the input's (an output_shape past
    # the last tap leaves rows that no block reaches: they get the bias alone, as they should)
    end = [max(0, (i - 1) * s + d * (k - 1) + 1 - o - p) for i, s, d, k, o, p in
           zip(win.in_size, win.strides, win.dilations, win.kernel, win.out_size, win.pads_begin)]
    if any((o + p + e - d * (k - 1) - 1) // s + 1 != i for o, p, e, d, k, s, i in
           zip(win.out_size, win.pads_begin, end, win.dilations, win.kernel, win.strides,
               win.in_size)):
        return None
    c, m = w.shape[:2]
    taps = math.prod(win.kernel)
    if taps * math.prod(win.in_size) > COL_GROWTH * math.prod(win.out_size):
        return None
    wp, wnodes = _relaid(graph, w, [("reshape", (c, m * taps)), ("transpose", (1, 0)),
                                    ("reshape", (m * taps, c) + (1,) * nd)], n.name + "_product_w")
    bias = n.input(2)
    # every output position takes exactly one tap (2x2/2 unpadded: UNet's decoder): the bias
    # goes into the product, and Col2Im only places the columns (no zeroing, no adds)
    into_product = bias is not None and bias.is_const and win.tiles_exactly()
    ins = [x, wp]
    if into_product:
        ins.append(graph.constant(np.repeat(bias.const, taps), n.name + "_product_b"))
        bias = None
    cols = make_node(graph, "Conv", ins, {"kernel_shape": [1] * nd}, n.name + "_product")
    flat = graph.constant(np.array([x.shape[0], m * taps, math.prod(win.in_size)], np.int64),
                          n.name + "_cols_shape")
    rows = make_node(graph, "Reshape", [cols.outputs[0], flat], {}, n.name + "_cols")
    col2im = make_node(graph, "Col2Im", [
        rows.outputs[0], graph.constant(np.array(win.out_size, np.int64), n.name + "_image"),
        graph.constant(np.array(win.kernel, np.int64), n.name + "_block")],
        {"strides": list(win.strides), "dilations": list(win.dilations),
         "pads": list(win.pads_begin) + end}, n.name + "_col2im", None if bias is not None else y)
    out = wnodes + [cols, rows, col2im]
    if bias is not None:
        b = bias.const.reshape((m,) + (1,) * nd) if bias.is_const else None
        if b is None:  # a run-time bias: broadcast it by a Reshape of its own
            shape = graph.constant(np.array((m,) + (1,) * nd, np.int64), n.name + "_bias_shape")
            out.append(make_node(graph, "Reshape", [bias, shape], {}, n.name + "_bias"))
            bval = out[-1].outputs[0]
        else:
            bval = graph.constant(np.ascontiguousarray(b), n.name + "_bias")
        out.append(make_node(graph, "Add", [col2im.outputs[0], bval], {}, n.name + "_add_bias", y))
    return out


def _as_phase_conv(graph: Graph, n: Node) -> list[Node] | None:
    """A strided, ungrouped 2-D ConvTranspose (dilation 1, constant weights) whose columns
    would pass COL_GROWTH (9x9/2: 20x the output): one Conv over the input to M x s_h x s_w
    channels, one per output phase (py, px), each with its taps py + s*j of the kernel,
    reversed and zero-filled to J = ceil(k / s) a dim; DepthToSpace(s, CRD) interleaves the
    phases, and a Slice drops what the padding cuts. Output row u = oy + pad of phase u % s
    sums x[u // s - j] w[u % s + s j] over j: the Conv's row q = u // s with J - 1 rows of
    padding before, computed for the rows the crop keeps only. The multiply-adds are
    (J s / k)^2 the scatter's (1.23x for 9x9/2, 1.44x for 5x5/2), on the register-blocked
    Conv kernels. Zen 3, AVX2 code: FSRCNN's 9x9/2 56 -> 1 from 360x640 377 -> 86 ms in the
    scatter kernel and as phases (onnxruntime 41); a 5x5/2 256 -> 128 on 16x16 59.8 -> 6.3 ms
    (5.4)."""
    win, w = _candidate(n) or (None, None)
    if win is None or len(win.in_size) != 2 or n.attrs["group"] != 1 or not w.is_const or \
            all(s == 1 for s in win.strides) or any(d != 1 for d in win.dilations):
        return None
    bias = n.input(2)
    if bias is not None and not bias.is_const:
        return None
    x, y = n.inputs[0], n.outputs[0]
    (sh, sw), (kh, kw), (h, wd) = win.strides, win.kernel, win.in_size
    jh, jw = -(-kh // sh), -(-kw // sw)
    pt, pl = win.pads_begin
    ho, wo = win.out_size
    # only the Conv rows q0 .. q1 the crop keeps (FSRCNN's 9x9/2, pad 4: exactly its output;
    # all of them cost 10% more multiply-adds there, 27% for a 5x5/2 on 16x16)
    q0h, q0w = min(pt // sh, jh - 1), min(pl // sw, jw - 1)
    end_h = max(0, -(-(pt + ho) // sh) - h)
    end_w = max(0, -(-(pl + wo) // sw) - wd)
    qh, qw = h + jh - 1 - q0h + end_h - jh + 1, wd + jw - 1 - q0w + end_w - jw + 1
    c, m = w.shape[:2]
    c64 = lambda a, what: graph.constant(np.array(a, np.int64), n.name + what)  # noqa: E731
    wt = np.zeros((m, sh, sw, c, jh, jw), np.float32)
    src = w.const.astype(np.float32)
    for py in range(sh):
        for px in range(sw):
            for j in range(jh):
                for i in range(jw):
                    ky, kx = py + sh * (jh - 1 - j), px + sw * (jw - 1 - i)
                    if ky < kh and kx < kw:
                        wt[:, py, px, :, j, i] = src[:, :, ky, kx].T
    ins = [x, graph.constant(wt.reshape(m * sh * sw, c, jh, jw), n.name + "_phase_w")]
    if bias is not None:
        ins.append(graph.constant(np.repeat(bias.const.astype(np.float32), sh * sw),
                                  n.name + "_phase_b"))
    conv = make_node(graph, "Conv", ins, {"kernel_shape": [jh, jw], "strides": [1, 1],
                                          "pads": [jh - 1 - q0h, jw - 1 - q0w, end_h, end_w]},
                     n.name + "_phases")
    if sh == sw:
        out = [conv, make_node(graph, "DepthToSpace", [conv.outputs[0]],
                               {"blocksize": sh, "mode": "CRD"}, n.name + "_interleave")]
    else:  # (DepthToSpace takes one block size): [N, M, sh, sw, qh, qw] -> [N, M, qh, sh, qw, sw]
        nb = x.shape[0]
        r = make_node(graph, "Reshape", [conv.outputs[0], c64([nb, m, sh, sw, qh, qw], "_ph6")],
                      {}, n.name + "_phases6")
        t = make_node(graph, "Transpose", [r.outputs[0]], {"perm": [0, 1, 4, 2, 5, 3]},
                      n.name + "_interleave6")
        out = [conv, r, t, make_node(graph, "Reshape", [t.outputs[0], c64(
            [nb, m, qh * sh, qw * sw], "_ph4")], {}, n.name + "_interleave")]
    full = out[-1].outputs[0]
    top, left = pt - q0h * sh, pl - q0w * sw
    if full.shape[2:] == (ho, wo) and top == left == 0:
        out[-1] = make_node(graph, out[-1].op, out[-1].inputs, out[-1].attrs, out[-1].name, y)
        return out
    out.append(make_node(graph, "Slice", [full, c64([top, left], "_crop_start"),
                                          c64([top + ho, left + wo], "_crop_end"),
                                          c64([2, 3], "_crop_axes")], {}, n.name + "_crop", y))
    return out


def _as_product_or_phases(graph: Graph, n: Node) -> list[Node] | None:
    """Col2Im where its columns stay within COL_GROWTH, else the phase Conv (2-D)."""
    return _as_product_col2im(graph, n) or _as_phase_conv(graph, n)


def _rewrite(graph: Graph, how) -> Graph:
    nodes = []
    for n in graph.nodes:
        new = how(graph, n)
        nodes += new if new is not None else [n]
    graph.nodes = nodes
    return graph


def as_conv(graph: Graph) -> Graph:
    """Stride-1 ConvTranspose -> Conv (flipped, transposed kernel; complementary padding)."""
    return _rewrite(graph, _as_conv)


def as_product_col2im(graph: Graph) -> Graph:
    """Strided ungrouped ConvTranspose -> 1x1 Conv to M x taps channels, Col2Im, bias Add; or,
    where those columns would pass COL_GROWTH, a Conv per output phase (_as_phase_conv)."""
    return _rewrite(graph, _as_product_or_phases)

"""Integer convolutions and matrix products computed by the float kernels, exactly.

A QConv's accumulator is bias + sum w * (x - x_zp) over integers. Where every such sum of
products, and so every partial sum in any order, stays below 2**24 in magnitude
(qmath.sum_bound over the constant weights and the whole range of the input type), float32
represents each of them exactly: a float Conv of the same integers, summed in whatever order
its kernel chooses, gives the sum bit for bit. The QConv then becomes

    DequantizeLinear(x, 1, x_zp)  ->  Conv(float(W))  ->  QFinish(B, M, S)

with QFinish adding the int32 bias (which may be far larger: channels whose weight scale is
tiny get biases near 2**30) and applying the QConv's own requantization, clamp and output type
(ops/qops.py), or giving the int32 sum (ConvInteger): outputs identical to the integer
kernel's, at the float kernels' speed (winograd_select leaves these Convs direct: its
transforms round). Where the whole sum may pass 2**24 (ResNet-50's 3x3 layers over 512
channels reach about 4e7 with typical per-channel int8 weights, its 2048 -> 512 1x1 layers
about 2e7), the input channels are cut into chunks over each of which it cannot: one float
Conv per chunk, each chunk's sum converted to int32 and the chunks added as integers in QFinish.
A QMatMul (its B constant, one row per output column) becomes a float
MatMul the same way (onnxruntime's quantize_dynamic writes MatMulInteger on run-time
quantized activations). The backend's choice where time comes first
(kernels/catalog.late_rewrites): on vector targets, where the float kernels run several
multiply-adds per instruction and the integer ones (made for the Cortex-M's DSP pairs) one.
The float copies of the input and the accumulator cost activation memory that the int8
tensors alone do not.

Measured on a Zen 4 with AVX2 code against onnxruntime's int8 kernels (its AVX2 u8s8 GEMMs), the
MLPerf Tiny int8 QDQ models of ../shared/models: see the figures in docs/performance.md."""
from __future__ import annotations

import numpy as np

from glowpy.ir import qmath
from glowpy.ir.graph import Graph
from glowpy.ir.ops.qops import REQ
from glowpy.ir.ops.quant import CONV_ATTRS
from glowpy.ir.passes.util import make_node

EXACT = 1 << 24  # integers float32 holds exactly: |n| <= 2**24
# chunks a sum may be cut into (below): each costs one more pass over the float output in
# QFinish, small beside the products while the chunks keep 8 or more input channels each
MAX_CHUNKS = 16


def _dev(node) -> int:
    """The largest |x - x_zp| the input type allows."""
    info = np.iinfo(node.inputs[0].dtype)
    zp = node.attrs["x_zp" if node.op == "QConv" else "a_zp"]
    return max(abs(int(info.min) - zp), abs(int(info.max) - zp))


def exact_chunks(node) -> list[int] | None:
    """Bounds [0, c1, ..., C] of chunks of input channels (a MatMul's columns of A) over each of
    which every sum of products (and partial sum) of a QConv or QMatMul with constant weights,
    bias and requantization tables stays below 2**24 for any input: one chunk where the whole
    sum does. Equal chunks (of a multiple of 8 channels where they hold 8 or more: the float
    kernels' blocks), the fewest that fit, at most MAX_CHUNKS; None when none fit, for a grouped
    Conv that needs more than one, or when the integer sum itself could pass int32 (the integer
    kernel's accumulator)."""
    if node.op not in ("QConv", "QMatMul"):
        return None
    if any(v is None or v.const is None for v in node.inputs[1:5]):
        return None
    w = node.inputs[1].const
    c = w.shape[1]
    per = np.abs(w.reshape(w.shape[0], c, -1).astype(np.int64)).sum(axis=2) * _dev(node)
    sums = np.concatenate([np.zeros((w.shape[0], 1), np.int64), np.cumsum(per, axis=1)], axis=1)
    if np.any(np.abs(node.inputs[2].const.astype(np.int64)).reshape(-1) + sums[:, -1] >= 1 << 31):
        return None
    grouped = node.op == "QConv" and node.attrs["group"] != 1
    for k in range(1, 2 if grouped else min(c, MAX_CHUNKS) + 1):
        size = -(-c // k)
        size = -(-size // 8) * 8 if size >= 8 else size
        bounds = list(range(0, c, size)) + [c]
        if all(np.all(sums[:, e] - sums[:, s] < EXACT) for s, e in zip(bounds, bounds[1:])):
            return bounds
    return None


def _products(graph: Graph, n, xf, bounds: list[int]) -> list:
    """One float Conv or MatMul per chunk of input channels (a view of the dequantized input
    where the chunk is all of it or the channels are outermost, batch 1: Slice)."""
    w = n.inputs[1].const
    conv = n.op == "QConv"
    axis = 1 if conv else len(xf.shape) - 1
    sums = []
    for i, (c0, c1) in enumerate(zip(bounds, bounds[1:])):
        part, tag = xf, "" if len(bounds) == 2 else f"_c{i}"
        if len(bounds) > 2:
            part = make_node(graph, "Slice", [xf] + [
                graph.constant(np.array([v], np.int64), f"{n.name}{tag}_{what}")
                for v, what in ((c0, "start"), (c1, "end"), (axis, "axis"))], {},
                f"{n.name}{tag}_in")
            sums.append(part)
            part = part.outputs[0]
        if conv:
            wf = graph.constant(np.ascontiguousarray(w[:, c0:c1].astype(np.float32)),
                                n.name + tag + "_w")
            prod = make_node(graph, "Conv", [part, wf], {k: n.attrs[k] for k in CONV_ATTRS},
                             n.name + tag + "_sum")
        else:  # QMatMul's B is [N, K]: one row per output column
            wf = graph.constant(np.ascontiguousarray(w[:, c0:c1].T.astype(np.float32)),
                                n.name + tag + "_w")
            prod = make_node(graph, "MatMul", [part, wf], {}, n.name + tag + "_sum")
        sums.append(prod)
    return sums


def qconv_in_float(graph: Graph, keep=lambda node: False) -> Graph:
    """Every QConv and QMatMul with exact_chunks, unless `keep(node)` (an integer kernel serves
    it better), as DequantizeLinear, a float Conv or MatMul per chunk, and QFinish adding the
    chunks' sums as integers and writing the node's own output value."""
    nodes = []
    for n in graph.nodes:
        bounds = None if keep(n) else exact_chunks(n)
        if bounds is None:
            nodes.append(n)
            continue
        x, w, b, m, s = n.inputs[:5]
        conv = n.op == "QConv"
        x_zp = n.attrs["x_zp" if conv else "a_zp"]
        zp = graph.constant(np.array(x_zp, x.dtype), n.name + "_x_zp")
        one = graph.constant(np.array(1.0, np.float32), n.name + "_one")
        xf = make_node(graph, "DequantizeLinear", [x, one, zp], {}, n.name + "_x")
        prods = _products(graph, n, xf.outputs[0], bounds)
        sums = [p.outputs[0] for p in prods if p.op != "Slice"]
        bound = qmath.sum_bound(w.const, b.const, x.dtype, x_zp)
        ties = qmath.ties_possible(bound, m.const, s.const)
        fin = make_node(graph, "QFinish", [sums[0], b, m, s] + sums[1:],
                        dict({k: n.attrs[k] for k in REQ}, ties=int(ties), axis=1 if conv else -1),
                        n.name, out=n.outputs[0])
        nodes += [xf, *prods, fin]
    graph.nodes = nodes
    return graph

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
transforms round). A QMatMul (its B constant, one row per output column) becomes a float
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


def exact_in_float(node) -> bool:
    """A QConv or QMatMul with constant weights, bias and requantization tables whose every
    sum of products (and partial sum) is below 2**24 for any input."""
    if node.op not in ("QConv", "QMatMul"):
        return False
    x, w = node.inputs[0], node.input(1)
    if any(v is None or v.const is None for v in node.inputs[1:5]):
        return False
    zp = node.attrs["x_zp" if node.op == "QConv" else "a_zp"]
    bound = qmath.sum_bound(w.const, np.zeros(w.shape[0], np.int64), x.dtype, zp)
    return bool(np.all(bound < EXACT))


def qconv_in_float(graph: Graph) -> Graph:
    """Every QConv and QMatMul that exact_in_float as DequantizeLinear, a float Conv or
    MatMul, and QFinish writing the node's own output value."""
    nodes = []
    for n in graph.nodes:
        if not exact_in_float(n):
            nodes.append(n)
            continue
        x, w, b, m, s = n.inputs[:5]
        conv = n.op == "QConv"
        x_zp = n.attrs["x_zp" if conv else "a_zp"]
        zp = graph.constant(np.array(x_zp, x.dtype), n.name + "_x_zp")
        one = graph.constant(np.array(1.0, np.float32), n.name + "_one")
        xf = make_node(graph, "DequantizeLinear", [x, one, zp], {}, n.name + "_x")
        if conv:
            wf = graph.constant(w.const.astype(np.float32), n.name + "_w")
            prod = make_node(graph, "Conv", [xf.outputs[0], wf],
                             {k: n.attrs[k] for k in CONV_ATTRS}, n.name + "_sum")
        else:  # QMatMul's B is [N, K]: one row per output column
            wf = graph.constant(np.ascontiguousarray(w.const.T.astype(np.float32)), n.name + "_w")
            prod = make_node(graph, "MatMul", [xf.outputs[0], wf], {}, n.name + "_sum")
        bound = qmath.sum_bound(w.const, b.const, x.dtype, x_zp)
        ties = qmath.ties_possible(bound, m.const, s.const)
        fin = make_node(graph, "QFinish", [prod.outputs[0], b, m, s],
                        dict({k: n.attrs[k] for k in REQ}, ties=int(ties), axis=1 if conv else -1),
                        n.name, out=n.outputs[0])
        nodes += [xf, prod, fin]
    graph.nodes = nodes
    return graph

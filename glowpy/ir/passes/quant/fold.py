"""The QDQ pass: DequantizeLinear -> float op [-> Relu/Clip] -> QuantizeLinear becomes one integer
op of ops/qops.py (int8 operands, int32 accumulation, per-channel weight scales, int32 bias,
fixed-point requantization, saturation); QLinearConv / ConvInteger / QLinearMatMul /
MatMulInteger became the same integer ops in the pass before (qlinear.py's lower_qlinear,
required at -O0).

Every pattern is recognised at its QuantizeLinear (patterns.py). What does not match keeps its
float form: QuantizeLinear and DequantizeLinear have float kernels of their own, so any model
compiles, only slower. Finally DequantizeLinear of constants (weights no integer op took) are
folded into float constants.

Rounding: `graph.quant_rounding`: "even" (the default: ONNX QuantizeLinear's round half to
even, the same results onnxruntime computes, and the MLPerf Tiny TFLite references, which
XNNPack requantizes that way too), or "away" (TFLite's reference fixed-point kernels and
CMSIS-NN: rounding half away from zero twice). QLinearConv and QLinearMatMul always use
"even", as ONNX specifies them.

Graph inputs read through DequantizeLinear (possibly behind Reshape/Transpose) and int8 graph
outputs get `qparams` = (scale, zero point), which the header and NAME.json report."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Value
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.quant.operands import tensor_params
from glowpy.ir.passes.quant.patterns import Folder
from glowpy.ir.passes.quant.rules import MOVES, QUANT_OPS


def _annotate_inputs(graph: Graph, users: dict):
    """Graph inputs read by DequantizeLinear (through MOVES) get that (scale, zero point)."""
    for v in graph.inputs:
        frontier = [v]
        while frontier and v.qparams is None:
            x = frontier.pop()
            for u in users.get(x, []):
                if u.op == "DequantizeLinear" and u.inputs[0] is x:
                    prm = tensor_params(u)
                    if prm is not None:
                        v.qparams = prm
                elif u.op in MOVES and u.inputs[0] is x:
                    frontier.append(u.outputs[0])


def _fold_const_dequantize(graph: Graph):
    kept = []
    for n in graph.nodes:
        if n.op == "DequantizeLinear" and all(v is None or v.is_const for v in n.inputs):
            a = n.opdef.reference(n, *[None if v is None else v.const for v in n.inputs])[0]
            o = n.outputs[0]
            c = graph.constant(a.astype(np.float32), o.name)
            if o in graph.outputs:
                c = Value(o.name, o.dtype, o.shape, const=a.astype(np.float32))
                graph.outputs = [c if x is o else x for x in graph.outputs]
            graph.replace_uses(o, c)
            continue
        kept.append(n)
    graph.nodes = kept


def fold_quantization(graph: Graph) -> Graph:
    if not {n.op for n in graph.nodes} & QUANT_OPS:
        return graph
    _annotate_inputs(graph, graph.consumers())
    f = Folder(graph)
    for q in [n for n in graph.nodes if n.op == "QuantizeLinear"]:
        if q in graph.nodes:
            f.fold(q)
    eliminate_dead_code(graph)
    _fold_const_dequantize(graph)
    for n in graph.nodes:  # int8 values an integer op writes keep their output's parameters
        for o in n.outputs:
            if o in graph.outputs and o.qparams is None and n.op == "QuantizeLinear":
                prm = tensor_params(n)
                if prm is not None:
                    o.qparams = prm
    return graph

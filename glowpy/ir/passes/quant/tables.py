"""Functions of one byte composed into one table: a QMul or QAdd whose two operands are each
the same 8-bit value x or a QTable of x is itself a function of x alone, so a 256-entry table
(computed with the op's own reference on every value of x: the same arithmetic, bit for bit).

That is how int8 models spell the gated activations: SiLU / Swish (x * sigmoid(x), which
onnxruntime's quantizer writes as a QDQ Sigmoid and a QDQ Mul of it with x), hard-swish
(x * HardSigmoid(x)) and GELU's x * Phi(x). Two passes over the tensor and a QMul become one
table lookup. EfficientNet-B0 quantized by onnxruntime (49 SiLU), Zen 4, AVX2 code: the QMul
and QTable passes took 3.6 of 11.4 ms (benchmarks/zoo/quantized.py; figures after this pass in
docs/performance.md)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.util import make_node

BINARY = ("QMul", "QAdd")


def _of_byte(v):
    """(x, table) when v is x itself (table None) or QTable(x) with a constant table."""
    p = v.producer
    if p is not None and p.op == "QTable" and p.inputs[1].const is not None:
        return p.inputs[0], np.asarray(p.inputs[1].const)
    return v, None


def _single(v):
    """v's one value where it is a constant holding one (broadcast to every element), else
    None."""
    return None if v.const is None or v.const.size != 1 else np.asarray(v.const).reshape(-1)


BYTE_MAPS = ("QTable", "Requantize")  # elementwise functions of one byte, per tensor


def _every_byte(dt) -> np.ndarray:
    """The 256 values of an 8-bit type in table order (QTable indexes by value - min)."""
    lo = int(np.iinfo(dt).min)
    return np.arange(lo, lo + 256).astype(dt)


def _byte_map(n) -> bool:
    """n maps each 8-bit element to an 8-bit element by a function of that byte alone (its
    table, if any, a constant)."""
    return n.op in BYTE_MAPS and n.inputs[0].dtype.itemsize == 1 and \
        n.outputs[0].dtype.itemsize == 1 and all(v.is_const for v in n.inputs[1:])


def _compose_chains(graph: Graph) -> None:
    """A byte map whose input is another's output, read by it alone, as one QTable of the
    first's input: the rescale of a folded Split or Slice before a table activation (WaveNet's
    and the GLU's halves before their tanh and sigmoid), two tables in a row."""
    readers = graph.consumers()
    outputs = set(graph.outputs)
    nodes = []
    for n in graph.nodes:
        p = n.inputs[0].producer if _byte_map(n) else None
        if p is None or not _byte_map(p) or len(readers.get(p.outputs[0], [])) != 1 or \
                p.outputs[0] in outputs:
            nodes.append(n)
            continue
        x = p.inputs[0]
        mid = p.opdef.reference(p, _every_byte(x.dtype), *[v.const for v in p.inputs[1:]])[0]
        table = n.opdef.reference(n, np.asarray(mid, p.outputs[0].dtype),
                                  *[v.const for v in n.inputs[1:]])[0]
        t = graph.constant(np.asarray(table, n.outputs[0].dtype).reshape(-1), n.name + "_table")
        m = make_node(graph, "QTable", [x, t], {}, n.name, out=n.outputs[0])
        nodes.append(m)
        readers[x] = [m if r is p else r for r in readers.get(x, [])]
    graph.nodes = nodes
    eliminate_dead_code(graph)


def compose_tables(graph: Graph) -> Graph:
    """Chains of byte maps (_compose_chains), then every QMul/QAdd of two functions of the same byte tensor (same shape), or of one such
    function and a constant single value (GELU's + 1 and x 0.5 as onnxruntime's QOperator
    quantizer writes them: ConvNeXt-T's 36 such QAdd and QMul took 4.6 of 67 ms as AVX2 code
    on a Zen 4), as a QTable."""
    nodes = []
    for n in graph.nodes:
        if n.op not in BINARY or n.outputs[0].dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
            nodes.append(n)
            continue
        y = n.outputs[0]
        (xa, ta), (xb, tb) = _of_byte(n.inputs[0]), _of_byte(n.inputs[1])
        ca, cb = _single(n.inputs[0]), _single(n.inputs[1])
        if ca is not None and cb is None:
            xa, ta = xb, ca
        elif cb is not None and ca is None:
            xb, tb = xa, cb
        if xa is not xb or xa.dtype.itemsize != 1 or xa.shape != y.shape or \
                (ca is None and cb is None and n.inputs[0].shape != n.inputs[1].shape):
            nodes.append(n)
            continue
        grid = _every_byte(xa.dtype)
        table = n.opdef.reference(n, grid if ta is None else ta, grid if tb is None else tb)[0]
        t = graph.constant(np.asarray(table, y.dtype).reshape(-1), n.name + "_table")
        nodes.append(make_node(graph, "QTable", [xa, t], {}, n.name, out=y))
    graph.nodes = nodes
    _compose_chains(graph)
    return graph

"""Gemm with transB=1 on a B computed at run time: B transposed by a Transpose node and the
Gemm reading it row-major, the layout the register-blocked kernel (codegen/kernels/gemm/
vector.py) reads a run-time B in. A constant B is packed at compile time whatever transB says;
a run-time one with transB took the generic scalar kernel: (64 x 1024) x (1024 x 1024)^T 196
ms against onnxruntime's 1.38 (Zen 4, AVX2 code). The Transpose reads and writes B once (the
register-tile transpose, tensor/movement.py), against the product's M passes over it.

The backend's choice where time comes first (kernels/catalog.late_rewrites): the transposed
copy is B's size in activations."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.passes.util import make_node


def transpose_runtime_b(graph: Graph, in_place=lambda node: False) -> Graph:
    """in_place(node): the backend reads this Gemm's B transposed as it is (few rows of A:
    codegen/kernels/gemm/dot.py), so it gets no Transpose."""
    nodes = []
    for n in graph.nodes:
        b = n.input(1) if n.op == "Gemm" else None
        if b is not None and n.attrs.get("transB") and not b.is_const and \
                np.dtype(b.dtype) == np.float32 and not in_place(n):
            t = make_node(graph, "Transpose", [b], {"perm": [1, 0]}, n.name + "_b_rows")
            nodes.append(t)
            n.inputs = [n.inputs[0], t.outputs[0]] + n.inputs[2:]
            n.attrs = dict(n.attrs, transB=0)
        nodes.append(n)
    graph.nodes = nodes
    return graph

"""A float MatMul of a matrix by one column (B of shape [..., K, 1] or [K]) or a few, as the
product of those columns, read as rows, by the matrix transposed: y = A b is y^T = b^T A^T.
With one column, b^T and y^T lie in memory exactly as b and y do, so only the matrix changes
layout; a few columns (2N <= the target's lanes) are transposed on the way in and out, where
time comes first (those copies are activation bytes).

The register-blocked kernel (codegen/kernels/gemm/vector.py) puts B's columns on the vector
lanes: a single column fills one lane of eight (AVX2) or sixteen, every multiply-add does one
useful product. Swapped, A's M rows lie on the lanes and every lane works.
- A constant A (torch.matmul(W, x), batched decay or mixing matrices, a state-space
  model's W @ h) is transposed at compile time: the product reads the column as its row
  and A^T as a packed constant B, batched or not.
- A 2-D A computed at run time becomes Gemm(b^T, A, transB=1): the dot-product kernel
  (gemm/dot.py) reads A's rows in place, one row of output.
- A batched run-time A is left alone (no kernel takes a batched transB), and so is a
  run-time A by several columns.

AVX2 code (-mcpu znver3) against onnxruntime's AVX2 kernels on the Zen 5 of
docs/performance.md (forty-eighth session), best of 3 alternating rounds (`benchmarks/ab.py`):
a constant [256, 64, 64] by [256, 64, 1] 181 -> 48
us (onnxruntime 64), a constant 1024 x 1024 by 1024 x 1 289 -> 45 us (onnxruntime 47), a
run-time 1024 x 1024 by 1024 x 1 230 -> 43 us (onnxruntime 51); a constant 1024 x 1024 by
1024 x 4 253 -> 86 us (onnxruntime 229), 512 x 2048 by 2048 x 3 206 -> 62 (222). A stack of
four RWKV blocks in their parallel form (a [256, 64, 64] decay matrix by exp(k) and exp(k) v
per block): 1.02 -> 0.69 of onnxruntime's time.

The fused epilogue stays on the product, its operands with their last two dims swapped: for
one column a view (they broadcast to [..., M, 1]), for a few a constant transposed at compile
time (a run-time operand keeps such a node as it is). Runs after the pipeline, on vector
targets (kernels/catalog.late_rewrites): for one column also where memory comes first, since
it adds no activation bytes."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.passes.util import make_node


def _columns(n: Node, width: int, transposes: bool) -> int:
    """How many columns the float32 MatMul's B has (1 for a 1-D B) where the product is
    swapped, else 0."""
    if n.op != "MatMul" or any(np.dtype(x.dtype) != np.float32 for x in n.inputs + n.outputs):
        return 0
    a, b = n.inputs[0], n.inputs[1]
    if len(a.shape) < 2:
        return 0
    cols = 1 if len(b.shape) == 1 else b.shape[-1]
    if cols == 1:
        return 1 if a.is_const or (len(a.shape) == 2 and len(b.shape) <= 2) else 0
    few = transposes and a.is_const and 2 * cols <= width and cols < a.shape[-2]
    return cols if few and all(x.is_const for x in n.inputs[epilogue.base_count(n):]) else 0


def _reshape(graph: Graph, v: Value, shape, name: str, out: Value | None = None) -> Node:
    """A Reshape of v to `shape` (a view), into `out` if given."""
    return make_node(graph, "Reshape", [v, graph.constant(np.array(shape, np.int64), name + "_shape")],
                     {}, name, out=out)


def _swapped(graph: Graph, v: Value, rank: int, name: str, pre: list) -> Value:
    """An operand broadcasting to a product of `rank` dims, with its last two dims swapped:
    a transposed constant, or a run-time value of last dim 1 as a view."""
    if len(v.shape) < 2 and rank < 2:
        return v
    shape = (1,) * max(0, 2 - len(v.shape)) + v.shape
    if v.is_const:
        return graph.constant(np.ascontiguousarray(np.swapaxes(v.const.reshape(shape), -1, -2)), name)
    if shape[-2] == 1:
        return v
    assert shape[-1] == 1, (v, rank)
    pre.append(r := _reshape(graph, v, shape[:-2] + (1, shape[-2]), name))
    return r.outputs[0]


def _turn(graph: Graph, v: Value, name: str, out: Value | None = None) -> Node:
    """A Transpose of v's last two dims (into `out` if given)."""
    perm = list(range(len(v.shape) - 2)) + [len(v.shape) - 1, len(v.shape) - 2]
    return make_node(graph, "Transpose", [v], {"perm": perm}, name, out=out)


def swap_columns(graph: Graph, width: int, transposes: bool) -> Graph:
    """width: the target's float lanes; transposes: a few columns may be transposed (time
    comes first)."""
    nodes, transposed = [], {}
    for n in graph.nodes:
        cols = _columns(n, width, transposes)
        if not cols:
            nodes.append(n)
            continue
        a, b, y = n.inputs[0], n.inputs[1], n.outputs[0]
        base, pre = epilogue.base_count(n), []
        if len(b.shape) == 1:
            row, extra = b, n.inputs[base:]
        else:
            extra = [_swapped(graph, x, len(y.shape), n.name + "_arg", pre) for x in n.inputs[base:]]
            if cols > 1:
                pre.append(t := _turn(graph, b, n.name + "_rows"))
                row = t.outputs[0]
            else:
                row = _swapped(graph, b, len(b.shape), n.name + "_row", pre)
        m = a.shape[-2]
        if a.is_const:
            if id(a) not in transposed:  # one copy for every product of the same matrix
                transposed[id(a)] = graph.constant(
                    np.ascontiguousarray(np.swapaxes(a.const, -1, -2)), n.name + "_t")
            ins, attrs = [row, transposed[id(a)]], {k: v for k, v in n.attrs.items() if k.startswith("_")}
            shape = y.shape if len(b.shape) == 1 else y.shape[:-2] + (cols, m)
            prod = Node("MatMul", n.name, ins + extra, [], attrs)
        else:  # a 2-D run-time A by one column: one row of dot products (gemm/dot.py)
            if len(b.shape) == 1:
                pre.append(r := _reshape(graph, b, (1, b.shape[0]), n.name + "_row"))
                row = r.outputs[0]
            attrs = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1, "broadcast": 0}
            ins, shape = [row, a], (1, m)
            if epilogue.steps(n):  # its operands now follow Gemm's three base inputs
                ins.append(None)
                attrs["_base_inputs"] = 3
                attrs["_epilogue"] = [dict(s, args=tuple(x if x is None else x + 1 for x in s["args"]))
                                      for s in epilogue.steps(n)]
            prod = Node("Gemm", n.name, ins + extra, [], attrs)
        v = y if shape == y.shape else Value(graph.unique_name(n.name + "_rows"), np.float32, shape)
        prod.outputs = [v]
        v.producer = prod
        nodes += pre + [prod]
        if v is y:
            continue
        if cols > 1:
            nodes.append(_turn(graph, v, n.name + "_cols", out=y))
        else:
            nodes.append(_reshape(graph, v, y.shape, n.name + "_cols", out=y))
    graph.nodes = nodes
    return graph

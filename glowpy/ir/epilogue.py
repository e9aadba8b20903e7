"""Fused epilogues: elementwise ops applied to a node's result before it is stored.

A node that hosts an epilogue (Conv, Gemm, MatMul or an elementwise op) computes its own op on its
first `_base_inputs` inputs, then applies the steps of `attrs["_epilogue"]` in order, element by
element, to that result. A step is a dict
    {"op": elementwise op name, "attrs": its attributes, "args": (arg, ...)}
where an arg is None for the running value or an int naming an input of the host node (the
extra operands follow the base inputs; they broadcast to the host's output shape without
changing it). Clip keeps its bounds as the attribute `_bounds` = (lo or None, hi or None).

This module is the single definition of that form: the fusion passes build it with `fuse`, the
graph evaluator and constant folding run it with `reference`, lowering and the kernels read it
with `steps` / `base_count`."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops.elementwise import BINARY, UNARY, VARIADIC

# ops whose per-element code is codegen.kernels.elementwise.scalar (what an epilogue runs)
SCALAR_OPS = {"Relu", "LeakyRelu", "Elu", "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "Tanh",
              "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Erf", "Add", "Sub", "Mul", "Div", "Pow",
              "PRelu", "Sum", "Max", "Min", "Mean", "Clip"}
ELEMENTWISE = frozenset(op for op in SCALAR_OPS
                        if op in UNARY or op in BINARY or op in VARIADIC or op == "Clip")
MATRIX_HOSTS = frozenset({"Conv", "Gemm", "MatMul"})
# At most this many steps in one node's epilogue. LLVM's time on one function grows faster than
# its size: a 2,000-node elementwise chain fused into a single kernel spent 7.6 s in LLVM, cut
# into kernels of 32 steps (each result one store and one load apart) it spends SEE_COMMIT.
MAX_STEPS = 32
HOSTS = MATRIX_HOSTS | ELEMENTWISE


def steps(node: Node) -> list:
    return node.attrs.get("_epilogue") or []


def base_count(node: Node) -> int:
    """How many of the node's inputs belong to its own op (the rest are epilogue operands)."""
    return node.attrs.get("_base_inputs", len(node.inputs))


def base_inputs(node: Node) -> list:
    return node.inputs[:base_count(node)]


def label(node: Node) -> str:
    """`Conv+Add+Relu`: the host op and its fused steps (graph dumps, instruction names)."""
    return "+".join([node.op] + [s["op"] for s in steps(node)])


def _clip_bounds(node: Node):
    lo, hi = node.opdef.bounds(node)
    return (None if lo is None else float(lo), None if hi is None else float(hi))


def can_host(node: Node) -> bool:
    if node.op not in HOSTS or len(node.outputs) != 1 or node.outputs[0].dtype != np.float32:
        return False
    if node.op == "Clip":  # its bounds must be constants (they become immediates)
        return all(v is None or v.is_const for v in node.inputs[1:])
    return True


def can_fuse(graph: Graph, producer: Node, consumer: Node, users: dict) -> bool:
    """Can `consumer` (elementwise, reading producer's only output) become a step of producer?"""
    v = producer.outputs[0]
    if not can_host(producer) or consumer.op not in ELEMENTWISE or len(consumer.outputs) != 1:
        return False
    if v in graph.outputs or not users.get(v) or any(u is not consumer for u in users[v]):
        return False
    if len(steps(producer)) + 1 + len(steps(consumer)) > MAX_STEPS:
        return False
    out = consumer.outputs[0]
    if out.dtype != v.dtype or out.shape != v.shape:
        return False  # the step must not broadcast the result to a larger shape
    if consumer.op == "Clip":
        return consumer.inputs[0] is v and all(x is None or x.is_const for x in consumer.inputs[1:])
    nb = base_count(consumer)
    if any(x is v for x in consumer.inputs[nb:]):
        return False  # a later step reads v itself, which the fused node never stores
    return all(x is not None and x.dtype == v.dtype for x in consumer.inputs[:nb])


def fuse(graph: Graph, producer: Node, consumer: Node, users: dict | None = None,
         reorder: bool = True) -> Node:
    """Makes `consumer` (and its own epilogue, if it has one) the next epilogue steps of
    `producer`; the fused node takes the consumer's output Value and its place in the node
    order (so the consumer's other operands are computed before it). Callers check `can_fuse`
    first. `users` (value -> readers), when given, is kept up to date, so a pass fusing many
    nodes needs no new index per fusion; with reorder=False the node list is left alone (the
    caller drops the consumer and moves the producer to its place itself)."""
    v = producer.outputs[0]
    if "_base_inputs" not in producer.attrs:
        n_decl = len(producer.opdef.inputs)
        variadic = any(s.endswith("*") for s in producer.opdef.inputs)
        base = len(producer.inputs) if variadic else n_decl
        producer.inputs = list(producer.inputs) + [None] * (base - len(producer.inputs))
        producer.attrs["_base_inputs"] = base
    nb = producer.attrs["_base_inputs"]

    def operand(x):
        """The producer's input index holding x (added as an extra operand if new)."""
        extra = producer.inputs[nb:]
        if x in extra:
            return nb + extra.index(x)
        producer.inputs.append(x)
        return len(producer.inputs) - 1

    if consumer.op == "Clip":
        new = [{"op": "Clip", "attrs": {"_bounds": _clip_bounds(consumer)}, "args": (None,)}]
    else:
        cnb = base_count(consumer)
        attrs = {k: a for k, a in consumer.attrs.items() if k not in ("_epilogue", "_base_inputs")}
        new = [{"op": consumer.op, "attrs": attrs,
                "args": tuple(None if x is v else operand(x) for x in consumer.inputs[:cnb])}]
    for st in steps(consumer):  # the consumer's own fused steps follow, operands remapped
        new.append({"op": st["op"], "attrs": st["attrs"],
                    "args": tuple(None if a is None else operand(consumer.inputs[a])
                                  for a in st["args"])})
    producer.attrs["_epilogue"] = steps(producer) + new
    out = consumer.outputs[0]
    producer.outputs = [out]
    out.producer = producer
    if users is not None:
        users.pop(v, None)
        for x in set(consumer.inputs) - {v, None}:
            users[x] = [producer if u is consumer else u for u in users.get(x, [])]
    if reorder:
        nodes = [n for n in graph.nodes if n is not producer]
        nodes[nodes.index(consumer)] = producer
        graph.nodes = nodes
    return producer


def apply_step(step: dict, acc: np.ndarray, operands: list) -> np.ndarray:
    """One epilogue step on numpy arrays (the op's own reference)."""
    from glowpy.ir.ops import get_op
    op = step["op"]
    args = [acc if a is None else operands[a] for a in step["args"]]
    if op == "Clip":
        lo, hi = step["attrs"]["_bounds"]
        y = acc
        if lo is not None:
            y = np.maximum(y, acc.dtype.type(lo))
        if hi is not None:
            y = np.minimum(y, acc.dtype.type(hi))
        return y.astype(acc.dtype)
    ins = [Value(f"a{j}", x.dtype, x.shape) for j, x in enumerate(args)]
    tmp = Node(op, "epilogue", ins, [], dict(step["attrs"]))
    y = get_op(op).reference(tmp, *args)[0]
    return np.broadcast_to(y, acc.shape).astype(acc.dtype)


def reference(node: Node, *arrays) -> list[np.ndarray]:
    """The node's outputs computed with the op references, epilogue included."""
    nb = base_count(node)
    if not steps(node) and nb == len(node.inputs):
        return node.opdef.reference(node, *arrays)
    base = list(arrays[:nb])
    while base and base[-1] is None and len(base) > _required(node):
        base.pop()
    y = node.opdef.reference(node, *base)[0]
    y = np.asarray(y).astype(node.outputs[0].dtype if node.outputs else y.dtype).reshape(
        node.outputs[0].shape if node.outputs else y.shape)
    for st in steps(node):
        y = apply_step(st, y, list(arrays))
    return [y]


def _required(node: Node) -> int:
    return sum(1 for s in node.opdef.inputs if not s.endswith(("?", "*")))

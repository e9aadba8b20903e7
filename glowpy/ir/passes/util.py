"""Small graph-rewriting helpers shared by the passes.

Rule every pass keeps: a graph output Value is never replaced or removed (its name is a
placeholder's name in the bundle); rewrites move it to a new producer instead."""
from __future__ import annotations

from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops import get_op


def users(graph: Graph) -> dict:
    """Value -> [consumer nodes] (a node listed once per input slot it reads the value in)."""
    return graph.consumers()


def only_user(graph: Graph, v: Value, users_: dict) -> Node | None:
    """The single consumer of v when v is not a graph output, else None."""
    us = users_.get(v, [])
    if v in graph.outputs or len(us) != 1:
        return None
    return us[0]


def replace_value(graph: Graph, old: Value, new: Value) -> bool:
    """Makes every reader of `old` read `new`; refused (False) when old is a graph output."""
    if old in graph.outputs:
        return False
    for n in graph.nodes:
        if any(x is old for x in n.inputs):
            n.inputs = [new if x is old else x for x in n.inputs]
    return True


def remove(graph: Graph, *nodes: Node):
    drop = {id(n) for n in nodes}
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]


def take_output(producer: Node, consumer: Node, index: int = 0):
    """The producer now writes the consumer's output Value (the consumer is being removed)."""
    out = consumer.outputs[0]
    producer.outputs[index] = out
    out.producer = producer


def make_node(graph: Graph, op: str, inputs: list, attrs: dict, name: str,
              out: Value | None = None, out_name: str = "") -> Node:
    """A new node (named after `name`, not yet in the node list) writing `out`, which must have
    the type the op infers, or a new Value named after `out_name` (default: the node's name)."""
    opdef = get_op(op)
    n = Node(op, graph.unique_name(name), list(inputs), [], opdef.complete_attrs(attrs, name))
    (dt, shape), = opdef.infer_node(n)
    if out is None:
        out = Value(graph.unique_name(out_name or n.name + "_out"), dt, shape)
    assert (out.dtype, out.shape) == (dt, shape), (op, out, dt, shape)
    out.producer = n
    n.outputs = [out]
    return n


def insert_node(graph: Graph, op: str, inputs: list, attrs: dict, name: str, at: int,
                out: Value | None = None, out_name: str = "") -> Value:
    """make_node, inserted at position `at` of the node list; returns its output."""
    n = make_node(graph, op, inputs, attrs, name, out, out_name)
    graph.nodes.insert(at, n)
    return n.outputs[0]

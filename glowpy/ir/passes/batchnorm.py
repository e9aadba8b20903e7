"""BatchNormalization (inference) becomes a per-channel Mul and Add with constants computed in
float64, so later passes can fold it into the producing Conv/Gemm or fuse it into one loop."""
from glowpy.ir.graph import Graph, Node, Value


def lower_batchnorm(graph: Graph) -> Graph:
    nodes = []
    for n in graph.nodes:
        if n.op != "BatchNormalization":
            nodes.append(n)
            continue
        x, y = n.inputs[0], n.outputs[0]
        mul, add = n.opdef.affine(n)
        shape = (-1,) + (1,) * max(len(x.shape) - 2, 0)
        m = graph.constant(mul.astype(x.dtype).reshape(shape), f"{n.name}_scale")
        a = graph.constant(add.astype(x.dtype).reshape(shape), f"{n.name}_shift")
        t = Value(graph.unique_name(f"{n.name}_scaled"), x.dtype, x.shape)
        n1 = Node("Mul", f"{n.name}_mul", [x, m], [t], {})
        n2 = Node("Add", f"{n.name}_add", [t, a], [y], {})
        t.producer, y.producer = n1, n2
        nodes += [n1, n2]
    graph.nodes = nodes
    return graph

"""A convolution whose weights are far larger than the cache, as a chain of convolutions over
chunks of its input channels, each adding onto the previous one's result.

A register-tiled convolution reads the weights of a block of output channels once per tile of
output pixels. When one block's weights (block x C x taps) outgrow L2, every tile streams them
from L3 or memory again: FCN-ResNet50's head, 3x3 2048 -> 512 on 28x28 (38 MB of weights,
1.2 MB a 16-channel block), ran at 53 GFLOP/s, 1.75x onnxruntime's time (`python
benchmarks/op_probe.py --probes fcn_head_2048x28`). Cut into chunks of input channels, each
chunk's block weights stay in L2 across the tiles; the chunks' partial sums meet in the output,
which the next chunk's Conv adds onto in place (its first epilogue step is the Add of the
previous partial result, which dies there: lowering's "accumulate"). The last chunk carries
the bias and the original epilogue. The channel slices of the input are views (contiguous for
batch 1), so the only extra traffic is the output read and written once per chunk.

Runs after the pipeline, on fused nodes; how many channels a chunk gets is the backend's
decision (kernels/catalog.late_rewrites, from the target's cache sizes)."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.util import make_node


def _split(graph: Graph, n: Node, chunk: int) -> list[Node]:
    x, w = n.inputs[0], n.inputs[1]
    c = x.shape[1]
    bias = n.input(2) if epilogue.base_count(n) > 2 else None
    extras = n.inputs[epilogue.base_count(n):]
    attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
    bounds = list(range(0, c, chunk)) + [c]
    nodes, prev = [], None
    for i, (c0, c1) in enumerate(zip(bounds, bounds[1:])):
        last = i == len(bounds) - 2
        part = make_node(graph, "Slice", [x] + [graph.constant(np.array([v], np.int64),
                                                               f"{n.name}_c{i}_{what}")
                                                for v, what in ((c0, "start"), (c1, "end"),
                                                                (1, "axis"))],
                         {}, f"{n.name}_c{i}_in")
        wc = graph.constant(np.ascontiguousarray(w.const[:, c0:c1]), f"{n.name}_c{i}_w")
        node = make_node(graph, "Conv", [part.outputs[0], wc, bias if last else None], attrs,
                         f"{n.name}_c{i}", n.outputs[0] if last else None)
        steps, more = [], extras if last else []
        if prev is not None:  # the running sum: the previous chunk's result, added first
            more = more + [prev]
            steps.append({"op": "Add", "attrs": {}, "args": (None, 3 + len(more) - 1)})
        if last:
            steps += epilogue.steps(n)
        if steps:  # epilogue operands follow the three base inputs (epilogue.py)
            node.inputs += more
            node.attrs |= {"_base_inputs": 3, "_epilogue": steps}
        nodes += [part, node]
        prev = node.outputs[0]
    return nodes


def split_reduction(graph: Graph, chunk_of) -> Graph:
    """Every float, ungrouped Conv with constant weights for which `chunk_of(node)` gives a
    channel count smaller than its input's becomes a chain over chunks of that many input
    channels."""
    nodes = []
    for n in graph.nodes:
        chunk = None
        if n.op == "Conv" and n.inputs[1].is_const and n.attrs.get("group", 1) == 1 and \
                n.inputs[0].dtype == np.float32 and n.inputs[0].shape[0] == 1:
            chunk = chunk_of(n)
        if chunk is None or chunk >= n.inputs[0].shape[1]:
            nodes.append(n)
            continue
        nodes += _split(graph, n, chunk)
    graph.nodes = nodes
    return graph

"""Multiply-accumulates of a node's op as defined (a Winograd kernel does fewer): the work
figure the profile, the report and patch-based execution's overhead limit share; and those an
instruction's kernel executes (`executed_macs`: the memory report's and the instrumentation's
"executed_macs"), which benchmarks count against the FMA peak."""
from __future__ import annotations

import numpy as np

CONVS = {"Conv": 1, "ConvInteger": 1, "QConv": 1, "FusedConv": 1, "QLinearConv": 3}
MATMULS = {"MatMul", "MatMulInteger", "QLinearMatMul", "QMatMul", "Gemm", "FusedGemm",
           "FusedMatMul"}


def node_macs(node, out_shape=None) -> int:
    """MACs of `node` (out_shape: its first output's shape if not the node's own)."""
    if node is None or not node.outputs:
        return 0
    out = int(np.prod(node.outputs[0].shape if out_shape is None else out_shape, dtype=np.int64))
    x = [v for v in node.inputs if v is not None]
    if node.op in CONVS and len(x) > CONVS[node.op]:
        return out * int(np.prod(x[CONVS[node.op]].shape[1:], dtype=np.int64))
    if node.op == "ConvTranspose" and len(x) > 1:
        return int(np.prod(x[0].shape, dtype=np.int64)) * int(np.prod(x[1].shape[1:]))
    if node.op in MATMULS and x and x[0].shape:
        a = x[0].shape
        return out * int(a[0] if node.op == "Gemm" and node.attrs.get("transA") else a[-1])
    return 0


def executed_macs(ins) -> int:
    """Multiply-accumulates instruction `ins`'s kernel performs: a Winograd convolution's own
    count, recorded by its rewrite (alpha^2 per tile and channel pair; the transforms' adds
    not counted), else the op's as defined (node_macs)."""
    wino = ins.attrs.get("winograd")
    if isinstance(wino, dict) and "macs" in wino:
        return int(wino["macs"])
    if ins.node is None or not ins.outputs:
        return 0
    return node_macs(ins.node, ins.outputs[0].shape)

"""Multiply-accumulates of a node's op as defined (a Winograd kernel does fewer): the work
figure the profile, the report and patch-based execution's overhead limit share."""
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

"""Patch embeddings as matrix products: a float Conv whose kernel equals its stride (no padding,
no dilation, one group: ViT's, MLP-Mixer's and Swin's 16x16 / 4x4 patchify stems) reads every
input pixel exactly once, so its im2col is a permutation. It becomes Reshape -> Transpose ->
Reshape (the patches as rows of C*kh*kw), a MatMul by the constant W^T (the register-blocked
Gemm kernel over K = C*kh*kw), the bias Add and a Transpose back to NCHW. The window-op
kernels vectorize over output pixels or channels with a 3-channel input spread over a large
kernel. On an AVX2 Zen 3: benchmarks/zoo vit_tiny's 3->192 16x16 stem 3.1 -> 1.85 M cycles
(the MatMul 1.70, the two Transposes 0.15; onnxruntime's Conv 2.39); single Convs on
1x3x224x224 against onnxruntime, 16x16 to 256 channels 1.29 -> 0.82, to 192 1.52 -> 0.92,
4x4 to 96 1.58 -> 1.25; 2x2 on 96x56x56 to 192 level (1.09 -> 1.08)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.passes.recurrent import _rebind


def patchify(graph: Graph) -> Graph:
    kept = graph.nodes
    nodes = []
    for n in kept:
        graph.nodes = []  # graph.add appends the replacement here
        if _patch_conv(n):
            _lower(graph, n)
            nodes += graph.nodes
        else:
            nodes.append(n)
    graph.nodes = nodes
    return graph


def _patch_conv(n) -> bool:
    if n.op != "Conv" or n.attrs["group"] != 1 or n.inputs[1].const is None:
        return False
    x, w, y = n.inputs[0], n.inputs[1], n.outputs[0]
    if any(v is not None and v.dtype != np.float32 for v in (x, w, y, n.input(2))):
        return False
    if len(x.shape) != 4 or (n.input(2) is not None and n.input(2).const is None):
        return False
    win = n.opdef.window(n)
    return (list(win.kernel) == list(win.strides) and np.prod(win.kernel) > 1 and
            not any(win.pads_begin) and not any(win.pads_end) and
            all(d == 1 for d in win.dilations) and
            all(s % k == 0 for s, k in zip(win.in_size, win.kernel)))


def _lower(graph: Graph, n):
    (bn, c, h, wd), w = n.inputs[0].shape, n.inputs[1].const
    m, _, kh, kw = w.shape
    oh, ow = h // kh, wd // kw

    def add(op, ins, **attrs):
        return graph.add(op, ins, attrs, name=f"{n.name}_{op.lower()}")[0]

    def shape(*dims):
        return graph.constant(np.asarray(dims, np.int64), f"{n.name}_shape")

    x = add("Reshape", [n.inputs[0], shape(bn, c, oh, kh, ow, kw)])
    x = add("Transpose", [x], perm=[0, 2, 4, 1, 3, 5])
    x = add("Reshape", [x, shape(bn, oh * ow, c * kh * kw)])
    wt = graph.constant(np.ascontiguousarray(w.reshape(m, -1).T), f"{n.name}_wT")
    y = add("MatMul", [x, wt])
    if n.input(2) is not None:
        y = add("Add", [y, n.input(2)])
    y = add("Transpose", [y], perm=[0, 2, 1])
    _rebind(add("Reshape", [y, shape(bn, m, oh, ow)]), n.outputs[0])

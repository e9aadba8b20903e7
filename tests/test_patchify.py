"""The patchify pass: float Convs whose kernel equals their stride (no padding, no dilation, one
group, the input divisible into patches) become a permutation and a MatMul; the others stay
Convs. Bundles compiled through the real path at every runnable vector level and compared
with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from glowpy.frontend.onnx import load_onnx
from glowpy.ir.passes.pipeline import optimize
from util import check_against_onnxruntime, make_graph_model
from vector_levels import RUNNABLE

TOL = dict(rtol=1e-4, atol=1e-5)


def conv_model(n, c, m, hw, kernel, strides=None, bias=True, relu=False, **attrs):
    rng = np.random.default_rng(5)
    inits = {"w": (rng.standard_normal((m, c // attrs.get("group", 1), *kernel)) * 0.2)
             .astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["y" if not relu else "c"], kernel_shape=list(kernel),
                              strides=list(strides or kernel), **attrs)]
    if relu:  # an activation after the product (fused into the MatMul's epilogue)
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    feeds = {"x": rng.standard_normal((n, c, *hw)).astype(np.float32)}
    return make_graph_model(nodes, feeds, ["y"], inits, opset=17), feeds


def ops_after_optimize(m, tmp_path) -> set:
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    return {n.op for n in optimize(load_onnx(path)).nodes}


CASES = [  # (model arguments, becomes a MatMul)
    (dict(n=1, c=3, m=24, hw=(32, 32), kernel=(8, 8)), True),  # ViT-style stem
    (dict(n=2, c=3, m=10, hw=(12, 16), kernel=(4, 4), bias=False, relu=True), True),
    (dict(n=1, c=5, m=7, hw=(6, 9), kernel=(2, 3)), True),  # rectangular, odd counts
    (dict(n=1, c=4, m=9, hw=(8, 8), kernel=(2, 2), auto_pad="VALID"), True),
    # stay Convs: overlapping windows, padding, dilation, groups, a remainder row
    (dict(n=1, c=3, m=8, hw=(16, 16), kernel=(4, 4), strides=(2, 2)), False),
    (dict(n=1, c=3, m=8, hw=(16, 16), kernel=(4, 4), pads=[1, 1, 1, 1]), False),
    (dict(n=1, c=4, m=8, hw=(16, 16), kernel=(2, 2), group=2), False),
    (dict(n=1, c=3, m=8, hw=(18, 16), kernel=(4, 4)), False),
    (dict(n=1, c=3, m=8, hw=(16, 16), kernel=(1, 1)), False),  # an ordinary pointwise Conv
]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[str(c[0]) for c in CASES])
def test_patch_convs_become_matmuls_and_match_onnxruntime(i, tmp_path):
    kw, patched = CASES[i]
    m, feeds = conv_model(**kw)
    ops = ops_after_optimize(m, tmp_path)
    assert ("Conv" not in ops and "MatMul" in ops) == patched, ops
    check_against_onnxruntime(m, feeds, tmp_path, **TOL, **RUNNABLE[i % len(RUNNABLE)].options)

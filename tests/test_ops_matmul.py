"""Gemm and MatMul against onnxruntime and glowpy's numpy references.

Gemm: alpha, beta, transA, transB, every C broadcast form ([N], [1, N], [M, 1], [M, N], [1],
scalar) and no C, B constant or at run time. MatMul: 2-D, batched, numpy broadcasting of the
batch dims, 1-D operands on either or both sides.
Tolerance rtol 1e-4 / atol 1e-5 (float32 dot products of up to 40 terms, another order)."""
import numpy as np
import pytest

from util import GraphBuilder, check_op

RNG = np.random.default_rng(13)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(trans_a, trans_b, tmp_path):
    m, k, n = 3, 5, 4
    a = rand(k, m) if trans_a else rand(m, k)
    bshape = (n, k) if trans_b else (k, n)
    g = GraphBuilder(a=a, b=rand(*bshape))
    t = {"transA": trans_a, "transB": trans_b}
    g.node("Gemm", ["a", rand(*bshape), rand(n)], **t)  # constant B, bias row
    g.node("Gemm", ["a", "b", rand(1, n)], alpha=0.5, beta=2.0, **t)
    g.node("Gemm", ["a", "b", rand(m, 1)], alpha=-1.5, **t)
    g.node("Gemm", ["a", "b", rand(m, n)], beta=0.25, **t)
    g.node("Gemm", ["a", "b", rand(1)], **t)
    g.node("Gemm", ["a", "b", np.float32(3.0)], beta=-1.0, **t)
    g.node("Gemm", ["a", "b"], alpha=2.0, **t)  # no C (opset 11+)
    g.node("Gemm", ["a", "b", rand(n)], beta=0.0, **t)
    check_op(g.model(13), g.feeds, tmp_path)


def test_gemm_runtime_c_and_opset7(tmp_path):
    """C as a graph input; Gemm-7 (C required, broadcast implied)."""
    g = GraphBuilder(a=rand(6, 8), b=rand(8, 5), c=rand(6, 5), cv=rand(5))
    g.node("Gemm", ["a", "b", "c"], alpha=0.75, beta=1.25)
    g.node("Gemm", ["a", "b", "cv"])
    check_op(g.model(13), g.feeds, tmp_path / "c")
    g7 = GraphBuilder(a=rand(6, 8))
    g7.node("Gemm", ["a", rand(5, 8), rand(5)], transB=1)
    g7.node("Gemm", ["a", rand(8, 5), rand(6, 5)], alpha=2.0, beta=0.5)
    check_op(g7.model(7), g7.feeds, tmp_path / "opset7")


MATMUL = [
    ((3, 4), (4, 5)),
    ((1, 40), (40, 7)),
    ((2, 3, 4), (2, 4, 5)),  # batched
    ((2, 3, 4), (4, 5)),  # batch broadcast of B
    ((3, 4), (2, 4, 5)),  # batch broadcast of A
    ((2, 1, 3, 4), (5, 4, 6)),  # both broadcast
    ((4,), (4, 5)),  # 1-D A
    ((3, 4), (4,)),  # 1-D B
    ((4,), (4,)),  # dot product -> scalar
    ((4,), (2, 4, 5)),  # 1-D A against a batch
    ((2, 3, 4), (4,)),  # batch against 1-D B
    ((1, 1, 3, 4), (1, 4, 1)),
]


def test_matmul(tmp_path):
    feeds = {}
    for i, (sa, sb) in enumerate(MATMUL):
        feeds[f"a{i}"], feeds[f"b{i}"] = rand(*sa), rand(*sb)
    g = GraphBuilder(**feeds)
    for i in range(len(MATMUL)):
        g.node("MatMul", [f"a{i}", f"b{i}"])
    g.node("MatMul", ["a0", rand(4, 6)])  # constant B
    g.node("MatMul", [rand(2, 3), "a0"])  # constant A
    check_op(g.model(13), g.feeds, tmp_path)

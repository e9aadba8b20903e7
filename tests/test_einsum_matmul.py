"""Pass einsum_as_matmul (glowpy/ir/passes/einsum.py): two-operand float Einsums become
Transpose/Reshape + MatMul, and other float equations are split into those first (labels
summed within one operand by ReduceSum, one operand as ReduceSum + Transpose, three or more
contracted pairwise), checked against onnxruntime through the whole compiler, with the memory
report naming the kernels that ran: no Einsum kernel where the pass applies, the Einsum
kernel where it does not (repeated labels, an ellipsis, broadcasting, integers)."""
import json

import numpy as np
import pytest

from util import check_against_onnxruntime, make_model

RNG = np.random.default_rng(29)

REWRITTEN = [  # (equation, input shapes, constant second operand)
    ("bhqd,hdk->bhqk", [(2, 3, 5, 4), (3, 4, 6)], True),  # batch h, first-operand labels b, q
    ("bhqd,bhkd->bhqk", [(1, 2, 7, 8), (1, 2, 9, 8)], False),  # attention scores
    ("bhqk,bhkd->bhqd", [(1, 2, 7, 9), (1, 2, 9, 8)], False),  # attention output
    ("bnd,dh->bnh", [(2, 5, 6), (6, 7)], True),  # a Linear's weights
    ("ij,jk->ki", [(4, 5), (5, 3)], False),  # the result transposed
    ("bi,bi->b", [(3, 8), (3, 8)], False),  # a batched dot product
    ("i,j->ij", [(3,), (4,)], False),  # an outer product (nothing contracted)
    ("nchw,oc->nohw", [(1, 3, 4, 5), (6, 3)], True),  # a 1x1 convolution
]


def _kernels(report) -> list[str]:
    return [i["kernel"] for i in json.loads(report.read_text())["instructions"]]


@pytest.mark.parametrize("eq,shapes,const", REWRITTEN, ids=[e for e, _, _ in REWRITTEN])
def test_rewritten(eq, shapes, const, tmp_path):
    a, b = (RNG.standard_normal(s).astype(np.float32) for s in shapes)
    m = make_model("Einsum", {"a": a} if const else {"a": a, "b": b},
                   attrs={"equation": eq}, initializers={"b": b} if const else None, opset=12)
    report = tmp_path / "m.json"
    check_against_onnxruntime(m, {"a": a} if const else {"a": a, "b": b}, tmp_path,
                              rtol=1e-5, atol=1e-5, dump_memory_report=str(report))
    kernels = _kernels(report)
    assert "Einsum" not in kernels and "MatMul" in kernels, kernels


SPLIT = [  # (equation, input shapes, the kernels expected)
    # k summed within the second; the matrix by that vector as one row of dot products
    # (glowpy/ir/passes/matvec.py, on every vector target)
    ("ij,jk->i", [(3, 4), (4, 5)], ["ReduceSum", "Gemm"]),
    ("bij->bj", [(2, 6, 5)], ["ReduceSum"]),
    ("bij->jb", [(2, 6, 5)], ["ReduceSum", "Transpose"]),
    ("ijk->kij", [(2, 3, 4)], ["Transpose"]),
    ("ij->ij", [(3, 4)], ["Copy"]),
    ("ij,jk,kl->il", [(4, 6), (6, 5), (5, 3)], ["MatMul", "MatMul"]),
    ("bi,bj,bk->bijk", [(2, 3), (2, 4), (2, 5)], None),  # outer products, b kept throughout
    ("abc,cd,bde->ae", [(2, 3, 4), (4, 5), (3, 5, 6)], None),  # b waits for the third
]


@pytest.mark.parametrize("eq,shapes,expected", SPLIT, ids=[e for e, _, _ in SPLIT])
def test_split(eq, shapes, expected, tmp_path):
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    report = tmp_path / "m.json"
    check_against_onnxruntime(make_model("Einsum", feeds, attrs={"equation": eq}, opset=12), feeds,
                              tmp_path, rtol=1e-5, atol=1e-5, dump_memory_report=str(report))
    kernels = _kernels(report)
    assert "Einsum" not in kernels, kernels
    if expected is not None:
        assert kernels == expected, kernels


KEPT = [
    ("ii->i", [(4, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (1, 4, 5)]),  # b broadcast
]


@pytest.mark.parametrize("eq,shapes", KEPT, ids=[e for e, _ in KEPT])
def test_left_to_the_kernel(eq, shapes, tmp_path):
    feeds = {f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    report = tmp_path / "m.json"
    check_against_onnxruntime(make_model("Einsum", feeds, attrs={"equation": eq}, opset=12), feeds,
                              tmp_path, rtol=1e-5, atol=1e-5, dump_memory_report=str(report))
    assert "Einsum" in _kernels(report)


def test_integers_left_to_the_kernel(tmp_path):
    feeds = {"a": RNG.integers(-5, 5, (3, 4)).astype(np.int32),
             "b": RNG.integers(-5, 5, (4, 2)).astype(np.int32)}
    report = tmp_path / "m.json"
    check_against_onnxruntime(make_model("Einsum", feeds, attrs={"equation": "ij,jk->ik"}, opset=12),
                              feeds, tmp_path, dump_memory_report=str(report))
    assert "Einsum" in _kernels(report)

"""Products of a matrix by one column or a few (glowpy/ir/passes/matvec.py, run from
kernels/catalog.late_rewrites on vector targets): compiled for each runnable x86 level, the
graph they compile to read from -dump-graph-DAG (the product's own shape tells whether it was
swapped), run and compared with onnxruntime, fused epilogues with per-row operands included."""
import re

import numpy as np
import pytest

import glowpy
import vector_levels
from util import GraphBuilder, check_against_onnxruntime

RNG = np.random.default_rng(17)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def products(model, tmp_path, **options) -> list[tuple[str, tuple]]:
    """(op, output shape) of every node the graph compiles to, in order (Reshapes included; a
    host's fused steps follow its op: MatMul+Add+Relu)."""
    import onnx
    tmp_path.mkdir()
    onnx.save(model, tmp_path / "m.onnx")
    dot = tmp_path / "g.dot"
    glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"), dump_graph_dag=str(dot), **options)
    return [(op, tuple(int(d) for d in shape.split(", ") if d))
            for op, shape in re.findall(r'label="\{([\w+]+)\|[^"]*float32\[([\d, ]*)\]\}"', dot.read_text())]


def const_batched():
    """torch.matmul(W, x) with a batched constant W, a run-time per-row bias and a Relu."""
    g = GraphBuilder(x=f32(4, 40, 1), r=f32(4, 24, 1))
    y = g.node("MatMul", [f32(4, 24, 40), "x"], output=False)
    g.node("Relu", [g.node("Add", [y, "r"], output=False)])
    return g


def const_vector():
    """W @ v with a 1-D v and a constant bias."""
    g = GraphBuilder(v=f32(70))
    g.node("Add", [g.node("MatMul", [f32(50, 70), "v"], output=False), f32(50)])
    return g


def runtime_column():
    """A run-time matrix by a column, scaled per row."""
    g = GraphBuilder(a=f32(30, 45), x=f32(45, 1))
    g.node("Mul", [g.node("MatMul", ["a", "x"], output=False), f32(30, 1)])
    return g


def runtime_vector():
    g = GraphBuilder(a=f32(30, 45), v=f32(45))
    g.node("MatMul", ["a", "v"])
    return g


def few_columns():
    """A constant matrix by three columns, a per-row constant bias."""
    g = GraphBuilder(x=f32(48, 3))
    g.node("Add", [g.node("MatMul", [f32(64, 48), "x"], output=False), f32(64, 1)])
    return g


def runtime_batched():
    """A batched run-time A: no kernel takes it transposed, it stays."""
    g = GraphBuilder(a=f32(2, 8, 16), x=f32(2, 16, 1))
    g.node("MatMul", ["a", "x"])
    return g


def shared_matrix():
    """One constant matrix by two columns: the transposed copy is made once."""
    w = f32(32, 20)
    g = GraphBuilder(x=f32(20, 1), z=f32(20, 1))
    g.node("MatMul", [w, "x"])
    g.node("MatMul", [w, "z"])
    return g


def expected(case, lanes):
    """The products each case compiles to at a level of `lanes` float lanes."""
    few = [("Transpose", (3, 48)), ("MatMul+Add", (3, 64)), ("Transpose", (64, 3))] \
        if 2 * 3 <= lanes else [("MatMul+Add", (64, 3))]
    return {
        "const_batched": [("Reshape", (4, 1, 24)), ("Reshape", (4, 1, 40)),
                          ("MatMul+Add+Relu", (4, 1, 24)),
                          ("Reshape", (4, 24, 1))],
        "const_vector": [("MatMul+Add", (50,))],
        "runtime_column": [("Reshape", (1, 45)), ("Gemm+Mul", (1, 30)), ("Reshape", (30, 1))],
        "runtime_vector": [("Reshape", (1, 45)), ("Gemm", (1, 30)), ("Reshape", (30,))],
        "few_columns": few,
        "runtime_batched": [("MatMul", (2, 8, 1))],
        "shared_matrix": [("Reshape", (1, 20)), ("MatMul", (1, 32)), ("Reshape", (32, 1))] * 2,
    }[case]


CASES = [const_batched, const_vector, runtime_column, runtime_vector, few_columns,
         runtime_batched, shared_matrix]


@pytest.mark.parametrize("level", vector_levels.RUNNABLE, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_swapped_products_match_onnxruntime(case, level, tmp_path):
    g = case()
    model = g.model(opset=13)
    assert products(model, tmp_path / "dag", **level.options) == expected(case.__name__, level.lanes)
    check_against_onnxruntime(model, g.feeds, tmp_path / "run", rtol=1e-4, atol=1e-4, **level.options)


def test_one_transposed_copy(tmp_path):
    """Two products of one matrix read one transposed constant (W^T, 20 x 32), and W itself
    is gone from the graph."""
    products(shared_matrix().model(opset=13), tmp_path / "dag", **vector_levels.RUNNABLE[0].options)
    dot = (tmp_path / "dag" / "g.dot").read_text()
    assert re.findall(r"constant \w+\|float32\[([\d, ]*)\]", dot) == ["20, 32"]
    assert len(re.findall(r"v\d+ -> n\d+", dot)) == 8  # x, z, W^T twice, 4 shape vectors


def test_memory_first_keeps_few_columns(tmp_path):
    """-activation-memory=min: no transposed copies of a few columns, but one column is
    still read as a row (a view); scalar microcontroller code keeps every product."""
    g = few_columns()
    assert products(g.model(opset=13), tmp_path / "min", activation_memory="min",
                    **vector_levels.RUNNABLE[-1].options) == [("MatMul+Add", (64, 3))]
    g = const_batched()
    assert products(g.model(opset=13), tmp_path / "min1", activation_memory="min",
                    **vector_levels.RUNNABLE[-1].options) == expected("const_batched", 16)
    assert products(g.model(opset=13), tmp_path / "m7", target="arm", mcpu="cortex-m7",
                    float_abi="hard") == [("MatMul+Add+Relu", (4, 24, 1))]

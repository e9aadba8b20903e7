"""Unit tests of the graph passes on hand-built graphs (no LLVM): each checks the structure the
pass leaves AND the numbers, by running the graph before and after with the op references
(glowpy.ir.evaluate)."""
import numpy as np
import pytest

from glowpy.ir import epilogue
from glowpy.ir.evaluate import evaluate
from glowpy.ir.graph import Graph
from glowpy.ir.ops import has_op
from glowpy.ir.passes.batchnorm import lower_batchnorm
from glowpy.ir.passes.cse import eliminate_common_subexpressions
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.fold import fold_constants
from glowpy.ir.passes.fold_affine import fold_affine
from glowpy.ir.passes.fold_batchnorm import fold_batchnorm
from glowpy.ir.passes.fuse_activation import fuse_activations
from glowpy.ir.passes.fuse_elementwise import fuse_elementwise
from glowpy.ir.passes.merge_pad import merge_pad
from glowpy.ir.passes.pipeline import PIPELINE, optimize
from glowpy.ir.passes.transpose import simplify_transposes
from glowpy.ir.passes.views import simplify_views

RNG = np.random.default_rng(7)
F = np.float32


def rand(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(F)


def const(g, array, name="c"):
    return g.constant(np.asarray(array, F) if np.asarray(array).dtype.kind == "f" else array, name)


def conv(g, x, cout, k=3, pads=1, group=1, bias=True, name="conv"):
    cin = x.shape[1]
    w = const(g, rand(cout, cin // group, k, k), f"{name}_w")
    ins = [x, w] + ([const(g, rand(cout), f"{name}_b")] if bias else [])
    return g.add("Conv", ins, {"pads": [pads] * 4, "group": group}, name=name)[0]


def check(g, pass_fn, feeds, rtol=1e-5, atol=1e-6):
    """Runs pass_fn on g; asserts the outputs are unchanged (same names, values within float
    reassociation); returns the graph."""
    before = evaluate(g, feeds)
    names = [v.name for v in g.outputs]
    g = pass_fn(g)
    g = eliminate_dead_code(g)
    after = evaluate(g, feeds)
    assert [v.name for v in g.outputs] == names
    for a, b in zip(before, after):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return g


def ops(g):
    return [epilogue.label(n) for n in g.nodes]


# -- constant folding, DCE, CSE ---------------------------------------------------------------

def test_fold_constants_uses_reference_and_keeps_output_names():
    g = Graph()
    g.fold = False  # build unfolded, as other rewrites leave it
    x = g.add_input("x", F, (2, 3))
    c = g.add("Add", [const(g, rand(2, 3)), const(g, rand(2, 3))], name="cadd")[0]
    d = g.add("Relu", [c], name="crelu", out_names=["folded_out"])[0]
    y = g.add("Mul", [x, d], name="mul")[0]
    g.outputs = [y, d]
    g = check(g, fold_constants, {"x": rand(2, 3)})
    assert ops(g) == ["Mul"]
    assert g.outputs[1].is_const and g.outputs[1].name == "folded_out"
    np.testing.assert_array_equal(g.outputs[1].const, np.maximum(
        g.nodes[0].inputs[1].const, 0))


def test_dead_code_removed():
    g = Graph()
    x = g.add_input("x", F, (4,))
    y = g.add("Relu", [x])[0]
    g.add("Exp", [x])  # nobody reads it
    g.outputs = [y]
    g = check(g, eliminate_dead_code, {"x": rand(4)})
    assert ops(g) == ["Relu"]


def test_cse_merges_nodes_and_identical_constants():
    g = Graph()
    x = g.add_input("x", F, (2, 4))
    a = rand(4)
    y1 = g.add("Add", [x, const(g, a, "a1")])[0]
    y2 = g.add("Add", [x, const(g, a.copy(), "a2")])[0]  # same bytes, another initializer
    z = g.add("Mul", [y1, y2])[0]
    r1, r2 = g.add("Relu", [z])[0], g.add("Relu", [z])[0]
    w = g.add("Sub", [r1, r2])[0]
    g.outputs = [w]
    g = check(g, eliminate_common_subexpressions, {"x": rand(2, 4)})
    assert ops(g) == ["Add", "Mul", "Relu", "Sub"]
    sub = g.nodes[-1]
    assert sub.inputs[0] is sub.inputs[1]


def test_cse_keeps_duplicate_that_is_a_graph_output():
    g = Graph()
    x = g.add_input("x", F, (3,))
    y1 = g.add("Relu", [x], out_names=["y1"])[0]
    y2 = g.add("Relu", [x], out_names=["y2"])[0]
    g.outputs = [y1, y2]
    g = check(g, eliminate_common_subexpressions, {"x": rand(3)})
    assert [v.name for v in g.outputs] == ["y1", "y2"] and len(g.nodes) == 2


# -- BatchNormalization and affine folding ----------------------------------------------------

def bn(g, x, name="bn"):
    c = x.shape[1]
    ins = [x, const(g, rand(c, lo=0.5, hi=2)), const(g, rand(c)), const(g, rand(c)),
           const(g, rand(c, lo=0.1, hi=2))]
    return g.add("BatchNormalization", ins, {"epsilon": 1e-3}, name=name)[0]


def test_batchnorm_folds_into_conv():
    g = Graph()
    x = g.add_input("x", F, (1, 3, 6, 6))
    y = bn(g, conv(g, x, 4))
    g.outputs = [y]
    g = check(g, fold_batchnorm, {"x": rand(1, 3, 6, 6)}, rtol=1e-5, atol=1e-5)
    assert ops(g) == ["Conv"]


def test_batchnorm_folds_into_gemm_and_matmul():
    g = Graph()
    x = g.add_input("x", F, (2, 5))
    a = bn(g, g.add("Gemm", [x, const(g, rand(6, 5)), const(g, rand(6))], {"transB": 1,
                                                                           "alpha": 0.5})[0], "bn1")
    b = bn(g, g.add("MatMul", [a, const(g, rand(6, 3))])[0], "bn2")
    g.outputs = [b]
    g = check(g, fold_batchnorm, {"x": rand(2, 5)}, rtol=1e-5, atol=1e-5)
    assert ops(g) == ["Gemm", "Gemm"]  # the MatMul took a bias, so it became a Gemm


def test_batchnorm_not_folded_when_producer_has_other_readers():
    g = Graph()
    x = g.add_input("x", F, (1, 3, 4, 4))
    c = conv(g, x, 3)
    y = g.add("Add", [bn(g, c), c])[0]
    g.outputs = [y]
    g = check(g, lambda g: lower_batchnorm(fold_batchnorm(g)), {"x": rand(1, 3, 4, 4)})
    assert ops(g) == ["Conv", "Mul", "Add", "Add"]


def test_affine_constants_fold_into_conv():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 5, 5))
    c = conv(g, x, 3, bias=False)
    c = g.add("Mul", [c, const(g, rand(3, 1, 1))])[0]
    c = g.add("Add", [const(g, rand(1, 3, 1, 1)), c])[0]
    c = g.add("Sub", [c, const(g, np.float32(0.25))])[0]
    c = g.add("Div", [c, const(g, rand(3, 1, 1, lo=1, hi=2))])[0]
    g.outputs = [c]
    g = check(g, fold_affine, {"x": rand(1, 2, 5, 5)}, rtol=1e-5, atol=1e-5)
    assert ops(g) == ["Conv"]


def test_affine_not_folded_when_inexact_or_not_per_channel():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 4, 4))
    c = g.add("Mul", [conv(g, x, 3), const(g, rand(1, 1, 4, 4))])[0]  # varies over space
    d = g.add("Sub", [const(g, rand(3, 1, 1)), conv(g, x, 3, name="c2")])[0]  # c - y
    e = g.add("Div", [conv(g, x, 3, name="c3"), const(g, np.zeros((3, 1, 1), F))])[0]
    g.outputs = [c, d, e]
    g = check(g, fold_affine, {"x": rand(1, 2, 4, 4)})
    assert sorted(ops(g)) == sorted(["Conv", "Mul", "Conv", "Sub", "Conv", "Div"])


def test_matmul_plus_bias_becomes_gemm():
    g = Graph()
    x = g.add_input("x", F, (3, 4))
    y = g.add("Add", [g.add("MatMul", [x, const(g, rand(4, 5))])[0], const(g, rand(5))])[0]
    g.outputs = [y]
    g = check(g, fold_affine, {"x": rand(3, 4)}, rtol=1e-5, atol=1e-5)
    assert ops(g) == ["Gemm"]


# -- fusion -----------------------------------------------------------------------------------

@pytest.mark.parametrize("act,attrs,extra", [
    ("Relu", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("Sigmoid", {}, []),
    ("HardSwish", {}, []), ("Tanh", {}, []), ("Clip", {}, [0.0, 6.0])])
def test_activation_fuses_into_conv_gemm_and_elementwise(act, attrs, extra):
    g = Graph()
    x = g.add_input("x", F, (1, 2, 5, 5))
    bounds = [const(g, np.float32(v)) for v in extra]
    a = g.add(act, [conv(g, x, 3, pads=0)] + bounds, attrs)[0]  # 1x3x3x3
    f = g.add("Flatten", [a], {"axis": 1})[0]
    m = g.add(act, [g.add("Gemm", [f, const(g, rand(27, 4))])[0]] + bounds, attrs)[0]
    e = g.add(act, [g.add("Add", [m, const(g, rand(4, lo=0, hi=8))])[0]] + bounds, attrs)[0]
    g.outputs = [e]
    g = check(g, fuse_activations, {"x": rand(1, 2, 5, 5, lo=-6, hi=6)})
    assert ops(g) == [f"Conv+{act}", "Flatten", f"Gemm+{act}", f"Add+{act}"]


def test_activation_not_fused_when_result_has_other_readers():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 4, 4))
    c = conv(g, x, 2)
    y = g.add("Add", [g.add("Relu", [c])[0], c])[0]
    g.outputs = [y, c]
    g = check(g, fuse_activations, {"x": rand(1, 2, 4, 4)})
    assert "Conv+Relu" not in ops(g)


def test_activation_moves_above_a_reshape_to_fuse():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 4, 4))
    r = g.add("Reshape", [conv(g, x, 1), g.constant(np.array([1, 16, 1]), "s")])[0]
    y = g.add("Sigmoid", [r], out_names=["score"])[0]
    g.outputs = [y]
    g = check(g, fuse_activations, {"x": rand(1, 2, 4, 4)})
    assert ops(g) == ["Conv+Sigmoid", "Reshape"]
    assert g.outputs[0].name == "score" and g.outputs[0].shape == (1, 16, 1)


def test_elementwise_chain_fuses_into_one_loop():
    g = Graph()
    x = g.add_input("x", F, (2, 3, 4))
    z = g.add_input("z", F, (3, 1))
    t = g.add("Mul", [x, const(g, rand(4))])[0]
    t = g.add("Add", [z, t])[0]  # runtime operand, broadcast
    t = g.add("Relu", [t])[0]
    t = g.add("Max", [t, const(g, np.float32(0.1)), x])[0]
    t = g.add("Sub", [const(g, np.float32(1.0)), t])[0]  # running value as second operand
    g.outputs = [t]
    g = check(g, lambda g: fuse_elementwise(fuse_activations(g)),
              {"x": rand(2, 3, 4), "z": rand(3, 1)})
    assert ops(g) == ["Mul+Add+Relu+Max+Sub"]
    assert len(epilogue.steps(g.nodes[0])) == 4


def test_residual_add_fuses_into_conv_and_broadcasting_consumers_do_not():
    g = Graph()
    x = g.add_input("x", F, (1, 3, 5, 5))
    a = g.add("Relu", [conv(g, x, 3, name="c1")])[0]
    b = conv(g, a, 3, name="c2")
    y = g.add("Relu", [g.add("Add", [a, b])[0]])[0]  # ResNet block
    big = g.add("Add", [g.add("Neg", [y])[0], g.add_input("w", F, (2, 3, 5, 5))])[0]  # grows
    g.outputs = [big]
    g = check(g, lambda g: fuse_elementwise(fuse_activations(g)),
              {"x": rand(1, 3, 5, 5), "w": rand(2, 3, 5, 5)})
    assert ops(g) == ["Conv+Relu", "Conv+Add+Relu+Neg", "Add"]


# -- Pad, transposes, views -------------------------------------------------------------------

needs_pad = pytest.mark.skipif(not has_op("Pad"), reason="no Pad op registered")


def pad(g, x, pads, value=0.0):
    return g.add("Pad", [x, g.constant(np.asarray(pads, np.int64), "pads"),
                         const(g, np.float32(value))])[0]


@needs_pad
def test_pad_merges_into_conv_and_pools():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 6, 6))
    c = conv(g, pad(g, x, [0, 0, 1, 2, 0, 0, 2, 1]), 2, pads=0)
    m = g.add("MaxPool", [pad(g, c, [0, 0, 1, 1, 0, 0, 1, 1], -np.inf)], {"kernel_shape": [3, 3]})[0]
    a = g.add("AveragePool", [pad(g, m, [0, 0, 1, 1, 0, 0, 0, 0])], {"kernel_shape": [2, 2]})[0]
    g.outputs = [a]
    g = check(g, merge_pad, {"x": rand(1, 2, 6, 6)})
    assert ops(g) == ["Conv", "MaxPool", "AveragePool"]
    assert g.nodes[0].attrs["pads"] == [1, 2, 2, 1] and g.nodes[2].attrs["count_include_pad"] == 1


@needs_pad
def test_pad_not_merged_when_it_would_change_results():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 6, 6))
    a = conv(g, pad(g, x, [0, 0, 1, 1, 0, 0, 1, 1], 1.0), 2, pads=0)  # non-zero fill
    b = g.add("MaxPool", [pad(g, x, [0, 0, 1, 1, 0, 0, 1, 1])], {"kernel_shape": [3, 3]})[0]
    c = conv(g, pad(g, x, [0, 1, 0, 0, 0, 0, 0, 0]), 2, pads=0, name="cc")  # pads channels
    g.outputs = [a, b, c]
    g = check(g, merge_pad, {"x": rand(1, 2, 6, 6, lo=-2, hi=-1)})
    assert ops(g).count("Pad") == 3


def test_transpose_pairs_cancel_compose_and_unit_moves_become_views():
    g = Graph()
    x = g.add_input("x", F, (2, 3, 4))
    t = g.add("Transpose", [x], {"perm": [1, 2, 0]})[0]
    u = g.add("Transpose", [t], {"perm": [2, 0, 1]})[0]  # back to x
    v = g.add("Transpose", [g.add("Transpose", [u], {"perm": [0, 2, 1]})[0]], {"perm": [1, 0, 2]})[0]
    w = g.add("Transpose", [g.add_input("z", F, (1, 5, 1, 1))], {"perm": [0, 2, 3, 1]})[0]
    c = g.add("Transpose", [g.add("Relu", [x])[0]], {"perm": [2, 1, 0]})[0]
    g.outputs = [g.add("Neg", [u])[0], v, w, c]
    g = check(g, simplify_transposes, {"x": rand(2, 3, 4), "z": rand(1, 5, 1, 1)})
    assert ops(g) == ["Transpose", "Reshape", "Relu", "Transpose", "Neg"]
    assert g.nodes[4].inputs[0].name == "x"  # the pair cancelled
    assert g.nodes[0].inputs[0].name == "x" and g.nodes[0].attrs["perm"] == [2, 0, 1]


def test_transpose_of_constant_folds():
    g = Graph()
    g.fold = False
    x = g.add_input("x", F, (3, 2))
    t = g.add("Transpose", [const(g, rand(2, 3))])[0]
    g.outputs = [g.add("Add", [x, t])[0]]
    g = check(g, fold_constants, {"x": rand(3, 2)})
    assert ops(g) == ["Add"]


def test_views_collapse_and_identity_vanishes():
    g = Graph()
    x = g.add_input("x", F, (2, 3, 4))
    a = g.add("Identity", [g.add("Relu", [x])[0]])[0]
    b = g.add("Flatten", [a], {"axis": 1})[0]
    c = g.add("Unsqueeze", [b, g.constant(np.array([0]), "ax")])[0]
    d = g.add("Reshape", [c, g.constant(np.array([2, 3, 4]), "s")])[0]  # back to a's shape
    e = g.add("Dropout", [g.add("Neg", [d])[0]], out_names=["out"])[0]  # a graph output: kept
    g.outputs = [e, c]
    g = check(g, simplify_views, {"x": rand(2, 3, 4)})
    assert ops(g) == ["Relu", "Reshape", "Neg", "Reshape"]
    assert g.nodes[2].inputs[0] is g.nodes[0].outputs[0]  # Neg reads the Relu directly
    assert g.nodes[1].inputs[0] is g.nodes[0].outputs[0]  # c: one Reshape from the Relu


# -- the pipeline -----------------------------------------------------------------------------

def test_pipeline_runs_every_pass_and_keeps_results():
    g = Graph()
    x = g.add_input("x", F, (1, 3, 8, 8))
    a = g.add("Relu", [bn(g, conv(g, x, 4, bias=False))])[0]
    b = g.add("Clip", [conv(g, a, 4, group=4, name="dw"), const(g, np.float32(0)),
                       const(g, np.float32(6))])[0]
    c = g.add("Add", [b, a])[0]
    y = g.add("Transpose", [g.add("Transpose", [c], {"perm": [0, 2, 3, 1]})[0]],
              {"perm": [0, 3, 1, 2]}, out_names=["y"])[0]
    g.outputs = [y]
    g = check(g, optimize, {"x": rand(1, 3, 8, 8)}, rtol=1e-5, atol=1e-5)
    # the cancelled pair ends in the graph output, so a view (no copy) keeps its name
    assert ops(g) == ["Conv+Relu", "Conv+Clip+Add", "Reshape"]
    assert [v.name for v in g.outputs] == ["y"]
    assert len(PIPELINE) >= 10


def test_level_zero_runs_only_required_passes():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 4, 4))
    y = g.add("Relu", [bn(g, conv(g, x, 2))])[0]
    g.outputs = [y]
    g = check(g, lambda g: optimize(g, level=0), {"x": rand(1, 2, 4, 4)})
    assert ops(g) == ["Conv", "Mul", "Add", "Relu"]

"""Per-op tests of the extended op set (logical, index, layout, generate, einsum modules and the
unary/reduce additions) against onnxruntime and the ops' numpy references, for the forms and
element types the ONNX node tests do not cover (their Einsum and CumSum cases are float64)."""
import numpy as np
import pytest

import vector_levels
from util import check_against_onnxruntime, compile_and_run, make_model, memory_report, reference_of

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32, lo=-3, hi=3):
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(lo, hi, shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    return RNG.integers(lo, hi, shape).astype(dtype)


def check(model, feeds, tmp_path, **tol):
    got, expected = check_against_onnxruntime(model, feeds, tmp_path, **tol)
    for r, e in zip(reference_of(model, feeds), expected):  # the numpy reference agrees too
        np.testing.assert_allclose(r, e, rtol=1e-5, atol=1e-6)
    return got


# -- Einsum: the forms real models use (attention, bilinear, batched products) ---------------

EINSUM = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("bhqk,bhkd->bhqd", [(1, 2, 3, 5), (1, 2, 5, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),  # implicit output: the same
    ("ji", [(3, 4)]),  # implicit output: sorted labels, a transpose
    ("i,i->", [(5,), (5,)]),
    ("ii->i", [(4, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 3, 4, 2)]),
    ("bid,d->bi", [(2, 3, 4), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("nchw,oc->nohw", [(1, 3, 2, 2), (4, 3)]),
    ("ijk->", [(2, 3, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum(eq, shapes, tmp_path):
    feeds = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    check(make_model("Einsum", feeds, attrs={"equation": eq}, opset=12), feeds, tmp_path,
          rtol=1e-5, atol=1e-5)


def test_einsum_int32(tmp_path):
    feeds = {"a": rand(2, 3, dtype=np.int32), "b": rand(3, 4, dtype=np.int32)}
    check(make_model("Einsum", feeds, attrs={"equation": "ij,jk->ik"}, opset=12), feeds, tmp_path)


# -- CumSum, TopK, ArgMax/ArgMin ----------------------------------------------------------------

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum_float32(axis, reverse, exclusive, tmp_path):
    feeds = {"x": rand(3, 5)}
    m = make_model("CumSum", feeds, attrs={"exclusive": exclusive, "reverse": reverse},
                   initializers={"axis": np.array(axis, np.int64)}, opset=14)
    check(m, feeds, tmp_path, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_cumsum_int(dtype, tmp_path):
    feeds = {"x": rand(2, 3, 4, dtype=dtype, lo=-100, hi=100)}
    check(make_model("CumSum", feeds, initializers={"axis": np.array(1, np.int32)}, opset=14),
          feeds, tmp_path)


@pytest.mark.parametrize("axis,reverse,exclusive", [(1, 0, 0), (0, 1, 0), (-1, 0, 1), (0, 1, 1)])
def test_cumprod(axis, reverse, exclusive, tmp_path):
    """CumProd (opset 26) against onnxruntime and the numpy reference, with a 0 inside a row
    (the exclusive form shifts, it does not divide), and int32 too."""
    x = rand(3, 5, lo=0.5, hi=1.5)
    x[1, 2] = 0.0
    for dtype in (np.float32, np.int32):
        feeds = {"x": x.astype(dtype) if dtype == np.float32 else np.round(x * 3).astype(dtype)}
        m = make_model("CumProd", feeds, attrs={"exclusive": exclusive, "reverse": reverse},
                       initializers={"axis": np.array(axis, np.int64)}, opset=26)
        check(m, feeds, tmp_path / dtype.__name__, rtol=1e-6, atol=0)


@pytest.mark.parametrize("largest,axis,k", [(1, -1, 3), (0, 1, 2), (1, 0, 4)])
def test_topk(largest, axis, k, tmp_path):
    x = np.round(rand(4, 6, 5), 1)  # rounded: ties, which break toward the lower index
    feeds = {"x": x}
    m = make_model("TopK", feeds, outputs=2, attrs={"largest": largest, "axis": axis},
                   initializers={"k": np.array([k], np.int64)}, opset=11)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("n, k, largest", [(8400, 300, 1), (1000, 1000, 0), (257, 1, 1)])
def test_topk_heap_sizes(n, k, largest, tmp_path):
    """A detector's top 300 of 8,400 anchors, a whole row sorted (k = n: argsort), k = 1; rows
    of values rounded to give ties (the lower index first), along an inner axis."""
    x = np.round(rand(2, n, 3), 1)
    feeds = {"x": x}
    m = make_model("TopK", feeds, outputs=2, attrs={"largest": largest, "axis": 1},
                   initializers={"k": np.array([k], np.int64)}, opset=11)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_nan_after_numbers(largest, tmp_path):
    """NaN comes after every number whichever way (the reference: numpy's stable argsort),
    NaNs among themselves by index."""
    x = rand(3, 40)
    x[:, [3, 17, 18, 30]] = np.nan
    feeds = {"x": x}
    m = make_model("TopK", feeds, outputs=2, attrs={"largest": largest},
                   initializers={"k": np.array([39], np.int64)}, opset=11)
    got = compile_and_run(m, feeds, tmp_path)
    expected = reference_of(m, feeds)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert np.isnan(got[0][:, -3:]).all() and not np.isnan(got[0][:, :-3]).any()


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("largest", [0, 1])
def test_topk_rows_skip_whole_vectors(largest, level, tmp_path):
    """Along the innermost axis, float32 rows offer the heap whole vectors first and skip those
    with no lane beating its root: a detector's top 300 of 8,403 anchors (a tail after the
    vectors at every width), the top 1 of 50, rows of few values (ties: the lower index first,
    across a vector and across the skip; -0 and +0 tie), +-inf, NaNs (after every number)
    among the first K (the root a NaN, which every number beats) and after them; values and
    indices equal to the numpy reference's (float32 heaps compare 64-bit rank keys), at each
    x86 vector level."""
    for n, kk in ((8403, 300), (50, 1), (77, 60)):
        x = np.round(rand(6, n), 1)
        x[1] = RNG.integers(-2, 3, n)
        x[1, np.flatnonzero(x[1] == 0)[::2]] = -0.0  # -0 ties with +0 (the lower index first)
        x[2, [0, 1, n // 2]] = np.nan
        x[3, :] = np.nan
        x[3, [5, n - 1]] = 1.0
        x[4, [n // 3, n - 2]] = np.inf
        x[4, [7, n - 3]] = -np.inf
        x[5] = np.arange(n) * (1 if largest else -1)  # every element beats the root: no skip
        feeds = {"x": x}
        m = make_model("TopK", feeds, outputs=2, attrs={"largest": largest, "axis": -1},
                       initializers={"k": np.array([kk], np.int64)}, opset=11)
        got = compile_and_run(m, feeds, tmp_path / f"r{n}", **level.options)
        expected = reference_of(m, feeds)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[0], expected[0])


def test_topk_int_rows_of_200(tmp_path):
    feeds = {"x": rand(3, 200, dtype=np.int32, lo=-50, hi=50)}
    m = make_model("TopK", feeds, outputs=2, initializers={"k": np.array([10], np.int64)}, opset=11)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int64])
def test_arg_reduce_types(op, dtype, tmp_path):
    feeds = {"x": rand(3, 4, 5, dtype=dtype, lo=0 if dtype == np.uint8 else -5, hi=6)}
    m = make_model(op, feeds, attrs={"axis": 1, "keepdims": 0, "select_last_index": 1}, opset=13)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_rows_along_the_lanes(op, last, level, tmp_path):
    """Along the innermost axis, float32 rows of a vector or more run on the lanes
    (tensor/index.py's vector variant): rows of 21 (two vectors and a masked tail on AVX2)
    and 300 (several registers per vector), values from a few integers (ties across lanes and
    across a lane's vectors), +-inf rows; the outputs equal onnxruntime's. Rows with NaN
    (first, last, several) equal the numpy reference: NaN is the largest, as np.argmax."""
    for n in (21, 300):
        x = RNG.integers(-3, 4, (6, n)).astype(np.float32)
        x[1] = -np.inf
        x[2, n // 2] = np.inf
        feeds = {"x": x}
        m = make_model(op, feeds, attrs={"axis": -1, "keepdims": 1, "select_last_index": last},
                       opset=13)
        report = memory_report(m, tmp_path / f"plan{n}", **level.options)
        assert [i["variant"]["name"] for i in report["instructions"]] == ["vector"]
        check_against_onnxruntime(m, feeds, tmp_path / f"ort{n}", **level.options)
        x[3, [0, 5, n - 1]] = np.nan
        x[4, n - 1] = np.nan
        x[5, [n // 3, n // 2]] = np.nan
        got = compile_and_run(m, feeds, tmp_path / f"nan{n}", **level.options)
        np.testing.assert_array_equal(got[0], reference_of(m, feeds)[0])
        pick = np.argmax if op == "ArgMax" else np.argmin
        rows = x[:, ::-1] if last else x
        want = [(n - 1 - pick(r) if last else pick(r)) if not np.isnan(r).any() else
                (n - 1 - np.argmax(np.isnan(r)) if last else np.argmax(np.isnan(r))) for r in rows]
        np.testing.assert_array_equal(got[0][:, 0], want)


# -- comparisons, logic, Where ------------------------------------------------------------------

@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int32, np.int64])
def test_compare(op, dtype, tmp_path):
    a = rand(3, 4, dtype=dtype, lo=0, hi=4)
    feeds = {"a": a, "b": rand(4, dtype=dtype, lo=0, hi=4)}
    check(make_model(op, feeds, opset=16), feeds, tmp_path)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_broadcast(op, tmp_path):
    feeds = {"a": rand(2, 3, 4, dtype=np.bool_), "b": rand(3, 1, dtype=np.bool_)}
    check(make_model(op, feeds, opset=7), feeds, tmp_path)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])  # onnxruntime: no bool Where
def test_where_broadcast(dtype, tmp_path):
    feeds = {"c": rand(2, 1, 4, dtype=np.bool_), "x": rand(3, 4, dtype=dtype),
             "y": rand(2, 3, 1, dtype=dtype)}
    check(make_model("Where", feeds, opset=16), feeds, tmp_path)


# -- layout and generated tensors -------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_])
def test_tile_expand(dtype, tmp_path):
    feeds = {"x": rand(2, 1, 3, dtype=dtype)}
    check(make_model("Tile", feeds, initializers={"r": np.array([2, 3, 1], np.int64)}, opset=13),
          feeds, tmp_path / "tile")
    check(make_model("Expand", feeds, initializers={"s": np.array([4, 2, 5, 3], np.int64)},
                     opset=13), feeds, tmp_path / "expand")


@pytest.mark.parametrize("op,mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"),
                                     ("SpaceToDepth", None)])
def test_block_shuffle(op, mode, tmp_path):
    shape = (2, 8, 3, 2) if op == "DepthToSpace" else (2, 3, 4, 6)
    feeds = {"x": rand(*shape)}
    attrs = {"blocksize": 2} | ({"mode": mode} if mode else {})
    check(make_model(op, feeds, attrs=attrs, opset=13), feeds, tmp_path)


def test_range_and_constant_of_shape_fold_to_outputs(tmp_path):
    import onnx
    from onnx import helper
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"]),
             helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=helper.make_tensor("v", onnx.TensorProto.INT32, [1], [7])),
             helper.make_node("Add", ["x", "r"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(v, np.float32), n)
             for n, v in (("s", 1.0), ("l", 3.5), ("d", 0.5))]
    inits.append(onnx.numpy_helper.from_array(np.array([2, 3], np.int64), "shape"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [5])],
                          [helper.make_empty_tensor_value_info("y"),
                           helper.make_empty_tensor_value_info("c")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    got = check(m, {"x": rand(5)}, tmp_path)
    assert got[1].dtype == np.int32 and (got[1] == 7).all() and got[1].shape == (2, 3)


# -- unary and reduce additions -----------------------------------------------------------------

@pytest.mark.parametrize("op,attrs,opset", [
    ("Selu", {"alpha": 2.0, "gamma": 3.0}, 6), ("Softsign", {}, 1), ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20), ("Mish", {}, 18), ("Floor", {}, 13), ("Ceil", {}, 13),
    ("Round", {}, 11), ("Sign", {}, 13), ("Sin", {}, 7), ("Cos", {}, 7)])
def test_unary(op, attrs, opset, tmp_path):
    x = rand(4, 50, lo=-6, hi=6)
    x[0, :8] = [0.5, -0.5, 1.5, -2.5, 0.0, -0.0, 2.0, -3.0]  # ties for Round, zeros for Sign
    feeds = {"x": x}
    check(make_model(op, feeds, attrs=attrs, opset=opset), feeds, tmp_path, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_sign_int(dtype, tmp_path):
    feeds = {"x": rand(3, 7, dtype=dtype)}
    check(make_model("Sign", feeds, opset=13), feeds, tmp_path)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                                "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce(op, keepdims, tmp_path):
    lo = 0.5 if op == "ReduceLogSum" else -1.5
    feeds = {"x": rand(3, 4, 5, lo=lo, hi=1.5)}
    m = make_model(op, feeds, attrs={"keepdims": keepdims},
                   initializers={"axes": np.array([0, 2], np.int64)}, opset=18)
    check(m, feeds, tmp_path, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,dtype", [(op, t) for op in ("ReduceMin", "ReduceMax", "ReduceProd",
                                                          "ReduceSumSquare")
                                      for t in (np.int32, np.int64)]
                         + [("ReduceMin", np.uint8), ("ReduceMax", np.uint8)])
def test_reduce_int(op, dtype, tmp_path):
    feeds = {"x": rand(2, 3, 4, dtype=dtype, lo=0 if dtype == np.uint8 else -3, hi=4)}
    m = make_model(op, feeds, initializers={"axes": np.array([1], np.int64)}, opset=18)
    check(m, feeds, tmp_path)


# -- MaxPool's Indices output (every attribute of the op: storage_order, pads, strides) -------

@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 5, 6), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 0, 0, 1]}),
    ((2, 1, 5, 5), {"kernel_shape": [3, 3], "storage_order": 1, "pads": [1, 1, 1, 1]}),
    ((1, 2, 4, 3, 5), {"kernel_shape": [2, 2, 2], "strides": [2, 1, 2]}),
])
def test_maxpool_indices(shape, attrs, tmp_path):
    feeds = {"x": rand(*shape)}
    check(make_model("MaxPool", feeds, outputs=2, attrs=attrs, opset=12), feeds, tmp_path)


def test_bool_where_and_equal(tmp_path):
    """bool data through Where (onnxruntime has no bool Where: numpy is the oracle) and Equal."""
    from util import compile_and_run
    feeds = {"c": rand(3, 4, dtype=np.bool_), "x": rand(3, 4, dtype=np.bool_),
             "y": rand(4, dtype=np.bool_)}
    got = compile_and_run(make_model("Where", feeds, opset=16), feeds, tmp_path / "where")
    np.testing.assert_array_equal(got[0], np.where(feeds["c"], feeds["x"], feeds["y"]))
    assert got[0].dtype == np.bool_
    feeds = {"a": rand(3, 4, dtype=np.bool_), "b": rand(4, dtype=np.bool_)}
    check(make_model("Equal", feeds, opset=13), feeds, tmp_path / "equal")

"""QAdd and QMul on vectors (glowpy/codegen/kernels/int8/qbinary.py) at every x86 vector
level: outputs equal the general scalar kernel's (forced through the registry) and the ops'
numpy references bit for bit, and lie within 1 LSB of onnxruntime (which rounds in float).
Shapes: the same shape with a tail after the last full vector (5x17 planes), a per-channel
operand broadcast over the planes (squeeze-excitation's scale), a row broadcast along the
last axis, a scalar, and an operand broadcast over the leading axis only; uint8 and int8; an
output scale above 1 (requantized values past 32 bits before the clamp) and TFLite's rounding
(-quantization-rounding=away). A QAdd runs as one linear form (qmath.linear_add) where one
gives its reference on every operand pair, which the test checks again from the form itself,
and where none does (an output scale of 1e-8: int32 sums cannot hold the form) each operand's
rescaled value from a table of its 256 bytes, the sum requantized once."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir import qmath
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from int8_check import byte_feeds, plan, same_as_references
from test_int8 import QDQ, lsb
from util import make_graph_model, memory_report, run_onnxruntime
from vector_levels import VBMI_RUNNABLE, params

SHAPES = {"x": (2, 6, 5, 17), "y": (2, 6, 5, 17), "c": (1, 6, 1, 1), "r": (17,), "s": (),
          "l": (1, 6, 5, 17)}


def binary_model(dtype, rng):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    scale = {"x": 0.05, "y": 0.025, "c": 0.02, "r": 0.04, "s": 0.03, "l": 0.06}
    zero = {"x": lo + 120, "y": lo + 30, "c": lo + 3, "r": lo + 200, "s": lo + 90, "l": lo + 128}

    def dq(name):
        return m.dq(name, scale[name], m.zp(zero[name]))
    outs = []
    for op in ("Add", "Mul"):
        for other in ("y", "c", "r", "s", "l"):
            outs.append(m.q(m.op(op, [dq("x"), dq(other)]), 0.07 if op == "Add" else 0.1,
                            lo + 100))
    # a requantization scale above 1 (tiny output scale): values far past int32 before the
    # clamp saturates them
    outs.append(m.q(m.op("Add", [dq("x"), dq("l")]), 1e-8, lo + 5))  # no linear form
    outs.append(m.q(m.op("Mul", [dq("x"), dq("l")]), 1e-5, lo + 5))
    feeds = byte_feeds(SHAPES, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("rounding", ["even", "away"])
@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qadd_qmul_on_vectors(dtype, level, rounding, tmp_path):
    model, feeds = binary_model(dtype, np.random.default_rng(21))
    scalar = {"QAdd": ("default", {}), "QMul": ("default", {})}
    opts = dict(quantization_rounding=rounding, **level.options)
    info, got = same_as_references(model, feeds, tmp_path,
                                   [opts, dict(opts, kernel_variants=scalar)],
                                   ort_lsb=1 if rounding == "even" else None)
    instrs = plan(tmp_path)
    kinds = [(i["op"], i["variant"]["name"]) for i in instrs if i["op"] in ("QAdd", "QMul")]
    # every output is a run of a full vector or more except the scalar-only ones (none here)
    assert len(kinds) == 12 and all(v == "vector" for _, v in kinds), kinds
    forms = [i["variant"]["params"]["linear"] for i in instrs if i["op"] == "QAdd"]
    assert all(f is not None for f in forms[:-1]) and forms[-1] is None, forms
    tables = [i["variant"]["params"]["tables"] for i in instrs if i["op"] == "QAdd"]
    assert tables == [False] * 5 + [True], tables  # no form: the rescaled values by tables
    assert len(info.outputs) == 12
    last = got[info.outputs[-1]["name"]]
    info8 = np.iinfo(dtype)
    assert np.any(last == info8.max) and np.any(last == info8.min)  # the clamp did work


@pytest.mark.parametrize("rounding", ["even", "away"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_linear_forms_give_the_reference_on_every_pair(dtype, rounding, tmp_path):
    """qmath.linear_add's forms, applied as the kernel applies them (int32 products and sums,
    an arithmetic shift, the output's zero point and clamp), equal the QAdd's reference on all
    256 x 256 operand pairs, and stay within int32; the binary model's QAdds, and ten more with
    input/output scale ratios from 1/50 to 40."""
    rng = np.random.default_rng(22)
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    outs, shapes = [], {}
    for i, (sa, sb, sy) in enumerate(zip(rng.uniform(0.002, 0.2, 10), rng.uniform(0.002, 0.2, 10),
                                        rng.uniform(0.005, 0.1, 10))):
        shapes.update({f"a{i}": (4,), f"b{i}": (4,)})
        y = m.op("Add", [m.dq(f"a{i}", sa, m.zp(lo + int(rng.integers(0, 256)))),
                         m.dq(f"b{i}", sb, m.zp(lo + int(rng.integers(0, 256))))])
        outs.append(m.q(y, sy, lo + 7))
    adds = []
    for k, model in enumerate((binary_model(dtype, rng)[0],
                               make_graph_model(m.nodes, byte_feeds(shapes, dtype, rng), outs,
                                                m.inits, opset=13))):
        path = str(tmp_path / f"m{k}.onnx")
        onnx.save(model, path)
        g = load_onnx(path)
        g.quant_rounding = rounding
        adds += [n for n in optimize(g).nodes if n.op == "QAdd"]
    assert len(adds) == 16
    info = np.iinfo(dtype)
    grid = np.arange(info.min, info.max + 1)
    a, b = [v.reshape(-1) for v in np.meshgrid(grid, grid, indexing="ij")]
    found = 0
    for n in adds:
        form = qmath.linear_add(n)
        if form is None:
            continue
        found += 1
        s, ma, mb, r = form
        t = n.attrs
        da, db = a.astype(np.int64) - t["a_zp"], b.astype(np.int64) - t["b_zp"]
        x = da * ma + db * mb + r
        assert -(1 << 31) <= x.min() and x.max() < 1 << 31, n.name  # what int32 holds
        got = np.clip((x >> s) + t["y_zp"], t["lo"], t["hi"])
        want = n.opdef.reference(n, a.astype(dtype), b.astype(dtype))[0]
        np.testing.assert_array_equal(got, want, err_msg=n.name)
    assert found == 15  # all but the one whose output scale is 1e-8


def test_one_element_scale_beside_a_scalar_zero_point(tmp_path):
    """onnxruntime's quantize_static writes per-tensor pairs of a [1] scale and a [] zero
    point (its QDQ ResNet-50 and MobileNetV2): the same parameter, compiled and run; a zero
    point of two elements beside one scale stays an error naming the node."""
    from glowpy.errors import ModelError
    from onnx import numpy_helper
    rng = np.random.default_rng(22)
    m = QDQ(np.uint8)
    a = m.op("DequantizeLinear", ["x", m.c(np.array([0.05], np.float32)),
                                  m.c(np.array(120, np.uint8))])
    out = m.q(m.op("Add", [a, m.dq("y", 0.03, m.zp(7))]), 0.07, 100)
    feeds = {"x": rng.integers(0, 256, (1, 4, 9, 9)).astype(np.uint8),
             "y": rng.integers(0, 256, (1, 4, 9, 9)).astype(np.uint8)}
    model = make_graph_model(m.nodes, feeds, [out], m.inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"))
    y = Bundle(str(tmp_path / "b"), info.name).run(feeds)[info.outputs[0]["name"]]
    np.testing.assert_array_equal(y, evaluate(optimize(load_onnx(path)), feeds)[0])
    assert lsb(y, run_onnxruntime(model, feeds)[0]) <= 1
    zp = next(i for i in model.graph.initializer if numpy_helper.to_array(i).dtype == np.uint8
              and numpy_helper.to_array(i).shape == ())
    zp.CopyFrom(numpy_helper.from_array(np.array([120, 120], np.uint8), zp.name))
    onnx.save(model, path)
    with pytest.raises(ModelError, match="DequantizeLinear.*zero point shape"):
        glowpy.compile(path, str(tmp_path / "c"))


@pytest.mark.parametrize("level", params() + params(VBMI_RUNNABLE))
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_gated_activations_become_one_table(dtype, level, tmp_path):
    """SiLU (x * Sigmoid(x)), hard-swish (x * HardSigmoid(x)), x + Tanh(x), and a QAdd and a
    QMul of x and a constant single value (GELU's + 1 and x 0.5, either operand first) in
    QDQ form: one QTable each (passes/quant/tables.py), equal bit for bit to the QTable + QMul/QAdd
    they replace (the pipeline without the pass) and within 1 LSB of onnxruntime; every
    input value over 324 elements (five 64-byte vectors and a rest), the tables looked up by
    AVX512-VBMI's byte permute where the level has it, by AVX2's pshufb per high nibble where
    it has those (kernels/int8/qtable.py), one by one elsewhere."""
    from glowpy.ir.passes import pipeline
    from glowpy.ir.passes.quant.tables import compose_tables
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    outs = []
    for act, op, ys in (("Sigmoid", "Mul", 0.02), ("HardSigmoid", "Mul", 0.03),
                        ("Tanh", "Add", 0.04)):
        x = m.dq("x", 0.05, m.zp(lo + 120))
        g = m.dq(m.q(m.op(act, [x]), 1 / 256 if act != "Tanh" else 1 / 128,
                     lo if act != "Tanh" else lo + 128), 1 / 256 if act != "Tanh" else 1 / 128,
                 m.zp(lo if act != "Tanh" else lo + 128))
        outs.append(m.q(m.op(op, [m.dq("x", 0.05, m.zp(lo + 120)), g]), ys, lo + 60))
    one = m.dq(m.c(np.array(lo + 228, dtype)), 0.01, m.zp(lo + 128))
    half = m.dq(m.c(np.array([lo + 255], dtype)), 1 / 510, m.zp(lo))
    outs.append(m.q(m.op("Add", [m.dq("x", 0.05, m.zp(lo + 120)), one]), 0.06, lo + 50))
    outs.append(m.q(m.op("Mul", [half, m.dq("x", 0.05, m.zp(lo + 120))]), 0.03, lo + 128))
    feeds = {"x": (np.arange(324) % 256 + lo).astype(dtype).reshape(1, 4, 9, 9)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    plan = memory_report(model, tmp_path / "plan", **level.options)["instructions"]
    ops = [i["op"] for i in plan]
    assert ops.count("QTable") == 5 and "QMul" not in ops and "QAdd" not in ops, ops
    tables = {i["variant"]["name"] for i in plan if i["op"] == "QTable"}
    assert tables == {"permute" if level.mattr else "nibbles" if level.lanes >= 8 else
                      "default"}, tables
    info = glowpy.compile(path, str(tmp_path / "b"), **level.options)
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    apart = [p for p in pipeline.PIPELINE if p is not compose_tables]
    refs = evaluate(optimize(load_onnx(path), passes=apart), feeds)
    for p, r, e in zip(info.outputs, refs, run_onnxruntime(model, feeds)):
        y = got[p["name"]]
        np.testing.assert_array_equal(y, r, err_msg=p["name"])
        assert lsb(y, e) <= 1, p["name"]
        assert len(np.unique(y)) > 30, p["name"]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qadd_on_ties_by_tables(dtype, level, tmp_path):
    """A residual QAdd as onnxruntime's QOperator quantizer left ConvNeXt-T's: operand scales
    2:1 (the second a part in a million above half), the output's a part in a million above
    the first's, so that most sums fall on the reference's ties, each decided by the first
    rescalings' roundings: no linear form exists (qmath.linear_add) and each operand's
    rescaled value comes from its table (qbinary._by_tables). Equal to the scalar kernel and
    the references bit for bit, within 1 LSB of onnxruntime."""
    rng = np.random.default_rng(23)
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    y = m.op("Add", [m.dq("a", 0.02, m.zp(lo + 127)), m.dq("b", 0.01 * (1 + 7e-7), m.zp(lo))])
    outs = [m.q(y, 0.02 * (1 + 3.6e-7), lo)]
    feeds = byte_feeds({"a": (3, 40, 21), "b": (3, 40, 21)}, dtype, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    info, got = same_as_references(model, feeds, tmp_path, [
        level.options, dict(level.options, kernel_variants={"QAdd": "default"})])
    params_ = [i["variant"]["params"] for i in plan(tmp_path) if i["op"] == "QAdd"]
    assert len(params_) == 1 and params_[0]["linear"] is None and params_[0]["tables"], params_
    assert len(np.unique(got[info.outputs[0]["name"]])) > 100


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_split_and_slice_stay_integer(dtype, tmp_path):
    """A Split and a Slice between QDQ pairs (WaveNet's and the GLU's gates: a convolution's
    channels in two halves, tanh of one times sigmoid of the other) run on the integer values
    (patterns.Folder.fold_Split, rules.MOVES): no DequantizeLinear or QuantizeLinear is left,
    a half on its input's grid is a part of it, a half on another grid is rescaled, and that
    rescale joins the table after it (tables._compose_chains). Outputs equal the pipeline's
    without the composition bit for bit and lie within 1 LSB of onnxruntime; the halves split
    along the last axis (not contiguous) are copied."""
    from glowpy.ir.passes import pipeline
    from glowpy.ir.passes.quant.tables import compose_tables
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    xs, xz = 0.05, lo + 120
    x = m.dq("x", xs, m.zp(xz))
    a, b = "half_a", "half_b"
    m.nodes.append(onnx.helper.make_node("Split", [x, m.c(np.array([4, 4], np.int64))], [a, b],
                                         axis=1))
    ta = m.q(m.op("Tanh", [m.dq(m.q(a, xs, xz), xs, m.zp(xz))]), 1 / 128, lo + 128)
    tb = m.q(m.op("Sigmoid", [m.dq(m.q(b, 0.03, lo + 100), 0.03, m.zp(lo + 100))]), 1 / 256, lo)
    gate = m.q(m.op("Mul", [m.dq(ta, 1 / 128, m.zp(lo + 128)), m.dq(tb, 1 / 256, m.zp(lo))]),
               1 / 200, lo + 128)
    part = m.q(m.op("Slice", [m.dq("x", xs, m.zp(xz)), m.c(np.array([2], np.int64)),
                              m.c(np.array([6], np.int64)), m.c(np.array([1], np.int64))]),
               0.07, lo + 90)
    c, d = "cols_c", "cols_d"
    m.nodes.append(onnx.helper.make_node("Split", [m.dq("x", xs, m.zp(xz)),
                                                   m.c(np.array([9, 8], np.int64))], [c, d], axis=3))
    cols = [m.q(c, xs, xz), m.q(d, xs, xz)]
    rng = np.random.default_rng(5)
    feeds = {"x": rng.integers(lo, lo + 256, (1, 8, 5, 17)).astype(dtype)}
    model = make_graph_model(m.nodes, feeds, [gate, part] + cols, m.inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    plan = memory_report(model, tmp_path / "plan")["instructions"]
    ops = [i["op"] for i in plan]
    # the channel halves and the channel Slice are parts of x (no instruction); the Slice
    # onto another grid is rescaled (read by no table); the halves of the rows are copied
    assert sorted(ops) == ["QMul", "QTable", "QTable", "Requantize", "Slice", "Slice"], ops
    info = glowpy.compile(path, str(tmp_path / "b"))
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    apart = [p for p in pipeline.PIPELINE if p is not compose_tables]
    refs = evaluate(optimize(load_onnx(path), passes=apart), feeds)
    ort = run_onnxruntime(model, feeds)
    for p, r, e in zip(info.outputs, refs, ort):
        y = got[p["name"]]
        np.testing.assert_array_equal(y, r, err_msg=p["name"])
        assert lsb(y, e) <= 1, p["name"]
    np.testing.assert_array_equal(got[info.outputs[2]["name"]], feeds["x"][..., :9])
    np.testing.assert_array_equal(got[info.outputs[3]["name"]], feeds["x"][..., 9:])
    assert len(np.unique(got[info.outputs[0]["name"]])) > 30

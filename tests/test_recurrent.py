"""LSTM, GRU and RNN: bundles compiled through the real path (lower_recurrent -> Gemm of the
input projections + RecurrentCell kernel) and compared with onnxruntime, together with the
ops' numpy references (check_op), over the attribute matrix onnxruntime supports; layout 1,
which onnxruntime refuses, against onnxruntime's layout-0 run of the same weights; models
shaped like torch.onnx exports of nn.LSTM / nn.GRU; an LSTM on the Cortex-M7 under QEMU.

Each matrix case compiles for one of the x86 vector levels this host runs (cases rotate over
them; hidden sizes 5 and 9 leave masked tails at every width, batch 3 a partial row tile)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import glowpy
from glowpy.errors import ModelError
from util import check_op, compile_and_run, make_graph_model, make_model, run_onnxruntime
from vector_levels import RUNNABLE

TOL = dict(rtol=1e-4, atol=1e-4)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_model(op, seq=5, batch=3, isz=4, hid=5, direction="forward", bias=True, lens=None,
                    states=False, peep=False, outs=("Y", "Y_h", "Y_c"), layout=0, opset=14,
                    seed=0, scale=0.6, **attrs):
    """A one-node model with initializer weights (scale 0.6: gates neither saturated nor
    linear; large layers need about 1/sqrt(hidden), torch's, or the recurrence is chaotic and
    amplifies rounding differences) and its feeds. lens: constant sequence_lens; states:
    initial_h (and initial_c)."""
    ndir = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    rng = np.random.default_rng(seed)

    def f(*s):
        return (rng.standard_normal(s) * scale).astype(np.float32)

    st = (batch, ndir, hid) if layout else (ndir, batch, hid)
    inits = {"W": f(ndir, g * hid, isz), "R": f(ndir, g * hid, hid)}
    optional = [("B", bias, lambda: f(ndir, 2 * g * hid)),
                ("L", lens is not None, lambda: np.array(lens, np.int32)),
                ("H0", states, lambda: f(*st))]
    if op == "LSTM":
        optional += [("C0", states, lambda: f(*st)), ("P", peep, lambda: f(ndir, 3 * hid))]
    names = ["X", "W", "R"]
    for name, present, make in optional:
        names.append(name if present else "")
        if present:
            inits[name] = make()
    while names[-1] == "":
        names.pop()
    outs = list(outs)[:3 if op == "LSTM" else 2]
    feeds = {"X": f(*((batch, seq, isz) if layout else (seq, batch, isz))) * 2}
    attrs = dict(hidden_size=hid, direction=direction, **attrs)
    if layout:
        attrs["layout"] = 1
    model = make_model(op, feeds, outs, attrs, inits, opset=opset, input_names=names)
    kept = [o for o in model.graph.output if o.name]  # '' marks an absent optional output
    del model.graph.output[:]
    model.graph.output.extend(kept)
    return model, feeds


def _cases():
    cases = []
    for op in ("LSTM", "GRU", "RNN"):
        for d in ("forward", "reverse", "bidirectional"):
            cases += [(op, dict(direction=d)),
                      (op, dict(direction=d, states=True, peep=True, bias=True)),
                      (op, dict(direction=d, lens=[5, 2, 3], states=True)),
                      (op, dict(direction=d, clip=0.7, bias=False, peep=True, hid=9))]
    for d in ("forward", "reverse", "bidirectional"):  # GRU's two forms of the reset gate
        cases += [("GRU", dict(direction=d, linear_before_reset=1, states=True)),
                  ("GRU", dict(direction=d, linear_before_reset=1, lens=[1, 5, 0], clip=0.5))]
    cases += [
        ("LSTM", dict(input_forget=1, peep=True, states=True)),
        ("LSTM", dict(input_forget=1, direction="bidirectional", clip=0.4, lens=[4, 5, 2])),
        ("LSTM", dict(lens=[0, 3, 5], states=True, direction="bidirectional")),  # empty sequence
        ("LSTM", dict(batch=1, seq=7, hid=17, isz=9)),  # register tiles over wider gate rows
        ("LSTM", dict(batch=6, hid=8, direction="bidirectional", states=True)),
        # every activation, with and without explicit alpha/beta (onnxruntime's defaults)
        ("LSTM", dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"],
                      activation_alpha=[0.3, 0.2], activation_beta=[0.6])),
        ("LSTM", dict(activations=["Sigmoid", "Elu", "ScaledTanh", "HardSigmoid", "Tanh", "Relu"],
                      activation_alpha=[0.8, 0.9, 0.3], activation_beta=[1.1, 0.4],
                      direction="bidirectional", clip=0.9)),
        ("GRU", dict(activations=["ScaledTanh", "Elu"], activation_alpha=[0.8, 0.7],
                     activation_beta=[1.2], linear_before_reset=1)),
        ("GRU", dict(activations=["Sigmoid", "Softplus", "HardSigmoid", "Affine"],
                     activation_alpha=[0.25, 0.6], activation_beta=[0.45, -0.1],
                     direction="bidirectional")),
        ("RNN", dict(activations=["Relu", "Affine"], activation_alpha=[0.5],
                     activation_beta=[0.1], direction="bidirectional")),
        ("RNN", dict(activations=["ThresholdedRelu", "Softplus"], activation_alpha=[0.2],
                     direction="bidirectional")),
        ("RNN", dict(activations=["LeakyRelu"])),
        ("RNN", dict(activations=["Elu"], activation_alpha=[0.5], lens=[2, 5, 1])),
        ("RNN", dict(activations=["Softsign"], direction="reverse")),
        ("RNN", dict(activations=["Sigmoid"], clip=0.3)),
        ("LSTM", dict(activations=["sigmoid", "TANH", "softSign"])),  # names: any case
        ("GRU", dict(linear_before_reset=1, bias=False, direction="bidirectional")),  # no Rbh
        # optional outputs: any subset, empty names for the absent ones
        ("LSTM", dict(outs=("", "Y_h"), states=True)),
        ("LSTM", dict(outs=("Y", "", "Y_c"), direction="bidirectional")),
        ("LSTM", dict(outs=("", "", "Y_c"), lens=[3, 1, 4])),
        ("LSTM", dict(outs=("Y",), direction="reverse")),
        ("GRU", dict(outs=("", "Y_h"), direction="bidirectional")),
        ("RNN", dict(outs=("Y",), lens=[5, 5, 4])),
        # older opsets: LSTM/GRU/RNN-7 (no layout attribute)
        ("LSTM", dict(opset=7, direction="bidirectional", peep=True, states=True)),
        ("GRU", dict(opset=7, linear_before_reset=1)),
        ("RNN", dict(opset=7, direction="reverse")),
    ]
    return cases


def _case_id(op, kw):
    return op + "-" + "-".join(f"{k}={v}" if not isinstance(v, (list, tuple)) else
                               f"{k}={'.'.join(map(str, v))}" for k, v in kw.items())


CASES = _cases()


@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(*c) for c in CASES])
def test_recurrent_matches_onnxruntime(i, tmp_path):
    op, kw = CASES[i]
    model, feeds = recurrent_model(op, **kw)
    level = RUNNABLE[i % len(RUNNABLE)]
    check_op(model, feeds, tmp_path, **TOL, **level.options)


@pytest.mark.parametrize("op, kw", [
    ("LSTM", dict(direction="bidirectional", states=True, peep=True, lens=[5, 2, 4])),
    ("GRU", dict(direction="reverse", states=True, linear_before_reset=1)),
    ("GRU", dict(direction="bidirectional", lens=[3, 5, 0])),
    ("RNN", dict(direction="bidirectional", states=True)),
], ids=["LSTM", "GRU-lbr", "GRU", "RNN"])
def test_layout_1_matches_onnxruntime_on_time_major_data(op, kw, tmp_path):
    """layout=1 (batch-major X, Y, states): onnxruntime refuses it, so the bundle is compared
    with onnxruntime's layout-0 run of the same weights on the transposed data."""
    batch_major, feeds = recurrent_model(op, layout=1, **kw)
    time_major, _ = recurrent_model(op, layout=0, **kw)
    # the layout-0 model's initial states are the layout-1 ones transposed
    inits = {t.name: numpy_helper.to_array(t) for t in batch_major.graph.initializer}
    for t in time_major.graph.initializer:
        if t.name in ("H0", "C0"):
            t.CopyFrom(numpy_helper.from_array(inits[t.name].transpose(1, 0, 2), t.name))
    want = run_onnxruntime(time_major, {"X": feeds["X"].transpose(1, 0, 2)})
    got = compile_and_run(batch_major, feeds, tmp_path, **RUNNABLE[0].options)
    perms = [(2, 0, 1, 3), (1, 0, 2), (1, 0, 2)]
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w.transpose(perms[k]), **TOL, err_msg=f"output {k}")


def test_unoptimized_build_lowers_the_recurrent_ops(tmp_path):
    """-O0 runs only the passes lowering needs; lower_recurrent is one of them."""
    model, feeds = recurrent_model("LSTM", direction="bidirectional", states=True, lens=[5, 3, 1])
    check_op(model, feeds, tmp_path, **TOL, opt_level=0, **RUNNABLE[0].options)


def test_unread_y_is_not_planned(tmp_path):
    """Only Y_h read: the cell keeps its state and writes no sequence, so the activations hold
    the projections (seq x batch x 4H floats) and not also the seq x batch x H of Y."""
    seq, batch, hid = 50, 3, 5
    model, feeds = recurrent_model("LSTM", seq=seq, batch=batch, hid=hid, outs=("", "Y_h"))
    got, _ = check_op(model, feeds, tmp_path, **TOL, **RUNNABLE[0].options)
    with open(os.path.join(str(tmp_path), "bundle", "model.json")) as f:
        activations = json.load(f)["memory"]["activations"]
    proj, y = seq * batch * 4 * hid * 4, seq * batch * hid * 4
    assert proj <= activations < proj + y, (activations, proj, y)


def test_opset_1_output_sequence_is_accepted(tmp_path):
    """LSTM-1's output_sequence only said whether Y may be omitted: the opset-1 model computes
    what onnxruntime computes for the same node at opset 14."""
    old, feeds = recurrent_model("LSTM", opset=1, output_sequence=1, states=True)
    new, _ = recurrent_model("LSTM", opset=14, states=True)
    got = compile_and_run(old, feeds, tmp_path, **RUNNABLE[0].options)
    for g, w in zip(got, run_onnxruntime(new, feeds)):
        np.testing.assert_allclose(g, w, **TOL)


@pytest.mark.parametrize("change, message", [
    (dict(activations=["Sigmoid", "Swish", "Tanh"]), "activation 'Swish' is not supported"),
    (dict(activations=["Sigmoid", "Tanh"]), "has 2 activations; expected 3"),
    (dict(lens=[6, 1, 1]), "sequence_lens [6, 1, 1] must be 3 lengths in [0, 5]"),
    (dict(direction="sideways"), "direction 'sideways' is not forward"),
    (dict(hidden_size=4), "W 'W' has shape [1, 20, 4]; expected [1, 16, 4]"),
])
def test_bad_attributes_are_one_line_model_errors(change, message, tmp_path):
    kw = dict(change)
    hid = kw.pop("hidden_size", None)
    model, _ = recurrent_model("LSTM", **kw)
    if hid is not None:
        for a in model.graph.node[0].attribute:
            if a.name == "hidden_size":
                a.i = hid
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelError) as e:
        glowpy.compile(path, str(tmp_path / "b"))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_run_time_sequence_lens_is_refused(tmp_path):
    model, _ = recurrent_model("GRU")
    node = model.graph.node[0]
    node.input.append("lens")  # after X, W, R, B
    model.graph.input.append(helper.make_tensor_value_info("lens", onnx.TensorProto.INT32, [3]))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelError, match="sequence_lens.*must be known at compile time"):
        glowpy.compile(path, str(tmp_path / "b"))


# ---------------------------------------------------------------------------------------------
# models shaped like torch.onnx's exports (torch is not installed: the same graphs by hand)


def _w(rng, *shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def torch_lstm_model(seq=12, batch=2, isz=10, hid=16, layers=2):
    """nn.LSTM(isz, hid, num_layers=2, bidirectional=True) exported with (h0, c0) inputs: each
    layer slices its states, its Y [seq, 2, batch, H] goes through Transpose(0, 2, 1, 3) and
    Reshape(0, 0, -1) into the next layer, h_n/c_n concatenate the layers' Y_h/Y_c."""
    rng = np.random.default_rng(7)
    nodes, inits = [], {}
    x = "input"
    for l in range(layers):
        i = isz if l == 0 else 2 * hid
        inits.update({f"W{l}": _w(rng, 2, 4 * hid, i), f"R{l}": _w(rng, 2, 4 * hid, hid),
                      f"B{l}": _w(rng, 2, 8 * hid), f"s{l}": np.array([2 * l], np.int64),
                      f"e{l}": np.array([2 * l + 2], np.int64)})
        for s in ("h", "c"):
            nodes.append(helper.make_node("Slice", [f"{s}0", f"s{l}", f"e{l}", "axis0"],
                                          [f"{s}0_{l}"]))
        nodes.append(helper.make_node(
            "LSTM", [x, f"W{l}", f"R{l}", f"B{l}", "", f"h0_{l}", f"c0_{l}"],
            [f"Y{l}", f"Yh{l}", f"Yc{l}"], hidden_size=hid, direction="bidirectional"))
        nodes.append(helper.make_node("Transpose", [f"Y{l}"], [f"T{l}"], perm=[0, 2, 1, 3]))
        x = "output" if l == layers - 1 else f"X{l + 1}"
        nodes.append(helper.make_node("Reshape", [f"T{l}", "shape"], [x]))
    inits.update({"axis0": np.array([0], np.int64), "shape": np.array([0, 0, -1], np.int64)})
    nodes += [helper.make_node("Concat", [f"Yh{l}" for l in range(layers)], ["hn"], axis=0),
              helper.make_node("Concat", [f"Yc{l}" for l in range(layers)], ["cn"], axis=0)]
    feeds = {"input": _w(rng, seq, batch, isz) * 3, "h0": _w(rng, 2 * layers, batch, hid),
             "c0": _w(rng, 2 * layers, batch, hid)}
    return make_graph_model(nodes, feeds, ["output", "hn", "cn"], inits, opset=14), feeds


def torch_gru_model(seq=9, batch=3, isz=6, hid=12):
    """nn.GRU(isz, hid, batch_first=True) exported without initial state: Transpose to time
    major, GRU with linear_before_reset=1 (torch's form), Squeeze of the direction axis,
    Transpose back to batch major."""
    rng = np.random.default_rng(8)
    inits = {"W": _w(rng, 1, 3 * hid, isz), "R": _w(rng, 1, 3 * hid, hid),
             "B": _w(rng, 1, 6 * hid), "axis1": np.array([1], np.int64)}
    nodes = [helper.make_node("Transpose", ["input"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["xt", "W", "R", "B"], ["Y", "hn"], hidden_size=hid,
                              linear_before_reset=1),
             helper.make_node("Squeeze", ["Y", "axis1"], ["Ys"]),
             helper.make_node("Transpose", ["Ys"], ["output"], perm=[1, 0, 2])]
    feeds = {"input": _w(rng, batch, seq, isz) * 3}
    return make_graph_model(nodes, feeds, ["output", "hn"], inits, opset=14), feeds


@pytest.mark.parametrize("build", [torch_lstm_model, torch_gru_model], ids=["lstm", "gru"])
def test_torch_shaped_exports_match_onnxruntime(build, tmp_path):
    model, feeds = build()
    level = RUNNABLE[-1]
    check_op(model, feeds, tmp_path, **TOL, **level.options)


@pytest.mark.parametrize("abi", ["hard", "soft"])
def test_lstm_on_cortex_m7_matches_onnxruntime(abi, tmp_path):
    """A bidirectional LSTM with peepholes, initial states and sequence lengths, compiled for
    the Cortex-M7 (scalar register tiles; soft float: library calls) and run under QEMU."""
    from test_cross import check_bare_metal_object
    from test_int8 import run_on_board
    model, feeds = recurrent_model("LSTM", seq=6, batch=2, isz=5, hid=7, direction="bidirectional",
                                   states=True, peep=True, lens=[6, 3], clip=2.0)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), target="arm", mcpu="cortex-m7",
                          float_abi=abi)
    check_bare_metal_object(info.files[".o"], abi == "soft")  # no libm: mathfn's sigmoid/tanh
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds, float_abi=abi)
    for p, got, want in zip(info.outputs, run["outputs"], run_onnxruntime(model, feeds)):
        np.testing.assert_allclose(got.reshape(want.shape), want, **TOL, err_msg=p["name"])


def test_gru_on_aarch64_matches_onnxruntime(tmp_path):
    """A bidirectional GRU (both reset forms, NEON register tiles) as a static AArch64 Linux
    executable (examples/bundles/aarch64) under qemu-aarch64."""
    from test_cross import run_on_aarch64
    model, feeds = recurrent_model("GRU", seq=6, batch=3, isz=5, hid=9, direction="bidirectional",
                                   states=True, lens=[6, 2, 5])
    info, outputs = run_on_aarch64(model, feeds, str(tmp_path))
    assert len(outputs) == len(info.outputs)
    for p, got, want in zip(info.outputs, outputs, run_onnxruntime(model, feeds)):
        np.testing.assert_allclose(got.reshape(want.shape), want, **TOL, err_msg=p["name"])

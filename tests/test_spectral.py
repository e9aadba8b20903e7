"""DFT, STFT and MelWeightMatrix (glowpy/ir/ops/spectral.py) through the whole compiler against
numpy.fft and onnxruntime (tolerances relative to the output's largest value: 1e-5 for short
DFTs; STFT's 400-point frames 2e-6 from float64's numpy, 2e-4 from onnxruntime, whose FFT is
itself 3e-5 to 1e-4 away): real and complex inputs, the transformed axis anywhere but the
last, dft_length truncating and zero-padding, onesided, inverse and the real inverse of a
one-sided spectrum (DFT-17's axis attribute and DFT-20's axis input), STFT with a constant
window (a Conv1d), a run-time window (gathered frames) and none, and a log-mel front end as
torchaudio exports it. Transforms too long for their matrix are refused with one error line."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import refused
from util import compile_and_run, make_graph_model, run_onnxruntime


def close(got, want, tol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(np.abs(want).max()), 1.0)
    err = float(np.abs(got - want).max()) / scale
    assert err <= tol, f"max error {err:.2e} of the largest value {scale:.3g}"


def dft_node(out, inputs=("x",), **attrs):
    return helper.make_node("DFT", list(inputs), [out], **attrs)


def numpy_dft(x, axis, length, inverse=False, onesided=False):
    z = x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]
    if inverse and onesided:
        return np.fft.irfft(z, n=length, axis=axis)[..., None].astype(np.float32)
    y = np.fft.ifft(z, n=length, axis=axis) if inverse else np.fft.fft(z, n=length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], -1).astype(np.float32)


# (input shape, axis, dft_length or None, inverse, onesided)
CASES = [((2, 16, 1), 1, None, 0, 0), ((2, 16, 1), 1, None, 0, 1), ((2, 16, 2), 1, None, 1, 0),
         ((3, 10, 5, 2), 1, None, 0, 0), ((3, 10, 5, 2), 2, 8, 0, 0), ((3, 10, 5, 1), 1, 14, 0, 1),
         ((2, 7, 2), 1, None, 1, 0), ((1, 9, 2), 1, 16, 1, 1), ((4, 2, 12, 1), -2, None, 0, 1)]


def test_dft_against_onnxruntime_and_numpy(tmp_path):
    """DFT-20 (axis an input), one bundle of every case; onnxruntime where it runs the form."""
    rng = np.random.default_rng(1)
    nodes, inits, feeds, outs, want = [], {}, {}, [], []
    for i, (shape, axis, length, inv, one) in enumerate(CASES):
        feeds[f"x{i}"] = rng.standard_normal(shape).astype(np.float32)
        inits[f"axis{i}"] = np.array(axis, np.int64)
        ins = [f"x{i}", f"len{i}" if length else "", f"axis{i}"]
        if length:
            inits[f"len{i}"] = np.array(length, np.int64)
        nodes.append(dft_node(f"y{i}", ins, inverse=inv, onesided=one))
        outs.append(f"y{i}")
        n = shape[axis]
        want.append(numpy_dft(feeds[f"x{i}"], axis % len(shape),
                              length or (2 * (n - 1) if inv and one else n), inv, one))
    model = make_graph_model(nodes, feeds, outs, inits, opset=20)
    got = compile_and_run(model, feeds, tmp_path)
    for g, w in zip(got, want):
        close(g, w)
    ort = [i for i, c in enumerate(CASES) if not (c[3] and c[4])]  # (its irfft form aside)
    sub = make_graph_model([nodes[i] for i in ort], {f"x{i}": feeds[f"x{i}"] for i in ort},
                           [outs[i] for i in ort], inits, opset=20)
    for i, e in zip(ort, run_onnxruntime(sub, {f"x{i}": feeds[f"x{i}"] for i in ort})):
        close(got[i], e)


def test_dft17_axis_attribute(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 6, 11, 2)).astype(np.float32)
    r = rng.standard_normal((3, 6, 11, 1)).astype(np.float32)
    model = make_graph_model([dft_node("y", axis=2), dft_node("z", ["r"], axis=1, onesided=1)],
                             {"x": x, "r": r}, ["y", "z"], opset=17)
    got = compile_and_run(model, {"x": x, "r": r}, tmp_path)
    for g, e in zip(got, run_onnxruntime(model, {"x": x, "r": r})):
        close(g, e)
    close(got[0], numpy_dft(x, 2, 11))
    close(got[1], numpy_dft(r, 1, 6, onesided=True))


def stft_model(signal, step, frame_length=None, window=None, runtime_window=False, onesided=1):
    inits = {"step": np.array(step, np.int64)}
    ins = ["signal", "step", "", ""]
    feeds = {"signal": signal}
    if window is not None:
        ins[2] = "window"
        (feeds if runtime_window else inits)["window"] = window
    if frame_length is not None:
        ins[3] = "flen"
        inits["flen"] = np.array(frame_length, np.int64)
    node = helper.make_node("STFT", [i for i in ins], ["y"], onesided=onesided)
    return make_graph_model([node], feeds, ["y"], inits, opset=17), feeds


@pytest.mark.parametrize("case", ["hann", "runtime_window", "no_window", "complex", "twosided"])
def test_stft(case, tmp_path):
    """Speech front-end sizes: 400-sample frames every 160 samples of 1 s at 16 kHz."""
    rng = np.random.default_rng(3)
    comps = 2 if case == "complex" else 1
    signal = rng.standard_normal((2, 16000 if case != "complex" else 4000, comps)) \
        .astype(np.float32)
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)).astype(np.float32)
    model, feeds = stft_model(
        signal, 160, frame_length=None if case != "no_window" else 400,
        window=None if case == "no_window" else hann, runtime_window=case == "runtime_window",
        onesided=0 if case in ("complex", "twosided") else 1)
    got = compile_and_run(model, feeds, tmp_path)[0]
    bins = 201 if case in ("hann", "runtime_window", "no_window") else 400
    assert got.shape == (2, (signal.shape[1] - 400) // 160 + 1, bins, 2)
    z = signal[..., 0] if comps == 1 else signal[..., 0] + 1j * signal[..., 1]
    frames = np.lib.stride_tricks.sliding_window_view(z.astype(np.complex128), 400, 1)[:, ::160]
    spec = np.fft.fft(frames * (1 if case == "no_window" else hann), axis=-1)[..., :bins]
    close(got, np.stack([spec.real, spec.imag], -1).astype(np.float32), 2e-6)  # float64's
    # onnxruntime's own error is 3e-5 to 1e-4 of the largest value (its FFT's rounding)
    close(got, run_onnxruntime(model, feeds)[0], 2e-4)


def test_log_mel_front_end(tmp_path):
    """HannWindow -> STFT -> power -> MatMul by MelWeightMatrix -> Log (torchaudio's
    MelSpectrogram as exported at opset 17), against onnxruntime."""
    rng = np.random.default_rng(4)
    audio = (0.1 * rng.standard_normal((1, 16000, 1))).astype(np.float32)
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    inits = {"n": i64(400), "step": i64(160), "mels": i64(80), "dft": i64(400),
             "rate": i64(16000), "lo": f32(0.0), "hi": f32(8000.0), "two": f32(2.0),
             "axis": i64([-1]), "eps": f32(1e-6)}
    nodes = [helper.make_node("HannWindow", ["n"], ["win"], periodic=1),
             helper.make_node("STFT", ["x", "step", "win"], ["spec"], onesided=1),
             helper.make_node("Pow", ["spec", "two"], ["sq"]),
             helper.make_node("ReduceSum", ["sq", "axis"], ["power"], keepdims=0),
             helper.make_node("MelWeightMatrix", ["mels", "dft", "rate", "lo", "hi"], ["fb"]),
             helper.make_node("MatMul", ["power", "fb"], ["mel"]),
             helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
             helper.make_node("Log", ["mel_eps"], ["y"])]
    model = make_graph_model(nodes, {"x": audio}, ["y", "fb"], inits, opset=18)
    got = compile_and_run(model, {"x": audio}, tmp_path)
    want = run_onnxruntime(model, {"x": audio})
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)  # the filter bank
    assert got[0].shape == (1, 98, 80)
    # log-mel (natural log, -12 .. 4): onnxruntime's STFT is 3e-5 of its largest value from
    # float64's, glowpy's 7e-7 (test_stft)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("build, fix", [
    (lambda: make_graph_model([dft_node("y", axis=1)], {"x": np.zeros((1, 4096, 2), np.float32)},
                              ["y"], opset=17), "transforms this long are not supported"),
    (lambda: stft_model(np.zeros((1, 100, 1), np.float32), 10, frame_length=20,
                        window=np.ones(16, np.float32))[0], "window of 16 values for frame_length 20"),
    (lambda: make_graph_model([dft_node("y", axis=2)], {"x": np.zeros((1, 8, 2), np.float32)},
                              ["y"], opset=17), "axis is the last dim"),
])
def test_bad_transforms_are_refused(build, fix, capsys, tmp_path):
    msg = refused(capsys, tmp_path, build())
    assert fix in msg, msg


def test_integer_dft_input_is_refused(capsys, tmp_path):
    node = helper.make_node("DFT", ["x"], ["y"], name="dft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      (1, 8, 3))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    msg = refused(capsys, tmp_path, m)
    assert "node 'dft' (DFT)" in msg and "[..., n, 2] (complex)" in msg, msg

"""`model-verify` through its command line (glowpy.verify.cli:main, the console script's entry):
per-layer comparison with onnxruntime on the host (in process) and on the emulated Cortex-M7
(QEMU mps2-an500), a deliberately corrupted weight named as the first affected layer, the
quantization error column of int8 models, and one-line usage errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from toolchains import require_tool
from util import MODELS, REPO, model_path

KWS = "mlperf_tiny_kws_dscnn_int8_qdq"
M7 = ["-target=arm", "-mcpu=cortex-m7"]
# one row of the table: marker, index, op, node, glowpy kernel, shape, figures
ROW = re.compile(r"^(>>| \*|  )\s*(\d+)\s+(\S+)\s+")


def model_verify(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = ("import sys; from glowpy.verify.cli import main; sys.argv[0] = 'model-verify'; "
            "main()")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout)


def table_rows(stdout: str) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in map(ROW.match, stdout.splitlines())
            if m]


def verified(res, rc: int, json_path) -> dict:
    assert res.returncode == rc, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    with open(json_path) as f:
        doc = json.load(f)
    rows = table_rows(res.stdout)
    assert [i for _, i, _ in rows] == list(range(len(doc["layers"]))), res.stdout
    return doc


def corrupt(bundle_dir, name: str, offset: int, nbytes: int) -> None:
    """Flips every bit of bytes [offset, offset + nbytes) of NAME.weights.bin."""
    path = os.path.join(bundle_dir, name + ".weights.bin")
    data = bytearray(open(path, "rb").read())
    data[offset:offset + nbytes] = bytes(b ^ 0xFF for b in data[offset:offset + nbytes])
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------------
# host, float


def test_mnist8_host_is_within_tolerance_layer_by_layer(tmp_path):
    out = tmp_path / "layers.json"
    res = model_verify(f"-model={model_path('mnist8')}",
                       f"-test-data={os.path.join(MODELS, 'mnist8_data')}", f"-json={out}")
    doc = verified(res, 0, out)
    assert doc["run"] == "in process" and doc["input_sets"] == 3 and doc["outputs_ok"]
    assert doc["reference"] == "onnxruntime" and doc["first_failure"] is None
    assert doc["kernels"] == "6 kernels, the deployment bundle's"  # observing split no fusion
    layers = doc["layers"]
    # Conv+Relu are one kernel: the Relu's output is observed, the Conv's is not (fused away)
    assert [(L["op"], L["kernel"]) for L in layers] == [
        ("Relu", "Conv+Relu"), ("MaxPool", "MaxPool"), ("Relu", "Conv+Relu"),
        ("MaxPool", "MaxPool"), ("Reshape", "Reshape"), ("Add", "Gemm")]
    assert [L["output"] for L in layers] == [False] * 5 + [True]
    for L in layers:
        assert L["ok"] and L["max_abs"] <= L["tolerance"], L
        assert L["tolerance"] >= 1e-4 and L["lsb"] is None and L["ulp"] is not None
        assert L["snr_db"] == "inf" or float(L["snr_db"]) > 80, L  # float32 rounding, no more
    assert "every layer is within tolerance" in res.stdout
    assert "outputs: 1 of 1 within tolerance" in res.stdout


def test_mnist8_corrupted_weight_names_the_layer_it_feeds(tmp_path):
    """A weight of the second convolution is corrupted after compiling (-keep, then -bundle):
    layers 0-1 still agree bit for bit, the Conv+Relu reading it is the first beyond
    tolerance, and the output is, so the exit status is 1."""
    bundle = tmp_path / "bundle"
    res = model_verify(f"-model={model_path('mnist8')}", f"-keep={bundle}")
    assert res.returncode == 0, res.stdout + res.stderr
    man = json.load(open(bundle / "mnist8.json"))
    (w,) = [c for c in man["constants"] if c.get("for") == "Convolution110"
            and c["shape"] == [16, 8, 5, 5]]
    corrupt(bundle, "mnist8", w["offset"], 4 * 25)  # one output channel's 5x5 taps of input 0
    out = tmp_path / "layers.json"
    res = model_verify(f"-model={model_path('mnist8')}", f"-bundle={bundle}", f"-json={out}")
    doc = verified(res, 1, out)
    first = doc["layers"][doc["first_failure"]]
    assert first["kernel_node"] == "Convolution110" and first["node"] == "ReLU114", first
    assert doc["first_failure"] == 2
    assert all(L["max_abs"] == 0 for L in doc["layers"][:2])
    assert not doc["layers"][-1]["ok"] and not doc["outputs_ok"]
    marked = [(m, i) for m, i, _ in table_rows(res.stdout) if m == ">>"]
    assert marked == [(">>", 2)], res.stdout
    assert "first layer beyond tolerance: #2 Relu node 'ReLU114'" in res.stdout
    assert "outputs: 0 of 1 within tolerance; beyond: Plus214_Output_0" in res.stdout
    # the edit is reported (the manifest's hash of weights.bin no longer matches)
    assert re.search(r"model-verify: warning: -bundle: mnist8\.weights\.bin: SHA-256 .*\(modified "
                     r"since it was compiled\)", res.stderr), res.stderr


def test_given_input_and_load_profile_compare_with_the_float_model(tmp_path):
    """-load-profile: the int8 bundle agrees with glowpy's int8 references exactly, and the
    float column (onnxruntime on the float model) shows the quantization error."""
    x = np.random.default_rng(1).uniform(-1, 1, (1, 1, 28, 28)).astype(np.float32)
    samples = tmp_path / "samples"
    samples.mkdir()
    for k in range(3):
        np.save(samples / f"s{k}.npy", np.random.default_rng(k).uniform(-1, 1, x.shape)
                .astype(np.float32))
    np.save(tmp_path / "x.npy", x)
    prof = tmp_path / "profile.yaml"
    env = dict(os.environ, PYTHONPATH=REPO)
    subprocess.run([sys.executable, "-c", "import sys; from glowpy.profiler import main; main()",
                    f"-model={model_path('mnist8')}", f"-input-dataset=Input3,npy,{samples}",
                    f"-dump-profile={prof}"], check=True, env=env, cwd=REPO, timeout=300)
    out = tmp_path / "layers.json"
    res = model_verify(f"-model={model_path('mnist8')}", f"-load-profile={prof}",
                       f"-input=Input3,{tmp_path / 'x.npy'}", f"-json={out}")
    doc = verified(res, 0, out)
    assert doc["inputs"] == "given" and doc["reference"].startswith("glowpy's int8 op")
    assert doc["kernels"] == "7 kernels, the deployment bundle's"  # QuantizeLinear + 6
    assert [L["kernel"] for L in doc["layers"]] == ["QConv", "MaxPool", "QConv", "MaxPool",
                                                    "Reshape", "QMatMul"]
    for L in doc["layers"]:
        assert L["max_abs"] == 0, L  # the int8 kernels are bit-exact with the references
        assert 20 < L["float_snr_db"] < 60, L  # int8 quantization noise
        assert 0 < L["float_max_abs"] < 0.5, L


# ---------------------------------------------------------------------------------------------
# Cortex-M7 under QEMU, int8


@pytest.fixture
def arm_tools():
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "make"):
        require_tool(tool)


def test_kws_int8_on_cortex_m7_exact_command(arm_tools):
    """The issue's command as written: a per-layer table, exit status 0."""
    res = model_verify(f"-model={model_path(KWS)}", *M7)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "run under QEMU (mps2-an500), 1 input set (random, seed 0), 14 layers" in lines[0]
    rows = table_rows(res.stdout)
    assert [i for _, i, _ in rows] == list(range(14)) and all(m == "  " for m, _, _ in rows)
    assert lines[-2:] == ["every layer is within tolerance", "outputs: 1 of 1 within tolerance"]


def test_kws_int8_on_cortex_m7_matches_layer_by_layer(tmp_path, arm_tools):
    out = tmp_path / "layers.json"
    res = model_verify(f"-model={model_path(KWS)}", *M7, f"-json={out}",
                       f"-test-data={os.path.join(MODELS, KWS + '_data')}")
    doc = verified(res, 0, out)
    assert doc["run"] == "under QEMU (mps2-an500)" and doc["input_sets"] == 3
    assert doc["target"]["cpu"] == "cortex-m7" and doc["target"]["triple"].startswith("thumbv7em")
    assert doc["kernels"] == "14 kernels, the deployment bundle's"
    layers = doc["layers"]
    kernels = [L["kernel"] for L in layers]
    assert kernels.count("QConv") == 9 and kernels[-3:] == ["Reshape", "QMatMul", "QSoftmax"]
    assert all(L["dtype"] == "int8" for L in layers) and layers[-1]["output"]
    for L in layers:
        assert L["ok"] and L["lsb"] <= 1, L
        assert L["float_snr_db"] is not None
    # the quantization error grows through the stack of convolutions
    conv_snr = [float(L["float_snr_db"]) for L in layers if L["kernel"] == "QConv"]
    assert conv_snr[0] > conv_snr[-1]
    assert "float: SNR dB" in res.stdout.splitlines()[2]


def test_kws_int8_corrupted_weight_on_cortex_m7(tmp_path, arm_tools):
    """The weights of the second pointwise convolution (conv2d_2) are corrupted in the bundle's
    constant region; the firmware run under QEMU names that layer first and exits 1."""
    bundle = tmp_path / "bundle"
    res = model_verify(f"-model={model_path(KWS)}", *M7, f"-keep={bundle}", "-num-inputs=1")
    assert res.returncode == 0, res.stdout + res.stderr
    man = json.load(open(bundle / f"{KWS}.json"))
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(model_path(KWS)).graph.initializer}
    w = inits["functional_1/conv2d_2/Conv2D"]
    image = open(bundle / f"{KWS}.weights.bin", "rb").read()
    # the layer's weights: as the model stores them, or re-laid out by the DSP convolution
    # (conv_im2col.pack_weights: layout "dsp_blocks", for the layer's instruction)
    (c,) = [c for c in man["constants"] if c["bytes"] == w.nbytes and (
            image[c["offset"]:c["offset"] + c["bytes"]] == w.astype(np.int8).tobytes() or
            c["layout"] == "dsp_blocks" and "conv2d_2/Conv2D" in c["for"])]
    corrupt(bundle, KWS, c["offset"], c["bytes"])
    out = tmp_path / "layers.json"
    res = model_verify(f"-model={model_path(KWS)}", f"-bundle={bundle}", f"-json={out}",
                       f"-test-data={os.path.join(MODELS, KWS + '_data')}", "-num-inputs=1")
    doc = verified(res, 1, out)
    first = doc["layers"][doc["first_failure"]]
    assert "functional_1/conv2d_2/Conv2D1" in first["node"] and first["kernel"] == "QConv"
    assert all(L["lsb"] == 0 for L in doc["layers"][:doc["first_failure"]])
    assert first["lsb"] > 1 and not doc["outputs_ok"]
    assert f"first layer beyond tolerance: #{doc['first_failure']} QuantizeLinear" in res.stdout


# ---------------------------------------------------------------------------------------------
# usage errors: one line, exit status 2


@pytest.mark.parametrize("args, expect", [
    ([], r"-model is required"),
    (["-model=MNIST", "-frobnicate=1"], r"No such option: -frobnicate"),
    (["-model=MNIST", "-lsb=-1"], r"-lsb must be >= 0"),
    (["-model=nope.onnx"], r"-model=nope\.onnx: expected an existing \.onnx file"),
    (["-model=MNIST", "-target=riscv32"], r"runs host bundles in process and Arm"),
    (["-model=MNIST", "-target=arm", "-mcpu=cortex-a53"], r"-mcpu=cortex-a53: .*MPS2"),
    (["-model=MNIST", "-target=arm", "-mcpu=cortex-m7", "-float-abi=hardfp"],
     r"-float-abi=hardfp"),
    (["-model=MNIST", "-input=foo,x.npy"], r"-input=foo,x\.npy: expected NAME,FILE"),
    (["-model=MNIST", "-emit-bundle=x"], r"-emit-bundle: .*-keep=DIR"),
    (["-model=MNIST", "-bundle=."], r"-bundle=\.: 0 bundles found"),
    (["-model=MNIST", "-rtol=abc"], r"-rtol"),
    (["-model=MNIST", "-onnx-define-symbol=N"], r"-onnx-define-symbol=N: expected name,value"),
], ids=["no-model", "unknown-option", "negative-lsb", "missing-model", "riscv", "cortex-a",
        "float-abi", "input-name", "emit-bundle", "no-bundle", "rtol", "symbol"])
def test_usage_errors_are_one_line_exit_2(args, expect, tmp_path):
    args = [a.replace("MNIST", model_path("mnist8")) for a in args]
    res = model_verify(*args)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("model-verify: error: "), res.stderr
    assert re.search(expect, lines[0]), lines[0]
    assert res.stdout == ""


def test_model_error_is_one_line_exit_1(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\xff\xff not a protobuf")
    res = model_verify(f"-model={bad}")
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and re.match(r"model-verify: error: '.*bad\.onnx' is not a valid "
                                        r"ONNX model", lines[0]), res.stderr
    assert res.stdout == ""

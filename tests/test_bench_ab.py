"""benchmarks/ab.py, the before/after harness: variants from a git revision of the checkout
and from the working tree with other model-compiler options, compiled and timed alternately
against onnxruntime, the outputs compared with the first variant's and with onnxruntime's."""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
AB = os.path.join(ROOT, "benchmarks", "ab.py")


def conv_model(path):
    rng = np.random.default_rng(3)
    ws = [numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.06).astype(np.float32),
                                  n) for n in ("w1", "w2")]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c2"], ["y"])], "abconv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64, 56, 56])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64, 56, 56])], ws)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    np.savez(str(path)[:-5] + ".npz", x=rng.standard_normal((1, 64, 56, 56)).astype(np.float32))


def run(*args):
    return subprocess.run([sys.executable, AB, *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def test_revision_and_options(tmp_path):
    model = tmp_path / "abconv.onnx"
    conv_model(model)
    r = run(model, "HEAD", ". -winograd=false", "--rounds", 2, "--batches", 1, "--seconds",
            0.01, "--mcpu", "x86-64-v3", "--work", tmp_path / "w")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in r.stdout.splitlines()
            if line.startswith("| ") and "---" not in line][1:]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert [c.strip() for c in rows[0]][0] == head[:10]
    assert [c.strip() for c in rows[1]][0] == "working tree -winograd=false"
    assert rows[2][0].strip() == "onnxruntime" and len(rows) == 3
    for label, compile_s, ms, first, vs_ort, diff, err in rows[:2]:
        assert float(ms) > 0 and float(compile_s) > 0
        assert abs(float(vs_ort) - float(ms) / float(rows[2][2])) <= 2e-3 * float(vs_ort)
        assert float(err) <= 1.0   # within the zoo's tolerance of onnxruntime
    assert float(rows[0][5]) == 0 and 0 < float(rows[1][5]) < 1e-3  # Winograd against direct
    assert os.path.isdir(os.path.join(ROOT, "build", "ab", head, "glowpy"))
    # both bundles for the named CPU, the second without Winograd
    import json
    mans = [json.load(open(tmp_path / "w" / f"variant{i}" / "bundle" / "abconv.json")) for i in (0, 1)]
    assert [m["target"]["cpu"] for m in mans] == ["x86-64-v3"] * 2
    assert [m["options"]["winograd"] for m in mans] == [True, False]


def test_errors(tmp_path):
    model = tmp_path / "abconv.onnx"
    conv_model(model)
    r = run(model, "no-such-revision", "--work", tmp_path / "w")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"ab.py: error: 'no-such-revision' is not a commit of {ROOT}; give a revision or '.'"]
    r = run(tmp_path / "missing.onnx", ".", "--work", tmp_path / "w")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"ab.py: error: model '{tmp_path / 'missing.onnx'}' does not exist; give an .onnx file "
        "or a zoo model's name"]
    r = run(model, ". -no-such-option", "--work", tmp_path / "w")
    assert r.returncode == 1 and r.stderr.startswith("ab.py: error: variant '. -no-such-option' did not compile")

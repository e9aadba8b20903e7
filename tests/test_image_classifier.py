"""image-classifier (Glow's workflow): images -> preprocessing -> the bundle in-process -> top-k.

The digits shipped in examples/bundles/mnist/images are classified through the real command;
the scores equal onnxruntime's on the same pixels; every -image-mode/-image-layout/
-image-channel-order/-mean/-stddev combination is checked against a hand computation on a PNG
written here; -dump-profile then -load-profile classifies the same with the int8 bundle; misuse
is one line with the usage (2) or model (1) status."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from glowpy.image_classifier import MODES, Preprocess
from util import model_path, run_onnxruntime

DIGITS = {os.path.join("examples", "bundles", "mnist", "images", f"digit{d}.pgm"): d
          for d in (2, 9, 0)}
ROOT = os.path.join(os.path.dirname(__file__), "..")
EXE = [sys.executable, "-c", "from glowpy.image_classifier import main; main()"]


def classify(*args, cwd=ROOT):
    return subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=600, cwd=cwd)


def parse(stdout):
    """{file: [(label, score), ...]} from Glow's ' File: x' / '\\tLabel-Kk: l (score: s)' lines."""
    out, cur = {}, None
    for line in stdout.splitlines():
        if line.startswith(" File: "):
            cur = out.setdefault(line[7:], [])
        else:
            m = re.match(r"\tLabel-K\d+: (\d+) \(score: (-?[\d.]+)\)$", line)
            assert m and cur is not None, line
            cur.append((int(m.group(1)), float(m.group(2))))
    return out


def test_digits_classified_with_onnxruntime_scores(tmp_path):
    import onnx
    mnist = model_path("mnist8")
    r = classify(*DIGITS, f"-model={mnist}", "-image-mode=0to255", "-topk=3",
                 f"-emit-bundle={tmp_path}/out")
    assert r.returncode == 0, r.stderr
    got = parse(r.stdout)
    assert list(got) == list(DIGITS)
    model = onnx.load(mnist)
    for path, digit in DIGITS.items():
        assert got[path][0][0] == digit
        px = np.asarray(Image.open(os.path.join(ROOT, path)).convert("L"), np.float32)
        ref = run_onnxruntime(model, {"Input3": px.reshape(1, 1, 28, 28)})[0].ravel()
        top = np.argsort(-ref)[:3]
        assert [k for k, _ in got[path]] == list(top)
        np.testing.assert_allclose([s for _, s in got[path]], ref[top], rtol=1e-4, atol=1e-3)
    assert os.path.exists(tmp_path / "out" / "mnist8.o")  # -emit-bundle keeps the bundle


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("order", ["BGR", "RGB"])
def test_preprocessing_matches_glows_formula(tmp_path, mode, layout, order):
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 14
    path = str(tmp_path / "x.png")
    Image.fromarray(rgb, "RGB").save(path)
    shape = (1, 3, 2, 3) if layout == "NCHW" else (1, 2, 3, 3)
    pre = Preprocess(shape, layout, mode, order, "10,20,30", "2,4,8")
    got = pre(path)
    scale, shift = {"0to1": (1 / 255, 0), "0to255": (1, 0), "neg1to1": (1 / 127.5, -1),
                    "neg128to127": (1, -128)}[mode]
    px = rgb.astype(np.float64)[:, :, ::-1] if order == "BGR" else rgb.astype(np.float64)
    want = (px * scale + shift - np.array([10, 20, 30])) / np.array([2, 4, 8])
    want = want if layout == "NHWC" else want.transpose(2, 0, 1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_profile_then_int8_bundle_classifies_the_same(tmp_path):
    mnist = model_path("mnist8")
    profile = str(tmp_path / "p.yaml")
    r = classify(*DIGITS, f"-model={mnist}", "-image-mode=0to255", f"-dump-profile={profile}")
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(profile) > 0
    r = classify(*DIGITS, f"-model={mnist}", "-image-mode=0to255", f"-load-profile={profile}",
                 f"-emit-bundle={tmp_path}/q")
    assert r.returncode == 0, r.stderr
    assert {p: v[0][0] for p, v in parse(r.stdout).items()} == DIGITS
    manifest = json.load(open(tmp_path / "q" / "mnist8.json"))
    assert manifest["options"]["quantization"]["profile"] == "p.yaml"


def test_misuse_is_one_line(tmp_path):
    mnist = model_path("mnist8")
    big = str(tmp_path / "big.png")
    Image.fromarray(np.zeros((30, 28), np.uint8)).save(big)
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not an image")
    cases = [
        ([big, f"-model={mnist}"], 1, f"image '{big}' is 28x30; the model takes 28x28 images"),
        ([str(junk), f"-model={mnist}"], 1, f"cannot read image '{junk}'"),
        ([big, f"-model={mnist}", "-image-mode=0to9"], 2, "-image-mode=0to9: expected one of"),
        ([f"-model={mnist}"], 2, "give the image files to classify"),
        ([big, f"-model={mnist}", "-mean=1,2"], 2, "-mean=1,2: expected one finite number or 1"),
    ]
    for args, status, start in cases:
        r = classify(*args)
        assert r.returncode == status, (args, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"image-classifier: error: {start}"), \
            (args, r.stderr)

"""examples/bundles/lenet_mnist: Glow's LeNet-MNIST example on a Caffe2 net. The net is built
from mnist8's weights (tests/caffe2_models.py), compiled through the model-compiler command line
(-model=DIR -model-input=data,float,[1,1,28,28]), the example is built with its Makefile
(-Wall -Wextra -Werror) and run on its sample images and on other encodings of mnist8's
reference inputs; what it prints matches onnxruntime on the ONNX original."""
import os
import re
import subprocess

import numpy as np
import onnx
import pytest
import typer

from caffe2_models import lenet_mnist, write_model
from glowpy.cli import app
from glowpy.cli import run as cli_run
from util import REPO, model_path, reference_data, run_onnxruntime

EXAMPLE = os.path.join(REPO, "examples", "bundles", "lenet_mnist")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("lenet")
    model = write_model(*lenet_mnist(), "dir", str(d / "lenet_mnist"))[0]
    rc = cli_run([f"-model={model}", "-model-input=data,float,[1,1,28,28]", "-network-name=lenet_mnist",
                  f"-emit-bundle={d / 'bundle'}"], "model-compiler", typer.main.get_command(app))
    assert rc == 0
    return d / "bundle"


def run_example(bundle, build, image):
    r = subprocess.run(["make", "-s", "-C", EXAMPLE, f"BUNDLE={bundle}", f"BUILD={build}",
                        f"IMAGE={image}", "run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    cls = int(re.search(r"^class (\d+)$", r.stdout, re.M).group(1))
    scores = [float(v) for v in re.search(r"^scores (.*)$", r.stdout, re.M).group(1).split()]
    logits = [float(v) for v in re.search(r"^logits (.*)$", r.stdout, re.M).group(1).split()]
    return cls, np.asarray(scores), np.asarray(logits)


def expected(index):
    m = onnx.load(model_path("mnist8"))
    x = reference_data("mnist8", index)[0][0]
    logits = run_onnxruntime(m, {m.graph.input[0].name: x})[0].reshape(-1).astype(np.float64)
    e = np.exp(logits - logits.max())
    return x.reshape(28, 28), logits, e / e.sum()


def check(result, index):
    _, logits, probs = expected(index)
    cls, scores, got_logits = result
    assert cls == int(logits.argmax())
    np.testing.assert_allclose(scores, probs, atol=1e-6)
    np.testing.assert_allclose(got_logits, logits, rtol=1e-5, atol=1e-4 * np.abs(logits).max())


SAMPLES = {"digit2.pgm": 0, "digit0.f32": 1, "digit9.txt": 2}


@pytest.mark.parametrize("image", sorted(SAMPLES))
def test_sample_images(bundle, tmp_path, image):
    index = SAMPLES[image]
    check(run_example(bundle, tmp_path, os.path.join(EXAMPLE, "images", image)), index)
    # the shipped samples are mnist8's reference inputs
    x = expected(index)[0]
    raw = open(os.path.join(EXAMPLE, "images", image), "rb").read()
    if image.endswith(".pgm"):
        assert raw == b"P5\n28 28\n255\n" + x.astype(np.uint8).tobytes()
    elif image.endswith(".f32"):
        assert raw == x.astype("<f4").tobytes()
    else:
        np.testing.assert_array_equal(np.asarray(raw.split(), np.float32).reshape(28, 28), x)


def test_other_encodings(bundle, tmp_path):
    x = expected(2)[0]
    p2 = tmp_path / "ascii.pgm"  # text PGM with a comment and maxval 15
    p2.write_text("P2\n# digit\n28 28\n15\n" + "\n".join(" ".join(str(int(v) * 15 // 255) for v in r) for r in x))
    cls, _, _ = run_example(bundle, tmp_path, p2)
    assert cls == int(expected(2)[1].argmax())
    p16 = tmp_path / "wide.pgm"  # 16-bit binary PGM: the same pixels exactly
    p16.write_bytes(b"P5 28 28 65535\n" + (x.astype(np.uint32) * 257).astype(">u2").tobytes())
    check(run_example(bundle, tmp_path, p16), 2)
    bad = tmp_path / "bad.pgm"
    bad.write_bytes(b"P5\n27 28\n255\n" + bytes(27 * 28))
    r = subprocess.run([str(tmp_path / "lenet_mnist"), str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "not a 28x28" in r.stderr

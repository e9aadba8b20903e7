"""The example C applications in examples/bundles, built with their Makefiles (-Wall -Werror)
against freshly compiled bundles and run; what they print is checked against the reference
data of the models they use."""
import os
import re
import subprocess

import numpy as np
import pytest

from util import REPO, model_path, reference_data
import glowpy

EXAMPLES = os.path.join(REPO, "examples", "bundles")


def make_run(example, tmp_path, **variables):
    args = ["make", "-s", "-C", os.path.join(EXAMPLES, example), f"BUILD={tmp_path / 'build'}"]
    args += [f"{k}={v}" for k, v in variables.items()] + ["run"]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def parse_scores(text):
    cls = int(re.search(r"^class (\d+)", text, re.M).group(1))
    scores = np.array([float(x) for x in re.search(r"^scores (.*)$", text, re.M).group(1).split()])
    return cls, scores


@pytest.fixture(scope="module")
def mnist_bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("mnist_bundle")
    glowpy.compile(model_path("mnist8"), str(d), network_name="mnist")
    return d


@pytest.mark.parametrize("index", [0, 1, 2])
def test_mnist_static_example(mnist_bundle, tmp_path, index):
    _, outputs = reference_data("mnist8", index)
    ref = outputs[0].reshape(-1)
    digit = int(ref.argmax())
    image = os.path.join(EXAMPLES, "mnist", "images", f"digit{digit}.pgm")
    cls, scores = parse_scores(make_run("mnist", tmp_path, BUNDLE=mnist_bundle, IMAGE=image))
    assert cls == digit
    # printed with 6 significant digits
    np.testing.assert_allclose(scores, ref, rtol=2e-5, atol=1e-4 * np.abs(ref).max())


def test_resnet8_dynamic_example(tmp_path):
    bundle = tmp_path / "bundle"
    glowpy.compile(model_path("mlperf_tiny_resnet8"), str(bundle), network_name="resnet8",
                   bundle_api="dynamic")
    inputs, outputs = reference_data("mlperf_tiny_resnet8", 0)
    inp = tmp_path / "input.bin"
    inp.write_bytes(inputs[0].astype("<f4").tobytes())
    ref = outputs[0].reshape(-1)
    text = make_run("resnet8", tmp_path, BUNDLE=bundle, INPUT=inp)
    cls, scores = parse_scores(text)
    assert cls == int(ref.argmax())
    np.testing.assert_allclose(scores, ref, rtol=2e-5, atol=1e-3 * np.abs(ref).max())
    # the shipped sample input is test_data_set_0's
    with open(os.path.join(EXAMPLES, "resnet8", "input.bin"), "rb") as f:
        assert f.read() == inputs[0].astype("<f4").tobytes()

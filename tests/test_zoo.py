"""The architecture zoo (benchmarks/zoo: 62 networks written in the op patterns PyTorch's
exporter produces, random weights from fixed seeds, small test sizes) compiles through the
real path and matches onnxruntime within the issue's model tolerance,
|bundle - onnxruntime| <= 1e-3 * max|onnxruntime| + 1e-4 per output. The whole file takes
about a minute of CPU (measured: 40 s of compile-and-run on an AMD EPYC Zen 3)."""
import os
import sys

import numpy as np
import pytest

from util import compile_and_run, run_onnxruntime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from zoo import ZOO, errors  # noqa: E402


def test_zoo_has_the_architectures_the_issue_asks_for():
    assert len(ZOO) >= 24, sorted(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_matches_onnxruntime(name, tmp_path):
    model, feeds = ZOO[name]()
    expected = run_onnxruntime(model, feeds)
    got = compile_and_run(model, feeds, tmp_path)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype, (name, i, g.shape, e.shape)
        assert np.isfinite(e).all() and e.std() > 0, f"{name}: a degenerate reference output {i}"
    for i, (err, tol) in enumerate(errors(got, expected)):
        assert err <= tol, f"{name} output {i}: max error {err:.3g} > tolerance {tol:.3g}"

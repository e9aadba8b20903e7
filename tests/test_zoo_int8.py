"""The zoo's int8 CNNs (benchmarks/zoo/quantized.py: onnxruntime's preprocessing and static QDQ
quantization of zoo models, small test sizes) compile through the real path for this host
and the AVX2 level, and their outputs equal the integer ops' numpy references bit for bit
(int16 pairs, float kernels over exact sums, chunks, vector QAdd/QMul: every kernel the
host path takes). onnxruntime is not the arbiter here: its AVX2 int8 kernels saturate
16-bit sums (docs/int8.md), and its requantization rounds in float."""
import os
import sys

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from vector_levels import RUNNABLE, params

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from zoo.quantized import ZOO_INT8  # noqa: E402


# AVX2 code where the host runs it (the SSE2 baseline elsewhere), and the host's own
LEVELS = params([lv for lv in RUNNABLE if lv.name == "avx2"] or RUNNABLE[:1]) + [None]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", sorted(ZOO_INT8))
def test_zoo_int8_model_matches_reference(name, level, tmp_path):
    model, feeds = ZOO_INT8[name]()
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops, ops
    info = glowpy.compile(path, str(tmp_path / "b"), **(level.options if level else {}))
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    refs = evaluate(optimize(load_onnx(path)), feeds)
    assert len(refs) == len(info.outputs)
    for p, r in zip(info.outputs, refs):
        y = got[p["name"]]
        assert y.shape == r.shape and np.std(r) > 0, p["name"]
        np.testing.assert_array_equal(y, r, err_msg=f"{name}: {p['name']}")

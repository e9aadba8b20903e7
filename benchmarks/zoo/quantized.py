"""int8 QDQ versions of zoo CNNs, quantized the way users of onnxruntime do it: its
preprocessing (shape inference, BatchNormalization folded into the convolutions), then
quantize_static in QDQ format with per-channel int8 weights and uint8 activations, calibrated
on the model's inputs and three random variants of them (fixed seed). The MLPerf Tiny int8
models of ../shared/models were quantized by TFLite's converter; these are the other common
origin of an int8 ONNX model.

    from zoo.quantized import ZOO_INT8; model, feeds = ZOO_INT8["resnet50_int8"](perf=True)
"""
from __future__ import annotations

import logging
import os
import tempfile

import numpy as np
import onnx

from . import classic, mobile

SOURCES = {"resnet50_int8": classic.resnet50, "mobilenet_v2_int8": mobile.mobilenet_v2,
           "efficientnet_b0_int8": mobile.efficientnet_b0, "resnet18_int8": classic.resnet18,
           "mobilenet_v3_small_int8": mobile.mobilenet_v3_small}


def quantize(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """onnxruntime's preprocessing and static QDQ quantization of `model`."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    rng = np.random.default_rng(0)
    # float inputs get noise of their own spread; token ids and masks stay as they are
    sets = [feeds] + [{k: (v + rng.standard_normal(v.shape).astype(v.dtype) * v.std())
                       if v.dtype.kind == "f" else v for k, v in feeds.items()} for _ in range(3)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(sets)

        def get_next(self):
            return next(self.it, None)
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)  # its "consider pre-processing" advice
    try:
        with tempfile.TemporaryDirectory() as d:
            src, pre, dst = (os.path.join(d, f) for f in ("f.onnx", "p.onnx", "q.onnx"))
            onnx.save(model, src)
            quant_pre_process(src, pre, skip_symbolic_shape=True)
            quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            return onnx.load(dst)
    finally:
        logging.getLogger().setLevel(level)


def _builder(source):
    def build(perf: bool = False):
        model, feeds = source(perf=perf)
        return quantize(model, feeds), feeds
    build.__doc__ = f"{source.__name__}, quantized (zoo/quantized.py)"
    return build


ZOO_INT8 = {name: _builder(src) for name, src in SOURCES.items()}

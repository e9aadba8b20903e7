"""float16 versions of zoo networks, made the way users make them: onnxconverter-common's
convert_float_to_float16, the whole model float16 (inputs and outputs too) or with float32
inputs and outputs (`keep_io_types`, the "_fp16io32" names). The feeds are the float32 model's,
rounded to float16 where the model takes float16.

    from zoo.half import ZOO_FP16; model, feeds = ZOO_FP16["resnet18_fp16"](perf=True)
"""
from __future__ import annotations

import warnings

import numpy as np

from . import classic, mobile, vision_tf, dense

# (float32 builder, keep_io_types); bert_tiny is left out: the converter leaves its Cast to
# float32 in place and onnxruntime refuses the model
SOURCES = {"resnet18_fp16": (classic.resnet18, False), "mobilenet_v2_fp16": (mobile.mobilenet_v2, False),
           "yolo_fp16io32": (dense.yolo, True), "vit_tiny_fp16io32": (vision_tf.vit, True),
           "vit_tiny_fp16": (vision_tf.vit, False)}
# onnxruntime rounds some ops' results to float16 (LayerNormalization and Softmax have float16
# kernels), a bundle only where the model casts: the outputs are compared within this share of
# their largest value (8 float16 ulps there; ViT measured 1.2e-3)
TOLERANCE = 4e-3


def to_float16(model, feeds: dict, keep_io_types: bool):
    from onnxconverter_common import float16
    with warnings.catch_warnings():  # "the float32 number 1e-12 will be truncated to 1e-07"
        warnings.simplefilter("ignore", UserWarning)
        m = float16.convert_float_to_float16(model, keep_io_types=keep_io_types)
    if not keep_io_types:
        feeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    return m, feeds


def errors(got, expected) -> list[tuple[float, float]]:
    """Per output (max |got - expected|, TOLERANCE * max|expected|)."""
    return [(float(np.abs(np.asarray(g, np.float64) - np.asarray(e, np.float64)).max()),
             TOLERANCE * float(np.abs(np.asarray(e, np.float64)).max()))
            for g, e in zip(got, expected)]


def _builder(source, keep):
    def build(perf: bool = False):
        return to_float16(*source(perf=perf), keep)
    build.__doc__ = f"{source.__name__}, float16 (zoo/half.py)"
    return build


ZOO_FP16 = {name: _builder(src, keep) for name, (src, keep) in SOURCES.items()}

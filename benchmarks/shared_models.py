"""The models in ../shared/models the benchmarks measure, split into float and quantized ones."""
import os

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_MODELS = os.path.join(os.path.dirname(ROOT), "shared", "models")
QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
             "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"}


def shared_models(quantized: bool = False) -> list[str]:
    """Names of the shared models that have reference data, float ones or quantized ones."""
    names = []
    for f in sorted(os.listdir(SHARED_MODELS)):
        name, ext = os.path.splitext(f)
        if ext != ".onnx" or not os.path.isdir(os.path.join(SHARED_MODELS, name + "_data")):
            continue
        m = onnx.load(os.path.join(SHARED_MODELS, f), load_external_data=False)
        if any(n.op_type in QUANT_OPS for n in m.graph.node) == quantized:
            names.append(name)
    return names


def shared_paths() -> dict:
    """{name: path} of every shared model with reference data, float and quantized (the
    host benchmarks time both against onnxruntime)."""
    return {n: os.path.join(SHARED_MODELS, n + ".onnx")
            for n in shared_models() + shared_models(quantized=True)}

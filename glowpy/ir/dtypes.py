"""Element types: numpy dtypes in the IR; ONNX's TensorProto enum and C names at the edges."""
import numpy as np

try:  # numpy has no bfloat16; ml_dtypes (JAX's) is a dependency of recent onnx (1.23 here)
    from ml_dtypes import bfloat16
except ImportError:  # older onnx: bfloat16 models are refused as an unsupported element type
    bfloat16 = None

from glowpy.errors import ModelError

# ONNX TensorProto.DataType values (stable across onnx versions)
ONNX_TO_NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
                 13: np.uint64, **({16: bfloat16} if bfloat16 else {})}
ONNX_NAMES = {0: "undefined", 8: "string", 14: "complex64", 15: "complex128", 16: "bfloat16",
              17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
              21: "uint4", 22: "int4", 23: "float4e2m1"}

# types a bundle can hold (placeholders and activations)
SUPPORTED = {np.dtype(t) for t in (np.float32, np.int8, np.uint8, np.int32, np.int64, np.bool_)}
# half-precision storage: graph inputs and outputs and Cast results only; the frontend computes
# everything else in float32 (frontend/onnx_half.py), and only Cast converts them
HALF = {np.dtype(t) for t in (np.float16, bfloat16) if t is not None}

# names used by -model-input and in the header's model-info block
BY_NAME = {"float": np.float32, "float32": np.float32, "int8": np.int8, "uint8": np.uint8,
           "int32": np.int32, "int64": np.int64, "bool": np.bool_, "float16": np.float16,
           **({"bfloat16": bfloat16} if bfloat16 else {})}
GLOW_NAMES = {np.dtype(np.float32): "float", np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8",
              np.dtype(np.int32): "i32", np.dtype(np.int64): "index64",
              np.dtype(np.bool_): "bool", np.dtype(np.float16): "float16",
              **({np.dtype(bfloat16): "bfloat16"} if bfloat16 else {})}


def from_onnx(elem_type: int, where: str) -> np.dtype:
    if elem_type in ONNX_TO_NUMPY:
        return np.dtype(ONNX_TO_NUMPY[elem_type])
    raise ModelError(f"{where}: element type {ONNX_NAMES.get(elem_type, elem_type)} is not supported")


def typed_attr(attrs: dict, key: str, op: str) -> dict:
    """An op's element-type attribute (Cast's and BitCast's `to`, EyeLike's `dtype`) read from
    its ONNX enum as a numpy dtype, in place; returns attrs."""
    if isinstance(attrs.get(key), int):
        attrs[key] = from_onnx(attrs[key], f"{op} '{key}'")
    return attrs


def to_onnx(dtype) -> int:
    dtype = np.dtype(dtype)
    for k, v in ONNX_TO_NUMPY.items():
        if np.dtype(v) == dtype:
            return k
    raise KeyError(dtype)


def named(name: str) -> np.dtype:
    """The dtype a manifest names (numpy's names; bfloat16 through ml_dtypes)."""
    return np.dtype(bfloat16) if name == "bfloat16" and bfloat16 else np.dtype(name)

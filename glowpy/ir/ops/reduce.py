"""Reductions and normalizations: the Reduce* family, Softmax, LogSoftmax, BatchNormalization."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, norm_axis, register
from glowpy.ir.ops.tensor import AxesOp

REDUCE = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max,
          "ReduceMin": np.min, "ReduceProd": np.prod,
          "ReduceL1": lambda a, axis, keepdims: np.sum(np.abs(a), axis=axis, keepdims=keepdims),
          "ReduceL2": lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims)),
          "ReduceSumSquare": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims),
          "ReduceLogSum": lambda a, axis, keepdims: np.log(np.sum(a, axis=axis, keepdims=keepdims)),
          "ReduceLogSumExp": lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis=axis,
                                                                     keepdims=keepdims))}


class Reduce(AxesOp):
    inputs = ("data", "axes?")
    attrs = {"keepdims": 1, "noop_with_empty_axes": 0}
    const_inputs = (1,)
    axes_input_since = 18  # ReduceSum moved axes to an input at 13, the others at 18

    def upgrade(self, op, attrs, inputs, opset, graph):
        if op == "ReduceSum" and opset >= 13:
            return attrs, inputs
        return super().upgrade(op, attrs, inputs, opset, graph)

    def reduced_axes(self, node) -> list[int]:
        r = len(node.inputs[0].shape)
        axes = self.axes(node, r) if node.input(1) is not None else None
        if not axes:
            return [] if node.attrs["noop_with_empty_axes"] else list(range(r))
        return axes

    def infer(self, node):
        x = node.inputs[0]
        axes = self.reduced_axes(node)
        keep = node.attrs["keepdims"]
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        return [(x.dtype, shape)]

    def reference(self, node, x, *_):
        axes = tuple(self.reduced_axes(node))
        if not axes:
            return [x]
        acc = np.float64 if node.op not in ("ReduceMax", "ReduceMin") else x.dtype
        y = REDUCE[node.op](x.astype(acc), axis=axes, keepdims=bool(node.attrs["keepdims"]))
        return [np.asarray(y).astype(x.dtype)]


for _name in REDUCE:
    register(type(_name, (Reduce,), {"names": (_name,)}))


class SoftmaxBase(Op):
    """Before opset 13 the input is coerced to 2-D at `axis` (default 1) and normalized over the
    whole trailing block; from 13 on, over the single dim `axis` (default -1). `upgrade` records
    which in the private attribute `_coerce2d`."""
    inputs = ("input",)
    attrs = {"axis": -1}
    log = False

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 13:
            attrs.setdefault("axis", 1)
            attrs["_coerce2d"] = True
        return attrs, inputs

    def layout(self, node) -> tuple[int, int, int]:
        """(outer, reduced, inner) sizes: the op normalizes over the middle one."""
        shape = node.inputs[0].shape
        if not shape and not node.attrs.get("_coerce2d"):  # norm_axis lets axis 0 pass rank 0
            raise ModelError(f"node '{node.name}' ({node.op}): input '{node.inputs[0].name}' is a "
                             f"scalar; {node.op} needs rank >= 1")
        ax = norm_axis(node.attrs["axis"], len(shape), node)
        if node.attrs.get("_coerce2d"):
            return int(np.prod(shape[:ax])), int(np.prod(shape[ax:])), 1
        return int(np.prod(shape[:ax])), shape[ax], int(np.prod(shape[ax + 1:]))

    def infer(self, node):
        x = node.inputs[0]
        self.layout(node)
        return [(x.dtype, x.shape)]

    def reference(self, node, x):
        o, r, i = self.layout(node)
        x3 = x.reshape(o, r, i).astype(np.float64)
        with np.errstate(invalid="ignore"):  # inf - inf: a row with +inf is NaN, as in onnxruntime
            z = x3 - x3.max(axis=1, keepdims=True)
            if self.log:
                y = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            else:
                e = np.exp(z)
                y = e / e.sum(axis=1, keepdims=True)
        return [y.reshape(x.shape).astype(x.dtype)]


@register
class Softmax(SoftmaxBase):
    pass


@register
class LogSoftmax(SoftmaxBase):
    log = True


@register
class BatchNormalization(Op):
    """Inference form: y = (x - mean) / sqrt(var + epsilon) * scale + B, per channel (dim 1)."""
    inputs = ("X", "scale", "B", "input_mean", "input_var")
    attrs = {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0, "spatial": 1, "is_test": 0,
             "consumed_inputs": None}
    const_inputs = (1, 2, 3, 4)

    def infer(self, node):
        x = node.inputs[0]
        if node.attrs["training_mode"]:
            raise ModelError(f"node '{node.name}' (BatchNormalization): training_mode=1 is not "
                             "supported (inference only)")
        if (getattr(node, "_num_outputs", None) or 1) > 1:
            raise ModelError(f"node '{node.name}' (BatchNormalization): running mean/var outputs "
                             "are training-only and not supported")
        c = x.shape[1] if len(x.shape) > 1 else 1
        for i in range(1, 5):
            if node.inputs[i].size != c:
                raise ModelError(f"node '{node.name}' (BatchNormalization): input "
                                 f"'{node.inputs[i].name}' must have {c} elements (channels)")
        return [(x.dtype, x.shape)]

    def affine(self, node) -> tuple[np.ndarray, np.ndarray]:
        """Per-channel (multiplier, addend), computed at compile time in float64."""
        s, b, m, v = (node.const_input(i).astype(np.float64).reshape(-1) for i in range(1, 5))
        mul = s / np.sqrt(v + node.attrs["epsilon"])
        return mul, b - m * mul

    def reference(self, node, x, *_):
        mul, add = self.affine(node)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return [(x * mul.reshape(shape) + add.reshape(shape)).astype(x.dtype)]

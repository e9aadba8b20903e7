"""Elementwise ops: unary math and activations, broadcasting binary and variadic ops, Cast."""
from __future__ import annotations

import math

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.dtypes import typed_attr
from glowpy.ir.ops.registry import Op, broadcast_shapes, register


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _gelu(x, approximate):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        return 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    if approximate != "none":
        raise ModelError(f"Gelu: approximate='{approximate}' is not supported (none or tanh)")
    return 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))


# name -> (numpy reference taking (x, attrs), attribute defaults)
UNARY = {
    "Relu": (lambda x, a: np.maximum(x, 0).astype(x.dtype), {}),
    "LeakyRelu": (lambda x, a: np.where(x < 0, x * np.float32(a["alpha"]), x), {"alpha": 0.01}),
    "Elu": (lambda x, a: np.where(x < 0, np.float32(a["alpha"]) * np.expm1(x), x), {"alpha": 1.0}),
    "Sigmoid": (lambda x, a: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(x.dtype), {}),
    "HardSigmoid": (lambda x, a: np.clip(np.float32(a["alpha"]) * x + np.float32(a["beta"]), 0, 1)
                    .astype(x.dtype), {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": (lambda x, a: (x * np.clip(x / np.float32(6) + np.float32(0.5), 0, 1)).astype(x.dtype), {}),
    "Swish": (lambda x, a: (x / (1 + np.exp(-np.float64(a["alpha"]) * x.astype(np.float64))))
              .astype(x.dtype), {"alpha": 1.0}),
    "Tanh": (lambda x, a: np.tanh(x), {}),
    "Exp": (lambda x, a: np.exp(x), {}),
    "Log": (lambda x, a: np.log(x), {}),
    "Sqrt": (lambda x, a: np.sqrt(x), {}),
    "Reciprocal": (lambda x, a: (1 / x).astype(x.dtype), {}),
    "Neg": (lambda x, a: -x, {}),
    "Abs": (lambda x, a: np.abs(x), {}),
    "Erf": (lambda x, a: _erf(x), {}),
    "Selu": (lambda x, a: np.where(x > 0, np.float64(a["gamma"]) * x, np.float64(a["gamma"])
                                   * np.float64(a["alpha"]) * np.expm1(x.astype(np.float64))),
             {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Softsign": (lambda x, a: x / (1 + np.abs(x)), {}),
    "Gelu": (lambda x, a: _gelu(x, a["approximate"]), {"approximate": "none"}),
    "Mish": (lambda x, a: x * np.tanh(np.logaddexp(0.0, x.astype(np.float64))), {}),
    "Floor": (lambda x, a: np.floor(x), {}),
    "Ceil": (lambda x, a: np.ceil(x), {}),
    "Round": (lambda x, a: np.round(x), {}),  # half to even, as ONNX specifies
    "Sign": (lambda x, a: np.sign(x), {}),
    "Sin": (lambda x, a: np.sin(x), {}),
    "Cos": (lambda x, a: np.cos(x), {}),
    "Atan": (lambda x, a: np.arctan(x), {}),
    "Asin": (lambda x, a: np.arcsin(x), {}),
    "Acos": (lambda x, a: np.arccos(x), {}),
    "Asinh": (lambda x, a: np.arcsinh(x), {}),
    "Acosh": (lambda x, a: np.arccosh(x), {}),
    "Atanh": (lambda x, a: np.arctanh(x), {}),
}


class Unary(Op):
    inputs = ("X",)
    traits = frozenset({"elementwise"})

    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, x.shape)]

    def reference(self, node, x):
        with np.errstate(all="ignore"):
            return [np.asarray(UNARY[node.op][0](x, node.attrs)).astype(x.dtype)]


for _name, (_fn, _attrs) in UNARY.items():
    register(type(_name, (Unary,), {"names": (_name,), "attrs": _attrs}))


@register
class Identity(Op):
    inputs = ("input",)
    traits = frozenset({"view"})

    def infer(self, node):
        return [(node.inputs[0].dtype, node.inputs[0].shape)]

    def reference(self, node, x):
        return [x]


@register
class Dropout(Op):
    """Inference only: the identity. The mask output, when asked for, is constant: all true
    from opset 12, all false before (as onnxruntime's), and of the data's type before opset 10.
    Not a view because of that second output: the views pass removes a Dropout whose mask is
    unused, and a remaining one is a copy plus a fill (kernels/tensor.py)."""
    inputs = ("data", "ratio?", "training_mode?")
    attrs = {"seed": 0, "ratio": 0.5, "is_test": 0, "consumed_inputs": None}
    const_inputs = (1, 2)  # ratio and training_mode decide what the node computes

    def upgrade(self, op, attrs, inputs, opset, graph):
        attrs["_mask_value"] = int(opset >= 12)
        attrs["_mask_is_data_type"] = opset < 10
        return attrs, inputs

    def mask(self, node) -> tuple[np.dtype, int]:
        x = node.inputs[0]
        return (x.dtype if node.attrs.get("_mask_is_data_type") else np.dtype(np.bool_),
                node.attrs.get("_mask_value", 1))

    def infer(self, node):
        ratio = node.input(1)
        zero = ratio is not None and ratio.is_const and float(np.asarray(ratio.const).reshape(-1)[0]) == 0
        if node.input(2) is not None and bool(node.const_input(2, "training_mode")) and not zero:
            raise ModelError(f"node '{node.name}' (Dropout): training_mode=true is not supported "
                             "(inference only; the output would be random)")
        x = node.inputs[0]
        n = node._num_outputs or 1
        return [(x.dtype, x.shape), (self.mask(node)[0], x.shape)][:n]

    def reference(self, node, x, *_):
        dt, value = self.mask(node)
        return [x, np.full(x.shape, value, dt)][: len(node.outputs) or 1]

    def try_fold(self, node, types):
        if node.inputs[0].is_const:
            return self.reference(node, node.inputs[0].const)[: len(types)]
        return None


@register
class Clip(Op):
    inputs = ("input", "min?", "max?")
    traits = frozenset({"elementwise"})

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 11:
            lo, hi = attrs.pop("min", -np.inf), attrs.pop("max", np.inf)
            inputs = [inputs[0], graph.constant(np.float32(lo), "clip_min"),
                      graph.constant(np.float32(hi), "clip_max")]
        # A bound computed at run time (a log-mel front end's Clip(x, min=ReduceMax(x) - 80))
        # becomes Max/Min with the scalar bound broadcast: the Clip kernel and the fused
        # epilogues take constant bounds as immediates.
        inputs = list(inputs) + [None] * (3 - len(inputs))
        for i, fn in ((1, "Max"), (2, "Min")):
            b = inputs[i]
            if b is not None and not b.is_const:
                if b.size != 1:
                    raise ModelError(f"Clip: {('min', 'max')[i - 1]} '{b.name}' must be a scalar, "
                                     f"got shape {list(b.shape)}")
                if b.dtype != inputs[0].dtype:
                    break  # the schema check names the mismatch
                scalar = graph.add("Reshape", [b, graph.constant(np.zeros(0, np.int64), "scalar")],
                                   name=f"{b.name}_scalar")[0]
                inputs[0] = graph.add(fn, [inputs[0], scalar], name=f"{b.name}_{fn.lower()}")[0]
                inputs[i] = None
        return attrs, inputs

    def bounds(self, node):
        lo, hi = node.const_input(1, "min"), node.const_input(2, "max")
        for what, v in (("min", lo), ("max", hi)):
            if v is not None and v.size != 1:
                raise ModelError(f"node '{node.name}' (Clip): {what} must be a scalar, got shape "
                                 f"{list(v.shape)}")
        return (None if lo is None else lo.reshape(()), None if hi is None else hi.reshape(()))

    def infer(self, node):
        x = node.inputs[0]
        self.bounds(node)
        return [(x.dtype, x.shape)]

    def reference(self, node, x, lo=None, hi=None):
        if lo is not None:
            x = np.maximum(x, lo.astype(x.dtype))
        if hi is not None:
            x = np.minimum(x, hi.astype(x.dtype))
        return [x]


def _pow(a, b):
    with np.errstate(all="ignore"):
        if np.issubdtype(a.dtype, np.integer):
            return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
        b = b.astype(a.dtype)
        if b.size == 1:
            # numpy's loop for a one-value exponent computes x ** 0.5 as sqrt (-0 of -0, NaN
            # of -inf, where powf and onnxruntime give +0 and +inf); an exponent per element
            # takes the general loop
            b = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape)).copy()
        return np.power(a, b).astype(a.dtype)


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(all="ignore"):
            return np.trunc(a.astype(np.float64) / b).astype(a.dtype)
    return a / b


BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div, "Pow": _pow,
    "PRelu": lambda x, s: np.where(x < 0, x * s, x).astype(x.dtype),
}


class Binary(Op):
    inputs = ("A", "B")
    traits = frozenset({"elementwise"})

    def infer(self, node):
        a, b = node.inputs
        if node.op != "Pow" and a.dtype != b.dtype:
            raise ModelError(f"node '{node.name}' ({node.op}): input types differ "
                             f"({a.dtype.name} and {b.dtype.name})")
        return [(a.dtype, broadcast_shapes(node, a.shape, b.shape))]

    def reference(self, node, a, b):
        with np.errstate(all="ignore"):
            return [np.asarray(BINARY[node.op](a, b)).astype(a.dtype)]


for _name in BINARY:
    register(type(_name, (Binary,), {"names": (_name,), "inputs": ("X", "slope") if _name == "PRelu"
                                     else ("A", "B")}))

VARIADIC = {"Sum": np.add, "Max": np.maximum, "Min": np.minimum, "Mean": np.add}


class Variadic(Op):
    inputs = ("data_0", "data*")
    traits = frozenset({"elementwise"})

    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, broadcast_shapes(node, *[v.shape for v in node.inputs]))]

    def reference(self, node, *xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = VARIADIC[node.op](acc, x)
        if node.op == "Mean":
            acc = acc / np.asarray(len(xs), acc.dtype)
        return [np.broadcast_to(acc, self.infer(node)[0][1]).astype(xs[0].dtype)]


for _name in VARIADIC:
    register(type(_name, (Variadic,), {"names": (_name,)}))


@register
class Cast(Op):
    inputs = ("input",)
    attrs = {"to": None, "saturate": 1}
    traits = frozenset({"elementwise"})

    def upgrade(self, op, attrs, inputs, opset, graph):
        return typed_attr(attrs, "to", op), inputs

    def infer(self, node):
        return [(node.attrs["to"], node.inputs[0].shape)]

    def reference(self, node, x):
        return [x.astype(node.attrs["to"])]


@register
class BitCast(Op):
    """The input's bytes read as another type of the same width (opset 26): a copy."""
    inputs = ("input",)
    attrs = {"to": None}
    since = 26

    def upgrade(self, op, attrs, inputs, opset, graph):
        return typed_attr(attrs, "to", op), inputs

    def infer(self, node):
        x, to = node.inputs[0], np.dtype(node.attrs["to"])
        if to.itemsize != x.dtype.itemsize:
            raise ModelError(f"node '{node.name}' (BitCast): {x.dtype.name} to {to.name}; "
                             "BitCast keeps the bit width")
        return [(to, x.shape)]

    def reference(self, node, x):
        return [np.ascontiguousarray(x).view(node.attrs["to"])]

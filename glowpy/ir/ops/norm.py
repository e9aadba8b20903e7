"""Normalizations over a window or a block of elements: LRN, LayerNormalization,
InstanceNormalization (ONNX semantics). The numpy references compute in float64."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import REQUIRED, Op, norm_axis, register


def _err(node, msg):
    return ModelError(f"node '{node.name}' ({node.op}): {msg}")


def _float_only(node, x):
    if x.dtype != np.float32:
        raise _err(node, f"type {x.dtype.name} is not supported (float only)")


@register
class LRN(Op):
    """y = x / (bias + alpha/size * sum of x^2 over channels [c - (size-1)//2, c + size//2])
    ^ beta."""
    inputs = ("X",)
    attrs = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": REQUIRED}

    def window(self, node) -> tuple[int, int]:
        """Channels before and after c in the window."""
        size = int(node.attrs["size"])
        if size < 1:
            raise _err(node, f"size must be >= 1, got {size}")
        return (size - 1) // 2, size - 1 - (size - 1) // 2

    def infer(self, node):
        x = node.inputs[0]
        if len(x.shape) < 3:
            raise _err(node, f"input rank must be >= 3 (N, C, spatial...), got {list(x.shape)}")
        _float_only(node, x)
        self.window(node)
        return [(x.dtype, x.shape)]

    def reference(self, node, x):
        before, after = self.window(node)
        a = node.attrs
        x64 = x.astype(np.float64)
        sq = x64 * x64
        c = x.shape[1]
        acc = np.zeros_like(x64)
        for ch in range(c):
            acc[:, ch] = sq[:, max(0, ch - before):min(c, ch + after + 1)].sum(axis=1)
        base = a["bias"] + a["alpha"] / a["size"] * acc
        return [(x64 / base ** a["beta"]).astype(x.dtype)]


def _moments(x64, axes):
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return mean, var


@register
class LayerNormalization(Op):
    """Normalizes over dims [axis, rank): y = (x - mean) / sqrt(var + epsilon) * Scale + B.
    Optional outputs Mean and InvStdDev have shape X.shape[:axis] + [1] * (rank - axis)."""
    inputs = ("X", "Scale", "B?")
    num_outputs = 3
    attrs = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
    since = 17

    def layout(self, node) -> tuple[int, int]:
        """(rows, row length)."""
        x = node.inputs[0]
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        return int(np.prod(x.shape[:ax])), int(np.prod(x.shape[ax:]))

    def infer(self, node):
        x = node.inputs[0]
        _float_only(node, x)
        if len(x.shape) < 1:
            raise _err(node, "input must have rank >= 1")
        if node.attrs["stash_type"] not in (1, 11):
            raise _err(node, f"stash_type {node.attrs['stash_type']} is not supported (1 = float)")
        ax = norm_axis(node.attrs["axis"], len(x.shape), node)
        norm_shape = x.shape[ax:]
        for v in node.inputs[1:]:
            if v is None:
                continue
            try:
                if np.broadcast_shapes(v.shape, norm_shape) != norm_shape:
                    raise ValueError
            except ValueError:
                raise _err(node, f"'{v.name}' shape {list(v.shape)} does not broadcast to the "
                                 f"normalized shape {list(norm_shape)}") from None
            if v.dtype != x.dtype:
                raise _err(node, f"'{v.name}' has type {v.dtype.name}, expected {x.dtype.name}")
        n = getattr(node, "_num_outputs", None) or 1
        if not 1 <= n <= 3:
            raise _err(node, f"has {n} outputs; expected 1 to 3 (Y, Mean, InvStdDev)")
        stat = (x.dtype, x.shape[:ax] + (1,) * (len(x.shape) - ax))
        return [(x.dtype, x.shape), stat, stat][:n]

    def reference(self, node, x, scale, b=None):
        ax = norm_axis(node.attrs["axis"], x.ndim, node)
        x64 = x.astype(np.float64)
        mean, var = _moments(x64, tuple(range(ax, x.ndim)))
        inv = 1.0 / np.sqrt(var + node.attrs["epsilon"])
        y = (x64 - mean) * inv * scale
        if b is not None:
            y = y + b
        outs = [y.astype(x.dtype), mean.astype(x.dtype), inv.astype(x.dtype)]
        return outs[:len(node.outputs) or getattr(node, "_num_outputs", None) or 1]


@register
class InstanceNormalization(Op):
    """Per (n, c) over the spatial dims: y = scale[c] * (x - mean) / sqrt(var + epsilon) + B[c]."""
    inputs = ("input", "scale", "B")
    attrs = {"epsilon": 1e-5, "consumed_inputs": None}  # consumed_inputs: opset 1, ignored

    def infer(self, node):
        x, s, b = node.inputs
        _float_only(node, x)
        if len(x.shape) < 3:
            raise _err(node, f"input rank must be >= 3 (N, C, spatial...), got {list(x.shape)}")
        for v in (s, b):
            if v.shape != (x.shape[1],):
                raise _err(node, f"'{v.name}' shape {list(v.shape)} must be [{x.shape[1]}] "
                                 "(channels)")
        return [(x.dtype, x.shape)]

    def reference(self, node, x, s, b):
        x64 = x.astype(np.float64)
        mean, var = _moments(x64, tuple(range(2, x.ndim)))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        y = (x64 - mean) / np.sqrt(var + node.attrs["epsilon"]) * s.reshape(shape)
        y = y + b.reshape(shape)
        return [y.astype(x.dtype)]

"""Ops of incremental decoding, which carry a state from one call to the next, as
compositions (ops/contrib.py): CausalConvWithState (opset 27: the short causal depthwise
convolution of Mamba and Gated DeltaNet layers) and TensorScatter (opset 24: a KV cache's
update, what PyTorch exports beside opset 23's Attention). Checked against onnx's reference
by tests/test_decode_state.py."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import Composite, add
from glowpy.ir.ops.registry import norm_axis, register


def _err(node, msg):
    return ModelError(f"node '{show(node.name)}' ({node.op}): {msg}")


@register
class CausalConvWithState(Composite):
    """The past state (zeros without one) before the input along the length, a depthwise
    Conv1d without padding over it (the bias, then SiLU if asked), and the last k - 1
    positions of that sequence as the present state."""
    inputs = ("input", "weight", "bias?", "past_state?")
    attrs = {"activation": "none"}
    num_outputs = 2
    since = 27

    def expand(self, g, node, ins, n_out):
        x, w, b, past = list(ins) + [None] * (4 - len(ins))
        act = node.attrs["activation"]
        if act not in ("none", "silu", "swish"):
            raise _err(node, f"activation '{show(act)}' is not one of none, silu, swish")
        if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[:2] != (x.shape[1], 1):
            raise _err(node, f"input {list(x.shape)} and weight {list(w.shape)}: input "
                             "(batch, channels, length), weight (channels, 1, k)")
        n, c, length = x.shape
        k = w.shape[2]
        if b is not None and b.shape != (c,):
            raise _err(node, f"bias {list(b.shape)} for {c} channels")
        if past is not None and past.shape != (n, c, k - 1):
            raise _err(node, f"past_state {list(past.shape)}; it must be {[n, c, k - 1]}")
        i64 = lambda v: g.constant(np.asarray(v, np.int64))  # noqa: E731
        if k == 1:
            seq = x
        elif past is None:
            seq = add(g, node, "Pad", [x, i64([0, 0, k - 1, 0, 0, 0])], tag="padded")[0]
        else:
            seq = add(g, node, "Concat", [past, x], {"axis": 2}, tag="padded")[0]
        y = add(g, node, "Conv", [seq, w] + ([b] if b is not None else []),
                {"group": c, "kernel_shape": [k]}, tag="conv")[0]
        if act != "none":
            y = add(g, node, "Mul", [y, add(g, node, "Sigmoid", [y])[0]], tag="silu")[0]
        outs = [y]
        if n_out > 1:
            if k == 1:
                raise _err(node, "a kernel of size 1 has an empty present_state; bundles hold "
                                 "no empty tensors")
            outs.append(add(g, node, "Slice", [seq, i64([length]), i64([length + k - 1]),
                                               i64([2])], tag="present_state")[0])
        return outs


@register
class TensorScatter(Composite):
    """present = past with `update` written along `axis` from each batch row's write index
    (0 without write_indices; modulo the cache length in circular mode): a ScatterElements
    whose indices are the write index plus 0..sequence_length-1. Positions past the cache's
    end in linear mode are not written (ScatterElements skips indices out of range)."""
    inputs = ("past_cache", "update", "write_indices?")
    attrs = {"axis": -2, "mode": "linear"}
    since = 24

    def expand(self, g, node, ins, n_out):
        past, upd, where = list(ins) + [None] * (3 - len(ins))
        mode = node.attrs["mode"]
        if mode not in ("linear", "circular"):
            raise _err(node, f"mode '{show(mode)}' is not linear or circular")
        r = len(past.shape)
        axis = norm_axis(node.attrs["axis"], r, node)
        if axis == 0 or len(upd.shape) != r or upd.dtype != past.dtype or any(
                u != p for d, (u, p) in enumerate(zip(upd.shape, past.shape)) if d != axis) \
                or upd.shape[axis] > past.shape[axis]:
            raise _err(node, f"update {upd.dtype.name}{list(upd.shape)} for past_cache "
                             f"{past.dtype.name}{list(past.shape)} along axis {axis} (not the "
                             "batch axis 0)")
        if where is not None and where.shape != (past.shape[0],):
            raise _err(node, f"write_indices {list(where.shape)}; it must be [{past.shape[0]}]")
        steps = np.arange(upd.shape[axis], dtype=np.int64).reshape(
            [-1 if d == axis else 1 for d in range(r)])
        idx = g.constant(steps)
        if where is not None:
            w = where if where.dtype == np.int64 else \
                add(g, node, "Cast", [where], {"to": np.dtype(np.int64)}, tag="indices64")[0]
            w = add(g, node, "Reshape", [w, g.constant(np.asarray([-1] + [1] * (r - 1),
                                                                  np.int64))], tag="start")[0]
            idx = add(g, node, "Add", [w, idx], tag="positions")[0]
            if mode == "circular":
                idx = add(g, node, "Mod", [idx, g.constant(np.int64(past.shape[axis]))],
                          tag="wrapped")[0]
        idx = add(g, node, "Expand", [idx, g.constant(np.asarray(upd.shape, np.int64))],
                  tag="indices")[0]
        return [add(g, node, "ScatterElements", [past, idx, upd], {"axis": axis})[0]]

    def reference(self, node, past, upd, where=None):
        """The spec's loop, positions outside the cache not written (as the kernel)."""
        axis = norm_axis(node.attrs["axis"], past.ndim, node)
        out, length = past.copy(), past.shape[axis]
        starts = np.zeros(past.shape[0], np.int64) if where is None else where.astype(np.int64)
        lead = (slice(None),) * (axis - 1)
        for b in range(past.shape[0]):
            for s in range(upd.shape[axis]):
                p = int(starts[b]) + s
                p = p % length if node.attrs["mode"] == "circular" else p + length if p < 0 else p
                if 0 <= p < length:
                    out[(b,) + lead + (p,)] = upd[(b,) + lead + (s,)]
        return [out]

"""A constant-mode Pad of the spatial dims merged into the Conv or pooling that reads it: the
window op's own padding does the same thing without the padded copy.

    Conv:        pad value 0
    AveragePool: pad value 0, and count_include_pad=1 afterwards (the padded zeros were real
                 elements counted in the divisor), so the pool must not have uncounted pads
    MaxPool:     pad value -inf (anything else could win the max)
Ceil-mode pools are left alone (where their last window may start depends on the padding)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node
from glowpy.ir.ops.registry import ints
from glowpy.ir.passes.util import only_user, remove, users


def _spatial_pads(pad: Node):
    """(begin, end) lists over the spatial dims, or None if Pad touches N/C or is not constant
    mode with constant operands."""
    mode = pad.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    x = pad.inputs[0]
    if mode != "constant" or len(x.shape) < 3:
        return None
    if any(v is not None and not v.is_const for v in pad.inputs[1:]):
        return None
    r = len(x.shape)
    pads = ints(pad.inputs[1].const) if pad.input(1) is not None else ints(pad.attrs.get("pads") or [])
    axes = ints(pad.input(3).const) if pad.input(3) is not None else list(range(r))
    if len(pads) != 2 * len(axes):
        return None
    full = [0] * (2 * r)
    for i, a in enumerate(axes):
        a = a + r if a < 0 else a
        full[a], full[a + r] = pads[i], pads[i + len(axes)]
    if any(p < 0 for p in full) or full[0] or full[1] or full[r] or full[r + 1]:
        return None
    return full[2:r], full[r + 2:]


def _pad_value(pad: Node) -> float:
    v = pad.input(2)
    if v is not None:
        return float(np.asarray(v.const).reshape(-1)[0]) if v.const.size else 0.0
    return float(pad.attrs.get("value", 0.0) or 0.0)


def merge_pad(graph: Graph) -> Graph:
    from glowpy.ir.ops.registry import has_op
    if not has_op("Pad"):
        return graph
    us = users(graph)
    merged = []
    for pad in list(graph.nodes):
        if pad.op != "Pad":
            continue
        y = pad.outputs[0]
        n = only_user(graph, y, us)
        if n is None or n.op not in ("Conv", "AveragePool", "MaxPool") or n.inputs[0] is not y:
            continue
        sp = _spatial_pads(pad)
        if sp is None:
            continue
        value = _pad_value(pad)
        if n.op in ("Conv", "AveragePool") and value != 0.0:
            continue
        if n.op == "MaxPool" and value != -np.inf:
            continue
        if n.op != "Conv" and n.attrs.get("ceil_mode"):
            continue
        auto = n.attrs.get("auto_pad", "NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID"):
            continue
        nd = len(sp[0])
        own = list(n.attrs.get("pads") or [0] * (2 * nd)) if auto == "NOTSET" else [0] * (2 * nd)
        if n.op == "AveragePool" and not n.attrs.get("count_include_pad") and any(own):
            continue
        new = [a + b for a, b in zip(own, sp[0] + sp[1])]
        n.attrs["pads"] = new
        n.attrs["auto_pad"] = "NOTSET"
        if n.op == "AveragePool":
            n.attrs["count_include_pad"] = 1
        if n.op == "Conv" and not n.attrs.get("kernel_shape"):
            n.attrs["kernel_shape"] = list(n.inputs[1].shape[2:])
        n.inputs = [pad.inputs[0]] + n.inputs[1:]
        us[pad.inputs[0]] = [n if u is pad else u for u in us.get(pad.inputs[0], [])]
        us.pop(y, None)
        merged.append(pad)
    remove(graph, *merged)  # once at the end: a removal per merge made the pass quadratic
    return graph

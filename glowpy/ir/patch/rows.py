"""What a node needs of its inputs to compute a band of its output rows, and the node that
computes just that band: the one table patch-based execution reads (rewrite.py).

A *row axis* is the dimension a stage is cut along: H (axis 2) of NCHW tensors, and whatever
axis maps onto it through a Transpose (axis 1 of an NHWC model input). A node is streamable
when every band [a, b) of its output rows is computed exactly, with the same arithmetic, from
bands of its inputs' rows: window ops (Conv, QConv, pools) through their window with the band's
own padding, elementwise ops row for row, Transpose through its permutation, Concat along
another axis. Everything else (global pools, reductions, reshapes, Resize, MatMul over the
rows...) ends the stage."""
from __future__ import annotations

from dataclasses import dataclass

from glowpy.ir import epilogue
from glowpy.ir.graph import Node, Value

WINDOW_OPS = {"Conv", "QConv", "MaxPool", "AveragePool", "QAvgPool"}
# per-element integer and quantization ops (their scalar attributes do not depend on position)
ROWWISE_OPS = {"QAdd", "QMul", "Requantize", "QTable", "QuantizeLinear", "DequantizeLinear",
               "FusedElementwise", "Cast"}


@dataclass(frozen=True)
class Need:
    """Rows [lo, hi) of an input along its axis `axis` (None: the whole input, unsliced)."""
    axis: int | None
    lo: int = 0
    hi: int = 0


WHOLE = Need(None)


def _rowwise_input(v: Value, out: Value, ax: int, a: int, b: int) -> Need | None:
    """An operand that broadcasts to the output: its rows if it spans them, whole if it is
    constant along them; None if it is neither (not streamable)."""
    if v is None:
        return WHOLE
    k = ax - (len(out.shape) - len(v.shape))
    if k < 0 or v.shape[k] == 1:
        return WHOLE
    if v.shape[k] == out.shape[ax]:
        return Need(k, a, b)
    return None


def _window(node: Node):
    """node's Window, computed once per node (the band search asks for it ~10^5 times)."""
    win = node.__dict__.get("_patch_window")
    if win is None:
        win = node._patch_window = node.opdef.window(node)
    return win


def _window_need(node: Node, a: int, b: int) -> Need:
    win = _window(node)
    s, pt, h = win.strides[0], win.pads_begin[0], win.in_size[0]
    eff = (win.kernel[0] - 1) * win.dilations[0] + 1
    return Need(2, max(0, a * s - pt), min(h, (b - 1) * s - pt + eff))


def needs(node: Node, ax: int, a: int, b: int) -> list[Need] | None:
    """Per input of `node`: what computing output rows [a, b) along axis `ax` reads; None when
    the node cannot compute a band of rows along that axis."""
    out = node.outputs[0]
    if len(node.outputs) != 1 or b <= a:
        return None
    base = epilogue.base_count(node)
    if node.op in WINDOW_OPS:
        win = _window(node)
        if len(out.shape) != 4 or ax != 2 or node.attrs.get("ceil_mode") or len(win.kernel) != 2:
            return None
        first = [_window_need(node, a, b)] + [WHOLE] * (base - 1)
        if any(v is not None and not v.is_const for v in node.inputs[1:base]):
            return None  # run-time weights: kept simple, such models are not MCU models
        rest = [_rowwise_input(v, out, ax, a, b) for v in node.inputs[base:]]
        return None if None in rest else first + rest
    if node.op == "Transpose":
        perm = node.opdef.perm(node)
        return [Need(perm[ax], a, b)]
    if node.op == "Concat":
        if node.attrs["axis"] % len(out.shape) == ax:
            return None
        return [Need(ax, a, b) if v is not None else WHOLE for v in node.inputs]
    if "elementwise" in node.opdef.traits or node.op in ROWWISE_OPS:
        if node.op in ("QuantizeLinear", "DequantizeLinear") and len(node.inputs) > 1 and \
                node.inputs[1].shape and node.attrs["axis"] % len(out.shape) == ax:
            return None  # per-row scales would need slicing too
        rest = [_rowwise_input(v, out, ax, a, b) for v in node.inputs]
        return None if None in rest else rest
    return None


def band_attrs(node: Node, a: int, b: int) -> dict:
    """The node's attributes for computing output rows [a, b) from the input band `needs`
    gave: window ops get the band's own top/bottom padding (the first band keeps the top
    padding, the last the bottom one, inner bands none), every other attribute is the node's."""
    attrs = dict(node.attrs)
    if node.op not in WINDOW_OPS:
        return attrs
    win = _window(node)
    s, pt, h = win.strides[0], win.pads_begin[0], win.in_size[0]
    eff = (win.kernel[0] - 1) * win.dilations[0] + 1
    start, end = a * s - pt, (b - 1) * s - pt + eff  # the window rows, padding included
    top, bottom = max(0, -start), max(0, end - h)
    attrs["pads"] = [top, win.pads_begin[1], bottom, win.pads_end[1]]
    attrs["auto_pad"] = "NOTSET"
    return attrs

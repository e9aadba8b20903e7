"""QLinearMatMul and QLinearConv that no integer kernel takes, as float32 ops on the centred
integers: (x - x_zp) op (w - w_zp) (+ the int32 bias), times x_scale * w_scale / y_scale,
rounded half to even onto y_zero_point's grid (a QuantizeLinear at scale 1). That is
onnxruntime's order of operations (integer products, one float multiplier per output
channel), and the products are exact integers while the accumulator stays below 2^24
(K up to 258 at full range; larger sums round in float before the multiplier).

Used where fold_qlinear (qlinear.py) cannot fold the operands into an integer kernel: B of a
QLinearMatMul computed at run time (the attention of a quantize_static QOperator transformer),
per-row A, weights of a QLinearConv computed at run time (StyleGAN2's modulated
convolutions), scales or zero points that are not constants. Parameters known at compile time
become float constants here, the others Casts and products."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops.quant import CONV_ATTRS
from glowpy.ir.passes.util import insert_node

F32 = {"to": np.dtype(np.float32)}


class _Builder:
    """Nodes inserted where `n` was (n leaves the node list), named after it."""

    def __init__(self, graph: Graph, n: Node):
        self.g, self.n = graph, n
        self.at = graph.nodes.index(n)
        graph.nodes.remove(n)

    def node(self, op, inputs, attrs=None, tag="", out=None) -> Value:
        v = insert_node(self.g, op, inputs, attrs or {}, f"{self.n.name}/{tag}", self.at, out=out,
                        out_name=f"{self.n.name}_{tag}")
        self.at += 1
        return v

    def real(self, v: Value, shape: tuple, tag: str) -> Value:
        """v as float32; a parameter of more than one element reshaped to `shape` (to broadcast
        along the axis it belongs to)."""
        shape = shape if v.size > 1 else v.shape
        if v.is_const:
            return self.g.constant(np.asarray(v.const, np.float32).reshape(shape),
                                   f"{self.n.name}_{tag}")
        f = self.node("Cast", [v], F32, tag=tag)
        return f if tuple(shape) == f.shape else \
            self.node("Reshape", [f, self.g.constant(np.array(shape, np.int64))], tag=tag + "_axis")

    def centred(self, x: Value, z: Value, shape: tuple, tag: str) -> Value:
        return self.node("Sub", [self.node("Cast", [x], F32, tag=f"{tag}_float"),
                                 self.real(z, shape, f"{tag}_zp")], tag=f"{tag}_centred")

    def finish(self, acc: Value, sx: Value, sw: Value, sy: Value, yz: Value):
        """acc * (sx * sw / sy), rounded onto yz's grid, into n's output."""
        if sx.is_const and sw.is_const and sy.is_const:
            mult = self.g.constant(sx.const * sw.const / sy.const, f"{self.n.name}_multiplier")
        else:
            mult = self.node("Div", [self.node("Mul", [sx, sw], tag="xw_scale"), sy],
                             tag="multiplier")
        scaled = self.node("Mul", [acc, mult], tag="scaled")
        self.node("QuantizeLinear", [scaled, self.g.constant(np.float32(1), f"{self.n.name}_one"),
                                     yz], tag="round", out=self.n.outputs[0])


def float_matmul(graph: Graph, n: Node, ins: list):
    """QLinearMatMul: A's parameters per tensor or per row ([M]), B's per column ([N])."""
    a, sa, az, b, sb, bz, sy, yz = ins
    rows = (a.shape[-2], 1) if len(a.shape) >= 2 else (1,)
    cols = (b.shape[-1],)
    f = _Builder(graph, n)
    acc = f.node("MatMul", [f.centred(a, az, rows, "a"), f.centred(b, bz, cols, "b")], tag="acc")
    f.finish(acc, f.real(sa, rows, "a_scale"), f.real(sb, cols, "b_scale"),
             f.real(sy, (), "y_scale"), yz)


def float_conv(graph: Graph, n: Node, ins: list):
    """QLinearConv: x's parameters per tensor, w's per tensor or per output channel, the
    optional int32 bias added to the accumulator. The float Conv pads with 0, which is x's
    zero point once x is centred (QLinearConv pads with the zero point)."""
    x, sx, xz, w, sw, wz, sy, yz, bias = ins + [None] * (9 - len(ins))
    cout, r = w.shape[0], len(w.shape)
    per_w = (cout,) + (1,) * (r - 1)       # [Cout, 1, ...] along the weights
    per_y = (1, cout) + (1,) * (r - 2)     # [1, Cout, 1, ...] along the output
    f = _Builder(graph, n)
    args = [f.centred(x, xz, (), "x"), f.centred(w, wz, per_w, "w")]
    if bias is not None:
        args.append(f.real(bias, (cout,), "bias"))
    acc = f.node("Conv", args, {k: n.attrs[k] for k in CONV_ATTRS}, tag="acc")
    f.finish(acc, f.real(sx, (), "x_scale"), f.real(sw, per_y, "w_scale"),
             f.real(sy, (), "y_scale"), yz)

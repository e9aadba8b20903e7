"""The QDQ patterns of the QDQ pass (fold.py: the pass, its order and rounding modes). Each is
recognised at its QuantizeLinear, walking up: an optional Relu/Clip (folded as the clamp
[lo, hi]), the float op, and DequantizeLinear operands with constant parameters (per-tensor for
activations; per-tensor or per-axis for constant weights). The integer node takes the
QuantizeLinear's output Value and its place; the float nodes it replaces are left to dead-code
removal (a DequantizeLinear that also feeds a float consumer stays for it). What does not match
keeps its float form."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir import qmath
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops import get_op
from glowpy.ir.ops.elementwise import UNARY
from glowpy.ir.ops.qops import softmax_table
from glowpy.ir.ops.quant import CONV_ATTRS
from glowpy.ir.passes.quant.operands import (Operand, const_weight, dq_operand, fold_zero_point,
                                             integer_weights, reads_padding, tensor_params)
from glowpy.ir.passes.quant.moves import MoveFolds
from glowpy.ir.passes.quant.rules import MOVES, act_bounds, clamped_host
from glowpy.ir.passes.util import insert_node, only_user

POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides",
              "dilations")


class Folder(MoveFolds):
    """The patterns at a QuantizeLinear (fold); the ops that move or select values are
    moves.MoveFolds'."""

    def __init__(self, graph: Graph):
        self.g = graph
        self.mode = getattr(graph, "quant_rounding", "even")
        self.users = graph.consumers()

    # -- building --------------------------------------------------------------------------
    def node(self, op: str, inputs: list, attrs: dict, out: Value | None, name: str,
             before: Node) -> Value:
        """Adds an integer node in front of `before`; writes `out` (or a new Value). The
        readers' index (self.users) follows every node added here and every QuantizeLinear
        removed in fold, the only two changes the patterns make: built afresh after each fold,
        it took 15 of the 41 s of an unrolled Mamba-style int8 model's compile (1,845
        QuantizeLinear)."""
        v = insert_node(self.g, op, inputs, attrs, name, self.g.nodes.index(before), out,
                        f"{name}_q")
        for x in v.producer.inputs:
            if x is not None:
                self.users.setdefault(x, []).append(v.producer)
        return v

    def const(self, a, name):
        return self.g.constant(np.ascontiguousarray(a), name)

    def req_attrs(self, out_s: float, out_z: int, dtype, act: Node | None) -> dict:
        lo, hi = qmath.activation_range(act.op if act is not None else None,
                                        act_bounds(act), out_s, out_z, dtype)
        return {"y_zp": out_z, "lo": lo, "hi": hi, "mode": self.mode,
                "out_dtype": np.dtype(dtype).name}

    def rescale(self, src: Operand, out_s, out_z, dtype, act, before, name, out=None) -> Value:
        """src requantized to (out_s, out_z) and clamped; src itself when nothing changes."""
        attrs = self.req_attrs(out_s, out_z, dtype, act)
        same = src.s == out_s and src.z == out_z and src.value.dtype == np.dtype(dtype)
        info = np.iinfo(dtype)
        if same and out is None and (attrs["lo"], attrs["hi"]) == (info.min, info.max):
            return src.value
        q, s = (1 << 30, 1) if src.s == out_s else qmath.quantize_multiplier(src.s / out_s)
        return self.node("Requantize", [src.value], dict(attrs, x_zp=src.z, q=q, s=s), out,
                         name, before)

    # -- the patterns ----------------------------------------------------------------------
    def fold(self, q: Node) -> bool:
        prm = tensor_params(q)
        if prm is None:
            return False
        out = q.outputs[0]
        (ys, yz), dt = prm, out.dtype
        out.qparams = (ys, yz)
        v = q.inputs[0]
        host = v.producer  # (if v has float readers besides q, the float nodes stay for them)
        if host is None:
            return False
        act, inner = None, clamped_host(self.g, host, self.users)
        if inner is not None:
            act, host = host, inner
        fn = getattr(self, "fold_" + host.op, None)
        if fn is None and host.op in MOVES:
            fn = self.fold_move
        elif fn is None and host.op in UNARY:
            fn = self.fold_unary
        if fn is None:
            return False
        try:
            res = fn(host, act, (ys, yz, dt), out, q)
        except ValueError as e:  # qmath: a scale ratio no int32 multiplier can express
            raise ModelError(f"node '{host.name}' ({host.op}) quantized by '{q.name}': {e}; "
                             "its input, weight and output scales are too far apart for "
                             "integer requantization, fix the model's scales") from None
        if res:
            self.g.nodes.remove(q)
            for x in q.inputs:
                if x is not None:
                    self.users[x].remove(q)
        return bool(res)

    def fold_Conv(self, host, act, yq, out, q):
        x, w = dq_operand(host.inputs[0]), const_weight(host.inputs[1])
        if x is None or w is None or len(w.value.shape) != len(x.value.shape):
            return False
        cout = w.value.shape[0]
        if not w.scalar and w.axis != 0:
            return False
        sw = np.broadcast_to(w.scale.reshape(-1), (cout,)).astype(np.float64)
        bias = self.bias(host.input(2), x.s * sw, cout)
        if bias is None:
            return False
        ys, yz, dt = yq
        m, s = qmath.multipliers(np.float64(x.s) * sw / np.float64(ys))
        attrs = {k: host.attrs[k] for k in CONV_ATTRS}
        attrs.update(self.req_attrs(ys, yz, dt, act), x_zp=x.z)
        wq = integer_weights(w.value.const, w.zp, 0)
        if not reads_padding(host):
            bias, attrs["x_zp"] = fold_zero_point(bias, wq, x.z)
        self.node("QConv", [x.value, self.const(wq, "qconv_w"),
                            self.const(bias, "qconv_b"), self.const(m, "qconv_m"),
                            self.const(s, "qconv_s")], attrs, out, host.name, q)
        return True

    def bias(self, v: Value | None, scales: np.ndarray, n: int):
        """int32 bias on the accumulator's grid (scale x_s * w_s per channel)."""
        if v is None:
            return np.zeros(n, np.int32)
        b = dq_operand(v, scalar=False)
        if b is not None and b.value.is_const:
            if b.value.size != n:
                return None
            bs = np.broadcast_to(b.scale.reshape(-1).astype(np.float64), (n,))
            raw = b.value.const.reshape(-1).astype(np.int64) - \
                np.broadcast_to(b.zp.reshape(-1).astype(np.int64), (n,))
            if b.value.dtype == np.int32 and np.allclose(bs, scales, rtol=1e-6, atol=0):
                return raw.astype(np.int32)
            real = raw * bs  # another grid (an int8 bias): rounded onto the accumulator's
        elif v.is_const:
            real = v.const.reshape(-1).astype(np.float64)
        else:
            return None
        if real.size != n:
            return None
        return np.clip(np.rint(real / scales), -2 ** 31, 2 ** 31 - 1).astype(np.int32)

    def fold_Add(self, host, act, yq, out, q):
        mm = [x.producer for x in host.inputs if x.producer is not None and
              x.producer.op == "MatMul" and only_user(self.g, x, self.users) is host]
        if mm:
            other = [x for x in host.inputs if x is not mm[0].outputs[0]][0]
            return self.matmul(mm[0].inputs[0], mm[0].inputs[1], other, act, yq, out, q,
                               host.name)
        return self.binary(host, act, yq, out, q)

    def fold_Mul(self, host, act, yq, out, q):
        return self.binary(host, act, yq, out, q)

    def fold_MatMul(self, host, act, yq, out, q):
        return self.matmul(host.inputs[0], host.inputs[1], None, act, yq, out, q, host.name)

    def fold_Gemm(self, host, act, yq, out, q):
        t = host.attrs
        if t["transA"] or t["alpha"] != 1.0 or (host.input(2) is not None and t["beta"] != 1.0):
            return False
        w = const_weight(host.inputs[1])
        if w is None:
            return False
        return self.matmul(host.inputs[0], host.inputs[1], host.input(2), act, yq, out, q,
                           host.name, trans_b=bool(t["transB"]))

    def matmul(self, a_v, b_v, bias_v, act, yq, out, q, name, trans_b=False):
        a, w = dq_operand(a_v), const_weight(b_v)
        if a is None or w is None or len(w.value.shape) != 2 or len(a.value.shape) < 1:
            return False
        wc = w.value.const.T if trans_b else w.value.const
        n = wc.shape[1]
        col_axis = 0 if trans_b else 1
        if not w.scalar and w.axis != col_axis:
            return False
        sw = np.broadcast_to(w.scale.reshape(-1), (n,)).astype(np.float64)
        if bias_v is not None and tuple(bias_v.shape) not in ((n,), (1, n)):
            return False
        bias = self.bias(bias_v, a.s * sw, n)
        if bias is None:
            return False
        ys, yz, dt = yq
        m, s = qmath.multipliers(np.float64(a.s) * sw / np.float64(ys))
        attrs = dict(self.req_attrs(ys, yz, dt, act), a_zp=a.z)
        wt = integer_weights(wc, w.zp, 1).T
        bias, attrs["a_zp"] = fold_zero_point(bias, wt, a.z)
        self.node("QMatMul", [a.value, self.const(wt, "qmm_w"), self.const(bias, "qmm_b"),
                              self.const(m, "qmm_m"), self.const(s, "qmm_s")], attrs, out, name, q)
        return True

    def binary(self, host, act, yq, out, q):
        a, b = dq_operand(host.inputs[0]), dq_operand(host.inputs[1])
        if a is None or b is None:
            return False
        ys, yz, dt = yq
        attrs = dict(self.req_attrs(ys, yz, dt, act), a_zp=a.z, b_zp=b.z)
        if host.op == "Mul":
            attrs["y_q"], attrs["y_s"] = qmath.quantize_multiplier(a.s * b.s / ys)
        else:
            twice = 2.0 * max(a.s, b.s)
            attrs["a_q"], attrs["a_s"] = qmath.quantize_multiplier(a.s / twice)
            attrs["b_q"], attrs["b_s"] = qmath.quantize_multiplier(b.s / twice)
            attrs["y_q"], attrs["y_s"] = qmath.quantize_multiplier(twice / ((1 << 20) * ys))
        self.node("Q" + host.op, [a.value, b.value], attrs, out, host.name, q)
        return True

    def fold_AveragePool(self, host, act, yq, out, q, kernel=None):
        x = dq_operand(host.inputs[0])
        if x is None or len(x.value.shape) < 3:
            return False
        ys, yz, dt = yq
        attrs = {k: host.attrs[k] for k in POOL_ATTRS if k in host.attrs}
        if kernel is not None:
            attrs = {"kernel_shape": kernel}
        attrs.update(self.req_attrs(ys, yz, dt, act), x_zp=x.z, same_scale=int(x.s == ys))
        if x.s != ys:
            tmp = Node("QAvgPool", host.name, [x.value], [],
                       get_op("QAvgPool").complete_attrs(attrs, host.name))
            counts = get_op("QAvgPool").counts(tmp)
            if len(set(counts.reshape(-1).tolist())) != 1:
                return False
            attrs["q"], attrs["s"] = qmath.quantize_multiplier(
                x.s / (ys * float(counts.reshape(-1)[0])))
        self.node("QAvgPool", [x.value], attrs, out, host.name, q)
        return True

    def fold_GlobalAveragePool(self, host, act, yq, out, q):
        x = host.inputs[0]
        return self.fold_AveragePool(host, act, yq, out, q, kernel=list(x.shape[2:]))

    def fold_DequantizeLinear(self, host, act, yq, out, q):
        x = dq_operand(host.outputs[0])
        if x is None:
            return False
        ys, yz, dt = yq
        return self.rescale(x, ys, yz, dt, act, q, host.name, out) is not None

    def fold_Relu(self, host, act, yq, out, q):
        dq = host.inputs[0].producer
        if dq is None or act_bounds(host) is None:
            return False
        return self.fold_DequantizeLinear(dq, host, yq, out, q)

    fold_Clip = fold_Relu

    def fold_Softmax(self, host, act, yq, out, q):
        x = dq_operand(host.inputs[0])
        if x is None or act is not None:
            return False
        ys, yz, dt = yq
        attrs = dict(self.req_attrs(ys, yz, dt, None), axis=host.attrs["axis"], y_scale=ys)
        if host.attrs.get("_coerce2d"):  # opset < 13: normalized over the flattened trailing dims
            attrs["_coerce2d"] = True
        self.node("QSoftmax", [x.value, self.const(softmax_table(x.s), "qsoftmax_t")], attrs,
                  out, host.name, q)
        return True

    def fold_unary(self, host, act, yq, out, q):
        """Any unary float op (with a Relu/Clip after it), or a chain of them with binary ops
        by constant single values between (GELU's x / sqrt(2) -> Erf, as onnxruntime's
        QOperator quantizer leaves it between a DequantizeLinear and a QuantizeLinear), as a
        256-entry table, computed with the ops' own references: exactly the model's float
        semantics on every input value. ConvNeXt-T in that format (AVX2 code, Zen 4): its 18
        Div -> Erf chains, their DequantizeLinear and QuantizeLinear took 9.4 of 64 ms."""
        chain = float_chain(host)
        x = None if chain is None else dq_operand(chain[0].inputs[_variable(chain[0])])
        if x is None or x.value.dtype.itemsize != 1:
            return False
        ys, yz, dt = yq
        lo = np.iinfo(x.value.dtype).min
        grid = np.arange(lo, lo + 256).astype(x.value.dtype)
        f = qmath.dequantize(grid, x.scale, x.zp)
        for n in chain:
            f = _apply(n, f)
        if act is not None:
            tmp = Node(act.op, act.name, [Value("x", np.float32, f.shape)] + act.inputs[1:], [],
                       dict(act.attrs))
            f = get_op(act.op).reference(tmp, f, *[None if v is None else v.const
                                                  for v in act.inputs[1:]])[0]
        table = qmath.quantize(f, np.float32(ys), np.asarray(yz, dt), dt)
        self.node("QTable", [x.value, self.const(table, "qtable")], {}, out, host.name, q)
        return True


CHAIN_MAX = 8  # float ops a table may stand for
# binary ops a chain may hold, by a constant single value (either operand)
CHAIN_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")


def _variable(n: Node) -> int:
    """The index of n's one non-constant input."""
    return next(i for i, v in enumerate(n.inputs) if v is not None and not v.is_const)


def _link(n: Node) -> bool:
    """n may be a link of a float chain: a unary op, or a binary one whose other operand is a
    constant single value."""
    ins = [v for v in n.inputs if v is not None]
    var = [v for v in ins if not v.is_const]
    if n.outputs[0].dtype != np.float32 or len(var) != 1 or var[0].shape != n.outputs[0].shape:
        return False  # (a constant that broadcasts the value to more dims: not elementwise)
    if n.op in UNARY:
        return len(n.inputs) == 1
    return n.op in CHAIN_BINARY and len(ins) == 2 and ins[ins[0] is var[0]].size == 1


def float_chain(host: Node) -> list | None:
    """[first, ..., host]: the links (_link) from one reading a DequantizeLinear's output up
    to host, each reading the one before; None where host is none or the walk finds no
    DequantizeLinear within CHAIN_MAX links."""
    chain = []
    n = host
    while n is not None and _link(n) and len(chain) < CHAIN_MAX:
        chain.insert(0, n)
        v = n.inputs[_variable(n)]
        if dq_operand(v) is not None:
            return chain
        n = v.producer
    return None


def _apply(n: Node, f: np.ndarray) -> np.ndarray:
    """n's reference on the values f of its variable input (its constant as it is), flat."""
    i = _variable(n)
    ins = [Value("x", np.float32, f.shape) if j == i else v for j, v in enumerate(n.inputs)]
    tmp = Node(n.op, n.name, ins, [], dict(n.attrs))
    args = [f if j == i else v.const for j, v in enumerate(n.inputs)]
    return np.asarray(get_op(n.op).reference(tmp, *args)[0], np.float32).reshape(-1)

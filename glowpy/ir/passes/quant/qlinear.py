"""ONNX's integer ops as the integer ops of ops/qops.py (part of the QDQ pass, fold.py):

  QLinearConv    -> QConv   (requantized, rounding half to even as ONNX specifies); with
                    weights computed at run time (StyleGAN2's modulated convolutions) as float
                    ops on the centred integers (float_form.py)
  ConvInteger    -> QConv   (out_dtype int32: the accumulator itself)
  QLinearMatMul  -> QMatMul (constant 2-D B); otherwise (B computed at run time, as in the
                    attention of a quantize_static QOperator transformer, or per-row A) as
                    float ops on the centred integers (float_form.py)
  MatMulInteger  -> QMatMul (out_dtype int32; constant 2-D B)

Zero points and scales must be constants; the input's per tensor, the weights' per tensor or
per output channel. ConvInteger/MatMulInteger also take a run-time scalar input zero point
(quantize_dynamic: DynamicQuantizeLinear computes it): the integer op without it, then an int32
correction (_runtime_zero_point). A node that does not qualify stays as it is (its numpy reference folds it
when everything is constant; otherwise codegen reports the op as unsupported)."""
from __future__ import annotations

import numpy as np

from glowpy.ir import qmath
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.ops import get_op
from glowpy.ir.ops.quant import CONV_ATTRS, int_conv
from glowpy.ir.passes.quant.float_form import float_conv, float_matmul
from glowpy.ir.passes.quant.operands import fold_zero_point, integer_weights, reads_padding
from glowpy.ir.passes.util import insert_node


def _c(v, default=None):
    if v is None:
        return default
    return np.asarray(v.const) if v.is_const else None


def _scalar(a) -> bool:
    return a is not None and a.size == 1


def _replace(graph: Graph, n: Node, op: str, inputs: list, attrs: dict):
    opdef = get_op(op)
    new = Node(op, n.name, inputs, n.outputs, opdef.complete_attrs(attrs, n.name))
    (dt, shape), = opdef.infer_node(new)
    assert (dt, shape) == (n.outputs[0].dtype, n.outputs[0].shape), (op, dt, shape)
    n.outputs[0].producer = new
    graph.nodes[graph.nodes.index(n)] = new


def _conv(graph, n, x, xz, w, wz, bias, req):
    cout = w.shape[0]
    attrs = {k: n.attrs[k] for k in CONV_ATTRS}
    attrs.update(req, x_zp=int(xz.reshape(-1)[0]))
    m, s = req.pop("_m", (np.zeros(1, np.int32), np.zeros(1, np.int32)))
    attrs.pop("_m", None)
    b = np.zeros(cout, np.int32) if bias is None else bias.astype(np.int32).reshape(-1)
    wq = integer_weights(w, wz, 0)
    if not reads_padding(n, x, Value("w", wq.dtype, wq.shape)):
        b, attrs["x_zp"] = fold_zero_point(b, wq, attrs["x_zp"])
    _replace(graph, n, "QConv", [x, graph.constant(wq, "qconv_w"),
                                 graph.constant(b, "qconv_b"), graph.constant(m, "qconv_m"),
                                 graph.constant(s, "qconv_s")], attrs)


def _req(ys, yz, reals):
    m, s = qmath.multipliers(reals)
    info = np.iinfo(yz.dtype)
    return {"y_zp": int(yz.reshape(-1)[0]), "lo": int(info.min), "hi": int(info.max),
            "mode": "even", "out_dtype": yz.dtype.name, "_m": (m, s)}


def _matmul(graph, n, a, az, b, bz, req):
    m, s = req.pop("_m", (np.zeros(1, np.int32), np.zeros(1, np.int32)))
    attrs = dict(req, a_zp=int(az.reshape(-1)[0]))
    wt = np.ascontiguousarray(integer_weights(b, bz, 1).T)
    bias, attrs["a_zp"] = fold_zero_point(np.zeros(b.shape[1], np.int32), wt, attrs["a_zp"])
    _replace(graph, n, "QMatMul", [a, graph.constant(wt, "qmm_w"), graph.constant(bias, "qmm_b"),
                                   graph.constant(m, "qmm_m"), graph.constant(s, "qmm_s")], attrs)


INT32 = {"out_dtype": "int32", "y_zp": 0, "lo": 0, "hi": 0, "mode": "even"}


def _runtime_zero_point(graph: Graph, n: Node, x: Value, xz: Value, w: np.ndarray, wz):
    """ConvInteger / MatMulInteger whose input zero point is a run-time scalar (the pattern of
    onnxruntime's quantize_dynamic): the integer op without it, minus zp * (the sum of the
    weights each output reads), an int32 constant per output channel (MatMul, and Conv
    without padding) or per output position (Conv windows reaching into the padding, where
    onnxruntime pads with the zero point, which adds nothing after the subtraction)."""
    y = n.outputs[0]
    tmp = Value(f"{n.name}_acc", np.int32, y.shape)
    n.outputs = [tmp]
    tmp.producer = n
    if n.op == "ConvInteger":
        wq = integer_weights(w, wz, 0)
        if reads_padding(n, x, Value("w", wq.dtype, wq.shape)):
            ones = np.ones((1,) + x.shape[1:], np.int64)
            sums = int_conv(n, ones, wq.astype(np.int64))
        else:
            sums = wq.reshape(wq.shape[0], -1).astype(np.int64).sum(1).reshape(
                (1, -1) + (1,) * (len(y.shape) - 2))
        _conv(graph, n, x, np.zeros(1, x.dtype), w, wz, None, dict(INT32))
    else:
        wq = integer_weights(w, wz, 1)
        sums = wq.astype(np.int64).sum(0)
        _matmul(graph, n, x, np.zeros(1, x.dtype), w, wz, dict(INT32))
    at = graph.nodes.index(tmp.producer) + 1  # (_replace made the integer op tmp's producer)
    zp = insert_node(graph, "Cast", [xz], {"to": np.dtype(np.int32)}, f"{n.name}_zp", at,
                     out_name=f"{n.name}_zp")
    corr = insert_node(graph, "Mul", [zp, graph.constant(sums.astype(np.int32), f"{n.name}_wsum")],
                       {}, f"{n.name}_zp_wsum", at + 1, out_name=f"{n.name}_zp_wsum")
    insert_node(graph, "Sub", [tmp, corr], {}, f"{n.name}_sub", at + 2, out=y)


def fold_qlinear(graph: Graph):
    for n in list(graph.nodes):
        ins = [n.input(i) for i in range(len(n.inputs))]
        if n.op == "QLinearConv":
            x, xs, xz, w, ws, wz, ys, yz, b = ins + [None] * (9 - len(ins))
            xs, xz, wc, ws, wz, ys, yz = map(_c, (xs, xz, w, ws, wz, ys, yz))
            bc = _c(b, np.zeros(1, np.int32)) if b is not None else None
            if any(a is None for a in (xs, xz, wc, ws, wz, ys, yz)) or \
                    (b is not None and bc is None) or \
                    not (_scalar(xs) and _scalar(xz) and _scalar(ys) and _scalar(yz)):
                float_conv(graph, n, ins)
                continue
            cout = wc.shape[0]
            reals = np.float64(xs.reshape(-1)[0]) * np.broadcast_to(
                ws.reshape(-1).astype(np.float64), (cout,)) / np.float64(ys.reshape(-1)[0])
            _conv(graph, n, x, xz, wc, wz, bc, _req(ys, yz, reals))
        elif n.op == "ConvInteger":
            x, w, xz, wz = ins + [None] * (4 - len(ins))
            xzc = _c(xz, np.zeros(1, x.dtype))
            wzc = _c(wz, np.zeros(1, np.int64))
            wc = _c(w)
            if wc is None or wzc is None:
                continue
            if xzc is None:  # a zero point computed at run time (DynamicQuantizeLinear)
                if xz.size == 1:
                    _runtime_zero_point(graph, n, x, xz, wc, wzc)
                continue
            if not _scalar(xzc):
                continue
            _conv(graph, n, x, xzc, wc, wzc, None, dict(INT32))
        elif n.op in ("QLinearMatMul", "MatMulInteger"):
            if n.op == "QLinearMatMul":
                a, as_, az, b, bs, bz, ys, yz = ins
                as_, az, bc, bs, bz, ys, yz = map(_c, (as_, az, b, bs, bz, ys, yz))
                if any(v is None for v in (as_, az, bc, bs, bz, ys, yz)) or \
                        not (_scalar(as_) and _scalar(az) and _scalar(ys) and _scalar(yz)) or \
                        bc.ndim != 2 or len(a.shape) < 2:
                    float_matmul(graph, n, ins)
                    continue
            else:
                a, b, az_v, bz = ins + [None] * (4 - len(ins))
                az, bz, bc = _c(az_v, np.zeros(1, a.dtype)), _c(bz, np.zeros(1, np.int64)), _c(b)
                if az is None and bz is not None and bc is not None and bc.ndim == 2 \
                        and len(a.shape) >= 2 and az_v.size == 1:
                    _runtime_zero_point(graph, n, a, az_v, bc, bz)
                    continue
                if az is None or bz is None or bc is None or not _scalar(az):
                    continue
            if bc.ndim != 2 or len(a.shape) < 2:
                continue
            ncol = bc.shape[1]
            if n.op == "QLinearMatMul":
                reals = np.float64(as_.reshape(-1)[0]) * np.broadcast_to(
                    bs.reshape(-1).astype(np.float64), (ncol,)) / np.float64(ys.reshape(-1)[0])
                req = _req(ys, yz, reals)
            else:
                req = dict(INT32)
            _matmul(graph, n, a, az, bc, bz, req)


INTEGER_OPS = frozenset({"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"})


def lower_qlinear(graph: Graph) -> Graph:
    """fold_qlinear as a pass of its own, required at -O0 too: these ops have no kernels of
    their own (their integer ops and float forms are what runs), so a QOperator model compiled
    with -O0 was refused ("no kernel for this op")."""
    if any(n.op in INTEGER_OPS for n in graph.nodes):
        fold_qlinear(graph)
    return graph

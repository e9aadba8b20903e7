"""Profile-guided quantization (`model-compiler -load-profile=profile.yaml`): the float graph
gets QuantizeLinear/DequantizeLinear pairs from the profiled ranges, then the QDQ pass
(fold.py) turns them into the same integer kernels a pre-quantized model gets.

It runs after the float rewrites that change weights (BatchNormalization and affine folding,
Pad merging) and before activation fusion: the profile was recorded by `model-profiler` on the
graph as it is at this point (tensor names match), and a Relu/Clip must still be a node to
become the integer op's clamp.

What is quantized: Conv, MatMul/Gemm with constant weights (and a bias Add after a MatMul),
Add, Mul, AveragePool, GlobalAveragePool, MaxPool, Concat, Reshape/Transpose-like views,
Relu/Clip, Softmax, Sigmoid and Tanh -- except the op types of
-keep-original-precision-for-nodes. Activations get (scale, offset) from their range by
-quantization-schema (after -quantization-calibration=KL, if asked); weights are symmetric int8
(per output channel with -enable-channelwise); biases int32 on the accumulator's grid (or int8,
-quantization-precision-bias=Int8). MaxPool and views keep their input's parameters. Graph
inputs and outputs stay float (a QuantizeLinear / DequantizeLinear kernel at the edge) unless
-model-input declared an input int8q."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir import qschema
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.passes.quant.fold import fold_quantization
from glowpy.ir.passes.quant.rules import ACTS, QUANTIZABLE, SAME_GRID, clamped_host
from glowpy.ir.passes.util import insert_node, only_user


def _float(v: Value | None) -> bool:
    return v is not None and v.dtype == np.float32


class Quantizer:
    def __init__(self, graph: Graph, profile, opts):
        self.g, self.profile, self.opts = graph, profile, opts
        self.users = graph.consumers()
        self.grid: dict = {}  # float Value -> (scale, offset)
        self.dq: dict = {}  # float Value -> its DequantizeLinear(QuantizeLinear(v)) Value

    # -- which nodes ---------------------------------------------------------------------------
    def eligible(self, n: Node) -> bool:
        if n.op not in QUANTIZABLE or n.op in self.opts.keep or len(n.outputs) != 1 or \
                n.attrs.get("_epilogue") or not _float(n.outputs[0]):
            return False
        ins = n.inputs
        if n.op == "Conv":
            return not ins[0].is_const and ins[1].is_const and \
                (n.input(2) is None or n.input(2).is_const) and _float(ins[0])
        if n.op in ("MatMul", "Gemm"):
            if n.op == "Gemm" and (n.attrs["transA"] or n.attrs["alpha"] != 1.0 or
                                   n.attrs["beta"] != 1.0):
                return False
            return not ins[0].is_const and ins[1].is_const and len(ins[1].shape) == 2 and \
                (n.input(2) is None or n.input(2).is_const) and _float(ins[0])
        if n.op in ACTS:
            return not ins[0].is_const and all(v is None or v.is_const for v in ins[1:])
        if n.op in ("Add", "Mul"):
            return all(_float(v) for v in ins) and not all(v.is_const for v in ins)
        if n.op == "Concat":
            return all(v is not None and not v.is_const and _float(v) for v in ins)
        return not ins[0].is_const and _float(ins[0])

    def plan(self):
        nodes = [n for n in self.g.nodes if self.eligible(n)]
        chosen = set(nodes)
        self.fused: set = set()  # values passed inside an integer op (no QuantizeLinear)
        self.bias_add: set = set()
        for n in nodes:
            host = clamped_host(self.g, n, self.users)
            if host is not None and host in chosen:
                self.fused.add(n.inputs[0])
            if n.op == "Add":
                for i, v in enumerate(n.inputs):
                    o = n.inputs[1 - i]
                    if v.producer in chosen and v.producer.op in ("MatMul", "Gemm") and \
                            o.is_const and o.size == v.shape[-1] and \
                            only_user(self.g, v, self.users) is n:
                        self.fused.add(v)
                        self.bias_add.add(n)
                        break
        return nodes

    # -- parameters ----------------------------------------------------------------------------
    def params(self, v: Value) -> tuple[float, int]:
        if v in self.grid:
            return self.grid[v]
        p = v.producer
        if p is not None and p.op in SAME_GRID and p.op not in self.opts.keep and \
                p.inputs[0] in self.grid:
            self.grid[v] = self.grid[p.inputs[0]]
            return self.grid[v]
        tp = self.profile.tensors.get(v.name)
        if tp is None or tuple(tp.shape) != tuple(v.shape):
            what = "has no range for" if tp is None else \
                f"records shape {list(tp.shape)} for"
            raise ModelError(
                f"-load-profile={show(self.profile.path)}: the profile does not match the model: "
                f"it {what} tensor '{show(v.name)}' {list(v.shape)} (it was recorded for model "
                f"'{show(self.profile.model)}'; re-run model-profiler on this model)")
        self.grid[v] = qschema.tensor_params(tp, self.opts)
        return self.grid[v]

    # -- building ------------------------------------------------------------------------------
    def insert(self, op, inputs, attrs, at: int, out: Value | None = None) -> Value:
        return insert_node(self.g, op, inputs, attrs, op, at, out, f"{op}_out")

    def c(self, a, name="q"):
        return self.g.constant(np.asarray(a), name)

    def qdq(self, v: Value, s: float, z: int, at: int, out: Value | None = None) -> Value:
        q = self.insert("QuantizeLinear", [v, self.c(np.float32(s), "scale"),
                                           self.c(np.int8(z), "zero_point")], {}, at)
        return self.insert("DequantizeLinear", [q, self.c(np.float32(s), "scale"),
                                                self.c(np.int8(z), "zero_point")], {}, at + 1,
                           out)

    def dq_of(self, v: Value, before: Node) -> Value:
        """v as DequantizeLinear(QuantizeLinear(v)) on its grid (one pair per value)."""
        p = v.producer
        if p is not None and p.op == "DequantizeLinear" and p.inputs[1].size == 1 and \
                p.inputs[1].is_const and (p.input(2) is None or p.input(2).is_const):
            z = 0 if p.input(2) is None else int(p.input(2).const.reshape(-1)[0])
            self.grid[v] = (float(p.inputs[1].const.reshape(-1)[0]), z)
            return v  # a declared int8q input (or already quantized): on its grid
        if v not in self.dq:
            s, z = self.params(v)
            self.dq[v] = self.qdq(v, s, z, self.g.nodes.index(before))
            self.grid[self.dq[v]] = (s, z)
        return self.dq[v]

    def const_dq(self, a: np.ndarray, scales, axis, name) -> Value:
        scales = np.asarray(scales, np.float32)
        zp = np.zeros(scales.shape, a.dtype)
        attrs = {"axis": axis} if scales.ndim else {}
        return self.insert("DequantizeLinear", [self.c(a, name), self.c(scales, "scale"),
                                                self.c(zp, "zero_point")], attrs, 0)

    def weights(self, n: Node, x_scale: float):
        """Replaces the float weights (and bias) of Conv / MatMul / Gemm by DequantizeLinear
        of their int8 (int32) form."""
        w = n.inputs[1].const
        axis = 0 if n.op == "Conv" or (n.op == "Gemm" and n.attrs["transB"]) else 1
        wq, ws = qschema.quantize_weights(w, axis, self.opts)
        n.inputs[1] = self.const_dq(wq, ws, axis, f"{n.name}_w")
        b = n.input(2)
        if b is not None:
            nout = w.shape[axis]
            if b.size != nout:
                return  # a broadcast Gemm C: left in float (the fold refuses, Gemm stays float)
            acc = np.float32(x_scale) * np.broadcast_to(np.asarray(ws, np.float32), (nout,))
            bq, bs = qschema.quantize_bias(b.const, acc, self.opts)
            n.inputs[2] = self.const_dq(bq, bs, 0, f"{n.name}_b")

    def run(self):
        nodes = self.plan()
        for n in nodes:
            if n.op in ACTS and n.inputs[0] in self.fused:
                pass  # the host op's result: read as is
            elif n in self.bias_add:
                n.inputs = [v if v.is_const or v in self.fused else self.dq_of(v, n)
                            for v in n.inputs]
            else:
                for i, v in enumerate(n.inputs):
                    if v is None or v.is_const:
                        continue
                    if n.op in ("Conv", "MatMul", "Gemm") and i > 0:
                        continue
                    n.inputs[i] = self.dq_of(v, n)
                if n.op in ("Conv", "MatMul", "Gemm"):
                    self.weights(n, self.grid[n.inputs[0]][0])
                elif n.op in ("Add", "Mul"):
                    for i, v in enumerate(n.inputs):
                        if v.is_const:
                            s, z = qschema.choose_params(v.const.min(), v.const.max(), "asymmetric")
                            qv = np.clip(np.rint(v.const / s) + z, -128, 127).astype(np.int8)
                            n.inputs[i] = self.insert("DequantizeLinear", [
                                self.c(qv, "q_operand"), self.c(np.float32(s), "scale"),
                                self.c(np.int8(z), "zero_point")], {}, 0)
            y = n.outputs[0]
            if y in self.fused:
                continue
            s, z = self.params(y)
            inner = Value(self.g.unique_name(y.name + "_float"), y.dtype, y.shape, producer=n)
            n.outputs = [inner]
            self.qdq(inner, s, z, self.g.nodes.index(n) + 1, out=y)
            self.dq[y] = y
            self.grid[y] = (s, z)


def quantize_from_profile(graph: Graph) -> Graph:
    profile = getattr(graph, "quant_profile", None)
    if profile is None:
        return graph
    Quantizer(graph, profile, graph.quant_options).run()
    return fold_quantization(graph)

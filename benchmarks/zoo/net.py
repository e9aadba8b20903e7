"""The graph builder of the zoo: the op patterns PyTorch's ONNX exporter writes (torchvision,
Hugging Face), with random weights from a fixed seed. Extends benchmarks/build_models.Net
(initializers, Conv, unfused BatchNormalization) with several-output nodes, typed inputs
and their feeds, the activations as exporters decompose them, Linear (Gemm or MatMul + Add),
LayerNorm (the opset-17 op or the opset-13 ReduceMean decomposition) and torch's shape
arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from build_models import Net as _BaseNet


class Net(_BaseNet):
    def __init__(self, name: str, seed: int, opset: int = 13):
        super().__init__(name, seed)
        self.opset = opset
        self.inputs, self.feeds = [], {}

    # -- graph plumbing --------------------------------------------------------------------
    def input(self, name: str, shape, dtype=np.float32, high: int | None = None) -> str:
        """A graph input and its feed: standard normal floats, or integers in [0, high)."""
        self.inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), list(shape)))
        if high is None:
            self.feeds[name] = self.rng.standard_normal(shape).astype(dtype)
        else:
            self.feeds[name] = self.rng.integers(0, high, shape).astype(dtype)
        return name

    def const(self, array, base: str = "const") -> str:
        """An initializer with the array's own dtype (shape vectors, indices, masks)."""
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def i64(self, values) -> str:
        return self.const(np.asarray(values, np.int64), "shape")

    def f32(self, value) -> str:
        return self.const(np.asarray(value, np.float32), "scalar")

    def weight(self, shape, fan_in: int | None = None, scale: float | None = None) -> str:
        """Random float weights: He scale by fan-in unless `scale` is given."""
        s = scale if scale is not None else np.sqrt(2.0 / (fan_in or shape[-1]))
        return self.init("w", self.rng.standard_normal(shape) * s)

    def ops(self, op: str, inputs, n: int, **attrs) -> list[str]:
        """A node with `n` outputs."""
        outs = [self._name(op.lower()) for _ in range(n)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=outs[0] + "_node", **attrs))
        return outs

    def model(self, outputs) -> tuple[onnx.ModelProto, dict]:
        """The checked model (outputs typed by ONNX shape inference) and its feeds."""
        outs = [outputs] if isinstance(outputs, str) else list(outputs)
        g = helper.make_graph(self.nodes, self.name, self.inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)],
                              producer_name="glowpy-zoo")
        m.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        typed = {v.name: v for v in inferred.graph.value_info}
        del m.graph.output[:]
        # an output behind a Reshape to sizes computed from x.size() stays untyped (ONNX's
        # inference does not propagate them): it gets a float type and no shape, which the
        # checker refuses, so such models are checked by the strict inference above only
        for o in outs:
            v = typed.get(o)
            known = v is not None and v.type.tensor_type.HasField("shape")
            m.graph.output.append(v if known else helper.make_tensor_value_info(
                o, onnx.TensorProto.FLOAT, None))
        if all(v.type.tensor_type.HasField("shape") for v in m.graph.output):
            onnx.checker.check_model(m, full_check=True)
        return m, dict(self.feeds)

    # -- convolutions ----------------------------------------------------------------------
    def convnd(self, x, cin, cout, k, stride=1, group=1, bias=True, dilation=1, pads=None,
               dims=2) -> str:
        """Conv of any rank (Conv1d: dims=1), torch's default 'same-ish' padding k//2*dilation."""
        w = self.weight((cout, cin // group) + (k,) * dims, fan_in=cin // group * k ** dims)
        ins = [x, w] + ([self.init("b", self.rng.standard_normal(cout) * 0.1)] if bias else [])
        p = (k // 2) * dilation
        return self.node("Conv", ins, kernel_shape=[k] * dims, strides=[stride] * dims,
                         dilations=[dilation] * dims, group=group,
                         pads=pads if pads is not None else [p] * (2 * dims))

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu") -> str:
        """Conv (no bias) + BatchNormalization + activation (any of act's), as torchvision
        exports them."""
        return self.act(self.bn(self.conv(x, cin, cout, k, stride, group), cout), act)

    def act(self, x, kind) -> str:
        if kind is None:
            return x
        if kind == "relu":
            return self.node("Relu", [x])
        if kind == "relu6":
            return self.node("Clip", [x, self.f32(0.0), self.f32(6.0)])
        if kind == "hardswish":   # torch >= 1.x at opset 14
            return self.node("HardSwish", [x])
        if kind == "hardsigmoid":  # torch's hardsigmoid: alpha 1/6
            return self.node("HardSigmoid", [x], alpha=1.0 / 6)
        if kind == "swish":       # nn.SiLU at opset < 14 (no Swish op): x * Sigmoid(x)
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        if kind == "gelu":        # nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2)))
            e = self.node("Erf", [self.node("Div", [x, self.f32(1.4142135381698608)])])
            return self.node("Mul", [self.node("Mul", [x, self.node("Add", [e, self.f32(1.0)])]),
                                     self.f32(0.5)])
        if kind == "sigmoid":
            return self.node("Sigmoid", [x])
        if kind == "tanh":
            return self.node("Tanh", [x])
        raise ValueError(kind)

    def se(self, x, c, squeeze, inner="relu", gate="sigmoid") -> str:
        """Squeeze-and-excitation: GlobalAveragePool, 1x1 Conv (bias) down and up, gate, Mul."""
        s = self.node("GlobalAveragePool", [x])
        s = self.act(self.convnd(s, c, squeeze, 1), inner)
        s = self.act(self.convnd(s, squeeze, c, 1), gate)
        return self.node("Mul", [x, s])

    def classifier(self, x, c, classes) -> str:
        """GlobalAveragePool, Flatten, Gemm(transB=1): torchvision's head."""
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        return self.linear(x, c, classes)

    # -- dense layers ----------------------------------------------------------------------
    def linear(self, x, cin, cout, bias=True, rank=2) -> str:
        """nn.Linear: Gemm(transB=1) on 2-D inputs, MatMul with the transposed weight + Add
        on higher ranks (as torch exports them)."""
        w = self.rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)
        b = self.rng.standard_normal(cout) * 0.02
        if rank == 2:
            ins = [x, self.init("fc_w", w)] + ([self.init("fc_b", b)] if bias else [])
            return self.node("Gemm", ins, alpha=1.0, beta=1.0, transB=1)
        y = self.node("MatMul", [x, self.init("fc_wT", w.T)])
        return self.node("Add", [y, self.init("fc_b", b)]) if bias else y

    def layernorm(self, x, c, eps=1e-5) -> str:
        """nn.LayerNorm over the last axis: the op from opset 17, else torch's decomposition."""
        g = self.init("ln_g", 1.0 + 0.1 * self.rng.standard_normal(c))
        b = self.init("ln_b", 0.1 * self.rng.standard_normal(c))
        if self.opset >= 17:
            return self.node("LayerNormalization", [x, g, b], axis=-1, epsilon=eps)
        mean = self.node("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.node("Sub", [x, mean])
        var = self.node("ReduceMean", [self.node("Pow", [d, self.f32(2.0)])], axes=[-1], keepdims=1)
        y = self.node("Div", [d, self.node("Sqrt", [self.node("Add", [var, self.f32(eps)])])])
        return self.node("Add", [self.node("Mul", [y, g]), b])

    def groupnorm(self, x, c, groups, spatial, eps=1e-5) -> str:
        """nn.GroupNorm as torch exports it below opset 18: Reshape (1, G, -1),
        InstanceNormalization with unit scale and zero bias, Reshape back to (1, C, *spatial),
        Mul by gamma and Add beta (per channel)."""
        y = self.node("Reshape", [x, self.i64([1, groups, -1])])
        y = self.node("InstanceNormalization", [y, self.init("ones", np.ones(groups)),
                                                self.init("zeros", np.zeros(groups))], epsilon=eps)
        y = self.node("Reshape", [y, self.i64([1, c] + list(spatial))])
        per_channel = [c] + [1] * len(spatial)
        g = self.init("gn_g", (1.0 + 0.1 * self.rng.standard_normal(c)).reshape(per_channel))
        b = self.init("gn_b", (0.1 * self.rng.standard_normal(c)).reshape(per_channel))
        return self.node("Add", [self.node("Mul", [y, g]), b])

    # -- torch's shape arithmetic ----------------------------------------------------------
    def dim(self, x, axis: int) -> str:
        """x.size(axis) as torch exports it: Shape -> Gather(scalar index) (a 0-D int64)."""
        return self.node("Gather", [self.node("Shape", [x]), self.const(np.int64(axis), "idx")], axis=0)

    def unsq(self, s) -> str:
        return self.node("Unsqueeze", [s, self.i64([0])]) if self.opset >= 13 else \
            self.node("Unsqueeze", [s], axes=[0])

    def view(self, x, dims) -> str:
        """x.view(*dims) where each item is an int (a constant) or a 0-D int64 tensor name
        (a size computed from shapes): Unsqueeze each, Concat, Reshape."""
        parts = [self.unsq(d) if isinstance(d, str) else self.i64([d]) for d in dims]
        return self.node("Reshape", [x, self.node("Concat", parts, axis=0)])

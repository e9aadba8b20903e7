"""onnxruntime's com.microsoft contrib ops that its own tools (transformer optimizer, fusion
passes, quantization) write into models, registered as "com.microsoft.<Op>".

Each is a `Composite`: `expand` writes it as a few ops glowpy already has (Conv + Add + Relu,
Add + LayerNormalization, DequantizeLinear + Add + QuantizeLinear, ...), and the
`decompose` pass (passes/decompose.py, first in the pipeline) puts that expansion in its place,
so every later pass (activation fusion, the QDQ fold to integer kernels) and every kernel
serves them unchanged. Inference and the numpy reference run the same expansion on a scratch
graph (with the inputs as constants, the ops' own references fold it), so there is one
definition of what each contrib op computes. Semantics follow onnxruntime's CPU kernels
(contrib_ops/cpu), checked against onnxruntime by tests/test_contrib_ops.py."""
from __future__ import annotations

import re

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.graph import Graph, Value
from glowpy.ir.ops.quant import CONV_ATTRS
from glowpy.ir.ops.registry import Op, register

MS = "com.microsoft."


class Composite(Op):
    """An op computed as a small graph of other ops (see the module docstring)."""
    traits = frozenset({"composite"})
    attr_kinds: dict = {}  # attribute -> type where the default (None) does not say

    def expand(self, g: Graph, node, ins: list, n_out: int) -> list[Value]:
        """Adds the ops computing `node` to `g` (ins: its inputs as Values of g, None for an
        omitted one); returns its first n_out outputs."""
        raise NotImplementedError

    def _scratch(self, node, arrays=None):
        g = Graph(node.name)
        g.max_tensor_bytes = None
        ins = []
        for i, v in enumerate(node.inputs):
            if v is None:
                ins.append(None)
            elif arrays is not None or v.is_const:
                a = arrays[i] if arrays is not None else v.const
                ins.append(g.constant(np.asarray(a, v.dtype).reshape(v.shape), v.name))
            else:
                ins.append(Value(v.name, v.dtype, v.shape))
        return g, ins

    def wanted(self, node) -> int:
        n = len(node.outputs) or getattr(node, "_num_outputs", None) or 1
        if n > self.num_outputs:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): has {n} outputs; the op has "
                             f"{self.num_outputs}")
        return n

    def expand_named(self, g: Graph, node, ins: list, n_out: int) -> list[Value]:
        """expand; an error raised by a node of the expansion (named `<node>/<tag>`) is told
        as the model's node's: "node 'b' (LpPool), in its AveragePool: ...". """
        try:
            return self.expand(g, node, ins, n_out)
        except ModelError as e:
            msg = str(e)
            for name in (show(node.name), node.name):
                head = f"node '{name}/"
                m = re.match(r"[^']*' \(([A-Za-z0-9_.]+)\): ", msg[len(head):]) \
                    if msg.startswith(head) else None
                if m:
                    raise ModelError(f"node '{show(node.name)}' ({node.op}), in its "
                                     f"{m.group(1)}: {msg[len(head) + m.end():]}") from None
            raise

    def infer(self, node):
        g, ins = self._scratch(node)
        return [(o.dtype, o.shape) for o in self.expand_named(g, node, ins, self.wanted(node))]

    def reference(self, node, *arrays):
        g, ins = self._scratch(node, list(arrays) + [None] * (len(node.inputs) - len(arrays)))
        outs = self.expand_named(g, node, ins, self.wanted(node))
        env = {}  # what did not fold as it was added (DequantizeLinear is nofold) runs here

        def get(v):
            return None if v is None else v.const if v.is_const else env[v]
        for n in g.nodes:
            for o, a in zip(n.outputs, n.opdef.reference(n, *[get(v) for v in n.inputs])):
                env[o] = np.asarray(a).astype(o.dtype, copy=False).reshape(o.shape)
        return [get(o) for o in outs]


def const_scalar(node, v: Value | None, what: str, default=None):
    if v is None:
        return default
    if not v.is_const:
        raise ModelError(f"node '{show(node.name)}' ({node.op}): {what} '{show(v.name)}' must be "
                         "known at compile time; make it an initializer or a Constant")
    return v.const


def add(g: Graph, node, op: str, inputs: list, attrs: dict | None = None, n: int = 1,
        tag: str = "") -> list[Value]:
    return g.add(op, inputs, attrs or {}, name=f"{node.name}/{tag or op}", num_outputs=n)


# activation name -> (glowpy op, its parameters in the order FusedConv's activation_params
# lists them; FusedGemm names them activation_alpha, activation_beta, activation_gamma)
ACTIVATIONS = {"Relu": ("Relu", ()), "Tanh": ("Tanh", ()), "Sigmoid": ("Sigmoid", ()),
               "LeakyRelu": ("LeakyRelu", ("alpha",)), "Clip": ("Clip", ("min", "max")),
               "HardSigmoid": ("HardSigmoid", ("alpha", "beta")), "Elu": ("Elu", ("alpha",)),
               "Selu": ("Selu", ("alpha", "gamma")), "Softsign": ("Softsign", ()),
               "Softplus": ("Softplus", ())}


def activate(g: Graph, node, y: Value, name: str, params: dict) -> Value:
    """y through the fused activation `name` with `params` (missing ones: ONNX defaults)."""
    if not name:
        return y
    if name not in ACTIVATIONS:
        raise ModelError(f"node '{show(node.name)}' ({node.op}): activation '{show(name)}' is not "
                         f"supported ({', '.join(sorted(ACTIVATIONS))})")
    op, names = ACTIVATIONS[name]
    if op == "Clip":
        lo, hi = params.get("min", -np.inf), params.get("max", np.inf)
        return add(g, node, "Clip", [y, g.constant(np.float32(lo)), g.constant(np.float32(hi))])[0]
    return add(g, node, op, [y], {k: float(params[k]) for k in names if k in params})[0]


@register
class FusedConv(Composite):
    """Conv + optional Z (summed before the activation) + activation(activation_params)."""
    names = (MS + "FusedConv",)
    inputs = ("X", "W", "B?", "Z?")
    attrs = dict(CONV_ATTRS, activation="", activation_params=None)
    attr_kinds = {k: list for k in ("dilations", "kernel_shape", "pads", "strides",
                                    "activation_params")}

    def expand(self, g, node, ins, n_out):
        x, w, b, z = ins + [None] * (4 - len(ins))
        y = add(g, node, "Conv", [x, w] + ([b] if b is not None else []),
                {k: node.attrs[k] for k in CONV_ATTRS})[0]
        if z is not None:
            y = add(g, node, "Add", [y, z])[0]
        name = node.attrs["activation"]
        vals = list(node.attrs["activation_params"] or [])
        keys = ACTIVATIONS.get(name, ("", ()))[1]
        return [activate(g, node, y, name, dict(zip(keys, vals)))]


@register
class FusedGemm(Composite):
    names = (MS + "FusedGemm",)
    inputs = ("A", "B", "C?")
    attrs = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0, "activation": "",
             "activation_alpha": None, "activation_beta": None, "activation_gamma": None}
    attr_kinds = {"activation_alpha": float, "activation_beta": float, "activation_gamma": float}

    def expand(self, g, node, ins, n_out):
        a = node.attrs
        y = add(g, node, "Gemm", [v for v in ins if v is not None],
                {k: a[k] for k in ("alpha", "beta", "transA", "transB")})[0]
        name = a["activation"]
        keys = ACTIVATIONS.get(name, ("", ()))[1]
        given = [a[f"activation_{k}"] for k in ("alpha", "beta", "gamma")]
        # activation_alpha/beta/gamma are the functor's alpha, beta, gamma; Selu names its
        # second parameter gamma
        params = {k: v for k, v in zip(("alpha", "beta", "gamma"), given) if v is not None}
        return [activate(g, node, y, name, {k: params[k] for k in keys if k in params})]


@register
class FusedMatMul(Composite):
    """alpha * op(A) @ op(B): transBatch moves the first dim behind the other batch dims
    (perm [1, ..., r-2, 0, r-1]), then trans swaps the last two (measured on onnxruntime)."""
    names = (MS + "FusedMatMul",)
    inputs = ("A", "B")
    attrs = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}

    def _operand(self, g, node, v, trans, batch, tag):
        r = len(v.shape)
        perm = list(range(r))
        if batch and r >= 3:
            perm = perm[1:r - 1] + [0, r - 1]
        if trans and r >= 2:
            perm[-2], perm[-1] = perm[-1], perm[-2]
        if perm == list(range(r)):
            return v
        return add(g, node, "Transpose", [v], {"perm": perm}, tag=tag)[0]

    def expand(self, g, node, ins, n_out):
        a = node.attrs
        x = self._operand(g, node, ins[0], a["transA"], a["transBatchA"], "transpose_a")
        w = self._operand(g, node, ins[1], a["transB"], a["transBatchB"], "transpose_b")
        y = add(g, node, "MatMul", [x, w])[0]
        if a["alpha"] != 1.0:
            y = add(g, node, "Mul", [y, g.constant(np.float32(a["alpha"]))])[0]
        return [y]


@register
class Gelu(Composite):
    """Gelu (erf), BiasGelu (Gelu(A + B)), FastGelu (tanh approximation, optional bias)."""
    names = (MS + "Gelu", MS + "BiasGelu", MS + "FastGelu")
    inputs = ("X", "bias?")

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        if len(ins) > 1 and ins[1] is not None:
            x = add(g, node, "Add", ins[:2])[0]
        elif node.op == MS + "BiasGelu":
            raise ModelError(f"node '{show(node.name)}' ({node.op}): needs its bias input B")
        tanh = node.op == MS + "FastGelu"
        return [add(g, node, "Gelu", [x], {"approximate": "tanh" if tanh else "none"})[0]]


@register
class QuickGelu(Composite):
    """x * Sigmoid(alpha * x)."""
    names = (MS + "QuickGelu",)
    inputs = ("X",)
    attrs = {"alpha": 1.702}

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        ax = add(g, node, "Mul", [x, g.constant(np.float32(node.attrs["alpha"]))])[0]
        return [add(g, node, "Mul", [x, add(g, node, "Sigmoid", [ax])[0]], tag="gate")[0]]


@register
class MsLayerNormalization(Composite):
    """com.microsoft's LayerNormalization: ONNX's (opset 17) under its older name."""
    names = (MS + "LayerNormalization",)
    inputs = ("X", "Scale", "B?")
    num_outputs = 3
    attrs = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def expand(self, g, node, ins, n_out):
        return add(g, node, "LayerNormalization", [v for v in ins if v is not None],
                   dict(node.attrs), n_out)


@register
class SkipLayerNormalization(Composite):
    """s = input + skip (+ bias); LayerNormalization(s, gamma, beta) over the last dim.
    Outputs: output, mean, inv_std_var (shape [..., 1]), input_skip_bias_sum (s)."""
    names = (MS + "SkipLayerNormalization",)
    inputs = ("input", "skip", "gamma", "beta?", "bias?")
    num_outputs = 4
    attrs = {"epsilon": 1e-12}

    def expand(self, g, node, ins, n_out):
        x, skip, gamma, beta, bias = ins + [None] * (5 - len(ins))
        s = add(g, node, "Add", [x, skip], tag="skip")[0]
        if bias is not None:
            s = add(g, node, "Add", [s, bias], tag="bias")[0]
        outs = add(g, node, "LayerNormalization", [s, gamma] + ([beta] if beta is not None else []),
                   {"axis": -1, "epsilon": node.attrs["epsilon"]}, min(n_out, 3))
        return (outs + [s])[:n_out]

"""Which intermediate tensors model-verify can observe, and the ONNX models that expose them.

A tensor is observed when it survives glowpy's graph optimizations under its ONNX name: the
output of a node of the optimized graph (a fused Conv+Relu keeps the Relu's output name, an
integer QConv the name of the QuantizeLinear output it replaces). Those tensors are appended to
graph.output, so the verify bundle is compiled from a model whose extra outputs are exactly
tensors the deployment bundle computes anyway: the kernels and their fusion are the same (a
tensor that was fused away is never made an output, which would split the fused kernel), only
the observed tensors move from the activation region into the mutable region.

onnxruntime runs the same augmented model, and for int8 models a float model with the Q/DQ
pairs of activations removed (QuantizeLinear dropped, each DequantizeLinear reading it replaced
by an Identity of the Q's float input), so every int8 tensor has a float counterpart: the Q's
input."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from glowpy.errors import ModelError, show


@dataclass
class Layer:
    """One observed tensor: the ONNX node producing it and the glowpy kernel computing it."""
    index: int
    tensor: str
    op: str  # the ONNX op producing it
    node: str  # the ONNX node's name
    kernel: str  # glowpy's op of the optimized graph (with fused steps: Conv+Relu)
    kernel_node: str  # that node's name (an instruction name of the bundle's manifest)
    dtype: str
    shape: tuple
    qparams: tuple | None = None  # (scale, zero point) of an int8 tensor
    float_tensor: str | None = None  # the float model's counterpart (int8 models)


def optimized_graph(model_path: str, opts):
    """The graph as compile_model has it before lowering (same options, same passes)."""
    from glowpy.compiler import _setup_quantization, load_graph
    from glowpy.ir.passes.pipeline import optimize
    graph = load_graph([model_path], opts)
    _setup_quantization(graph, opts)
    return optimize(graph, opts.opt_level)


def observable_layers(model: onnx.ModelProto, graph) -> list[Layer]:
    """The model's node outputs that are node outputs of the optimized `graph`, in ONNX order;
    the model's own outputs included (last), its inputs not."""
    from glowpy.ir.epilogue import label
    produced = {}
    for n in graph.nodes:
        for v in n.outputs:
            produced[v.name] = (n, v)
    qin = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    layers = []
    for node in model.graph.node:
        for t in node.output:
            if t not in produced:
                continue
            n, v = produced[t]
            src = v
            while src.qparams is None and src.producer is not None and \
                    "view" in src.producer.opdef.traits and src.producer.inputs:
                src = src.producer.inputs[0]  # a view (Reshape) keeps its input's grid
            q = tuple(src.qparams) if src.qparams is not None else None
            layers.append(Layer(len(layers), t, node.op_type, node.name or f"({node.op_type})",
                                label(n), n.name, v.dtype.name, v.shape, q, qin.get(t, t)))
    if not layers:
        raise ModelError("no tensor of the model survives in glowpy's graph under its ONNX "
                         "name: nothing to compare")
    return layers


def kernel_labels(model_path: str, opts) -> list[str]:
    """The optimized graph's nodes as glowpy's kernels (Conv+Relu), loader warnings muted;
    not the DequantizeLinear that gives a quantized graph's float output (with -load-profile
    each observed tensor has one)."""
    import contextlib
    import io
    from glowpy.ir.epilogue import label
    with contextlib.redirect_stderr(io.StringIO()):
        g = optimized_graph(model_path, opts)
    outs = {id(v) for v in g.outputs}
    return [label(n) for n in g.nodes
            if not (n.op == "DequantizeLinear" and id(n.outputs[0]) in outs)]


def with_outputs(model: onnx.ModelProto, names: list[str], dtypes: dict) -> onnx.ModelProto:
    """A copy of `model` whose graph.output also lists `names` (ONNX element types from
    `dtypes`, shapes left to inference)."""
    from glowpy.ir.dtypes import to_onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in names:
        if name not in have:
            m.graph.output.append(helper.make_tensor_value_info(name, to_onnx(dtypes[name]), None))
            have.add(name)
    return m


def float_model(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """The QDQ model with its activations' Q/DQ pairs removed, or None when it has none. A
    QuantizeLinear is dropped when only DequantizeLinear nodes read its output (and it is no
    graph output); each of those becomes Identity(the Q's float input)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    readers: dict = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    drop = {n.output[0]: n.input[0] for n in g.node if n.op_type == "QuantizeLinear"
            and n.output[0] not in outputs and readers.get(n.output[0])
            and all(r.op_type == "DequantizeLinear" for r in readers[n.output[0]])}
    if not drop:
        return None
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.output[0] in drop:
            continue
        if n.op_type == "DequantizeLinear" and n.input[0] in drop:
            n = helper.make_node("Identity", [drop[n.input[0]]], [n.output[0]], name=n.name)
        nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def ort_run(model: onnx.ModelProto, feeds: dict, names: list[str], what: str) -> dict:
    """{name: array} of `names` computed by onnxruntime on `model`."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ModelError("model-verify compares with onnxruntime, which is not installed "
                         "(pip install onnxruntime)") from None
    so = ort.SessionOptions()
    # ORT's own graph rewrites would fuse across the observed tensors and change them
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        got = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own errors: one line
        raise ModelError(f"onnxruntime cannot run the {what}: {show(str(e), 300)}") from None
    return dict(zip(names, got))


def random_inputs(graph, model: onnx.ModelProto, seed: int) -> dict:
    """Seeded inputs for the graph's inputs: integers over their type's range, floats uniform
    in [-1, 1) (or over the range a QuantizeLinear reading the input represents)."""
    rng = np.random.default_rng(seed)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for v in graph.inputs:
        if v.dtype.kind in "iu":
            info = np.iinfo(v.dtype)
            out[v.name] = rng.integers(info.min, int(info.max) + 1, v.shape, dtype=v.dtype)
        elif v.dtype.kind == "b":
            out[v.name] = rng.integers(0, 2, v.shape).astype(bool)
        else:
            lo, hi = -1.0, 1.0
            for n in model.graph.node:
                if n.op_type == "QuantizeLinear" and n.input[0] == v.name and n.input[1] in inits:
                    s = float(np.ravel(inits[n.input[1]])[0])
                    z = float(np.ravel(inits[n.input[2]])[0]) if len(n.input) > 2 and \
                        n.input[2] in inits else 0.0
                    info = np.iinfo(inits[n.input[2]].dtype if len(n.input) > 2 and
                                    n.input[2] in inits else np.uint8)
                    lo, hi = (info.min - z) * s, (info.max - z) * s
                    break
            out[v.name] = rng.uniform(lo, hi, v.shape).astype(v.dtype)
    return out


class References:
    """The reference values of the observed tensors for one input set: (ref, float ref).

    ref: onnxruntime on the model with the observed tensors as outputs; with -load-profile,
    where glowpy itself quantizes and onnxruntime has no int8 model to run, glowpy's op
    references (ir/evaluate.py, the int8 kernels' bit-exact oracle) on the quantized graph of
    the same augmented model. float ref (int8 models only): onnxruntime on the float model,
    the QDQ model without its activations' Q/DQ pairs, or the model itself with a profile."""

    def __init__(self, model: onnx.ModelProto, layers: list[Layer], aug_path: str, opts):
        self.names = [L.tensor for L in layers]
        dtypes = {L.tensor: L.dtype for L in layers}
        self.profiled = bool(opts.load_profile)
        self.kind = "onnxruntime"
        self.float_kind = None
        self.fnames: list = []
        if self.profiled:
            import contextlib
            import io
            with contextlib.redirect_stderr(io.StringIO()):  # the compile printed them
                self.qgraph = optimized_graph(aug_path, opts)
            self.kind = "glowpy's int8 op references (quantized with the profile)"
            _quantized_kernels(layers, self.qgraph)
            self.fmodel, self.fnames = with_outputs(model, self.names, dtypes), self.names
            self.float_kind = "onnxruntime on the model"
            return
        self.model = with_outputs(model, self.names, dtypes)
        fm = float_model(model)
        if fm is not None:
            fdt = {L.float_tensor: "float32" if L.float_tensor != L.tensor else L.dtype
                   for L in layers}
            self.fmodel, self.fnames = with_outputs(fm, list(fdt), fdt), list(fdt)
            self.float_kind = "onnxruntime on the model without Q/DQ pairs"

    def __call__(self, feeds: dict) -> tuple[dict, dict]:
        if self.profiled:
            from glowpy.ir.evaluate import evaluate
            got = evaluate(self.qgraph, feeds)
            ref = {v.name: a for v, a in zip(self.qgraph.outputs, got)}
        else:
            ref = ort_run(self.model, feeds, self.names, "model")
        fref = ort_run(self.fmodel, feeds, self.fnames, "float model") if self.fnames else {}
        return ref, fref


def _quantized_kernels(layers: list[Layer], qgraph) -> None:
    """Names each layer's kernel in the quantized graph: the int8 op behind the
    DequantizeLinear that gives the observed (float) output."""
    from glowpy.ir.epilogue import label
    by_name = {v.name: v for v in qgraph.outputs}
    for L in layers:
        v = by_name.get(L.tensor)
        n = v.producer if v is not None else None
        while n is not None and n.op == "DequantizeLinear" and n.inputs[0].producer is not None:
            n = n.inputs[0].producer
        if n is not None:
            L.kernel, L.kernel_node = label(n), n.name

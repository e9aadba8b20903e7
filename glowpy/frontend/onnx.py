"""ONNX loader: translates a ModelProto into graph IR calls. Op semantics (defaults, older
opsets' forms, inference) live in the op definitions; this module only reads protobuf."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from glowpy.errors import ModelError, UsageError
from glowpy.ir import dtypes
from glowpy.ir.graph import Graph
from glowpy.ir.ops import get_op, has_op

MIN_OPSET, MAX_OPSET = 7, 22
IGNORED_DOMAINS = {"ai.onnx.ml"}  # declared by converters; only an error if a node uses them


@dataclass
class InputSpec:
    """A `-model-input=name,type,[d0,d1,...]` override (quantized: scale and offset set)."""
    name: str
    dtype: np.dtype
    shape: tuple
    scale: float | None = None
    offset: int | None = None


@dataclass
class LoadOptions:
    inputs: dict = field(default_factory=dict)  # name -> InputSpec
    symbols: dict = field(default_factory=dict)  # dim_param -> int


def read_model(path: str):
    import onnx
    from google.protobuf.message import DecodeError
    if not os.path.isfile(path):
        raise ModelError(f"cannot read model file '{path}': no such file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"cannot read model file '{path}': {e.strerror}") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(f"'{path}' is not a valid ONNX model (protobuf parse error: {e})") from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"'{path}' is not an ONNX model: it has no graph nodes")
    from glowpy.frontend.external_data import load_external_data
    load_external_data(model, os.path.dirname(os.path.abspath(path)))
    return model


def opset_version(model) -> int:
    version = None
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            version = o.version
    if version is None:
        raise ModelError("model imports no default-domain (ai.onnx) opset")
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise ModelError(f"model uses ai.onnx opset {version}; supported opsets are "
                         f"{MIN_OPSET} to {MAX_OPSET} (convert it with onnx.version_converter)")
    return version


def check_ops(model):
    """Refuses a model with unknown ops, listing them all at once."""
    missing: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        if n.domain not in ("", "ai.onnx") or not has_op(n.op_type) or \
                "internal" in get_op(n.op_type).traits:
            missing.setdefault(key, []).append(n.name or (n.output[0] if n.output else f"#{i}"))
    if missing:
        parts = [f"{op} x{len(names)} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
                 for op, names in sorted(missing.items())]
        raise ModelError(f"unsupported ops ({sum(len(v) for v in missing.values())} nodes): "
                         + "; ".join(parts))


def attribute_value(attr, where: str):
    from onnx import helper, numpy_helper
    if attr.ref_attr_name:
        raise ModelError(f"{where}: attribute '{attr.name}' refers to a function attribute")
    if attr.type == attr.TENSOR:
        return numpy_helper.to_array(attr.t)
    if attr.type in (attr.GRAPH, attr.GRAPHS, attr.SPARSE_TENSOR, attr.TYPE_PROTO):
        raise ModelError(f"{where}: attribute '{attr.name}' of type "
                         f"{attr.AttributeType.Name(attr.type)} is not supported")
    v = helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def constant_value(attrs: dict, where: str):
    """The value of a Constant node, whichever attribute holds it."""
    for key, dt in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                    ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dt)
    raise ModelError(f"{where}: Constant with {sorted(attrs) or 'no'} attribute is not supported "
                     "(use value, value_float(s) or value_int(s))")


def input_type(vi, opts: LoadOptions, warn) -> tuple[np.dtype, tuple]:
    spec = opts.inputs.get(vi.name)
    if spec is not None:
        return spec.dtype, spec.shape
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        raise ModelError(f"input '{vi.name}' has no tensor type or shape; give one with "
                         f"-model-input={vi.name},float,[d0,d1,...]")
    dt = dtypes.from_onnx(tt.elem_type, f"input '{vi.name}'")
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            shape.append(d.dim_value)
        elif d.HasField("dim_param") and d.dim_param in opts.symbols:
            shape.append(opts.symbols[d.dim_param])
        elif i == 0:
            name = d.dim_param or "?"
            warn(f"input '{vi.name}': symbolic leading dimension '{name}' set to 1 "
                 f"(use -onnx-define-symbol={name},N to choose)")
            shape.append(1)
        else:
            name = d.dim_param or ("0" if d.HasField("dim_value") else "unknown")
            raise ModelError(
                f"input '{vi.name}': dimension {i} ('{name}') is not known; fix it with "
                f"-onnx-define-symbol={name},N or -model-input={vi.name},{dtypes.GLOW_NAMES.get(dt, 'float')},[...]")
    return dt, tuple(shape)


def load_onnx(path: str, opts: LoadOptions | None = None, warn=None) -> Graph:
    from onnx import numpy_helper
    opts = opts or LoadOptions()
    warn = warn or (lambda m: warnings.warn(m))
    model = read_model(path)
    opset = opset_version(model)
    check_ops(model)
    g = model.graph
    graph = Graph(g.name or os.path.splitext(os.path.basename(path))[0])
    values: dict[str, object] = {}
    for t in g.initializer:
        try:
            values[t.name] = graph.constant(numpy_helper.to_array(t), t.name)
        except Exception as e:  # noqa: BLE001 - protobuf/numpy raise many kinds for bad tensors
            raise ModelError(f"initializer '{t.name}' cannot be read: {e}") from None
    known_inputs = set()
    for vi in g.input:
        if vi.name in values:
            continue
        dt, shape = input_type(vi, opts, warn)
        v = graph.add_input(vi.name, dt, shape)
        spec = opts.inputs.get(vi.name)
        if spec is not None and spec.scale is not None:
            v.qparams = (spec.scale, spec.offset)
        values[vi.name] = v
        known_inputs.add(vi.name)
    unknown = sorted(set(opts.inputs) - known_inputs)
    if unknown:
        raise UsageError(f"-model-input names {', '.join(repr(u) for u in unknown)}, which the model "
                         f"does not have as inputs (inputs: {', '.join(sorted(known_inputs))})")
    for i, n in enumerate(g.node):
        name = n.name or (n.output[0] if n.output else f"{n.op_type}_{i}")
        where = f"node '{name}' ({n.op_type})"
        inputs = []
        for x in n.input:
            if x == "":
                inputs.append(None)
            elif x not in values:
                raise ModelError(f"{where}: input tensor '{x}' is not produced by any node, "
                                 "initializer or graph input")
            else:
                inputs.append(values[x])
        attrs = {a.name: attribute_value(a, where) for a in n.attribute}
        opdef = get_op(n.op_type)
        if n.op_type == "Constant":
            attrs = {"value": constant_value(attrs, where)}
        attrs, inputs = opdef.upgrade(n.op_type, attrs, inputs, opset, graph)
        unknown_attrs = sorted(set(attrs) - set(opdef.attrs) - {k for k in attrs if k.startswith("_")})
        if unknown_attrs:
            raise ModelError(f"{where}: attribute(s) {', '.join(unknown_attrs)} not supported "
                             f"for opset {opset}")
        while inputs and inputs[-1] is None:
            inputs.pop()
        outs = graph.add(n.op_type, inputs, attrs, name=name, out_names=list(n.output),
                         num_outputs=len(n.output))
        for oname, v in zip(n.output, outs):
            if oname:
                values[oname] = v
    for vi in g.output:
        if vi.name not in values:
            raise ModelError(f"graph output '{vi.name}' is not produced by any node")
        graph.outputs.append(values[vi.name])
    graph.output_names = [vi.name for vi in g.output]
    graph.input_names = [v.name for v in graph.inputs]
    return graph

"""ONNX loader: translates a ModelProto into graph IR calls. Op semantics (defaults, older
opsets' forms, inference) live in the op definitions; this module only reads protobuf."""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from glowpy.errors import ModelError, UsageError, show
from glowpy.ir import dtypes
from glowpy.ir.graph import Graph
from glowpy.ir.ops import get_op
from glowpy.frontend import onnx_control as control
from glowpy.frontend.onnx_cut import cut
from glowpy.frontend.onnx_half import has_half, type_outputs, widen
from glowpy.frontend.onnx_checks import (_declared_type, _non_text, check_attr_kinds,
                                         check_declared_types, check_node_schema, check_ops,
                                         check_structure, free_names, node_label, op_key)
from glowpy.ir.validate import check_dims, check_size, tensor_bytes

# Opsets 1..28: older forms are mapped by each op's `upgrade`, and an attribute an op does not
# know is refused, so an opset whose semantics glowpy does not implement fails loudly. The
# versions after 22 (23-25, 27, 28) add element types, plus Range's stash_type and Cast's
# round_mode (refused unless default).
MIN_OPSET, MAX_OPSET = 1, 28
IGNORED_DOMAINS = {"ai.onnx.ml"}  # declared by converters; only an error if a node uses them


@dataclass
class InputSpec:
    """A `-model-input=name,type,[d0,d1,...]` override (quantized: scale and offset set)."""
    name: str
    dtype: np.dtype
    shape: tuple
    scale: float | None = None
    offset: int | None = None

    def __post_init__(self):
        # The quantization grid of a declared input: checked here, where every way of
        # building a spec (command line, API) passes, before an offset of 500 reaches int8 code
        if self.offset is None:
            return
        info = np.iinfo(self.dtype)
        q = "int8q" if self.dtype == np.int8 else "uint8q"
        where = f"-model-input={show(self.name)},{q}"
        if not info.min <= self.offset <= info.max:
            raise UsageError(f"{where}: offset {self.offset} is outside the {self.dtype.name} range "
                             f"{info.min}..{info.max}")
        if self.scale is None or not (np.isfinite(self.scale) and self.scale > 0):
            raise UsageError(f"{where}: scale {self.scale} must be a positive finite number")


@dataclass
class LoadOptions:
    inputs: dict = field(default_factory=dict)  # name -> InputSpec
    symbols: dict = field(default_factory=dict)  # dim_param -> int
    max_tensor_bytes: int | None = None  # validate.py: the target's size limit
    outputs: list = field(default_factory=list)  # -model-outputs: tensors made the outputs
    cut_inputs: list = field(default_factory=list)  # -model-inputs: tensors made inputs


MAX_PROTO = 2 * 1024 ** 3  # protobuf cannot parse messages of 2 GiB or more


def read_model(path: str, max_tensor_bytes: int | None = None):
    import onnx
    from google.protobuf.message import DecodeError, Error as ProtobufError
    if os.path.isdir(path):
        raise ModelError(f"cannot read model file '{show(path)}': it is a directory (Caffe2 "
                         "nets are given as a directory or as -model=predict_net -model=init_net)")
    if not os.path.isfile(path):
        what = "no such file" if not os.path.exists(path) else "not a regular file"
        raise ModelError(f"cannot read model file '{show(path)}': {what}")
    try:
        if os.path.getsize(path) >= MAX_PROTO:
            raise ModelError(f"'{show(path)}' is 2 GiB or larger, more than protobuf can parse; "
                             "store the weights as ONNX external data")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"cannot read model file '{show(path)}': {e.strerror}") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ProtobufError, RuntimeError, ValueError) as e:
        raise ModelError(f"'{show(path)}' is not a valid ONNX model (protobuf parse error: "
                         f"{e})") from None
    if not model.HasField("graph"):
        raise ModelError(f"'{show(path)}' is not an ONNX model: it has no graph (is it a "
                         "tensor, a Caffe2 net or another protobuf?)")
    if not model.graph.node:
        raise ModelError(f"'{show(path)}' is not a usable ONNX model: its graph has no nodes")
    bad = _non_text(model)
    if bad:
        raise ModelError(f"'{show(path)}' is not a valid ONNX model: the {bad} is not valid "
                         "UTF-8 text")
    from glowpy.frontend.external_data import load_external_data
    load_external_data(model, os.path.dirname(os.path.abspath(path)), max_tensor_bytes)
    return model


def opset_version(model) -> int:
    versions = {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")}
    if not versions:
        raise ModelError("model imports no default-domain (ai.onnx) opset; add an opset_import "
                         f"entry for ai.onnx (opsets {MIN_OPSET} to {MAX_OPSET} are supported)")
    if len(versions) > 1:
        raise ModelError(f"model imports the ai.onnx opset more than once, with versions "
                         f"{sorted(versions)}; keep one")
    version = versions.pop()
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise ModelError(f"model uses ai.onnx opset {version}; supported opsets are "
                         f"{MIN_OPSET} to {MAX_OPSET} (convert it with onnx.version_converter)")
    return version


def attribute_value(attr, where: str, limit: int | None = None):
    from onnx import helper
    if attr.ref_attr_name:
        raise ModelError(f"{where}: attribute '{show(attr.name)}' refers to a function attribute")
    if attr.type == attr.TENSOR:
        return tensor_value(attr.t, f"{where}: attribute '{show(attr.name)}'", limit)
    if attr.type in (attr.GRAPH, attr.GRAPHS, attr.SPARSE_TENSOR, attr.TYPE_PROTO, attr.TENSORS,
                     attr.SPARSE_TENSORS, attr.TYPE_PROTOS):
        raise ModelError(f"{where}: attribute '{show(attr.name)}' of type "
                         f"{attr.AttributeType.Name(attr.type)} is not supported")
    try:
        v = helper.get_attribute_value(attr)
    except ValueError:
        raise ModelError(f"{where}: attribute '{show(attr.name)}' has no valid type "
                         f"({attr.type})") from None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


def tensor_value(t, where: str, limit: int | None = None) -> np.ndarray:
    """A TensorProto as a numpy array, its type and size checked before anything is allocated."""
    from onnx import numpy_helper
    dt = dtypes.from_onnx(t.data_type, where)
    check_dims(t.dims, where, allow_zero=True)
    check_size(tensor_bytes(dt, t.dims), where, limit)
    try:
        a = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001 - protobuf/numpy raise many kinds for bad tensors
        raise ModelError(f"{where}: tensor data cannot be read ({show(e, 200)})") from None
    if a.dtype != dt or a.shape != tuple(t.dims):
        raise ModelError(f"{where}: tensor data does not match its declared type and shape")
    return a


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
    where = f"input '{show(vi.name)}'"
    if spec is not None:
        return spec.dtype, spec.shape
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        raise ModelError(f"{where} has no tensor type or shape; give one with "
                         f"-model-input={show(vi.name)},float,[d0,d1,...]")
    dt = dtypes.from_onnx(tt.elem_type, where)
    shape = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value <= 0:
                raise ModelError(
                    f"{where}: dimension {i} is {d.dim_value}; tensors with zero or negative "
                    f"dimensions are not supported (give a shape with -model-input="
                    f"{show(vi.name)},{dtypes.GLOW_NAMES.get(dt, 'float')},[...])")
            shape.append(d.dim_value)
        elif d.HasField("dim_param") and d.dim_param in opts.symbols:
            shape.append(opts.symbols[d.dim_param])
        elif i == 0:
            name = show(d.dim_param or "?", 60)
            warn(f"{where}: symbolic leading dimension '{name}' set to 1 "
                 f"(use -onnx-define-symbol={name},N to choose)")
            shape.append(1)
        else:
            name = show(d.dim_param or "unknown", 60)
            raise ModelError(
                f"{where}: dimension {i} ('{name}') is not known; fix it with "
                f"-onnx-define-symbol={name},N or -model-input={show(vi.name)},"
                f"{dtypes.GLOW_NAMES.get(dt, 'float')},[...]")
    return dt, tuple(shape)


def load_onnx(path: str, opts: LoadOptions | None = None, warn=None) -> Graph:
    opts = opts or LoadOptions()
    warn = warn or (lambda m: warnings.warn(m))
    limit = opts.max_tensor_bytes
    model = read_model(path, limit)
    opset = opset_version(model)
    if opts.outputs or opts.cut_inputs:  # before the checks: dropped nodes are never looked at
        cut(model, opts.outputs, opts.cut_inputs, opts.inputs)
    check_ops(model)
    order = check_structure(model)
    halves = [vi for vi in model.graph.input if vi.name in opts.inputs
              and opts.inputs[vi.name].dtype in dtypes.HALF and vi.type.HasField("tensor_type")]
    if halves:  # -model-input=x,float16: a half placeholder, as a model's own would be
        type_outputs(model, every=True)  # the outputs keep the model's types
        for vi in halves:
            vi.type.tensor_type.elem_type = dtypes.to_onnx(opts.inputs[vi.name].dtype)
    if has_half(model):  # float16/bfloat16 tensors computed in float32 (onnx_half.py)
        widen(model, lambda t, where: tensor_value(t, where, limit))
        order = check_structure(model)
    g = model.graph
    graph = Graph(g.name or os.path.splitext(os.path.basename(path))[0])
    graph.max_tensor_bytes = limit
    used = {x for n in g.node for x in list(n.input) + free_names(n)} | \
        {vi.name for vi in g.output}
    values: dict[str, object] = {}
    for t in g.initializer:
        if t.name in used:  # unused initializers are never read
            values[t.name] = graph.constant(
                tensor_value(t, f"initializer '{show(t.name)}'", limit), t.name)
    known_inputs = set()
    initializers = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in initializers:  # an input with a default value: a constant
            dt, _ = _declared_type(vi)
            if vi.name in values and dt is not None and dt != values[vi.name].dtype:
                raise ModelError(f"graph input '{show(vi.name)}' is declared {dt.name} but its "
                                 f"initializer is {values[vi.name].dtype.name}")
            continue
        dt, shape = input_type(vi, opts, warn)
        where = f"input '{show(vi.name)}' {dt.name}{list(shape)}"
        check_dims(shape, where)
        check_size(tensor_bytes(dt, shape), where, limit)
        v = graph.add_input(vi.name, dt, shape)
        spec = opts.inputs.get(vi.name)
        if spec is not None and spec.scale is not None:
            v.qparams = (spec.scale, spec.offset)
            if _declared_type(vi)[0] == np.float32:  # int8q for a float input: dequantize it
                v = graph.add("DequantizeLinear", [v, graph.constant(np.float32(spec.scale)),
                                                   graph.constant(np.array(spec.offset, dt))],
                              name=f"{vi.name}_dequantize", out_names=[f"{vi.name}_float"])[0]
        values[vi.name] = v
        known_inputs.add(vi.name)
    unknown = sorted(set(opts.inputs) - known_inputs)
    if unknown:
        names = ", ".join(f"'{show(u)}'" for u in unknown)
        raise UsageError(f"-model-input names {names}, which "
                         f"the model does not have as inputs (inputs: "
                         f"{', '.join(show(x) for x in sorted(known_inputs)) or 'none'})")
    ctx = Context(graph, opset, limit)
    for i in order:
        translate_node(ctx, g.node[i], node_label(g.node[i], i), values)
    for vi in g.output:
        v = values[vi.name]
        where = f"graph output '{show(vi.name)}' {v.dtype.name}{list(v.shape)}"
        check_dims(v.shape, where)
        graph.outputs.append(v)
    check_declared_types(g, values, bool(opts.inputs or opts.symbols))
    graph.output_names = [vi.name for vi in g.output]
    graph.input_names = [v.name for v in graph.inputs]
    return graph


@dataclass
class Context:
    """What translating a node needs besides its scope: the graph being built, the model's
    opset and size limit, and the constants of subgraphs already read (a Loop body is
    translated once per iteration; its initializers are read once)."""
    graph: Graph
    opset: int
    limit: int | None
    sub_constants: dict = field(default_factory=dict)

    # what onnx_control needs of this module (it cannot import it: onnx imports it)
    def translate(self, n, name: str, values):
        translate_node(self, n, name, values)

    def tensor(self, t, where: str):
        return tensor_value(t, where, self.limit)

    def attribute(self, a, where: str):
        return attribute_value(a, where, self.limit)


def translate_node(ctx: Context, n, name: str, values):
    """Adds one ONNX node to ctx.graph; `values` maps the ONNX names in scope to Values (a
    ChainMap inside subgraphs) and receives the node's outputs."""
    graph, opset, limit = ctx.graph, ctx.opset, ctx.limit
    op = op_key(n)
    where = f"node '{show(name)}' ({show(op, 60)})"
    inputs = [None if x == "" else values[x] for x in n.input]
    if op == n.op_type:
        check_node_schema(n, opset, inputs, where)
    if op in control.CONTROL_OPS:
        outs = control.translate(ctx, n, name, where, inputs, values)
    else:
        attrs = {a.name: attribute_value(a, where, limit) for a in n.attribute}
        if op != n.op_type:  # onnx has no schemas of contrib ops: they declare attribute kinds
            check_attr_kinds(get_op(op), attrs, where)
        opdef = get_op(op)
        if op == "Constant":
            attrs = {"value": constant_value(attrs, where)}
        attrs, inputs = opdef.upgrade(op, attrs, inputs, opset, graph)
        unknown_attrs = sorted(set(attrs) - set(opdef.attrs) - {k for k in attrs if k.startswith("_")})
        if unknown_attrs:
            raise ModelError(f"{where}: attribute(s) {', '.join(show(a, 60) for a in unknown_attrs)}"
                             f" not supported for opset {opset}")
        while inputs and inputs[-1] is None:
            inputs.pop()
        outs = graph.add(op, inputs, attrs, name=name, out_names=list(n.output),
                         num_outputs=len(n.output))
    named = [k for k, o in enumerate(n.output) if o]
    if named and named[-1] >= len(outs):
        raise ModelError(f"{where}: the node names {len(n.output)} outputs but the op "
                         f"has {len(outs)}")
    for oname, v in zip(n.output, outs):
        if oname:
            values[oname] = v

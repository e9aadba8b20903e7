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
from glowpy.ir.ops import get_op, has_op
from glowpy.ir.validate import check_dims, check_size, order_nodes, tensor_bytes

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


@dataclass
class LoadOptions:
    inputs: dict = field(default_factory=dict)  # name -> InputSpec
    symbols: dict = field(default_factory=dict)  # dim_param -> int
    max_tensor_bytes: int | None = None  # validate.py: the target's size limit


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


def _non_text(model) -> str | None:
    """Which name field holds bytes that are not UTF-8 (protobuf then hands out bytes)."""
    g = model.graph
    fields = [("graph name", g.name)] + [("opset domain", o.domain) for o in model.opset_import]
    for coll, what in ((g.input, "graph input name"), (g.output, "graph output name"),
                       (g.value_info, "value_info name"), (g.initializer, "initializer name")):
        fields += [(what, x.name) for x in coll]
    fields += [("external data entry", v)
               for x in g.initializer for e in x.external_data for v in (e.key, e.value)]
    fields += [(f"shape symbol of {show(vi.name, 60)}", d.dim_param)
               for vi in list(g.input) + list(g.output) for d in vi.type.tensor_type.shape.dim]
    for i, n in enumerate(g.node):
        fields += [(f"node {i} {what}", x) for what, x in
                   [("name", n.name), ("op_type", n.op_type), ("domain", n.domain)]
                   + [("input name", x) for x in n.input] + [("output name", x) for x in n.output]
                   + [("attribute name", a.name) for a in n.attribute]]
    for what, x in fields:
        if not isinstance(x, str):
            return what
    return None


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


def check_domains(model):
    """Refuses nodes of domains other than ai.onnx, listing every such domain at once."""
    used: dict[str, int] = {}
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            used[n.domain] = used.get(n.domain, 0) + 1
    if used:
        imported = {o.domain: o.version for o in model.opset_import}
        parts = [f"'{show(d)}' ({c} node{'s' if c > 1 else ''}"
                 + (f", opset {imported[d]})" if d in imported else ", not imported)")
                 for d, c in sorted(used.items())]
        raise ModelError(f"unsupported op domain(s): {', '.join(parts)}; only the default "
                         "ai.onnx domain is supported")


def check_ops(model):
    """Refuses a model with unknown ops, listing them all at once."""
    missing: dict[str, list[str]] = {}
    for i, n in enumerate(model.graph.node):
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        if n.domain not in ("", "ai.onnx") or not has_op(n.op_type) or \
                "internal" in get_op(n.op_type).traits:
            missing.setdefault(key, []).append(n.name or (n.output[0] if n.output else f"#{i}"))
    if missing:
        parts = [f"{show(op, 60)} x{len(names)} ("
                 f"{', '.join(show(x, 60) for x in names[:5])}{', ...' if len(names) > 5 else ''})"
                 for op, names in sorted(missing.items())]
        raise ModelError(f"unsupported ops ({sum(len(v) for v in missing.values())} nodes): "
                         + "; ".join(parts))


def node_label(n, i: int) -> str:
    return n.name or (n.output[0] if n.output and n.output[0] else f"{n.op_type}_{i}")


def check_structure(model) -> list[int]:
    """Unique graph inputs and initializers, then the wiring (validate.order_nodes); returns
    the node execution order."""
    g = model.graph
    for what, names in (("initializer", [t.name for t in g.initializer]),
                        ("graph input", [vi.name for vi in g.input])):
        seen = set()
        for n in names:
            if not n:
                raise ModelError(f"a {what} has an empty name")
            if n in seen:
                raise ModelError(f"{what} '{show(n)}' is declared more than once")
            seen.add(n)
    available = {t.name for t in g.initializer} | {vi.name for vi in g.input}
    nodes = [(node_label(n, i), list(n.input), list(n.output)) for i, n in enumerate(g.node)]
    return order_nodes(nodes, available, [vi.name for vi in g.output], "model")


def attribute_value(attr, where: str, limit: int | None = None):
    from onnx import helper, numpy_helper
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


_ONNX_TYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
              np.dtype(np.float16): "float16", np.dtype(np.bool_): "bool"}


def _schema(op_type: str, opset: int):
    from onnx import defs
    try:
        return defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 - SchemaError: glowpy-only op or form, nothing to compare
        return None


def _attr_spec(op_type: str, name: str, schema):
    """The schema's declaration of an attribute; if this opset's version of the op lacks it, the
    newest version that has it (the op definition decides whether it is accepted)."""
    spec = schema.attributes.get(name) if schema is not None else None
    if spec is None:
        latest = _schema(op_type, 10 ** 6)
        spec = latest.attributes.get(name) if latest is not None else None
    return spec


def check_node_schema(n, opset: int, inputs: list, where: str):
    """What the ONNX schema of the node's op at this opset says, checked before the op's code
    sees the node: each attribute once and of its declared type, required attributes present,
    and input element types allowed by the type constraints (inputs sharing a type variable
    such as T must have the same type)."""
    from onnx import AttributeProto, defs
    seen = set()
    for a in n.attribute:
        if a.name in seen:
            raise ModelError(f"{where}: attribute '{show(a.name)}' is given more than once")
        seen.add(a.name)
    schema = _schema(n.op_type, opset)
    names = AttributeProto.AttributeType
    for a in n.attribute:
        spec = _attr_spec(n.op_type, a.name, schema)
        if spec is None or a.ref_attr_name:
            continue
        want = int(getattr(spec.type, "value", spec.type))
        if a.type != want:
            have = names.Name(a.type) if a.type in names.values() else str(a.type)
            raise ModelError(f"{where}: attribute '{show(a.name)}' has type {have}; ONNX "
                             f"defines it as {names.Name(want)}")
    if schema is None:
        return
    for k, spec in schema.attributes.items():
        if spec.required and k not in seen:
            raise ModelError(f"{where}: missing required attribute '{k}' (ONNX opset {opset})")
    allowed = {tc.type_param_str: set(tc.allowed_type_strs) for tc in schema.type_constraints}
    formal = list(schema.inputs)
    bound: dict[str, tuple] = {}
    variadic = defs.OpSchema.FormalParameterOption.Variadic
    optional = defs.OpSchema.FormalParameterOption.Optional
    for i, x in enumerate(n.input):
        f = formal[i] if i < len(formal) else \
            formal[-1] if formal and formal[-1].option == variadic else None
        if x == "" and f is not None and f.option != optional:
            raise ModelError(f"{where}: input {i} ({f.name}) is required, but its name is empty")
    for i, v in enumerate(inputs):
        if v is None:
            continue
        if i < len(formal):
            f = formal[i]
        elif formal and formal[-1].option == variadic:
            f = formal[-1]
        else:
            break  # too many inputs: the op's own check names them
        ts = f"tensor({_ONNX_TYPE.get(v.dtype, v.dtype.name)})"
        label = f"input {i} ('{show(n.input[i], 60)}', {f.name})"
        if f.type_str in allowed:
            if ts not in allowed[f.type_str]:
                ok = ", ".join(sorted(t[7:-1] for t in allowed[f.type_str] if t.startswith("tensor(")))
                raise ModelError(f"{where}: {label} has type {ts[7:-1]}, which {n.op_type} does not "
                                 f"accept ({f.type_str}: {ok})")
            prev = bound.get(f.type_str)
            if prev is not None and prev[0] != ts and (f.is_homogeneous or f is not prev[2]):
                raise ModelError(f"{where}: {label} has type {ts[7:-1]} but {prev[1]} has type "
                                 f"{prev[0][7:-1]}; both are {f.type_str} and must match")
            bound.setdefault(f.type_str, (ts, label, f))
        elif f.type_str.startswith("tensor(") and f.type_str != ts:
            raise ModelError(f"{where}: {label} has type {ts[7:-1]}; {n.op_type} expects "
                             f"{f.type_str[7:-1]}")


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


def _declared_type(vi):
    """(dtype or None, [dim or None, ...] or None) of a ValueInfo, None where not given."""
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    dt = np.dtype(dtypes.ONNX_TO_NUMPY[tt.elem_type]) if tt.elem_type in dtypes.ONNX_TO_NUMPY \
        else None
    if not tt.HasField("shape"):
        return dt, None
    return dt, [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in tt.shape.dim]


def check_declared_types(g, values: dict, overridden: bool):
    """Graph outputs and value_info annotations must agree with what the graph computes: the
    element type always; a graph output's shape where the model gives concrete dimensions
    (unless -model-input/-onnx-define-symbol changed the input shapes)."""
    for vi, kind in [(vi, "graph output") for vi in g.output] + \
            [(vi, "value_info") for vi in g.value_info]:
        v = values.get(vi.name)
        if v is None:
            continue
        dt, dims = _declared_type(vi)
        where = f"{kind} '{show(vi.name)}'"
        if dt is not None and dt != v.dtype:
            raise ModelError(f"{where} is declared {dt.name} but the graph computes "
                             f"{v.dtype.name}{list(v.shape)}")
        if kind != "graph output" or dims is None or overridden:
            continue
        if len(dims) != len(v.shape) or any(d is not None and d != e for d, e in zip(dims, v.shape)):
            decl = [d if d is not None else "?" for d in dims]
            raise ModelError(f"{where} is declared with shape {decl} but the graph computes "
                             f"{list(v.shape)}")


def load_onnx(path: str, opts: LoadOptions | None = None, warn=None) -> Graph:
    opts = opts or LoadOptions()
    warn = warn or (lambda m: warnings.warn(m))
    limit = opts.max_tensor_bytes
    model = read_model(path, limit)
    opset = opset_version(model)
    check_domains(model)
    check_ops(model)
    order = check_structure(model)
    g = model.graph
    graph = Graph(g.name or os.path.splitext(os.path.basename(path))[0])
    graph.max_tensor_bytes = limit
    used = {x for n in g.node for x in n.input} | {vi.name for vi in g.output}
    values: dict[str, object] = {}
    for t in g.initializer:
        if t.name in used:  # unused initializers are never read
            values[t.name] = graph.constant(
                tensor_value(t, f"initializer '{show(t.name)}'", limit), t.name)
    known_inputs = set()
    for vi in g.input:
        if vi.name in values:
            dt, _ = _declared_type(vi)
            if dt is not None and dt != values[vi.name].dtype:
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
        values[vi.name] = v
        known_inputs.add(vi.name)
    unknown = sorted(set(opts.inputs) - known_inputs)
    if unknown:
        names = ", ".join(f"'{show(u)}'" for u in unknown)
        raise UsageError(f"-model-input names {names}, which "
                         f"the model does not have as inputs (inputs: "
                         f"{', '.join(show(x) for x in sorted(known_inputs)) or 'none'})")
    for i in order:
        n = g.node[i]
        name = node_label(n, i)
        where = f"node '{show(name)}' ({show(n.op_type, 60)})"
        inputs = [None if x == "" else values[x] for x in n.input]
        check_node_schema(n, opset, inputs, where)
        attrs = {a.name: attribute_value(a, where, limit) for a in n.attribute}
        opdef = get_op(n.op_type)
        if n.op_type == "Constant":
            attrs = {"value": constant_value(attrs, where)}
        attrs, inputs = opdef.upgrade(n.op_type, attrs, inputs, opset, graph)
        unknown_attrs = sorted(set(attrs) - set(opdef.attrs) - {k for k in attrs if k.startswith("_")})
        if unknown_attrs:
            raise ModelError(f"{where}: attribute(s) {', '.join(show(a, 60) for a in unknown_attrs)}"
                             f" not supported for opset {opset}")
        while inputs and inputs[-1] is None:
            inputs.pop()
        outs = graph.add(n.op_type, inputs, attrs, name=name, out_names=list(n.output),
                         num_outputs=len(n.output))
        named = [k for k, o in enumerate(n.output) if o]
        if named and named[-1] >= len(outs):
            raise ModelError(f"{where}: the node names {len(n.output)} outputs but the op "
                             f"has {len(outs)}")
        for oname, v in zip(n.output, outs):
            if oname:
                values[oname] = v
    for vi in g.output:
        v = values[vi.name]
        where = f"graph output '{show(vi.name)}' {v.dtype.name}{list(v.shape)}"
        check_dims(v.shape, where)
        graph.outputs.append(v)
    check_declared_types(g, values, bool(opts.inputs or opts.symbols))
    graph.output_names = [vi.name for vi in g.output]
    graph.input_names = [v.name for v in graph.inputs]
    return graph

"""Checks of an ONNX model before it is translated (glowpy/frontend/onnx.py): text fields,
domains and ops, graph wiring, and what each op's ONNX schema says about its attributes and
input types; after translation, the declared output and value_info types. Each failure is one
ModelError line naming the node, op, tensor or attribute."""
from __future__ import annotations

import functools

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir import dtypes
from glowpy.ir.ops import get_op, has_op
from glowpy.ir.validate import order_nodes


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
    for i, n in enumerate(all_nodes(g)):
        fields += [(f"node {i} {what}", x) for what, x in
                   [("name", n.name), ("op_type", n.op_type), ("domain", n.domain)]
                   + [("input name", x) for x in n.input] + [("output name", x) for x in n.output]
                   + [("attribute name", a.name) for a in n.attribute]]
    for what, x in fields:
        if not isinstance(x, str):
            return what
    return None


def subgraphs(n) -> list:
    """The GraphProto attributes of a node (If's branches, Loop's and Scan's body)."""
    out = []
    for a in n.attribute:
        if a.type == a.GRAPH:
            out.append(a.g)
        elif a.type == a.GRAPHS:
            out.extend(a.graphs)
    return out


def all_nodes(g) -> list:
    """The nodes of a graph and of every subgraph inside it, depth first."""
    out = []
    for n in g.node:
        out.append(n)
        for sub in subgraphs(n):
            out.extend(all_nodes(sub))
    return out


def free_names(n) -> list[str]:
    """The outer-scope tensors a node's subgraphs read (ONNX: implicit inputs), sorted; a
    node reading them must come after their producers."""
    free: set[str] = set()
    for sub in subgraphs(n):
        defined = {t.name for t in sub.initializer} | {vi.name for vi in sub.input}
        for m in sub.node:
            free |= {x for x in list(m.input) + free_names(m) if x and x not in defined}
            defined |= set(m.output)
        free |= {vi.name for vi in sub.output if vi.name not in defined}
    return sorted(free)


CONTRIB_DOMAIN = "com.microsoft"  # onnxruntime's contrib ops: registered as "com.microsoft.Op"


def op_key(n) -> str:
    """The registry name of a node's op: the op type in the default domain, else prefixed with
    its domain ("com.microsoft.FusedConv"), the spelling the errors and -list-ops use."""
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"


def check_ops(model):
    """Refuses a model with unknown ops, listing them all at once: default-domain ops glowpy
    does not know and ops of other domains (com.microsoft beyond its registered contrib ops,
    ai.onnx.ml, ...), those inside If, Loop and Scan subgraphs too, in one line, so fixing
    one does not reveal the next."""
    missing: dict[str, list[str]] = {}
    for i, n in enumerate(all_nodes(model.graph)):
        key = op_key(n)
        # a dotted op type in the default domain is no ONNX op, even if it spells a contrib op
        if not has_op(key) or "internal" in get_op(key).traits or \
                (key == n.op_type and "." in key):
            missing.setdefault(key, []).append(n.name or (n.output[0] if n.output else f"#{i}"))
    if missing:
        parts = [f"{show(op, 60)} x{len(names)} ("
                 f"{', '.join(show(x, 60) for x in names[:5])}{', ...' if len(names) > 5 else ''})"
                 for op, names in sorted(missing.items())]
        hint = ("; of other domains only the com.microsoft ops -list-ops shows are supported"
                if any("." in op for op in missing) else "")
        raise ModelError(f"unsupported ops ({sum(len(v) for v in missing.values())} nodes): "
                         + "; ".join(parts) + hint)


_KINDS = {float: "a float", int: "an int", str: "a string", list: "a list"}


def check_attr_kinds(opdef, attrs: dict, where: str):
    """The attributes of an op onnx has no schema for (com.microsoft) against the kinds the op
    declares: its default's type, or `attr_kinds` where the default is None. An int is taken
    for a float (helper.make_node(alpha=2) writes one)."""
    for k, v in attrs.items():
        if k not in opdef.attrs or k.startswith("_"):
            continue  # unknown attributes: the loader names them
        default = opdef.attrs[k]
        kind = getattr(opdef, "attr_kinds", {}).get(k) or type(default)
        if kind is float and isinstance(v, int):
            attrs[k] = float(v)
        elif kind in _KINDS and not isinstance(v, kind):
            raise ModelError(f"{where}: attribute '{show(k)}' must be {_KINDS[kind]}, got "
                             f"{show(type(v).__name__)}")
        elif kind is list and not all(isinstance(x, (int, float)) for x in v):
            raise ModelError(f"{where}: attribute '{show(k)}' must be a list of numbers")


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
    return order_graph(g, available, "model")


def order_graph(g, available: set, what: str) -> list[int]:
    """validate.order_nodes for a graph or subgraph: a node's subgraphs' outer-scope reads
    count as its inputs."""
    nodes = [(node_label(n, i), list(n.input) + free_names(n), list(n.output))
             for i, n in enumerate(g.node)]
    return order_nodes(nodes, available, [vi.name for vi in g.output], what)


_ONNX_TYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
              np.dtype(np.float16): "float16", np.dtype(np.bool_): "bool"}


@functools.lru_cache(maxsize=None)  # per node otherwise: unrolled loop bodies ask again and again
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


def latest_since(op_type: str) -> int:
    """The first opset defining op_type."""
    from onnx import defs
    return min(s.since_version for s in defs.get_all_schemas_with_history()
               if s.name == op_type and s.domain == "")


# Ops onnxruntime defined in the default domain before ONNX did: its transformer optimizer
# writes them into opset 12-16 models. They load at every opset, checked against the ONNX
# schema that later adopted them unchanged.
EARLY_OPS = frozenset({"LayerNormalization"})


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
    if schema is None and n.op_type in EARLY_OPS:
        schema = _schema(n.op_type, 10 ** 6)
    names = AttributeProto.AttributeType
    for a in n.attribute:
        spec = _attr_spec(n.op_type, a.name, schema)
        if spec is None and (schema or _schema(n.op_type, 10 ** 6)) is not None:
            raise ModelError(f"{where}: attribute '{show(a.name)}' is not an attribute of "
                             f"{n.op_type} in any ONNX opset")
        if spec is None or a.ref_attr_name:
            continue
        want = int(getattr(spec.type, "value", spec.type))
        if a.type != want:
            have = names.Name(a.type) if a.type in names.values() else str(a.type)
            raise ModelError(f"{where}: attribute '{show(a.name)}' has type {have}; ONNX "
                             f"defines it as {names.Name(want)}")
    if schema is None:
        latest = _schema(n.op_type, 10 ** 6)
        if latest is not None:
            raise ModelError(f"{where}: {n.op_type} does not exist in ai.onnx opset {opset}; it "
                             f"was added in opset {latest_since(n.op_type)}")
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

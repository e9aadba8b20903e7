"""Structural mutators for tools/fuzz.py: names, opsets, domains, op types, element types,
dimensions, initializers, attributes, graph wiring, new nodes, value_info, bytes; make_case
applies one to three of them (and of fuzz_bombs.MUTATORS, fuzz_hostile.MUTATORS)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

import fuzz_bombs
import fuzz_hostile

HOSTILE_NAMES = ["", "*/", "/*", "*/ int evil; /*", "a\nb", "x\r\n#define A 1", '"', "'", "\\",
                 "a\\", "??/", "é", "名前", "\u202ename", "\x00", "\x7f", "tab\there", "0abc",
                 "int", "main", "memcpy", "CONSTANT_MEM_SIZE", "MEM_ALIGN", "__x", "_Evil",
                 "k0_Conv", "a/b", "a_b", "../../etc/passwd", "x" * 3000, "$(rm -rf /)", "%s%n",
                 "\ud800", "a b c"]
HOSTILE_INTS = [0, -1, 1, 2, 3, 7, -7, 255, 1 << 16, 1 << 31, (1 << 31) - 1, 1 << 40, -(1 << 63),
                (1 << 63) - 1]


# -- mutations --------------------------------------------------------------------------------

def _tensor_names(m) -> list[str]:
    g = m.graph
    names = [vi.name for vi in g.input] + [t.name for t in g.initializer]
    names += [o for nd in g.node for o in nd.output] + [x for nd in g.node for x in nd.input]
    return [x for x in dict.fromkeys(names) if x]


def _name(c, m) -> str:
    if c.bool(0.3):
        existing = _tensor_names(m)
        if existing:
            return c.choice(existing)
    return c.choice(HOSTILE_NAMES)


def _rename_everywhere(m, old, new):
    g = m.graph
    for coll in (g.input, g.output, g.value_info, g.initializer):
        for x in coll:
            if x.name == old:
                x.name = new
    for nd in g.node:
        for i, x in enumerate(nd.input):
            if x == old:
                nd.input[i] = new
        for i, x in enumerate(nd.output):
            if x == old:
                nd.output[i] = new


def mut_rename_tensor(c, m):
    names = _tensor_names(m)
    if names:
        new = c.choice(HOSTILE_NAMES[1:]) + (str(c.int(0, 9)) if c.bool() else "")
        _rename_everywhere(m, c.choice(names), new)


def mut_rename_one_place(c, m):
    g = m.graph
    if g.node:
        nd = c.choice(g.node)
        if nd.input and c.bool():
            nd.input[c.int(0, len(nd.input) - 1)] = _name(c, m)
        elif nd.output:
            nd.output[c.int(0, len(nd.output) - 1)] = _name(c, m)


def mut_strings(c, m):
    g = m.graph
    what = c.int(0, 3)
    s = c.choice(HOSTILE_NAMES)
    if what == 0:
        g.name = s
    elif what == 1:
        g.doc_string = s
    elif what == 2 and g.node:
        c.choice(g.node).name = s
    else:
        m.producer_name = s


def mut_opset(c, m):
    v = c.choice([1, 5, 6, 7, 9, 11, 13, 17, 18, 21, 22, 23, 99, -1])
    if c.bool(0.2):
        m.opset_import.add(domain=c.choice(["", "ai.onnx", "com.microsoft", "x"]), version=v)
    else:
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = v
        if c.bool(0.1):
            del m.opset_import[:]


def mut_domain(c, m):
    if m.graph.node:
        c.choice(m.graph.node).domain = c.choice(["com.microsoft", "ai.onnx.ml", "ai.onnx", "",
                                                  "evil\n"])


def mut_op_type(c, m):
    from glowpy.ir.ops import all_ops
    if m.graph.node:
        nd = c.choice(m.graph.node)
        nd.op_type = c.choice(sorted(all_ops()) + ["NoSuchOp", "", "If", "Loop", "Scan"])


def mut_elem_type(c, m):
    g = m.graph
    t = c.choice([0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 21, 99])
    what = c.int(0, 2)
    if what == 0 and g.input:
        c.choice(g.input).type.tensor_type.elem_type = t
    elif what == 1 and g.output:
        c.choice(g.output).type.tensor_type.elem_type = t
    elif g.initializer:
        c.choice(g.initializer).data_type = t


def mut_dims(c, m):
    g = m.graph
    vis = list(g.input) + list(g.output)
    if not vis:
        return
    vi = c.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    op = c.int(0, 4)
    if op == 0 and dims:
        d = dims[c.int(0, len(dims) - 1)]
        d.dim_value = c.choice(HOSTILE_INTS) if c.bool(0.4) else c.int(1, 9)
    elif op == 1 and dims:
        dims[c.int(0, len(dims) - 1)].dim_param = c.choice(["N", "batch", "", "*/"])
    elif op == 2:
        dims.add().dim_value = c.choice([1, 2, 3])
    elif op == 3 and dims:
        del dims[c.int(0, len(dims) - 1)]
    else:
        vi.type.tensor_type.ClearField("shape")


def mut_initializer(c, m):
    g = m.graph
    if not g.initializer:
        return
    t = c.choice(g.initializer)
    op = c.int(0, 5)
    if op == 0 and t.dims:
        t.dims[c.int(0, len(t.dims) - 1)] = c.choice(HOSTILE_INTS)
    elif op == 1:
        t.raw_data = t.raw_data[:c.int(0, len(t.raw_data))] if t.raw_data else c.bytes(3)
    elif op == 2:
        t.dims.append(c.choice([1, 2, 0]))
    elif op == 3:
        g.initializer.remove(t)
    elif op == 4:  # external data with a hostile location
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        loc = c.choice(["../outside.bin", "/etc/passwd", "missing.bin", "a\0b", "sub/../../x",
                        "C:\\x", "data.bin", "link.bin", ""])
        t.external_data.add(key="location", value=loc)
        if c.bool():
            t.external_data.add(key="offset", value=c.choice(["0", "-1", "99999999", "x", "1"]))
        if c.bool():
            t.external_data.add(key="length", value=c.choice(["0", "4", "99999999", "-4", "y"]))
    elif c.bool():
        t.ClearField("raw_data")
        t.float_data.extend([1.0] * c.int(0, 3))
    else:  # same type, new consistent shape and data
        try:
            a = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001
            return
        shape = [c.int(1, 4) for _ in range(c.int(0, 4))]
        vals = np.arange(int(np.prod(shape)), dtype=np.int64) % 7 - 2
        t.CopyFrom(numpy_helper.from_array(vals.astype(a.dtype).reshape(shape), t.name))


def _set_attr(a, c):
    kind = c.int(0, 5)
    name = a.name
    a.Clear()
    a.name = name
    if kind == 0:
        a.type, a.i = AttributeProto.INT, c.choice(HOSTILE_INTS)
    elif kind == 1:
        a.type = AttributeProto.INTS
        a.ints.extend(c.choice(HOSTILE_INTS) for _ in range(c.int(0, 6)))
    elif kind == 2:
        a.type, a.f = AttributeProto.FLOAT, c.choice([0.0, -1.0, 1e30, float("nan"), float("inf")])
    elif kind == 3:
        a.type, a.s = AttributeProto.STRING, c.choice([b"", b"SAME_UPPER", b"VALID", b"\xff\xfe",
                                                      b"NOTSET", b"reflect", b"x" * 100])
    elif kind == 4:
        a.type = AttributeProto.FLOATS
        a.floats.extend([1.0, -2.0][: c.int(0, 2)])
    else:
        a.type = AttributeProto.TENSOR
        a.t.CopyFrom(numpy_helper.from_array(np.zeros([c.int(0, 3)], np.float32), "t"))


SMALL_INTS = [-3, -2, -1, 0, 1, 2, 3, 4, 5]


def _same_type_value(a, c):
    """A plausible value of the attribute's own type (shapes and axes stay small)."""
    if a.type == AttributeProto.INT:
        a.i = c.choice(SMALL_INTS)
    elif a.type == AttributeProto.INTS:
        del a.ints[:]
        a.ints.extend(c.choice(SMALL_INTS) for _ in range(c.int(0, 8)))
    elif a.type == AttributeProto.FLOAT:
        a.f = c.choice([0.0, 0.5, 1.0, -1.0, 1e-5, 2.0])
    elif a.type == AttributeProto.STRING:
        a.s = c.choice([b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID", b"constant",
                        b"reflect", b"edge", b"nearest", b"linear", b"DCR", b"CRD", b"bogus"])
    else:
        _set_attr(a, c)


def mut_attribute(c, m):
    g = m.graph
    if not g.node:
        return
    nd = c.choice(g.node)
    op = c.int(0, 4)
    if op == 0 and nd.attribute:
        del nd.attribute[c.int(0, len(nd.attribute) - 1)]
    elif op in (1, 2) and nd.attribute:
        a = nd.attribute[c.int(0, len(nd.attribute) - 1)]
        if c.bool(0.6):
            _same_type_value(a, c)
        elif op == 1 and a.type == AttributeProto.INT:
            a.i = c.choice(HOSTILE_INTS)
        elif op == 1 and a.type == AttributeProto.INTS and a.ints:
            a.ints[c.int(0, len(a.ints) - 1)] = c.choice(HOSTILE_INTS)
        else:
            _set_attr(a, c)
    elif op == 3 and nd.attribute:
        nd.attribute.add().CopyFrom(nd.attribute[0])  # duplicated
    else:
        a = nd.attribute.add()
        a.name = c.choice(["axis", "axes", "perm", "kernel_shape", "strides", "pads", "group",
                           "dilations", "auto_pad", "keepdims", "alpha", "mode", "bogus", "to",
                           "transA", "transB", "shape", "value", "split", "allowzero"])
        _set_attr(a, c)


def mut_wiring(c, m):
    g = m.graph
    nodes = list(g.node)
    op = c.int(0, 6)
    if op == 0 and len(nodes) > 1:  # swap two nodes (order), or reverse all
        if c.bool(0.3):
            g.ClearField("node")
            g.node.extend(nodes[::-1])
        else:
            i, j = c.int(0, len(nodes) - 1), c.int(0, len(nodes) - 1)
            nodes[i], nodes[j] = nodes[j], nodes[i]
            g.ClearField("node")
            g.node.extend(nodes)
    elif op == 1 and nodes:  # input from a later node / own output: a cycle
        i = c.int(0, len(nodes) - 1)
        j = c.int(i, len(nodes) - 1)
        if nodes[i].input and nodes[j].output:
            nodes[i].input[c.int(0, len(nodes[i].input) - 1)] = nodes[j].output[0]
    elif op == 2 and nodes:  # remove a node
        g.node.remove(c.choice(nodes))
    elif op == 3 and nodes:  # duplicate a node (two producers of the same tensor)
        g.node.add().CopyFrom(c.choice(nodes))
    elif op == 4:  # a graph output pointing at another tensor
        names = _tensor_names(m)
        if names:
            out = g.output.add()
            out.name = c.choice(names)
            if c.bool():
                out.type.tensor_type.elem_type = TensorProto.FLOAT
    elif op == 5 and g.output:
        if c.bool():
            del g.output[c.int(0, len(g.output) - 1)]
        else:
            g.output.add().CopyFrom(g.output[0])
    elif nodes:  # an optional input omitted / an extra input
        nd = c.choice(nodes)
        if nd.input and c.bool():
            nd.input[c.int(0, len(nd.input) - 1)] = ""
        else:
            nd.input.append(c.choice(_tensor_names(m) or ["x"]))


def mut_add_node(c, m):
    """A node of a random registered op on random existing tensors, with random attributes."""
    from glowpy.ir.ops import all_ops
    ops = all_ops()
    name = c.choice(sorted(k for k, v in ops.items() if "internal" not in v.traits))
    opdef = ops[name]
    names = _tensor_names(m)
    if not names:
        return
    n_in = max(1, len([s for s in opdef.inputs if not s.endswith("?")]))
    domain, _, op_type = name.rpartition(".")  # contrib ops: "com.microsoft.FusedConv"
    nd = m.graph.node.add(op_type=op_type, domain=domain, name=f"fz{len(m.graph.node)}")
    if domain and domain not in {o.domain for o in m.opset_import}:
        m.opset_import.add(domain=domain, version=1)
    nd.input.extend(c.choice(names) for _ in range(n_in))
    nd.output.append(f"fz_out{len(m.graph.node)}")
    schema = None
    try:
        schema = onnx.defs.get_schema(name, 17, "")
    except Exception:  # noqa: BLE001 - not an ONNX op at this opset
        pass
    for k in list(opdef.attrs)[: c.int(0, 3)]:
        a = nd.attribute.add()
        a.name = k
        spec = schema.attributes.get(k) if schema is not None else None
        if spec is not None and c.bool(0.8):
            a.type = int(getattr(spec.type, "value", spec.type))
            _same_type_value(a, c)
        else:
            _set_attr(a, c)
    if c.bool(0.7):
        o = m.graph.output.add()
        o.name = nd.output[0]


def mut_value_info(c, m):
    names = _tensor_names(m)
    if names:
        vi = m.graph.value_info.add()
        vi.name = c.choice(names)
        vi.type.tensor_type.elem_type = c.choice([1, 6, 7, 9, 8])


STRUCTURAL = [mut_rename_tensor, mut_rename_one_place, mut_strings, mut_opset, mut_domain,
              mut_op_type, mut_elem_type, mut_dims, mut_initializer, mut_attribute, mut_wiring,
              mut_add_node, mut_value_info] + fuzz_bombs.MUTATORS + fuzz_hostile.MUTATORS


def mutate_bytes(c, data: bytes) -> bytes:
    b = bytearray(data)
    op = c.int(0, 3)
    if op == 0:
        for _ in range(c.int(1, 8)):
            if b:
                b[c.int(0, len(b) - 1)] = c.int(0, 255)
    elif op == 1:
        b = b[:c.int(0, len(b))]
    elif op == 2:
        i = c.int(0, len(b))
        b[i:i] = c.bytes(c.int(1, 16))
    else:
        i, j = sorted((c.int(0, len(b)), c.int(0, len(b))))
        k = c.int(0, len(b))
        b[k:k] = b[i:j][:4096]
    return bytes(b)


def make_case(c, seeds) -> tuple[bytes, list[str], dict]:
    """One mutant: (serialized model, names of the mutations applied, compile options the
    mutations chose: fuzz_hostile.take_options)."""
    m = onnx.ModelProto()
    m.CopyFrom(c.choice(seeds))
    applied = []
    for _ in range(c.int(1, 3)):
        mut = c.choice(STRUCTURAL)
        try:
            mut(c, m)
        except (ValueError, TypeError, UnicodeError, IndexError):
            continue  # protobuf refused the value (e.g. a lone surrogate): not a model
        applied.append(mut.__name__)
    options = fuzz_hostile.take_options(m)
    try:
        data = m.SerializeToString()
    except Exception:  # noqa: BLE001 - e.g. a lone surrogate in a string field: not a model
        applied.append("unserializable->seed")
        data = c.choice(seeds).SerializeToString()
    if c.bool(0.1):
        data = mutate_bytes(c, data)
        applied.append("mutate_bytes")
    return data, applied, options

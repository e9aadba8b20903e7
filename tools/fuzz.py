#!/usr/bin/env python3
"""Model fuzzer for glowpy: mutates valid ONNX models (bytes, fields, names, shapes, attributes,
graph wiring, external data) and compiles each mutant, checking that the compiler

  * either succeeds, or fails with a GlowpyError (a ModelError/UsageError: one line, exit 1/2);
    an "internal error" (any other exception) is a failure;
  * never crashes (the worker process dies) and never hangs (per-case time limit);
  * leaves nothing behind on failure, and exactly the five bundle files on success;
  * writes a header that compiles as C (`cc -fsyntax-only -Wall -Werror`), whatever names the
    mutant carries.

Compiles run in a separate worker process, so a crash or a hang is caught and reported with
the model that caused it. The mutations are driven by a `Chooser`: `RandomChooser` for long
runs (this script), or hypothesis' `data` object in tests/test_fuzz.py (fixed seed,
shrinking).

    python tools/fuzz.py --cases 5000 --seed 1 [--seeds-from-onnx] [--save DIR]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import AttributeProto, TensorProto, helper, numpy_helper  # noqa: E402

import fuzz_bombs  # noqa: E402  (beside this file: tools/ is sys.path[0] or the tests add it)

FUZZ_LIMIT = 64 << 20  # -max-region-size for fuzz cases: keeps every case small and fast
BUNDLE_FILES = {"fuzz.o", "fuzz.h", "fuzz.weights.bin", "fuzz.weights.txt", "fuzz.json"}

HOSTILE_NAMES = ["", "*/", "/*", "*/ int evil; /*", "a\nb", "x\r\n#define A 1", '"', "'", "\\",
                 "a\\", "??/", "é", "名前", "\u202ename", "\x00", "\x7f", "tab\there", "0abc",
                 "int", "main", "memcpy", "CONSTANT_MEM_SIZE", "MEM_ALIGN", "__x", "_Evil",
                 "k0_Conv", "a/b", "a_b", "../../etc/passwd", "x" * 3000, "$(rm -rf /)", "%s%n",
                 "\ud800", "a b c"]
HOSTILE_INTS = [0, -1, 1, 2, 3, 7, -7, 255, 1 << 16, 1 << 31, (1 << 31) - 1, 1 << 40, -(1 << 63),
                (1 << 63) - 1]


# -- choosers ---------------------------------------------------------------------------------

class RandomChooser:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def bool(self, p=0.5):
        return self.r.random() < p

    def bytes(self, n):
        return bytes(self.r.getrandbits(8) for _ in range(n))


class HypothesisChooser(RandomChooser):
    """The same interface over hypothesis' `data.draw`, so hypothesis can shrink a failure."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def int(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))

    def bool(self, p=0.5):
        return self.data.draw(self.st.booleans())

    def bytes(self, n):
        return self.data.draw(self.st.binary(min_size=n, max_size=n))


# -- seed models ------------------------------------------------------------------------------

def _vi(name, shape, et=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, et, shape)


def _init(name, shape, rng, dtype=np.float32):
    a = (rng.standard_normal(shape) * 0.5).astype(dtype) if dtype == np.float32 else \
        np.asarray(shape, dtype)
    return numpy_helper.from_array(a, name)


def _model(nodes, inputs, outputs, inits=(), opset=17, name="seed"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="glowpy-fuzz")
    m.ir_version = 8
    return m


def builtin_seeds() -> list[onnx.ModelProto]:
    """Small valid models covering the main op families (each compiles in well under 1 s)."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    seeds = []
    # a small CNN: Conv -> Relu -> MaxPool -> Reshape -> Gemm -> Softmax
    seeds.append(_model(
        [n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
         n("Relu", ["c"], ["r"], name="relu"),
         n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
         n("Reshape", ["p", "shape"], ["f"], name="flat"),
         n("Gemm", ["f", "fw", "fb"], ["g"], transB=1, name="fc"),
         n("Softmax", ["g"], ["y"], axis=1, name="softmax")],
        [_vi("x", [1, 2, 8, 8])], [_vi("y", [1, 5])],
        [_init("w", [4, 2, 3, 3], rng), _init("b", [4], rng),
         numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
         _init("fw", [5, 64], rng), _init("fb", [5], rng)], name="cnn"))
    # elementwise with broadcasting and unary math
    seeds.append(_model(
        [n("Add", ["a", "b"], ["s"]), n("Mul", ["s", "k"], ["m"]), n("Sigmoid", ["m"], ["g"]),
         n("Sub", ["g", "a"], ["d"]), n("Tanh", ["d"], ["t"]), n("Div", ["t", "k"], ["q"]),
         n("Clip", ["q", "lo", "hi"], ["y"])],
        [_vi("a", [2, 3, 4]), _vi("b", [3, 1])], [_vi("y", [2, 3, 4])],
        [_init("k", [4], rng), numpy_helper.from_array(np.float32(-1), "lo"),
         numpy_helper.from_array(np.float32(1), "hi")], name="eltwise"))
    # data movement
    seeds.append(_model(
        [n("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
         n("Concat", ["t", "t"], ["c"], axis=1),
         n("Slice", ["c", "st", "en", "ax"], ["s"]),
         n("Unsqueeze", ["s", "ua"], ["u"]),
         n("Squeeze", ["u", "ua"], ["q"]),
         n("Flatten", ["q"], ["f"], axis=1),
         n("Gather", ["f", "idx"], ["y"], axis=1)],
        [_vi("x", [2, 3, 4])], [_vi("y", [2, 3])],
        [numpy_helper.from_array(np.array([1], np.int64), "st"),
         numpy_helper.from_array(np.array([5], np.int64), "en"),
         numpy_helper.from_array(np.array([1], np.int64), "ax"),
         numpy_helper.from_array(np.array([1], np.int64), "ua"),
         numpy_helper.from_array(np.array([0, 2, 5], np.int64), "idx")], name="movement"))
    # matmul, reductions, normalization
    seeds.append(_model(
        [n("MatMul", ["x", "w"], ["m"]),
         n("BatchNormalization", ["m4", "sc", "bi", "mu", "va"], ["bn"]),
         n("Reshape", ["m", "s4"], ["m4"]),
         n("ReduceMean", ["bn"], ["rm"], axes=[2, 3], keepdims=1),
         n("GlobalAveragePool", ["bn"], ["gp"]),
         n("Add", ["rm", "gp"], ["y"])],
        [_vi("x", [1, 4, 6])], [_vi("y", [1, 4, 1, 1])],
        [_init("w", [6, 6], rng), numpy_helper.from_array(np.array([1, 4, 2, 3], np.int64), "s4"),
         _init("sc", [4], rng), _init("bi", [4], rng), _init("mu", [4], rng),
         numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.1, "va")],
        opset=13, name="reduce"))
    # pooling / padding / pointwise convs, two outputs
    seeds.append(_model(
        [n("Pad", ["x", "pads"], ["p"], mode="constant"),
         n("AveragePool", ["p"], ["a"], kernel_shape=[3, 3], strides=[1, 1]),
         n("Conv", ["a", "w"], ["c"], kernel_shape=[1, 1], group=1),
         n("LeakyRelu", ["c"], ["y1"], alpha=0.1),
         n("ReduceMax", ["x"], ["y2"], axes=[1], keepdims=0)],
        [_vi("x", [1, 3, 5, 5])], [_vi("y1", [1, 2, 5, 5]), _vi("y2", [1, 5, 5])],
        [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
         _init("w", [2, 3, 1, 1], rng)], opset=13, name="pool2"))
    # an older opset (attribute forms that later became inputs)
    seeds.append(_model(
        [n("Reshape", ["x"], ["r"], shape=[2, 6]),
         n("Relu", ["r"], ["y"])],
        [_vi("x", [3, 4])], [_vi("y", [2, 6])], opset=4, name="old"))
    return seeds


def shared_seeds() -> list[onnx.ModelProto]:
    """The small real models of ../shared/models (fast to compile)."""
    d = os.path.join(os.path.dirname(REPO), "shared", "models")
    out = []
    for name in ("mnist8", "mnist_onnx2c_atmega14x14"):
        p = os.path.join(d, name + ".onnx")
        if os.path.exists(p):
            out.append(onnx.load(p))
    return out


def onnx_node_seeds(max_bytes=1 << 16) -> list[onnx.ModelProto]:
    """The single-node models of onnx's backend tests whose ops glowpy knows."""
    import warnings
    from glowpy.ir.ops import has_op
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            from onnx.backend.test.case.node import collect_testcases
            raw = collect_testcases(None)
    out = []
    for tc in raw:
        m = tc.model
        if m is None or "_expanded" in tc.name or m.ByteSize() > max_bytes:
            continue
        if all(has_op(nd.op_type) and nd.domain in ("", "ai.onnx") for nd in m.graph.node):
            out.append(m)
    return out


# -- mutations --------------------------------------------------------------------------------

def _tensor_names(m) -> list[str]:
    g = m.graph
    names = [vi.name for vi in g.input] + [t.name for t in g.initializer]
    names += [o for nd in g.node for o in nd.output] + [x for nd in g.node for x in nd.input]
    return [x for x in dict.fromkeys(names) if x]


def _name(c: "RandomChooser", m) -> str:
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
              mut_add_node, mut_value_info] + fuzz_bombs.MUTATORS


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


def make_case(c, seeds) -> tuple[bytes, list[str]]:
    """One mutant: (serialized model, names of the mutations applied)."""
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
    try:
        data = m.SerializeToString()
    except Exception:  # noqa: BLE001 - e.g. a lone surrogate in a string field: not a model
        applied.append("unserializable->seed")
        data = c.choice(seeds).SerializeToString()
    if c.bool(0.1):
        data = mutate_bytes(c, data)
        applied.append("mutate_bytes")
    return data, applied


# -- the worker (compiles cases in its own process) -------------------------------------------

def worker_main():
    """Reads one JSON request per line: {"model": path, "out": dir}; answers one JSON line."""
    import resource
    try:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ValueError, OSError):
        pass
    import traceback
    from glowpy.compiler import Options, compile_model
    from glowpy.errors import GlowpyError, one_line
    for line in sys.stdin:
        req = json.loads(line)
        res = {"status": "ok", "message": ""}
        try:
            compile_model(req["model"], req["out"],
                          Options(network_name="fuzz", llvm_opt=req.get("llvm_opt", 0),
                                  max_region_size=FUZZ_LIMIT))
        except GlowpyError as e:
            res = {"status": "error", "message": one_line(e), "exit": e.exit_code}
        except Exception as e:  # noqa: BLE001 - that is what the fuzzer looks for
            res = {"status": "internal", "message": f"{type(e).__name__}: {one_line(e, 500)}",
                   "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


class Worker:
    """A compile worker process; restarted after a crash or a hang."""

    def __init__(self, workdir: str, timeout: float = 20.0, llvm_opt: int = 0):
        self.workdir, self.timeout, self.llvm_opt = workdir, timeout, llvm_opt
        self.proc = None
        self.n = 0
        self.cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

    def _start(self):
        self.log = open(os.path.join(self.workdir, "worker.log"), "ab")
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, cwd=self.workdir)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.log.close()

    def run(self, data: bytes, extra_files: dict | None = None) -> dict:
        """Compiles one model (bytes); returns {"status": ok|error|internal|crash|hang|leak|
        header, "message": ...}."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.n += 1
        case = os.path.join(self.workdir, f"case{self.n}")
        os.makedirs(case)
        model = os.path.join(case, "m.onnx")
        with open(model, "wb") as f:
            f.write(data)
        with open(os.path.join(case, "data.bin"), "wb") as f:  # for external-data mutants
            f.write(b"\0" * 64)
        with open(os.path.join(case, fuzz_bombs.HUGE_FILE[0]), "wb") as f:
            f.truncate(fuzz_bombs.HUGE_FILE[1])  # sparse: costs nothing unless read
        try:
            os.symlink("/etc/hostname", os.path.join(case, "link.bin"))
        except OSError:
            pass
        out = os.path.join(case, "out")
        t0 = time.monotonic()
        self.proc.stdin.write((json.dumps({"model": model, "out": out,
                                           "llvm_opt": self.llvm_opt}) + "\n").encode())
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(self.timeout)
        sel.close()
        if not ready:
            self.close()
            res = {"status": "hang", "message": f"no answer within {self.timeout} s"}
        else:
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait()
                self.close()
                res = {"status": "crash", "message": f"worker died (exit {rc})"}
            else:
                res = json.loads(line)
        res["seconds"] = time.monotonic() - t0
        if res["status"] == "error" and os.path.lexists(out):
            res = {"status": "leak", "message": f"failed compile left {sorted(os.listdir(out))}"}
        elif res["status"] == "ok":
            files = set(os.listdir(out))
            if files != BUNDLE_FILES:
                res = {"status": "leak", "message": f"bundle directory holds {sorted(files)}"}
            elif self.cc:
                r = subprocess.run([self.cc, "-fsyntax-only", "-Wall", "-Werror", "-x", "c",
                                    os.path.join(out, "fuzz.h")], capture_output=True, text=True)
                if r.returncode:
                    res = {"status": "header", "message": r.stderr[-2000:]}
        if res["status"] in ("ok", "error"):
            shutil.rmtree(case, ignore_errors=True)
        else:
            res["case_dir"] = case
        return res


OK_STATUSES = ("ok", "error")


def replay(paths, timeout, llvm_opt) -> int:
    bad = 0
    with tempfile.TemporaryDirectory(prefix="glowpy-fuzz-") as work:
        w = Worker(work, timeout, llvm_opt)
        try:
            for p in paths:
                src = os.path.join(p, "m.onnx") if os.path.isdir(p) else p
                d = os.path.dirname(os.path.abspath(src))
                with open(src, "rb") as f:
                    res = w.run(f.read())
                bad += res["status"] not in OK_STATUSES
                print(f"{d}: {res['status']}: {res['message'][:300]}")
        finally:
            w.close()
    return 1 if bad else 0


# -- the long run -----------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="per-case time limit (s)")
    ap.add_argument("--llvm-opt", type=int, default=0)
    ap.add_argument("--seeds-from-onnx", action="store_true",
                    help="also mutate onnx's backend node-test models (slower start)")
    ap.add_argument("--save", default="fuzz-findings", help="where failing cases are kept")
    ap.add_argument("--replay", nargs="+", metavar="MODEL",
                    help="compile saved cases (m.onnx files or case directories) and report")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main()
        return 0
    if a.replay:
        return replay(a.replay, a.timeout, a.llvm_opt)
    seeds = builtin_seeds() + shared_seeds()
    if a.seeds_from_onnx:
        seeds += onnx_node_seeds()
    print(f"fuzz: {len(seeds)} seed models, {a.cases} cases, seed {a.seed}", flush=True)
    c = RandomChooser(a.seed)
    stats = collections.Counter()
    muts = collections.Counter()
    findings = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="glowpy-fuzz-") as work:
        w = Worker(work, a.timeout, a.llvm_opt)
        try:
            for i in range(a.cases):
                data, applied = make_case(c, seeds)
                res = w.run(data)
                stats[res["status"]] += 1
                muts.update(applied)
                if res["status"] not in OK_STATUSES:
                    os.makedirs(a.save, exist_ok=True)
                    dst = os.path.join(a.save, f"case{i}")
                    shutil.copytree(res["case_dir"], dst, symlinks=True, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns(fuzz_bombs.HUGE_FILE[0]))
                    with open(os.path.join(dst, "result.json"), "w") as f:
                        json.dump(dict(res, mutations=applied), f, indent=1)
                    findings.append((i, res["status"], res["message"][:200]))
                    print(f"  case {i}: {res['status']}: {res['message'][:200]} -> {dst}",
                          flush=True)
                if (i + 1) % 500 == 0:
                    print(f"  {i + 1} cases, {time.monotonic() - t0:.0f} s: {dict(stats)}",
                          flush=True)
        finally:
            w.close()
    dt = time.monotonic() - t0
    print(f"fuzz: {a.cases} cases in {dt:.0f} s ({a.cases / dt:.1f}/s): {dict(stats)}")
    print(f"fuzz: mutations applied: {dict(muts.most_common())}")
    print(f"fuzz: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

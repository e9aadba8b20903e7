"""Mutators for tools/fuzz.py aimed at the second hostile-input review (issue 22): names that
collide with what a C or C++ program has (standard header macros, predefined macros, reserved
forms) as graph outputs, network names and entry names; new nodes of the ops whose output size
a model's constants decide (Resize, Upsample, Pad, Slice, Tile, Expand, ConstantOfShape, Range,
ConvTranspose, DepthToSpace, SpaceToDepth, Unsqueeze, Reshape) with huge, negative, zero or
NaN values; and hostile option values (-target, -mcpu, -march, -mattr, -float-abi).

Options travel inside the model as a metadata_props entry OPTIONS_KEY (JSON), which make_case
takes out again before the model is serialized."""
from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPTIONS_KEY = "glowpy-fuzz-options"
I64_MAX = (1 << 63) - 1
C_NAMES = ["MAX", "MIN", "C", "WIDTH", "_cplusplus", "__GNUC__", "linux", "unix", "i386", "errno",
           "EOF", "NULL", "onnx::Gemm_0", "a__b", "_", "__", "_1", "INT8_MAX", "main", "write",
           "_Bool", "SIZE_MAX", "M_PI", "x_", "CONSTANT_MEM_SIZE", "config"]
NETWORK_NAMES = ["INT8", "int8", "SIZE", "UINT16", "FLT", "DBL", "_", "linux", "unix", "a__b", "x_",
                 "errno", "write", "EOF", "M", "_X", "fuzz", "i386", "CHAR", "PTRDIFF"]
ENTRY_NAMES = [None, "linux", "write", "_start", "errno", "INT8_MAX", "run", "unix", "EOF",
               "a__b", "printf", "infer"]
HOSTILE_TEXT = ['"', "a\nb", "x86_64\0", "\x1b[31m", "x" * 300, "", " ", "é", "+", ",", "'",
                "native", "host", "generic"]
TARGETS = ["x86_64-unknown-linux-gnu", 'x86_64-unknown-linux-gnu"', "x86_64-\"-linux-gnu",
           "thumbv7em-unknown-none-eabihf", "riscv32-\"-none-elf", "x86_64\n!0 = x", "arm"]
CPUS = ["x86-64", "x86-64-v3", 'x86-64"', "cortex-m7", "a\nb", "generic"]
ATTRS = ["+avx2", '+"', "+avx2,-\"x", "+a b", ",,,", "+sse2\n", "-avx512f"]
BIG = [0, -1, 1, 2, 3, 1 << 20, 1 << 31, 1 << 40, 1 << 62, I64_MAX, -(1 << 63), -(1 << 40)]
FLOATS = [float("nan"), float("inf"), -1.0, 0.0, 1e-30, 1e9, 3.4e38, 2.0, 0.5]


def _options(m) -> dict:
    for p in m.metadata_props:
        if p.key == OPTIONS_KEY:
            return json.loads(p.value)
    return {}


def _set_options(m, **kw):
    opts = dict(_options(m), **kw)
    keep = [p for p in m.metadata_props if p.key != OPTIONS_KEY]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    m.metadata_props.add(key=OPTIONS_KEY, value=json.dumps(opts))


def take_options(m) -> dict:
    """The options a mutator stored in `m`, removed from it."""
    opts = _options(m)
    keep = [p for p in m.metadata_props if p.key != OPTIONS_KEY]
    del m.metadata_props[:]
    m.metadata_props.extend(keep)
    return opts


def mut_c_names(c, m):
    """A graph output renamed (everywhere) to a colliding name, and/or a network or entry name
    that collides."""
    from fuzz_mutators import _rename_everywhere
    g = m.graph
    if g.output and c.bool(0.7):
        _rename_everywhere(m, c.choice(g.output).name, c.choice(C_NAMES))
    if c.bool(0.6):
        _set_options(m, network_name=c.choice(NETWORK_NAMES))
    if c.bool(0.3):
        _set_options(m, main_entry_name=c.choice(ENTRY_NAMES))


def mut_cli_values(c, m):
    """Hostile values of the options that reach LLVM."""
    key = c.choice(["target", "mcpu", "march", "mattr", "float_abi"])
    pool = {"target": TARGETS, "mcpu": CPUS, "march": CPUS, "mattr": ATTRS}.get(key, [])
    _set_options(m, **{key: c.choice(pool + HOSTILE_TEXT)})


def _float_input(m):
    for v in m.graph.input:
        t = v.type.tensor_type
        if t.elem_type == TensorProto.FLOAT and t.HasField("shape"):
            return v.name, len(t.shape.dim)
    return None, 0


def _ints(c, n):
    return np.array([c.choice(BIG) if c.bool(0.5) else c.int(1, 4) for _ in range(n)], np.int64)


def _floats(c, n):
    return np.array([c.choice(FLOATS) if c.bool(0.5) else 1.0 for _ in range(n)], np.float32)


def mut_size_bomb(c, m):
    """A new node of an op whose output size its constants or attributes decide, fed hostile
    values, on a float graph input (or nothing), made a graph output."""
    g = m.graph
    x, r = _float_input(m)
    k = len(g.node)
    op = c.choice(["Resize", "Upsample", "Pad", "Slice", "Tile", "Expand", "ConstantOfShape",
                   "Range", "ConvTranspose", "DepthToSpace", "SpaceToDepth", "Unsqueeze",
                   "Reshape"])
    consts, attrs, ins = [], {}, [x] if x else []
    if op == "ConstantOfShape" or (op == "Range" and c.bool()) or not x:
        op = c.choice(["ConstantOfShape", "Range"])
        ins = []
    if op == "Resize":
        ins += ["", ""] if c.bool() else [""]
        consts = [_ints(c, r)] if len(ins) == 3 else [_floats(c, r)]
        attrs = {"mode": c.choice(["nearest", "linear", "cubic"])}
    elif op == "Upsample":
        consts, attrs = [_floats(c, r)], {"mode": "nearest"}
    elif op == "Pad":
        consts, attrs = [_ints(c, 2 * r)], {"mode": c.choice(["constant", "edge", "reflect"])}
    elif op == "Slice":
        consts = [_ints(c, 1), _ints(c, 1), np.array([c.int(-r, max(r - 1, 0))], np.int64),
                  _ints(c, 1)]
    elif op in ("Tile", "Expand", "Reshape"):
        consts = [_ints(c, r if op == "Tile" else c.choice([r, 1, 40, 1000]))]
    elif op == "ConstantOfShape":
        consts = [_ints(c, c.choice([1, 2, 3, 33, 200000]))]
    elif op == "Range":
        dt = c.choice([np.float32, np.int64])
        consts = [np.array(c.choice(FLOATS if dt == np.float32 else BIG), dt) for _ in range(3)]
    elif op == "ConvTranspose":
        consts = [np.ones([1, 1] + [2] * max(r - 2, 1), np.float32)]
        name = c.choice(["strides", "output_padding", "output_shape", "dilations", "pads"])
        n = max(r - 2, 1) * (2 if name == "pads" else 1)
        attrs = {name: [int(v) for v in _ints(c, n)]}
    elif op in ("DepthToSpace", "SpaceToDepth"):
        attrs = {"blocksize": c.choice(BIG)}
    elif op == "Unsqueeze":
        consts = [np.arange(c.choice([1, 2, 40, 100000]), dtype=np.int64)]
    for i, v in enumerate(consts):
        name = f"bomb{k}_{i}"
        g.initializer.append(numpy_helper.from_array(v, name))
        ins.append(name)
    out = f"bomb{k}"
    g.node.append(helper.make_node(op, ins, [out], name=out, **attrs))
    g.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT if op != "Range" else
                                                  helper.np_dtype_to_tensor_dtype(consts[0].dtype),
                                                  None))


MUTATORS = [mut_c_names, mut_cli_values, mut_size_bomb]

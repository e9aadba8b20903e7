"""Mutators for tools/fuzz.py aimed at work and memory bombs: window attributes far past the
input (strides, dilations, pads, kernels), NaN/inf in float attributes and tensors (Range,
Resize scales), external-data entries with odd offsets and lengths (Unicode digits, spaces,
huge values) and initializers naming gigabytes of external data, used or not. The worker
gives every case a sparse 4 GiB `huge.bin` beside the model (HUGE_FILE)."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto, TensorProto, helper

HUGE_FILE = ("huge.bin", 1 << 32)
WINDOW_ATTRS = ("strides", "dilations", "pads", "kernel_shape")
BIG = [2, 3, 17, 4096, 1 << 14, 1 << 20, 1 << 31, 1 << 40, (1 << 63) - 1]
SPECIAL = [float("nan"), float("inf"), float("-inf"), 1e38, -1e38, 1e-45, 0.0]
ODD_NUMBERS = ["\u0663", "\u00b2", "1\u0660", " 8 ", "+8", "8.0", "0x8", "8_0", "", "-0",
               "18446744073709551616", "4294967296", "64", "16"]


def _window_nodes(m):
    return [n for n in m.graph.node if n.op_type in (
        "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "QLinearConv", "ConvInteger")]


def mut_window_attr(c, m):
    """A window op's strides, dilations, pads or kernel_shape set to a huge value."""
    nodes = _window_nodes(m)
    if not nodes:
        return
    n = c.choice(nodes)
    name = c.choice(WINDOW_ATTRS)
    rank = 2
    for a in n.attribute:
        if a.name in WINDOW_ATTRS and a.ints:
            rank = len(a.ints) // (2 if a.name == "pads" else 1)
    vals = [c.choice(BIG) if c.bool() else 1 for _ in range(rank * (2 if name == "pads" else 1))]
    keep = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(keep + [helper.make_attribute(name, vals)])


def mut_float_special(c, m):
    """NaN, inf or an extreme value in a float attribute or a float initializer."""
    floats = [a for n in m.graph.node for a in n.attribute
              if a.type in (AttributeProto.FLOAT, AttributeProto.FLOATS)]
    inits = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT]
    if floats and (not inits or c.bool()):
        a = c.choice(floats)
        if a.type == AttributeProto.FLOAT:
            a.f = c.choice(SPECIAL)
        elif a.floats:
            a.floats[c.int(0, len(a.floats) - 1)] = c.choice(SPECIAL)
    elif inits:
        t = c.choice(inits)
        from onnx import numpy_helper
        try:
            arr = numpy_helper.to_array(t).copy()
        except Exception:  # noqa: BLE001 - already mutated beyond reading
            return
        if arr.size:
            arr.flat[c.int(0, arr.size - 1)] = c.choice(SPECIAL)
            t.CopyFrom(numpy_helper.from_array(arr.astype(np.float32), t.name))


def _external(t, location, offset, length):
    t.ClearField("raw_data")
    del t.float_data[:]
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    t.external_data.add(key="location", value=location)
    if offset is not None:
        t.external_data.add(key="offset", value=offset)
    if length is not None:
        t.external_data.add(key="length", value=length)


def mut_external_odd(c, m):
    """An initializer moved to data.bin (64 bytes) with an odd offset or length string."""
    if not m.graph.initializer:
        return
    t = c.choice(m.graph.initializer)
    _external(t, "data.bin", c.choice(ODD_NUMBERS + [None]), c.choice(ODD_NUMBERS + [None]))


def mut_external_huge(c, m):
    """A new initializer of 4 GiB in huge.bin, unused or added to the graph's inputs of a node,
    or an existing one pointed at the huge file."""
    g = m.graph
    if g.initializer and c.bool():
        t = c.choice(g.initializer)
    else:
        t = g.initializer.add()
        t.name = f"huge{len(g.initializer)}"
        t.data_type = TensorProto.FLOAT
        if g.node and c.bool(0.3):
            g.node[c.int(0, len(g.node) - 1)].input.append(t.name)
    del t.dims[:]
    t.dims.extend(c.choice([[1 << 30], [1 << 15, 1 << 15], [1 << 29], [16]]))
    _external(t, HUGE_FILE[0], c.choice(["0", None, "4096", str(HUGE_FILE[1] - 64)]),
              c.choice([str(HUGE_FILE[1]), None, "64", str(1 << 31)]))


MUTATORS = [mut_window_attr, mut_float_special, mut_external_odd, mut_external_huge]

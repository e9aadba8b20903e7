"""The memory planner and lowering's memory decisions.

1. A hypothesis property test of the offset assignment on random lifetime sets: no two live
   buffers overlap (beyond a granted streaming overlap), and no plan is below the lower bound.
2. Lowering decisions on hand-built graphs (zero-copy Concat, Split/Slice parts, in-place ops,
   streaming overlaps, no reuse at all), each plan checked byte by byte by `check_plan`.
3. Real bundles with those decisions, compared with onnxruntime.
4. Per shared model: the activation region is within the naive liveness bound of the original
   ONNX graph, the mutable region holds only the placeholders, the object keeps no buffers of
   its own (.data + .bss < 4 KiB), and the header and the memory report say what the plan is."""
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from bundle_cache import compiled, writable_section_bytes
from util import FLOAT_MODELS, check_against_onnxruntime, model_path
from vector_levels import params
from glowpy.compiler import Options, load_graph
from glowpy.ir import liveness
from glowpy.ir.graph import Graph
from glowpy.ir.lower import lower
from glowpy.ir.naive_bound import naive_liveness_bound
from glowpy.ir.passes.pipeline import optimize
from glowpy.ir.planner import (Member, assign_offsets, build, live_profile, lower_bound, place,
                                plan)
from glowpy.ir.program import ALIGN, align
from glowpy.ir.program import ACTIVATION

F = np.float32
RNG = np.random.default_rng(3)


# -- 1. property test of the offset assignment ------------------------------------------------

@st.composite
def lifetime_sets(draw):
    n_instr = draw(st.integers(2, 12))
    groups = []
    for gi in range(draw(st.integers(1, 10))):
        g = []
        for _ in range(draw(st.integers(1, 3))):
            lo = draw(st.integers(0, 4)) * ALIGN
            hi = lo + draw(st.integers(1, 8)) * ALIGN
            a = draw(st.integers(0, n_instr - 1))
            b = draw(st.integers(a, n_instr - 1))
            g.append(Member(None, gi, lo, hi, a, b))
        shift = min(m.lo for m in g)
        for m in g:
            m.lo, m.hi = m.lo - shift, m.hi - shift
        groups.append(g)
    pairs = {}
    # streaming overlaps: an input dying at t and an output born at t, in different groups
    for _ in range(draw(st.integers(0, 3))):
        gi, go = draw(st.integers(0, len(groups) - 1)), draw(st.integers(0, len(groups) - 1))
        if gi == go:
            continue
        mi, mo = groups[gi][0], groups[go][0]
        t = draw(st.integers(0, n_instr - 1))
        mi.start, mi.end = min(mi.start, t), t
        mo.start, mo.end = t, max(mo.end, t)
        if any(id(mi) in k or id(mo) in k for k in pairs):
            continue
        pairs[(id(mi), id(mo))] = -draw(st.integers(1, 4)) * ALIGN
    return groups, pairs, n_instr


def overlap_violations(groups, offsets, pairs):
    bad = []
    mems = [(m, offsets[m.group] + m.lo, offsets[m.group] + m.hi) for g in groups for m in g]
    for i, (m, lo, hi) in enumerate(mems):
        for c, clo, chi in mems[i + 1:]:
            if m.group == c.group or m.start > c.end or c.start > m.end:
                continue
            if lo >= chi or clo >= hi:
                continue
            d = pairs.get((id(m), id(c)))
            if d is not None and clo - lo <= d:  # c is the output, below its input m
                continue
            d = pairs.get((id(c), id(m)))
            if d is not None and lo - clo <= d:
                continue
            bad.append((m, c))
    return bad


def live_bytes(groups, t: int) -> int:
    """The bytes of the members live at instruction t, each group's byte ranges counted once."""
    per = {}
    for g in groups:
        for m in g:
            if m.start <= t <= m.end:
                per.setdefault(m.group, set()).update(range(m.lo, m.hi, ALIGN))
    return sum(len(v) for v in per.values()) * ALIGN


@settings(max_examples=300, deadline=None)
@given(lifetime_sets())
def test_offsets_never_overlap_and_never_beat_the_lower_bound(case):
    groups, pairs, n = case
    offsets, size, _, bound = assign_offsets(groups, pairs, n, reuse=True, iterations=20)
    assert not overlap_violations(groups, offsets, pairs)
    assert all(o % ALIGN == 0 and o >= 0 for o in offsets)
    assert size >= max(m.hi + offsets[m.group] for g in groups for m in g)
    assert size >= bound == lower_bound(groups, pairs, n)
    # the bound is at least the bytes of any single instant's live buffers minus overlaps
    for t in range(n):
        live = live_bytes(groups, t)
        mems = {id(m): m for g in groups for m in g}
        granted = sum(min(mems[a].hi - mems[a].lo, mems[b].hi - mems[b].lo)
                      for a, b in pairs if mems[a].start <= t <= mems[a].end
                      and mems[b].start <= t <= mems[b].end)
        assert bound >= live - granted


@settings(max_examples=100, deadline=None)
@given(lifetime_sets())
def test_without_reuse_every_group_has_its_own_bytes(case):
    groups, pairs, n = case
    offsets, size, _, _ = assign_offsets(groups, pairs, n, reuse=False)
    spans = sorted((o, o + max(m.hi for m in g)) for o, g in zip(offsets, groups))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert size == sum(max(m.hi for m in g) for g in groups)


@settings(max_examples=200, deadline=None)
@given(lifetime_sets(), st.randoms(use_true_random=False))
def test_first_fit_takes_the_lowest_offset_that_conflicts_with_nothing_placed(case, rnd):
    """first_fit.place compares each group with all placed members at once (numpy); checked
    here against the definition, one candidate offset at a time."""
    groups, pairs, n = case
    order = list(range(len(groups)))
    rnd.shuffle(order)
    for mirror in (False, True):
        offsets = place(groups, order, pairs, mirror)
        assert all(o % ALIGN == 0 and o >= 0 for o in offsets)
        assert not overlap_violations(groups, offsets, pairs)
    offsets = place(groups, order, pairs)
    for k, gi in enumerate(order):
        placed = [groups[g] for g in order[:k]] + [groups[gi]]
        for x in range(0, offsets[gi], ALIGN):  # every lower offset meets a placed member
            trial = {g: offsets[g] for g in order[:k]} | {gi: x}
            assert overlap_violations(placed, trial, pairs), (gi, x)


@settings(max_examples=200, deadline=None)
@given(lifetime_sets())
def test_live_profile_is_the_union_of_each_groups_live_bytes_less_granted_overlaps(case):
    groups, pairs, n = case
    mems = {id(m): m for g in groups for m in g}
    expect = []
    for t in range(n):
        granted = sum(max(0, min(mems[b].size + d, mems[a].size)) for (a, b), d in pairs.items()
                      if mems[a].start <= t <= mems[a].end and mems[b].start <= t <= mems[b].end)
        expect.append(live_bytes(groups, t) - granted)
    assert live_profile(groups, pairs, n) == expect


# -- a byte-level checker of real plans -------------------------------------------------------

def check_plan(prog):
    """Every activation storage lies inside the region, and two storages whose bytes are
    needed at the same instruction share no byte -- unless one contains the other's data (a
    Concat slice or Split part inside its container), both are read-only parts of the same
    data, one was written over the other as it died (an in-place output), or lowering granted
    a streaming overlap and it is respected."""
    iv = liveness.intervals(prog)
    size = prog.sizes["activation"]
    pairs = {(id(a), id(b)): (i, d) for i, a, b, d in prog.overlaps}
    st = [(s, s.address[1], s.address[1] + s.nbytes, a, b) for s, (a, b) in iv.items()
          if s.root.region == ACTIVATION]
    for s, lo, hi, a, b in st:
        assert 0 <= lo and hi <= size, f"{s.name} [{lo}, {hi}) outside the region ({size})"

    def ancestors(s):
        out = set()
        while s.base is not None:
            s = s.base.storage
            out.add(id(s))
        return out

    for i, (s, lo, hi, a, b) in enumerate(st):
        for t, tlo, thi, ta, tb in st[i + 1:]:
            if b < ta or tb < a or hi <= tlo or thi <= lo:
                continue
            if id(t) in ancestors(s) or id(s) in ancestors(t):
                continue
            if s.relation == t.relation == "part" and ancestors(s) & ancestors(t):
                continue  # two read-only views of the same data
            if (b == ta and t.relation == "reuse") or (tb == a and s.relation == "reuse"):
                continue
            for x, xlo, y, ylo in ((s, lo, t, tlo), (t, tlo, s, lo)):
                p = pairs.get((id(x), id(y)))
                if p is not None and ylo - xlo <= p[1]:
                    break
            else:
                raise AssertionError(f"{s.name} [{lo}, {hi}) live {a}..{b} overlaps {t.name} "
                                     f"[{tlo}, {thi}) live {ta}..{tb}")
    assert prog.plan_info["lower_bound"] <= size


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_model_plans_are_valid_at_every_instruction(name):
    graph = optimize(load_graph([model_path(name)], Options()))
    check_plan(build(graph))


# -- 2. lowering decisions on hand-built graphs -----------------------------------------------

def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype(F)


def conv(g, x, cout, k=3, group=1, pads=1):
    w = g.constant(rand(cout, x.shape[1] // group, k, k), "w")
    return g.add("Conv", [x, w, g.constant(rand(cout), "b")], {"pads": [pads] * 4, "group": group})[0]


def storage_relation(prog, value_name):
    for ins in prog.instrs:
        for b in ins.inputs + ins.outputs:
            if b is not None and b.value is not None and b.value.name == value_name:
                s = b.storage
                return (s.relation if s.base is not None else None), s
    raise KeyError(value_name)


def test_concat_operands_are_written_into_their_slices():
    g = Graph()
    x = g.add_input("x", F, (1, 2, 6, 6))
    a, b = conv(g, x, 3), conv(g, x, 5)
    c = g.add("Concat", [a, b], {"axis": 1})[0]
    g.outputs = [g.add("Exp", [c])[0]]
    prog = plan(lower(g))
    assert [i.op for i in prog.instrs] == ["Conv", "Conv", "Exp"]
    (ra, sa), (rb, sb) = storage_relation(prog, a.name), storage_relation(prog, b.name)
    assert ra == rb == "slice" and sb.address[1] - sa.address[1] == a.nbytes
    check_plan(prog)
    prog0 = plan(lower(g, optimize=False))
    assert "Concat" in [i.op for i in prog0.instrs]


def test_concat_of_strided_slices_or_inputs_copies():
    g = Graph()
    x = g.add_input("x", F, (2, 3, 4))
    y = g.add("Exp", [x])[0]
    c = g.add("Concat", [y, y], {"axis": 1})[0]  # leading dim 2: slices are strided
    d = g.add("Concat", [x, g.add("Neg", [x])[0]], {"axis": 0})[0]  # x is a graph input
    g.outputs = [c, d]
    prog = plan(lower(g))
    assert [i.op for i in prog.instrs] == ["Exp", "Concat", "Neg", "Copy"]
    check_plan(prog)


def test_split_and_contiguous_slice_are_parts_of_their_input():
    g = Graph()
    x = g.add_input("x", F, (1, 6, 4))
    e = g.add("Exp", [x])[0]
    s1, s2 = g.add("Split", [e, g.constant(np.array([2, 4]), "sp")], {"axis": 1}, num_outputs=2)
    sl = g.add("Slice", [e, g.constant(np.array([1]), "st"), g.constant(np.array([3]), "en"),
                         g.constant(np.array([1]), "ax")])[0]
    st2 = g.add("Slice", [e, g.constant(np.array([1]), "st2"), g.constant(np.array([3]), "en2"),
                          g.constant(np.array([2]), "ax2")])[0]  # strided: copied
    g.outputs = [g.add("Sum", [s1, sl])[0], g.add("Neg", [s2])[0], g.add("Neg", [st2])[0]]
    prog = plan(lower(g))
    assert [i.op for i in prog.instrs].count("Slice") == 1 and "Split" not in [i.op for i in prog.instrs]
    (r1, p1), (r2, p2) = storage_relation(prog, s1.name), storage_relation(prog, s2.name)
    assert r1 == r2 == "part" and p2.address[1] - p1.address[1] == 2 * 4 * 4
    assert storage_relation(prog, sl.name)[0] == "part"
    check_plan(prog)


def test_elementwise_ops_run_in_place_when_their_input_dies():
    g = Graph()
    x = g.add_input("x", F, (1, 4, 8, 8))
    a = g.add("Exp", [g.add("Neg", [x])[0]])[0]
    b = g.add("Add", [a, g.constant(rand(4, 1, 1), "c")])[0]
    keep = g.add("Neg", [b])[0]
    c = g.add("Mul", [b, keep])[0]  # b still read after the Neg: no in-place at Neg
    g.outputs = [g.add("Sqrt", [c])[0]]
    prog = plan(lower(g))
    assert storage_relation(prog, a.name)[0] == "reuse"
    assert storage_relation(prog, b.name)[0] == "reuse"
    assert storage_relation(prog, keep.name)[0] is None
    assert prog.sizes["activation"] == 2 * align(x.nbytes)
    check_plan(prog)


def test_row_ops_run_in_place_when_their_input_dies():
    """Softmax, LogSoftmax and LayerNormalization read a whole softmax group (row) before
    writing any of it, then each element before writing it: their output takes a dying
    input's bytes, as an elementwise op's does (DETR's 8 x 850 x 850 scores: 47.1 -> 25.7 MB
    of activations)."""
    g = Graph()
    x = g.add_input("x", F, (2, 7, 133))
    a = g.add("Neg", [x])[0]
    s = g.add("Softmax", [a], {"axis": -1})[0]
    ls = g.add("LogSoftmax", [s], {"axis": 1})[0]
    ln = g.add("LayerNormalization", [ls, g.constant(rand(133), "sc"), g.constant(rand(133), "bi")],
               {"axis": -1, "epsilon": 1e-5})[0]
    g.outputs = [g.add("Neg", [ln])[0]]
    prog = plan(lower(g))
    assert [storage_relation(prog, v.name)[0] for v in (s, ls, ln)] == ["reuse"] * 3
    assert prog.sizes["activation"] == align(x.nbytes)
    check_plan(prog)


def test_no_reuse_gives_every_buffer_its_own_bytes():
    g = Graph()
    x = g.add_input("x", F, (1, 4, 8, 8))
    t = x
    for _ in range(4):
        t = g.add("Neg", [t])[0]
    g.outputs = [t]
    prog = plan(lower(g, reuse=False), reuse=False)
    assert prog.sizes["activation"] == 3 * align(x.nbytes) and not prog.overlaps
    assert plan(lower(g)).sizes["activation"] == align(x.nbytes)


def test_streaming_window_ops_overlap_their_dying_input():
    g = Graph()
    x = g.add_input("x", F, (1, 8, 16, 16))
    a = g.add("Exp", [x])[0]
    d = conv(g, a, 8, group=8)  # depthwise
    m = g.add("MaxPool", [d], {"kernel_shape": [2, 2], "strides": [2, 2]})[0]
    g.outputs = [g.add("Neg", [m])[0]]
    prog = build(g)
    assert len(prog.overlaps) == 2
    plane = 16 * 16 * 4
    # each output starts one output plane below its input: the chain needs both shifts
    assert prog.sizes["activation"] == align(a.nbytes) + plane + plane // 4
    assert prog.plan_info["lower_bound"] == align(a.nbytes) + plane  # the depthwise instant
    check_plan(prog)


def test_pointwise_conv_in_place_and_residual_accumulation():
    g = Graph()
    x = g.add_input("x", F, (1, 8, 10, 10))
    a = g.add("Exp", [x])[0]
    p = conv(g, a, 16, k=1, pads=0)  # expands channels, in place with a scratch tile
    r = g.add("Relu", [g.add("Add", [conv(g, conv(g, p, 16), 16), p])[0]])[0]  # residual
    g.outputs = [g.add("Softmax", [r])[0]]  # not fusable: the Conv output is an activation
    optimize(g)
    prog = build(g)
    ops = [i.op for i in prog.instrs]
    assert "ConvPointwiseInPlace" in ops or prog.sizes["activation"] <= 2 * align(p.nbytes)
    acc = [i for i in prog.instrs if i.attrs.get("accumulate") is not None]
    assert len(acc) == 1 and acc[0].outputs[0].storage.relation == "reuse"
    check_plan(prog)


def test_schedule_search_finishes_a_branch_before_starting_the_next():
    g = Graph()
    x = g.add_input("x", F, (1, 8, 16, 16))
    a1, b1 = g.add("Neg", [x])[0], g.add("Exp", [x])[0]  # model order: both big ones first
    pool = {"kernel_shape": [4, 4], "strides": [4, 4]}
    a2, b2 = g.add("MaxPool", [a1], pool)[0], g.add("MaxPool", [b1], pool)[0]
    g.outputs = [g.add("Add", [a2, b2])[0]]
    model_order = plan(lower(g)).sizes["activation"]
    prog = build(g)
    assert prog.plan_info["schedule"] != "model"
    assert prog.sizes["activation"] < model_order
    assert [n.op for n in g.nodes][:2] != ["Neg", "Exp"]  # the chosen order is left in the graph
    check_plan(prog)


# -- 3. those decisions in real bundles -------------------------------------------------------

def _node_model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in inputs],
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_bundle_with_concat_split_slice_views(tmp_path):
    inits = {"w1": rand(3, 2, 3, 3), "w2": rand(5, 2, 1, 1), "b2": rand(5), "sp": np.array([4, 4]),
             "s": np.array([1]), "e": np.array([7]), "ax": np.array([1])}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["b"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Concat", ["ar", "b"], ["c"], axis=1),
             helper.make_node("Split", ["c", "sp"], ["s1", "s2"], axis=1),
             helper.make_node("Slice", ["c", "s", "e", "ax"], ["sl"]),
             helper.make_node("Add", ["s1", "s2"], ["y"]),
             helper.make_node("Sigmoid", ["sl"], ["z"])]
    m = _node_model(nodes, [("x", [1, 2, 6, 6])], ["y", "z", "c"], inits)
    check_against_onnxruntime(m, {"x": rand(1, 2, 6, 6)}, tmp_path / "o1")
    check_against_onnxruntime(m, {"x": rand(1, 2, 6, 6)}, tmp_path / "nr",
                              reuse_activation_memory=False)


def test_bundle_with_in_place_kernels(tmp_path):
    """Depthwise convolutions overlapping their input, 1x1 convolutions in place (expanding
    and reducing channels), a residual accumulated into its own buffer, fused epilogues."""
    c8, c16 = 8, 16
    inits = {"dw1": rand(c8, 1, 3, 3), "b1": rand(c8), "pw1": rand(c16, c8, 1, 1), "b2": rand(c16),
             "dw2": rand(c16, 1, 3, 3), "pw2": rand(c8, c16, 1, 1), "b3": rand(c8),
             "dw3": rand(c8, 1, 3, 3), "pw3": rand(c8, c8, 1, 1)}
    nodes = [helper.make_node("Exp", ["x"], ["e"]),
             helper.make_node("Conv", ["e", "dw1", "b1"], ["d"], pads=[1, 1, 1, 1], group=c8),
             helper.make_node("Clip", ["d"], ["dc"]),
             helper.make_node("Conv", ["dc", "pw1", "b2"], ["p"]),
             helper.make_node("Relu", ["p"], ["pr"]),
             helper.make_node("Conv", ["pr", "dw2"], ["q"], pads=[1, 1, 1, 1], group=c16),
             helper.make_node("Conv", ["q", "pw2", "b3"], ["k"]),
             helper.make_node("HardSwish", ["k"], ["kh"]),
             helper.make_node("Conv", ["kh", "dw3"], ["m"], pads=[1, 1, 1, 1], group=c8),
             helper.make_node("Conv", ["m", "pw3"], ["n"]),
             helper.make_node("Add", ["n", "kh"], ["r"]),
             helper.make_node("Relu", ["r"], ["rr"]),
             helper.make_node("AveragePool", ["rr"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Tanh", ["y"], ["t"])]
    m = _node_model(nodes, [("x", [1, c8, 9, 7])], ["t"], inits)
    x = rand(1, c8, 9, 7)
    report = str(tmp_path / "memory.json")
    # -activation-memory=min: the in-place 1x1 kernel is slower, so hosts take it only on request
    check_against_onnxruntime(m, {"x": x}, tmp_path / "o1", rtol=1e-4, atol=1e-5,
                              dump_memory_report=report, activation_memory="min")
    with open(report) as f:
        rep = json.load(f)
    kernels = [i["kernel"] for i in rep["instructions"]]
    assert kernels.count("ConvPointwiseInPlace") == 2
    assert [i["in_place"].get("accumulate") is not None for i in rep["instructions"]
            if "in_place" in i].count(True) == 1
    assert sum(1 for i in rep["instructions"] if i.get("overlaps_input")) >= 3
    plane = 9 * 7 * 4
    assert rep["activations"]["size"] < (c8 + c16) * plane  # below any input + output pair
    check_against_onnxruntime(m, {"x": x}, tmp_path / "o0", opt_level=0)


@pytest.mark.parametrize("variant", ["vector", "default"])
@pytest.mark.parametrize("level", params())
def test_bundle_with_row_ops_in_place(level, variant, tmp_path):
    """LayerNormalization over rows, Softmax over rows of 133 (a masked tail at every width),
    LogSoftmax over columns (7 groups 133 apart), each written over its input: the
    activation region is one tensor, the outputs onnxruntime's, on the vector kernels at each
    x86 level and on the scalar `default` Softmax kernels."""
    shape, d = [2, 7, 133], 133
    inits = {"sc": rand(d), "bi": rand(d)}
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "sc", "bi"], ["n"], axis=-1),
             helper.make_node("Softmax", ["n"], ["s"], axis=-1),
             helper.make_node("LogSoftmax", ["s"], ["l"], axis=1),
             helper.make_node("Neg", ["l"], ["y"])]
    m = _node_model(nodes, [("x", shape)], ["y"], inits)
    report = tmp_path / "memory.json"
    forced = {"kernel_variants": {"Softmax": "default", "LogSoftmax": "default"}} \
        if variant == "default" else {}
    check_against_onnxruntime(m, {"x": rand(*shape) * 3}, tmp_path / "b", rtol=1e-4, atol=1e-5,
                              dump_memory_report=str(report), **level.options, **forced)
    rep = json.loads(report.read_text())
    assert rep["activations"]["size"] == align(2 * 7 * 133 * 4)
    assert {i["kernel"]: i["variant"]["name"] for i in rep["instructions"]
            if i["kernel"] in ("Softmax", "LogSoftmax")} == {"Softmax": variant, "LogSoftmax": variant}


# -- 4. every shared float model --------------------------------------------------------------

@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_model_memory(name):
    info, d, report_path = compiled(name)
    mem = info.memory
    naive = naive_liveness_bound(model_path(name))
    # Winograd convolutions' scratch is memory spent for speed on vector hosts (-winograd=false
    # plans without it): the naive bound has no such buffers
    scratch = mem["activations_scratch"]
    assert mem["activations"] <= naive + scratch, \
        f"{name}: {mem['activations']} > naive bound {naive} + Winograd scratch {scratch}"
    assert mem["activations_lower_bound"] <= mem["activations"]
    placeholders = info.inputs + [o for o in info.outputs if o not in info.inputs]
    assert mem["mutable"] == sum(align(p["bytes"]) for p in placeholders)
    own = writable_section_bytes(os.path.join(d, info.name + ".o"))
    assert sum(own.values()) < 4096, own
    with open(os.path.join(d, info.name + ".h")) as f:
        header = f.read()
    eff = mem["activations_lower_bound"] / mem["activations"] if mem["activations"] else 1.0
    assert f"// Activations allocation efficiency: {eff:.4f}" in header
    total = mem["constant"] + mem["mutable"] + mem["activations"]
    assert f"// Total data size: {total} (bytes)" in header
    with open(report_path) as f:
        rep = json.load(f)
    act = rep["activations"]
    assert rep["regions"] == {"constant": mem["constant"], "mutable": mem["mutable"],
                              "activation": mem["activations"]}
    assert act["lower_bound"] == mem["activations_lower_bound"] == act["peak"]["bytes"]
    assert rep["instructions"][act["peak"]["instruction_index"]]["live_bytes"] == act["peak"]["bytes"]
    for b in rep["buffers"]:
        assert 0 <= b["offset"] and b["offset"] + b["size"] <= mem["activations"]
        assert b["first_use"]["index"] <= b["last_use"]["index"]
        assert b["producer"] is None or b["producer"]["index"] <= b["last_use"]["index"]
    assert set(act["peak"]["live_buffers"]) <= {b["name"] for b in rep["buffers"]}


# -- 5. the command line ----------------------------------------------------------------------

def model_compiler(*argv) -> int:
    import typer

    from glowpy.cli import app, run
    return run(list(argv), "model-compiler", typer.main.get_command(app))


def test_cli_memory_report_graph_dump_and_no_reuse(tmp_path):
    model = model_path("mnist8")
    rep, dot = tmp_path / "mem.json", tmp_path / "g.dot"
    assert model_compiler(f"-model={model}", f"-emit-bundle={tmp_path / 'a'}",
                          f"-dump-memory-report={rep}", f"-dump-graph-DAG={dot}") == 0
    report = json.loads(rep.read_text())
    with open(tmp_path / "a" / "mnist8.json") as f:
        mem = json.load(f)["memory"]
    assert report["regions"]["activation"] == mem["activations"] <= naive_liveness_bound(model)
    assert report["activations"]["peak"]["instruction"] in {i["name"] for i in report["instructions"]}
    assert "Conv+Relu" in dot.read_text()  # the DAG shows the optimized, fused graph
    assert model_compiler(f"-model={model}", f"-emit-bundle={tmp_path / 'b'}",
                          "-reuse-activation-memory-allocations=false",
                          f"-dump-memory-report={tmp_path / 'nr.json'}") == 0
    nr = json.loads((tmp_path / "nr.json").read_text())
    spans = sorted((b["offset"], b["offset"] + b["size"]) for b in nr["buffers"])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # nothing shares bytes
    assert nr["regions"]["activation"] > mem["activations"]
    assert model_compiler(f"-model={model}", f"-emit-bundle={tmp_path / 'c'}", "-O0") == 0
    with open(tmp_path / "c" / "mnist8.json") as f:
        assert json.load(f)["memory"]["activations"] > mem["activations"]

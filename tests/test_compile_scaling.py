"""Compile time that scales: the structures behind it, checked for what they compute.

1. The memory-greedy schedule (a heap with rescoring of only the readers whose 'frees it'
   changed) gives exactly the order of the plain algorithm that rescans every ready node,
   on random graphs with fan-out, repeated reads and views.
2. Identical kernels are emitted once: residual blocks of one shape share their functions,
   and the bundle still matches onnxruntime.
3. Long elementwise chains are cut into kernels of at most epilogue.MAX_STEPS steps and match
   onnxruntime.
4. The in-place 1x1 relaxation keeps the region's size while bounding its plans.
The times themselves are printed by benchmarks/compile_time.py, not asserted here."""
import os
import re
import sys

import numpy as np
import pytest

from glowpy.ir import epilogue, schedule
from glowpy.ir.graph import Graph
from util import check_against_onnxruntime
from vector_levels import params

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import compile_time as models  # noqa: E402


def _plain_greedy(graph, mode):
    """The quadratic reference: every step rescores every ready node."""
    preds, succs, producer = schedule._deps(graph)
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    rep = schedule._storage_value(graph, producer)
    remaining = {}
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None and not v.is_const:
                s = rep.get(v, v)
                remaining[s] = remaining.get(s, 0) + 1
    outputs = {rep.get(v, v) for v in graph.outputs}
    indeg = {id(n): len(preds[id(n)]) for n in graph.nodes}
    ready = [n for n in graph.nodes if indeg[id(n)] == 0]
    order = []
    while ready:
        def score(n):
            new = sum(schedule._cost(o) for o in n.outputs if rep.get(o, o) is o)
            counts = {}
            for v in n.inputs:
                if v is not None and not v.is_const:
                    s = rep.get(v, v)
                    counts[s] = counts.get(s, 0) + 1
            freed = sum(schedule._cost(s) for s, c in counts.items()
                        if remaining.get(s, 0) == c and s not in outputs
                        and s not in graph.inputs)
            return (new - freed, pos[id(n)]) if mode == "grow" else (-freed, new, pos[id(n)])
        n = min(ready, key=score)
        ready.remove(n)
        order.append(n)
        for v in n.inputs:
            if v is not None and not v.is_const:
                remaining[rep.get(v, v)] -= 1
        for s in succs[id(n)]:
            indeg[id(s)] -= 1
            if indeg[id(s)] == 0:
                ready.append(s)
    return order


def _random_graph(seed):
    rng = np.random.default_rng(seed)
    g = Graph("random")
    g.fold = False
    vals = [g.add_input("x", np.float32, (1, 4, 4))]
    for i in range(60):
        kind = rng.integers(4)
        a = vals[rng.integers(len(vals))]
        shape = (1, 4, int(rng.integers(1, 5)))
        if a.shape != shape:
            a = g.add("Reshape", [a, g.constant(np.array(a.shape, np.int64))])[0] \
                if kind == 0 else g.add("Slice", [a, g.constant(np.array([0])),
                                                  g.constant(np.array([a.shape[2]]))])[0]
        if kind == 1:  # a tensor read twice by one node
            out = g.add("Add", [a, a])[0]
        elif kind == 2:
            b = vals[rng.integers(len(vals))]
            out = g.add("Mul", [a, b])[0] if b.shape == a.shape else g.add("Relu", [a])[0]
        else:
            out = g.add("Concat", [a, vals[rng.integers(len(vals))]], {"axis": 2})[0] \
                if vals[-1].shape[:2] == a.shape[:2] else g.add("Sigmoid", [a])[0]
        vals.append(out)
    g.outputs = [vals[-1], vals[len(vals) // 2]]
    return g


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("mode", ["grow", "free"])
def test_heap_greedy_schedule_is_the_plain_algorithm(seed, mode):
    g = _random_graph(seed)
    assert [n.name for n in schedule.greedy(g, mode)] == \
        [n.name for n in _plain_greedy(g, mode)]


def _kernel_functions(ir_path):
    text = open(ir_path).read()
    return re.findall(r'define internal void @"?(k\d+_[A-Za-z0-9_]+)', text)


@pytest.mark.parametrize("level", params())
def test_identical_kernels_share_one_function(tmp_path, level):
    model = models.blocks(70)  # 10 residual blocks of one shape
    x = np.random.default_rng(1).standard_normal((1, 8, 8, 8)).astype(np.float32)
    ir_path = str(tmp_path / "m.ll")
    check_against_onnxruntime(model, {"x": x}, str(tmp_path / "out"), rtol=1e-4, atol=1e-4,
                              dump_llvm_ir=ir_path, **level.options)
    fns = _kernel_functions(ir_path)
    # 20 convolutions of two kinds (Conv+Relu, Conv+Add+Relu); the first block reads the
    # input placeholder and the last writes the output (other regions, other alignment
    # and aliasing), and the planner's in-place choices differ early on: at most 6 texts
    assert len([f for f in fns if "Conv" in f]) <= 6, fns
    calls = re.findall(r'call void @"?(k\d+_[A-Za-z0-9_]+)', open(ir_path).read())
    assert len([c for c in calls if "Conv" in c]) == 20


def test_long_chain_is_cut_into_bounded_kernels(tmp_path):
    n = 200
    model = models.chain(n)
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    ir_path = str(tmp_path / "m.ll")
    check_against_onnxruntime(model, {"x": x}, str(tmp_path / "out"), rtol=1e-4, atol=1e-5,
                              dump_llvm_ir=ir_path)
    calls = re.findall(r'call void @"?(k\d+_[A-Za-z0-9_]+)', open(ir_path).read())
    # each kernel is a host plus at most MAX_STEPS fused steps
    assert len(calls) == -(-n // (epilogue.MAX_STEPS + 1)), calls


def test_kernels_differing_only_in_argument_alignment_share_one_function():
    """Two kernels whose texts differ only in the alignment their pointer arguments promise
    (one reads a view 4 bytes into a buffer) are merged with their helper functions; the
    function kept promises the smaller alignment, and the module still compiles."""
    from llvmlite import ir
    from glowpy.codegen import module as M
    from glowpy.codegen.target import host_target

    mod = ir.Module()
    shared = {}
    kept = []
    for idx, align in ((3, 64), (7, 4)):
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), f"k{idx}_Conv")
        fn.args[0].attributes.align = align
        helper = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.PointerType()]),
                             f"k{idx}_Conv_store0")
        helper.args[0].attributes.align = align
        hb = ir.IRBuilder(helper.append_basic_block("entry"))
        hb.store(ir.Constant(ir.FloatType(), 1.0), helper.args[0])
        hb.ret_void()
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.call(helper, [fn.args[0]])
        b.ret_void()
        kept.append(M._share(mod, fn, [helper], shared))
    assert kept[0] is kept[1] and kept[0].name == "k3_Conv"
    names = [g for g in mod.globals if g.startswith("k")]
    assert names == ["k3_Conv", "k3_Conv_store0"], names
    text = str(mod)
    assert "align 64" not in text and text.count("align 4 %") == 2, text
    assert len(M.compile_module(mod, host_target())) > 0
    # bodies that differ in what they promise (a store's alignment) stay apart
    twins = []
    for idx, align in ((11, 64), (12, 4)):
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.PointerType()]), f"k{idx}_Conv")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.store(ir.Constant(ir.FloatType(), 1.0), fn.args[0], align=align)
        b.ret_void()
        twins.append(M._share(mod, fn, [], shared))
    assert twins[0] is not twins[1] and {"k11_Conv", "k12_Conv"} <= set(mod.globals)


def test_large_modules_are_optimized_in_parts_into_one_object(tmp_path, monkeypatch):
    """A module past SPLIT_TEXT is optimized in parts on threads (codegen/optimize.py): the
    bundle matches onnxruntime, its object is the same byte for byte for 2, 3 and 6 parts
    (every part sees the kernels as external), and the kernels are local symbols again:
    the object exports the entry alone."""
    from glowpy import elf
    from glowpy.codegen import optimize

    monkeypatch.setattr(optimize, "SPLIT_TEXT", 1)
    counts = []
    split = optimize.split
    monkeypatch.setattr(optimize, "split", lambda mod: counts.append(len(split(mod)[0]))
                        or split(mod))
    model = models.blocks(30)
    x = np.random.default_rng(3).standard_normal((1, 8, 8, 8)).astype(np.float32)
    objects = []
    for parts in (2, 3, 6):
        monkeypatch.setattr(optimize, "PARTS", parts)
        out = tmp_path / f"p{parts}"
        check_against_onnxruntime(model, {"x": x}, str(out), rtol=1e-4, atol=1e-4)
        [obj] = [p for p in (out / "bundle").iterdir() if p.suffix == ".o"]
        objects.append(obj.read_bytes())
    assert counts[0] == 2 and counts[1] == 3 and counts[2] >= 4, counts
    assert objects[0] == objects[1] == objects[2]
    exported = [s for s in elf.Elf(objects[0]).symbols()
                if s.defined and s.bind == "global" and s.type == "func"]
    assert [s.name for s in exported] == ["model"], exported
    local = [s.name for s in elf.Elf(objects[0]).symbols() if s.type == "func" and s.bind == "local"]
    assert len([n for n in local if re.match(r"k\d+_Conv", n)]) >= 2, local

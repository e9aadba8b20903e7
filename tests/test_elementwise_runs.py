"""Elementwise variant `runs` (glowpy/codegen/kernels/elementwise/runs.py): broadcasts whose
innermost contiguous run is shorter than two vectors, in explicit vectors over the flat output,
at each x86 vector level the host runs, against onnxruntime under guard pages (a partial
vector's load or store that strays out of its tensor faults). Every operand kind (flat, one
value per row, one per column, one value), whole periods of lcm(lanes, run) floats and the
vectors and partial vector after them, fused chains with immediates; layouts it does not take
keep the loop of `default`, which the memory report names."""
import json

import numpy as np
import pytest

from test_kernels_fast import check_guarded
from util import GraphBuilder
from vector_levels import params

RNG = np.random.default_rng(31)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _variants(report):
    return {i["name"]: (i["variant"]["name"], i["variant"]["params"])
            for i in json.loads(report.read_text())["instructions"]}


def _runs(level, rows, run, operands):
    """What the memory report names for a run of `run` floats at `level`: the runs where the
    run is shorter than two of the level's vectors."""
    if run < 2 * level.lanes:
        return ("runs", {"rows": rows, "run": run, "operands": operands})
    return ("default", None)


@pytest.mark.parametrize("level", params())
def test_runs_match_onnxruntime(level, tmp_path):
    # StyleGAN2's modulation: w [2, 3, 40, 3, 3] x style [1, 1, 40, 1, 1], runs of 9 (360 floats
    # an outer step: two periods of 144 and 72 more at 16 lanes, five of 72 at 8, ten of 36 at 4)
    g = GraphBuilder(w=_rand(2, 3, 40, 3, 3), s=_rand(1, 1, 40, 1, 1), x=_rand(4, 7, 5),
                     c=_rand(5), a=_rand(3, 50, 3), r=_rand(3, 50, 1), t=_rand(3, 1, 1),
                     d=_rand(8, 1) + 3.0, e=_rand(8, 11), f=_rand(2, 30, 7), h=_rand(2, 30, 1),
                     u=_rand(1, 48, 10, 16), c2=_rand(1, 48, 10, 1))
    g.node("Mul", ["w", "s"], name="modulate")
    g.node("Add", ["x", "c"], name="columns")  # [28, 5] + one value per column
    g.node("Sum", ["a", "r", "t"], name="three")  # flat, row and (per outer step) splat
    g.node("Div", ["d", "e"], name="divisor_first")  # the row operand first
    g.node("Mul", ["c2", "u"], name="one_vector")  # CapsNet's routing: runs of 16
    fused = g.node("Mul", ["f", "h"], name="fused", output=False)
    g.node("Relu", [g.node("Add", [fused, np.float32(0.25)], output=False)])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    assert _variants(report) == {
        "modulate": _runs(level, 40, 9, ["flat", "row"]),
        "columns": _runs(level, 7 * 4, 5, ["flat", "column"]),
        "three": _runs(level, 50, 3, ["flat", "row", "splat"]),
        "divisor_first": _runs(level, 8, 11, ["row", "flat"]),
        "one_vector": _runs(level, 480, 16, ["row", "flat"]),
        "fused": _runs(level, 60, 7, ["flat", "row"])}


@pytest.mark.parametrize("level", params())
def test_layouts_it_leaves_to_the_loop(level, tmp_path):
    # runs of 32 (a multiple of every level's vector), of 37 (two vectors or more at every
    # level: the vector loop and its remainder serve them), a broadcast along an outer axis
    # only (one value per column of 32), and int32
    g = GraphBuilder(x=_rand(4, 32), r=_rand(4, 1), y=_rand(6, 37), q=_rand(6, 1),
                     z=_rand(3, 4, 8), o=_rand(1, 4, 8),
                     i=RNG.integers(-9, 9, (5, 3)).astype(np.int32),
                     j=RNG.integers(-9, 9, (5, 1)).astype(np.int32))
    g.node("Mul", ["x", "r"], name="long_runs")
    g.node("Sub", ["y", "q"], name="longer_runs")
    g.node("Max", ["z", "o"], name="outer_only")
    g.node("Mul", ["i", "j"], name="integers")
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    assert {n: v[0] for n, v in _variants(report).items()} == {
        "long_runs": "default", "longer_runs": "default",
        "outer_only": "default", "integers": "default"}

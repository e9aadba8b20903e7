"""The ONNX backend node tests through the real compile -> link -> run path (glowpy/conformance.py).

Every case runs by default (a few minutes), and the pass rate and the exclusion list's
freshness are checked. GLOWPY_CONFORMANCE=subset runs a representative subset instead, for quick
local runs: for every op in scope, its first two cases that are not excluded plus the first case
of every other element-type signature (so integer and bool paths are exercised). The full run with its report is one command:

    python -m glowpy.conformance --report docs/conformance.md
"""
import os

import numpy as np
import pytest

from glowpy import conformance as conf
from glowpy.conformance.report import Summary

FULL = os.environ.get("GLOWPY_CONFORMANCE", "full") != "subset"
EXCLUSIONS = conf.load_exclusions()
_RESULTS = {}  # case name -> Result (the full run's pass-rate test reuses the per-op runs)


def run(case):
    if case.name not in _RESULTS:
        _RESULTS[case.name] = conf.run_case(case)
    return _RESULTS[case.name]


def _signature(case):
    return tuple(getattr(x, "dtype", None) for x in case.inputs + case.outputs)


def representative(cases):
    """First two runnable cases, plus the first of each other dtype signature."""
    picked, sigs = [], set()
    for c in cases:
        if c.name in EXCLUSIONS:
            continue
        sig = _signature(c)
        if len(picked) < 2 or sig not in sigs:
            picked.append(c)
        sigs.add(sig)
    return picked


def _cases(op):
    return conf.select(conf.load_cases(), [op])


def test_exclusions_are_well_formed():
    names = {c.name for c in conf.select(conf.load_cases())}
    for name, entry in EXCLUSIONS.items():
        assert name in names, f"{name}: no such node test among the ops in scope"
        assert isinstance(entry, tuple) and len(entry) == 2, name
        cat, reason = entry
        assert cat in conf.CATEGORIES, f"{name}: unknown category {cat!r}"
        assert isinstance(reason, str) and len(reason) > 8, f"{name}: give a reason"


def test_exclusion_file_has_no_duplicate_entries():
    import ast
    tree = ast.parse(open(conf.DEFAULT_EXCLUSIONS).read())
    keys = [k.value for node in ast.walk(tree) if isinstance(node, ast.Dict)
            for k in node.keys if isinstance(k, ast.Constant)]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    assert not dups, f"listed twice (the later entry silently wins): {dups}"


def test_type_exclusions_are_really_about_types():
    """A dtype/types entry must name a case whose tensors bundles cannot hold, so the pass-rate
    denominator (which leaves those out) cannot be shrunk by mislabelling a failure."""
    from glowpy.ir.dtypes import SUPPORTED
    for c in conf.select(conf.load_cases()):
        cat = EXCLUSIONS.get(c.name, ("",))[0]
        values = c.inputs + c.outputs
        if cat == "types":
            assert any(not isinstance(v, np.ndarray) for v in values), c.name
        elif cat == "dtype":
            assert any(v.dtype not in SUPPORTED for v in values), c.name


# NonZero's one case feeds run-time data (a data-dependent output size, refused):
# tests/test_shape_ops.py checks the constant form, which folds.
# CastLike's node tests cast from or to float64/float8/int2/int4, or float16/bfloat16 like a
# tensor of shape [0], and onnx ships no node test of GlobalLpPool: tests/test_composite_std.py
# checks both against onnxruntime (tests/test_half.py CastLike to float16).
NO_TYPED_CASES = {"CastLike", "GlobalLpPool", "NonZero"}


def test_ops_without_runnable_node_tests_are_exactly_the_known_ones():
    assert {op for op in conf.SCOPE_OPS if not representative(_cases(op))} == NO_TYPED_CASES


@pytest.mark.parametrize("op", [op for op in conf.SCOPE_OPS if op not in NO_TYPED_CASES])
def test_node_tests_of_op(op):
    cases = _cases(op) if FULL else representative(_cases(op))
    results = [run(c) for c in cases]
    unexpected = [r for r in results if (r.status != "pass") != (r.name in EXCLUSIONS)]
    assert not unexpected, "\n".join(
        f"{r.name}: {r.status} {r.message}" if r.status != "pass"
        else f"{r.name}: passes but is excluded (stale entry: delete it)" for r in unexpected)


@pytest.mark.skipif(not FULL, reason="the pass rate needs the full run (not GLOWPY_CONFORMANCE=subset)")
def test_pass_rate_at_least_95_percent():
    results = [run(c) for c in conf.select(conf.load_cases())]
    s = Summary(results, EXCLUSIONS)
    total, typed_out, passed = s.counts()
    assert not s.unexpected and not s.stale
    assert passed >= 0.95 * (total - typed_out), f"{passed}/{total - typed_out}"


def test_runner_freezes_only_the_declared_compile_time_inputs():
    by_name = {c.name: c for c in conf.load_cases()}
    r = run(by_name["test_reshape_reordered_all_dims"])
    assert r.status == "pass" and r.frozen == ["shape"]
    r = run(by_name["test_slice"])
    assert r.status == "pass" and r.frozen == ["starts", "ends", "axes", "steps"]
    r = run(by_name["test_add_bcast"])
    assert r.status == "pass" and r.frozen == []


def test_compare_is_onnx_runners():
    ok = [np.array([1.0, 2.0], np.float32)]
    conf.compare(ok, [np.array([1.0005, 2.0], np.float32)], 1e-3, 1e-7)
    for bad in ([np.array([1.01, 2.0], np.float32)], [np.array([1, 2], np.int32)],
                [np.array([[1.0, 2.0]], np.float32)], []):
        with pytest.raises(AssertionError):
            conf.compare(ok, bad, 1e-3, 1e-7)

"""ONNX conformance: the official ONNX backend node tests through the real compile-and-run path.

Each case of `onnx.backend.test.case.node.collect_testcases()` (built from the installed onnx:
a one-node model, its inputs and its expected outputs) is compiled into a bundle with
`glowpy.compile`, linked into the C harness by `glowpy.runtime.Bundle` and run; its outputs are
compared with the expected ones as onnx's own backend runner does (same shape, same dtype,
`assert_allclose` with the case's rtol/atol, 1e-3/1e-7).

An ahead-of-time compiler fixes every shape at compile time, so operands that determine shapes,
axes or counts must be compile-time constants. The node tests feed some of them as graph inputs
(Reshape's shape, Slice's starts/ends/axes/steps, Pad's pads, Resize's roi/scales/sizes,
Split's split, Squeeze/Unsqueeze/Reduce* axes, Expand's shape, Tile's repeats, TopK's k,
Range's and ConstantOfShape's operands, Clip's bounds, BatchNormalization's statistics). The
runner gives exactly the inputs an op declares in `Op.const_inputs` (the op registry's list of
compile-time operands) to the compiler as initializers with the case's values, and feeds the
rest at run time. Nothing else about a case is changed.

Full run (writes docs/conformance.md, exits 1 on an unexpected failure or a stale exclusion):
    python -m glowpy.conformance --report docs/conformance.md
Subsets while developing:
    python -m glowpy.conformance --ops Conv,Gemm -v
    python -m glowpy.conformance --cases 'test_resize_*' -v
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import re
import runpy
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

# The ops the conformance issue names: the core set, then the extended set.
CORE_OPS = (
    "Conv Gemm MatMul Add Sub Mul Div Pow Max Min Sum Mean Relu LeakyRelu PRelu Elu Sigmoid "
    "HardSigmoid HardSwish Tanh Clip Exp Log Sqrt Reciprocal Neg Abs Erf MaxPool AveragePool "
    "GlobalAveragePool GlobalMaxPool BatchNormalization Softmax LogSoftmax Reshape Flatten "
    "Transpose Concat Split Slice Gather Squeeze Unsqueeze Pad Resize Upsample ReduceMean "
    "ReduceSum ReduceMax Identity Dropout Constant Shape Cast").split()
EXTENDED_OPS = (
    "ConvTranspose InstanceNormalization LayerNormalization LRN Selu Softplus Softsign Gelu Mish "
    "Floor Ceil Round Sign Sin Cos ReduceMin ReduceProd ReduceL2 ArgMax ArgMin Tile Expand Where "
    "Equal Less Greater Not And Or ConstantOfShape Range DepthToSpace SpaceToDepth CumSum TopK "
    "Einsum").split()
SCOPE_OPS = tuple(CORE_OPS + EXTENDED_OPS)

# Exclusion categories: the only reasons a case of an in-scope op may be left failing.
CATEGORIES = {
    "dtype": "an element type bundles do not hold (they hold float32, int8, uint8, int32, "
             "int64 and bool)",
    "training": "training-only behaviour (glowpy compiles inference graphs)",
    "random": "output depends on a random generator",
    "types": "sequence, optional or string values (bundles hold tensors only)",
    "zero-size": "a tensor with a zero dimension (bundles refuse empty tensors)",
    "unsupported": "an op form glowpy does not implement",
}
# categories that put a case outside "the types in scope": not counted in the pass rate
TYPE_CATEGORIES = ("dtype", "types")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_EXCLUSIONS = os.path.join(REPO, "tests", "conformance_exclusions.py")


@dataclass
class Case:
    name: str
    op: str
    model_bytes: bytes
    inputs: list
    outputs: list
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class Result:
    name: str
    op: str
    status: str  # "pass", "fail" (wrong numbers/shape/dtype), "error" (did not compile or run)
    message: str = ""
    seconds: float = 0.0
    frozen: list = field(default_factory=list)  # inputs given to the compiler as initializers


# -- collecting cases --------------------------------------------------------------------------

_CASES: list | None = None


def load_cases() -> list[Case]:
    """Every single-op node test of the installed onnx (the `_expanded` function-body variants
    are left out), in onnx's order. Collection runs onnx's reference code: ~10 s, once."""
    global _CASES
    if _CASES is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                from onnx.backend.test.case.node import collect_testcases
                raw = collect_testcases(None)
        cases = []
        for tc in raw:
            if "_expanded" in tc.name or tc.model is None or len(tc.model.graph.node) != 1:
                continue
            (ins, outs), = tc.data_sets[:1]
            cases.append(Case(tc.name, tc.model.graph.node[0].op_type, tc.model.SerializeToString(),
                              [_array(x) for x in ins], [_array(x) for x in outs], tc.rtol, tc.atol))
        _CASES = cases
    return _CASES


def _array(x):
    """numpy scalars and TensorProtos as arrays; sequences and optionals stay as they are."""
    from onnx import TensorProto, numpy_helper
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, TensorProto):
        try:
            return numpy_helper.to_array(x)
        except Exception:  # noqa: BLE001 - element types numpy cannot hold
            return x
    return x


def select(cases, ops=None, patterns=None, scope=True) -> list[Case]:
    ops = set(ops) if ops else (set(SCOPE_OPS) if scope else None)
    out = [c for c in cases if ops is None or c.op in ops]
    if patterns:
        out = [c for c in out if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    return out


def load_exclusions(path: str = DEFAULT_EXCLUSIONS) -> dict[str, tuple[str, str]]:
    """{case name: (category, reason)} from the exclusion file (a Python module defining
    EXCLUSIONS)."""
    if not os.path.isfile(path):
        return {}
    return dict(runpy.run_path(path)["EXCLUSIONS"])


# -- one case ----------------------------------------------------------------------------------

def freeze_shape_inputs(model, inputs: list):
    """Moves the inputs the op declares compile-time (`Op.const_inputs`) from graph inputs to
    initializers holding the case's values. Returns (model, feeds {name: array}, frozen names)."""
    from onnx import numpy_helper

    from glowpy.ir.ops import get_op, has_op
    node = model.graph.node[0]
    const_idx = get_op(node.op_type).const_inputs if has_op(node.op_type) else ()
    const_names = {node.input[i] for i in const_idx if i < len(node.input) and node.input[i]}
    graph_inputs = [vi for vi in model.graph.input
                    if vi.name not in {t.name for t in model.graph.initializer}]
    feeds, frozen, keep = {}, [], []
    for vi, value in zip(graph_inputs, inputs):
        if vi.name in const_names and isinstance(value, np.ndarray):
            model.graph.initializer.append(numpy_helper.from_array(value, vi.name))
            frozen.append(vi.name)
        else:
            feeds[vi.name] = value
            keep.append(vi)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, feeds, frozen


def compare(got: list, expected: list, rtol: float, atol: float):
    """onnx's backend-runner comparison; raises AssertionError."""
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        if g.shape != e.shape:
            raise AssertionError(f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}")
        if g.dtype != e.dtype:
            raise AssertionError(f"output {i}: dtype {g.dtype}, expected {e.dtype}")
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def run_case(case: Case, workdir: str | None = None, keep: bool = False) -> Result:
    """Compiles, links and runs one case; never raises (the outcome is in the Result)."""
    import onnx

    import glowpy
    from glowpy.runtime import Bundle
    t0 = time.perf_counter()
    d = tempfile.mkdtemp(prefix=f"{case.name}-", dir=workdir)
    frozen = []
    try:
        if any(not isinstance(x, np.ndarray) for x in case.inputs + case.outputs):
            return Result(case.name, case.op, "error", "inputs or outputs are not tensors "
                          "(sequence/optional values)", time.perf_counter() - t0)
        model = onnx.ModelProto.FromString(case.model_bytes)
        model, feeds, frozen = freeze_shape_inputs(model, case.inputs)
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = glowpy.compile(path, os.path.join(d, "bundle"), network_name="net")
        res = Bundle(os.path.join(d, "bundle"), info.name).run(feeds, timeout=120)
        got = [res[p["name"]] for p in info.outputs]
        compare(got, case.outputs, case.rtol, case.atol)
        return Result(case.name, case.op, "pass", "", time.perf_counter() - t0, frozen)
    except AssertionError as e:
        msg = " ".join(str(e).split())
        return Result(case.name, case.op, "fail", msg[:300], time.perf_counter() - t0, frozen)
    except Exception as e:  # noqa: BLE001 - every failure is a result, not a crash of the run
        from glowpy.errors import GlowpyError
        msg = f"{type(e).__name__}: {e}" if not isinstance(e, GlowpyError) else str(e)
        if not isinstance(e, GlowpyError) and os.environ.get("GLOWPY_CONFORMANCE_TRACE"):
            msg += "\n" + traceback.format_exc()
        return Result(case.name, case.op, "error", " ".join(msg.split())[:300],
                      time.perf_counter() - t0, frozen)
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def _run_payload(args):
    return run_case(*args)


def run_cases(cases: list[Case], jobs: int = 1, progress=None) -> list[Result]:
    """Runs cases in order (jobs > 1: in that many spawned worker processes)."""
    results = []
    if jobs <= 1:
        for c in cases:
            r = run_case(c)
            results.append(r)
            if progress:
                progress(r)
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        for r in ex.map(_run_payload, [(c,) for c in cases]):
            results.append(r)
            if progress:
                progress(r)
    return results


# -- verdicts and the report -------------------------------------------------------------------

@dataclass
class Summary:
    results: list
    exclusions: dict
    unexpected: list = field(default_factory=list)  # failing, not excluded
    stale: list = field(default_factory=list)  # excluded, but passing

    def __post_init__(self):
        for r in self.results:
            if r.status != "pass" and r.name not in self.exclusions:
                self.unexpected.append(r)
            if r.status == "pass" and r.name in self.exclusions:
                self.stale.append(r)

    def counts(self, rs=None):
        """(cases, cases outside the types in scope that do not pass, cases passing)."""
        rs = self.results if rs is None else rs
        total = len(rs)
        dtype = sum(1 for r in rs if self.exclusions.get(r.name, ("",))[0] in TYPE_CATEGORIES
                    and r.status != "pass")
        passed = sum(1 for r in rs if r.status == "pass")
        return total, dtype, passed


def suggest(case: Case, result: Result) -> tuple[str, str]:
    """A first guess at the exclusion entry of a failing case (to be reviewed by hand)."""
    from glowpy.ir.dtypes import SUPPORTED
    values = case.inputs + case.outputs
    if any(not isinstance(v, np.ndarray) for v in values):
        kinds = sorted({"sequence" if isinstance(v, list) else type(v).__name__
                        for v in values if not isinstance(v, np.ndarray)})
        return "types", f"{'/'.join(kinds)} values; bundles hold tensors only"
    bad = sorted({v.dtype.name for v in values if v.dtype not in SUPPORTED})
    if bad:
        return "dtype", f"{', '.join(bad)} tensors"
    if any(0 in v.shape for v in values):
        return "zero-size", "a tensor with a zero dimension"
    return "unsupported", result.message


def pct(a, b):
    return f"{100.0 * a / b:.1f}%" if b else "-"


REPORT_HEADER = """\
# ONNX conformance

glowpy is measured against the official ONNX backend node tests: every single-op test case
that the installed onnx ({onnx_version}) builds with
`onnx.backend.test.case.node.collect_testcases()` is compiled into a bundle with
`glowpy.compile`, linked into a C program by `glowpy.runtime.Bundle` and run, and its outputs
are compared with the expected ones as onnx's own backend runner does (same shape and dtype,
`assert_allclose` with rtol 1e-3, atol 1e-7). The `_expanded` variants (the same tests
rewritten as function bodies of other ops) are not counted.

An ahead-of-time compiler fixes every shape at compile time, so the operands that determine
shapes, axes or counts (Reshape's shape, Slice's starts and ends, Pad's pads, Resize's scales
and sizes, Split's split, Squeeze/Unsqueeze/Reduce* axes, Expand's shape, Tile's repeats,
TopK's k, Range and ConstantOfShape operands, Clip's bounds) are given to the compiler as
initializers holding the test's values: exactly the inputs each op declares in
`Op.const_inputs`. Everything else is fed at run time.

Cases that cannot pass are listed, each with its reason, in
[tests/conformance_exclusions.py](../tests/conformance_exclusions.py). Most are element types
that bundles do not hold (float16, float64, bfloat16, int16, uint16/32/64, float8, int4,
strings); the percentage below counts the cases whose types bundles support.

**{passed} of {testable} node tests pass ({percent})** for the {nops} ops in scope
({total} single-op cases, of which {dtype} use unsupported element types).
`pytest tests/test_conformance.py` runs a representative subset; the full run is one command:

    python -m glowpy.conformance --report docs/conformance.md

(`-j 2` runs it in two processes; `--ops Conv,Gemm` or `--cases 'test_resize_*'` select
subsets.) Generated by that command on {date}; do not edit by hand.
"""


def report(summary: Summary, onnx_version: str, scope=SCOPE_OPS) -> str:
    import datetime
    rs = summary.results
    total, dtype, passed = summary.counts()
    by_op: dict[str, list] = {}
    for r in rs:
        by_op.setdefault(r.op, []).append(r)
    lines = [REPORT_HEADER.format(onnx_version=onnx_version, passed=passed, testable=total - dtype,
                                  percent=pct(passed, total - dtype), nops=len(by_op),
                                  total=total, dtype=dtype,
                                  date=datetime.date.today().isoformat())]
    lines += ["| op | cases | unsupported types | passed | pass rate | other exclusions |",
              "|---|---:|---:|---:|---:|---|"]
    order = [op for op in scope if op in by_op] + sorted(set(by_op) - set(scope))
    for op in order:
        t, d, p = summary.counts(by_op[op])
        other = sorted({summary.exclusions[r.name][0] for r in by_op[op]
                        if r.status != "pass" and r.name in summary.exclusions
                        and summary.exclusions[r.name][0] != "dtype"})
        lines.append(f"| {op} | {t} | {d} | {p} | {pct(p, t - d)} | {', '.join(other)} |")
    lines.append(f"| **all** | **{total}** | **{dtype}** | **{passed}** | "
                 f"**{pct(passed, total - dtype)}** | |")
    cats: dict[str, list] = {}
    for r in rs:
        if r.status != "pass" and r.name in summary.exclusions:
            cat, reason = summary.exclusions[r.name]
            cats.setdefault(cat, []).append((r.name, reason))
    lines += ["", "## Excluded cases by category", ""]
    for cat, items in sorted(cats.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- **{cat}** ({len(items)}): {CATEGORIES.get(cat, '')}")
    lines += ["", "Cases of other categories than `dtype`:", ""]
    for cat, items in sorted(cats.items()):
        if cat == "dtype":
            continue
        for name, reason in items:
            lines.append(f"- `{name}` ({cat}): {reason}")
    if summary.unexpected or summary.stale:
        lines += ["", "## Not as expected", ""]
        lines += [f"- `{r.name}` {r.status}: {r.message}" for r in summary.unexpected]
        lines += [f"- `{r.name}` passes but is excluded (stale entry)" for r in summary.stale]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m glowpy.conformance",
                                 description="Run the ONNX backend node tests through glowpy.")
    ap.add_argument("--ops", help="comma-separated op types (default: the ops in scope)")
    ap.add_argument("--cases", action="append", help="glob on case names (repeatable)")
    ap.add_argument("--all-ops", action="store_true", help="every op, not only those in scope")
    ap.add_argument("--exclusions", default=DEFAULT_EXCLUSIONS)
    ap.add_argument("--report", help="write the markdown summary here (e.g. docs/conformance.md)")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    ap.add_argument("--suggest", action="store_true",
                    help="print exclusion entries (to review) for unexpected failures")
    a = ap.parse_args(argv)
    import onnx
    ops = a.ops.split(",") if a.ops else None
    cases = select(load_cases(), ops, a.cases, scope=not a.all_ops)
    excl = load_exclusions(a.exclusions)

    def progress(r):
        if a.verbose or (r.status != "pass") != (r.name in excl):
            tag = r.status.upper() + (" (excluded)" if r.name in excl else "")
            print(f"{tag:16s} {r.name} {r.seconds:.2f}s {r.message}", flush=True)

    t0 = time.perf_counter()
    results = run_cases(cases, a.jobs, progress)
    s = Summary(results, excl)
    total, dtype, passed = s.counts()
    print(f"{passed}/{total - dtype} passed ({pct(passed, total - dtype)}); {total} cases, "
          f"{dtype} with unsupported types; {len(s.unexpected)} unexpected failures, "
          f"{len(s.stale)} stale exclusions; {time.perf_counter() - t0:.0f}s")
    if a.suggest:
        by_name = {c.name: c for c in cases}
        for r in s.unexpected:
            cat, reason = suggest(by_name[r.name], r)
            print(f"    {r.name!r}: ({cat!r}, {reason!r}),")
    if a.report:
        with open(a.report, "w") as f:
            f.write(report(s, onnx.__version__))
    return 1 if s.unexpected or s.stale else 0


if __name__ == "__main__":
    sys.exit(main())

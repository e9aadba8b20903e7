"""The verdicts of a conformance run (unexpected failures, stale exclusions, pass rates) and its
markdown report (docs/conformance.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glowpy.conformance import CATEGORIES, SCOPE_OPS, TYPE_CATEGORIES, Case, Result


@dataclass
class Summary:
    """Verdicts over results. Only ops in scope are judged (a run with --all-ops reports the
    other ops' numbers for information)."""
    results: list
    exclusions: dict
    scope: tuple = SCOPE_OPS
    unexpected: list = field(default_factory=list)  # failing, not excluded
    stale: list = field(default_factory=list)  # excluded, but passing

    def __post_init__(self):
        self.in_scope = [r for r in self.results if r.op in self.scope]
        self.others = [r for r in self.results if r.op not in self.scope]
        for r in self.in_scope:
            if r.status != "pass" and r.name not in self.exclusions:
                self.unexpected.append(r)
            if r.status == "pass" and r.name in self.exclusions:
                self.stale.append(r)

    def counts(self, rs=None):
        """(cases, cases outside the types in scope that do not pass, cases passing)."""
        rs = self.in_scope if rs is None else rs
        total = len(rs)
        typed_out = sum(1 for r in rs if r.status != "pass"
                        and self.exclusions.get(r.name, ("",))[0] in TYPE_CATEGORIES)
        passed = sum(1 for r in rs if r.status == "pass")
        return total, typed_out, passed


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
TopK's k, Range and ConstantOfShape operands, Clip's bounds, also BatchNormalization's
statistics and Dropout's ratio and training_mode) are given to the compiler as initializers
holding the test's values: exactly the inputs each op declares in `Op.const_inputs` (listed in
[ops.md](ops.md)). Everything else is fed at run time.

Every case that does not pass is listed with its reason in
[tests/conformance_exclusions.py](../tests/conformance_exclusions.py); the run fails on any
other failure and on an exclusion whose case passes. Most exclusions are element types that
bundles do not hold (float64, int16, uint16/32/64, float8, int4, strings) or sequence values;
the pass rate counts the cases whose types bundles hold (float32, int8, uint8, int32, int64,
bool, and float16/bfloat16: a model's half tensors are computed in float32 and stay half at
its inputs and outputs and where it casts). Einsum's node tests are float64 or bfloat16, most
of CumSum's float64, and Cast's other than float32 <-> float16/bfloat16 convert between types
bundles do not hold: tests/test_ops_extended.py (and the core per-op tests) check those ops in
float32 and the integer types against onnxruntime, tests/test_half.py every half value.

**{passed} of {testable} node tests pass ({percent})** for the {nops} ops in scope: the core
set and the extended set of the conformance issue ({total} single-op cases, of which
{typed_out} use types bundles do not hold).

`pytest tests/test_conformance.py` (part of the test suite) runs them all and checks the pass
rate and the exclusion list; `GLOWPY_CONFORMANCE=subset` runs a representative subset (every
op's first two cases and one case per other type signature) for quick local runs. The full run and this report are one command:

    python -m glowpy.conformance --report docs/conformance.md

(`-j 2` runs it in two processes; `--ops Conv,Gemm` or `--cases 'test_resize_*'` select
subsets; `--all-ops` adds the ops outside the scope; `--suggest` prints draft exclusion
entries for new failures.) Generated by that command on {date}; do not edit by hand.
"""


def _table(summary, by_op, order):
    lines = ["| op | cases | types not held | passed | pass rate | other exclusions |",
             "|---|---:|---:|---:|---:|---|"]
    for op in order:
        t, d, p = summary.counts(by_op[op])
        other = sorted({summary.exclusions[r.name][0] for r in by_op[op]
                        if r.status != "pass" and r.name in summary.exclusions
                        and summary.exclusions[r.name][0] not in TYPE_CATEGORIES})
        lines.append(f"| {op} | {t} | {d} | {p} | {pct(p, t - d)} | {', '.join(other)} |")
    return lines


def report(summary: Summary, onnx_version: str) -> str:
    import datetime
    total, typed_out, passed = summary.counts()
    by_op: dict[str, list] = {}
    for r in summary.results:
        by_op.setdefault(r.op, []).append(r)
    in_scope = [op for op in summary.scope if op in by_op]
    lines = [REPORT_HEADER.format(onnx_version=onnx_version, passed=passed,
                                  testable=total - typed_out,
                                  percent=pct(passed, total - typed_out), nops=len(in_scope),
                                  total=total, typed_out=typed_out,
                                  date=datetime.date.today().isoformat())]
    lines += _table(summary, by_op, in_scope)
    lines.append(f"| **all** | **{total}** | **{typed_out}** | **{passed}** | "
                 f"**{pct(passed, total - typed_out)}** | |")
    cats: dict[str, list] = {}
    for r in summary.in_scope:
        if r.status != "pass" and r.name in summary.exclusions:
            cat, reason = summary.exclusions[r.name]
            cats.setdefault(cat, []).append((r.name, reason))
    lines += ["", "## Excluded cases", ""]
    for cat, items in sorted(cats.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- **{cat}** ({len(items)}): {CATEGORIES.get(cat, '')}")
    lines += ["", "Those not about element types:", ""]
    for cat, items in sorted(cats.items()):
        if cat not in TYPE_CATEGORIES:
            lines += [f"- `{name}` ({cat}): {reason}" for name, reason in items]
    if summary.unexpected or summary.stale:
        lines += ["", "## Not as expected", ""]
        lines += [f"- `{r.name}` {r.status}: {r.message}" for r in summary.unexpected]
        lines += [f"- `{r.name}` passes but is excluded (stale entry)" for r in summary.stale]
    if summary.others:
        others = sorted({r.op for r in summary.others})
        p = sum(r.status == "pass" for r in summary.others)
        lines += ["", "## Ops outside the scope", "",
                  f"For information (not judged): {p} of {len(summary.others)} node tests of "
                  f"{len(others)} other ops pass.", ""]
        lines += _table(summary, by_op, others)
    return "\n".join(lines) + "\n"

"""python -m glowpy.conformance: runs the ONNX node tests through glowpy (see the package
docstring), prints unexpected failures and stale exclusions, and writes the report."""
from __future__ import annotations

import argparse
import sys
import time

from glowpy.conformance import (DEFAULT_EXCLUSIONS, SCOPE_OPS, load_cases, load_exclusions,
                                run_cases, select)
from glowpy.conformance.report import Summary, pct, report, suggest


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
        if a.verbose or (r.op in SCOPE_OPS and (r.status != "pass") != (r.name in excl)):
            tag = r.status.upper() + (" (excluded)" if r.name in excl else "")
            print(f"{tag:16s} {r.name} {r.seconds:.2f}s {r.message}", flush=True)

    t0 = time.perf_counter()
    results = run_cases(cases, a.jobs, progress)
    s = Summary(results, excl)
    total, dtype, passed = s.counts()
    print(f"{passed}/{total - dtype} passed ({pct(passed, total - dtype)}); {total} cases in "
          f"scope, {dtype} with types bundles do not hold; {len(s.unexpected)} unexpected "
          f"failures, {len(s.stale)} stale exclusions; {time.perf_counter() - t0:.0f}s")
    if s.others:
        print(f"ops outside the scope: {sum(r.status == 'pass' for r in s.others)}/"
              f"{len(s.others)} passed")
    if a.suggest:
        by_name = {c.name: c for c in cases}
        for r in s.unexpected:
            cat, reason = suggest(by_name[r.name], r)
            print(f"    {r.name!r}: ({cat!r}, {reason!r}),")
    if a.report:
        text = report(s, onnx.__version__)
        if a.ops or a.cases:
            text = text.replace("\n\n", f"\n\n**Partial run** ({' '.join(argv or sys.argv[1:])}): "
                                "the numbers cover only the selected cases.\n\n", 1)
        with open(a.report, "w") as f:
            f.write(text)
    return 1 if s.unexpected or s.stale else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Patch-based execution on the emulated Cortex-M7: activations, instructions, flash and stack
of each int8 MLPerf Tiny model (and the float VWW) untiled and with `-patch-overhead=10`, and
whether the patched bundle's outputs are bit-identical to the untiled one's.

    python benchmarks/patch_m7.py [--work DIR] [--json FILE]

Same ruler as benchmarks/cortex_m7.py (QEMU mps2-an500, -icount shift=2, SysTick ticks x 10);
it takes about ten minutes."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cortex_m7 import measure  # noqa: E402

MODELS = ["mlperf_tiny_kws_dscnn_int8_qdq", "mlperf_tiny_vww_int8_qdq",
          "mlperf_tiny_resnet8_int8_qdq", "mlperf_tiny_vww_mobilenetv1_025"]
PATCH = {"patch_overhead": 10.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", help="keep bundles and firmware here")
    ap.add_argument("--json", help="also write the rows as JSON")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--models", help="comma-separated subset of the models")
    a = ap.parse_args(argv)
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="glowpy-patch-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        for name in (a.models.split(",") if a.models else MODELS):
            print(f"{name} ...", file=sys.stderr, flush=True)
            plain = measure(name, work, "hard", a.timeout)
            patched = measure(name, work, "hard", a.timeout, extra=PATCH, tag="-patch")
            rows.append((name, plain, patched))
    print("| model | activations: untiled -> patched (B) | instructions: untiled -> patched | "
          "flash (B) | stack (B) | outputs |")
    print("|---|--:|--:|--:|--:|---|")
    for name, p, q in rows:
        if "instructions" not in p or "instructions" not in q:
            print(f"| {name} | failed: {p.get('error') or q.get('error')} | | | | |")
            ok = False
            continue
        same = p["output_sha1"] == q["output_sha1"]
        ok = ok and same and q["instructions"] <= 1.10 * p["instructions"]
        print(f"| {name} | {p['activations']:,} -> {q['activations']:,} "
              f"({q['activations'] / p['activations']:.2f}x) | {p['instructions']:,} -> "
              f"{q['instructions']:,} ({q['instructions'] / p['instructions'] - 1:+.1%}) | "
              f"{p['flash']:,} -> {q['flash']:,} | {p['stack']:,} -> {q['stack']:,} | "
              f"{'bit-identical' if same else 'DIFFER'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"model": n, "untiled": p, "patched": q} for n, p, q in rows], f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

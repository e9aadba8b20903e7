"""Fingerprints of the LLVM IR glowpy generates: every model in ../shared/models for a fixed set
of targets (explicit CPUs, so the result does not depend on the machine running it).

    python tools/ir_fingerprint.py --out before.json          # at the old commit
    python tools/ir_fingerprint.py --compare before.json      # at the new one: exit 1 on a change

A commit that only moves code must leave every fingerprint unchanged; one that changes
generated code says which (model, target) pairs changed and why."""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
MODELS = os.path.join(os.path.dirname(REPO), "shared", "models")

TARGETS = {
    "x86-64": dict(target="x86_64", mcpu="x86-64"),
    "x86-64-v3": dict(target="x86_64", mcpu="x86-64-v3"),
    "x86-64-v4": dict(target="x86_64", mcpu="x86-64-v4"),
    "aarch64": dict(target="aarch64"),
    "cortex-m7-hard": dict(target="arm", mcpu="cortex-m7", float_abi="hard"),
    "cortex-m7-soft": dict(target="arm", mcpu="cortex-m7", float_abi="soft"),
    "cortex-m4": dict(target="arm", mcpu="cortex-m4", float_abi="hard"),
    "cortex-m33": dict(target="arm", mcpu="cortex-m33", float_abi="hard"),
    "cortex-m55": dict(target="arm", mcpu="cortex-m55", float_abi="hard"),
    "cortex-m3": dict(target="arm", mcpu="cortex-m3"),
}


def fingerprints(models: list[str], targets: list[str]) -> dict:
    import glowpy
    out = {}
    with tempfile.TemporaryDirectory(prefix="glowpy-irfp-") as d:
        for m in models:
            for t in targets:
                ll = os.path.join(d, "m.ll")
                try:
                    glowpy.compile(os.path.join(MODELS, m + ".onnx"), os.path.join(d, "b"),
                                   dump_llvm_ir=ll, **TARGETS[t])
                    with open(ll, "rb") as f:
                        out[f"{m} {t}"] = hashlib.sha256(f.read()).hexdigest()
                except Exception as e:  # noqa: BLE001 - a refusal is part of the fingerprint
                    out[f"{m} {t}"] = f"error: {type(e).__name__}: {e}"
                print(f"{m} {t} {out[f'{m} {t}'][:16]}", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the fingerprints (JSON) here")
    ap.add_argument("--compare", help="compare with fingerprints written earlier")
    ap.add_argument("--models", help="comma-separated model names (default: all shared models)")
    ap.add_argument("--targets", help=f"comma-separated, of {', '.join(TARGETS)} (default: all)")
    a = ap.parse_args(argv)
    models = a.models.split(",") if a.models else sorted(
        os.path.basename(p)[:-5] for p in glob.glob(os.path.join(MODELS, "*.onnx")))
    targets = a.targets.split(",") if a.targets else list(TARGETS)
    fp = fingerprints(models, targets)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(fp, f, indent=1, sort_keys=True)
    if a.compare:
        with open(a.compare) as f:
            old = json.load(f)
        changed = sorted(k for k in fp if k in old and old[k] != fp[k])
        for k in changed:
            print(f"changed: {k}")
        print(f"{len(fp) - len(changed)} of {len(fp)} unchanged")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

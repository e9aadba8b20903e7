"""Profiles of -instrument-profile runs in the spirit of Graphcore Poplar's: target
information, memory by region and by buffer, program structure (the instructions in order),
per-instruction and per-op ticks and shares, MACs, bytes moved and the code size of each kernel
function, from a run's counter table and the manifest's "instrumentation"; and the readable
table. Used by Bundle.profile, the bundle-profile command and benchmarks/cortex_m7.py.

A profile's "total" compares the sum of the per-instruction counts with the whole call measured
around the entry by the same counter ("coverage": their ratio; the rest is the entry's own
prologue and epilogue)."""
from __future__ import annotations

import json
import re

from glowpy.errors import UsageError, show

FORMAT = "glowpy-profile/1"


def _buffers(desc: dict) -> list[dict]:
    """Every buffer the instructions name, once (region, offset, bytes, first/last user)."""
    seen: dict = {}
    for row in desc["instructions"]:
        for o in row["operands"]:
            key = (o["region"], o["offset"], o["name"])
            b = seen.setdefault(key, {"name": o["name"], "region": o["region"],
                                      "offset": o["offset"], "bytes": o["bytes"],
                                      "dtype": o["dtype"], "shape": o["shape"],
                                      "first_use": row["id"]})
            b["last_use"] = row["id"]
    return sorted(seen.values(), key=lambda b: (b["region"], b["offset"], b["name"]))


def build(manifest: dict, counts, total: int | None, unit: str = "cycles",
          runs: int | None = None, scale: int = 1) -> dict:
    """The profile of `runs` runs, in ticks per run: `counts` per instruction (the counter
    table; an extra last entry is the call count), `total` the whole calls' ticks measured
    around the entry; `scale` converts the counter's ticks into `unit` (SysTick ticks under
    QEMU -icount shift=2: 10 instructions)."""
    desc = manifest.get("instrumentation")
    if not desc or not desc.get("profile"):
        raise UsageError(f"bundle '{show(manifest['network_name'])}' has no profile counters; "
                         "compile it with -instrument-profile")
    rows = desc["instructions"]
    counts = [int(c) for c in counts]
    if len(counts) == len(rows) + 1:
        runs = counts[-1] if runs is None else runs
        counts = counts[:-1]
    if len(counts) != len(rows):
        raise UsageError(f"{len(counts)} counts for a bundle of {len(rows)} instructions")
    runs = runs or 1  # units per inference, like the MACs and bytes:
    counts = [round(c * scale / runs) for c in counts]
    total = round(total * scale / runs) if total else total
    ops_sum = sum(counts)
    pct = (lambda c: round(100.0 * c / ops_sum, 2) if ops_sum else 0.0)
    program = []
    for row, c in zip(rows, counts):
        moved = row["bytes_read"] + row["bytes_written"]
        program.append({k: row[k] for k in ("id", "op", "node", "kernel") if k in row}
                       | ({"variant": row["variant"]} if "variant" in row else {})
                       | {unit: c, "percent": pct(c), "macs": row["macs"],
                          "bytes_read": row["bytes_read"], "bytes_written": row["bytes_written"],
                          "macs_per_" + unit[:-1]: round(row["macs"] / c, 3) if c else None,
                          "bytes_per_" + unit[:-1]: round(moved / c, 3) if c else None,
                          "code_bytes": row.get("code_bytes", 0)})
    by_op: dict = {}
    for row, p in zip(rows, program):
        o = by_op.setdefault(row["op"], {"count": 0, unit: 0, "macs": 0, "bytes": 0,
                                         "kernels": set()})
        o["count"] += 1
        o[unit] += p[unit]
        o["macs"] += row["macs"]
        o["bytes"] += row["bytes_read"] + row["bytes_written"]
        o["kernels"].add((row["kernel"], row.get("code_bytes", 0)))
    ops = {op: {"count": o["count"], unit: o[unit], "percent": pct(o[unit]),
                "macs": o["macs"], "bytes": o["bytes"],
                "code_bytes": sum(b for _, b in o["kernels"])}  # a shared kernel counts once
           for op, o in sorted(by_op.items(), key=lambda kv: -kv[1][unit])}
    mem = manifest["memory"]
    return {
        "format": FORMAT, "bundle": manifest["network_name"], "entry": manifest["entry"],
        "target": {**manifest["target"], "counter": desc["profile"]["counter"], "unit": unit},
        "memory": {"regions": {"constant": mem["constant"], "mutable": mem["mutable"],
                               "activations": mem["activations"],
                               "profile_table": 8 * desc["profile"]["entries"]},
                   "buffers": _buffers(desc)},
        "code": {"kernel_bytes": sum({r["kernel"]: r.get("code_bytes", 0) for r in rows}.values())},
        "runs": runs,
        "total": {"per_instruction_sum": ops_sum, "whole_call": total,
                  "coverage": round(ops_sum / total, 4) if total else None},
        "programs": program, "ops": ops}


def table(p: dict) -> str:
    """The profile as text: per instruction in program order, then per op type."""
    unit = p["target"]["unit"]
    from glowpy.bundle_info import NAME_WIDTH, _table
    t = p["total"]
    lines = [f"profile of {show(p['bundle'])} on {p['target'].get('triple')} "
             f"(cpu {p['target'].get('cpu')}, counter {p['target']['counter']}, {unit} per "
             f"inference, {p['runs']} run(s))"]
    lines += _table([[r["id"], r["op"], show(r["node"], NAME_WIDTH // 2), r["kernel"],
                      r.get("variant", ""), f"{r[unit]:,}", f"{r['percent']:.1f}",
                      f"{r['macs']:,}", f"{r['bytes_read'] + r['bytes_written']:,}",
                      r["code_bytes"]] for r in p["programs"]],
                    ["id", "op", "node", "kernel", "variant", unit, "%", "MACs", "bytes",
                     "code B"])
    lines.append("per op type:")
    lines += _table([[op, o["count"], f"{o[unit]:,}", f"{o['percent']:.1f}",
                      f"{o['macs']:,}", f"{o['bytes']:,}", o["code_bytes"]]
                     for op, o in p["ops"].items()],
                    ["op", "count", unit, "%", "MACs", "bytes", "code B"])
    whole = f"{t['whole_call']:,}" if t["whole_call"] else "not measured"
    cov = f" ({100 * t['coverage']:.2f}% of the whole call)" if t["coverage"] else ""
    lines.append(f"per inference: per-instruction sum {t['per_instruction_sum']:,} {unit}{cov}; "
                 f"whole call (around the entry): {whole}")
    return "\n".join(lines)


def parse_counts(text: str) -> tuple[list[int], int | None]:
    """Counters from a run's output: "profile <i> <count>" lines (in any order), and the
    whole call's "cycles <n>" line when present, or a JSON list of counts."""
    if text.lstrip().startswith("["):
        return [int(c) for c in json.loads(text)], None
    found = {int(i): int(c) for i, c in re.findall(r"^profile (\d+) (\d+)\s*$", text, re.M)}
    if not found or sorted(found) != list(range(len(found))):
        raise UsageError("no 'profile <i> <count>' lines for every instruction in the counts")
    m = re.search(r"^cycles (\d+)\s*$", text, re.M)
    return [found[i] for i in range(len(found))], int(m.group(1)) if m else None

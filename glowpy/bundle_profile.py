"""`bundle-profile`: a run's profile counters (-instrument-profile) as a JSON profile in the
spirit of Graphcore Poplar's (target, memory by region and by buffer, program structure: the
instructions in order, per-instruction and per-op ticks, MACs, bytes moved, code size of each
kernel function) and a readable table.

    bundle-profile out/                      # host bundle: runs it in process on random inputs
    bundle-profile out/ -input=Input3=x.npy -repeat=100 -json=profile.json
    bundle-profile out/ -counts=run.txt -unit=instructions -scale=10
                                             # counters of a run elsewhere (the Cortex-M
                                             # runner's "profile <i> <count>" lines and
                                             # "cycles <total>": SysTick ticks of 10
                                             # instructions under QEMU -icount shift=2)

A profile's "total" compares the sum of the per-instruction counts with the whole call measured
around the entry by the same counter ("coverage": their ratio; the rest is the entry's own
prologue and epilogue)."""
from __future__ import annotations

import json
import re
import sys
from typing import List, Optional

import numpy as np
import typer

from glowpy.errors import ModelError, UsageError, show

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})
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


def _inputs(manifest: dict, given: list[str]) -> dict:
    """-input name=file.npy values; inputs not given are random (seed 0) in the input's type."""
    out, rng = {}, np.random.default_rng(0)
    for g in given:
        if "=" not in g:
            raise UsageError(f"-input={g}: expected name=file.npy")
        name, path = g.split("=", 1)
        try:
            out[name] = np.load(path)
        except (OSError, ValueError) as e:
            raise UsageError(f"-input={g}: cannot read {show(path)}: {e}") from None
    for p in manifest["inputs"]:
        if p["name"] not in out and p["symbol"] not in out:
            dt = np.dtype(p["dtype"])
            out[p["name"]] = (rng.integers(-128, 127, p["shape"]).astype(dt) if dt.kind in "iub"
                              else rng.standard_normal(p["shape"]).astype(dt))
    return out


@app.command(help="Profile an -instrument-profile bundle: run it in process (host bundles) or "
                  "read a run's counters (-counts), and print per-instruction and per-op "
                  "ticks, MACs, bytes and code size.")
def bundle_profile(
    directory: str = typer.Argument(..., help="The bundle directory."),
    network_name: Optional[str] = typer.Option(None, "--network-name", help="The bundle's name when the directory holds several."),
    input: Optional[List[str]] = typer.Option(None, "--input", help="name=file.npy (repeatable); other inputs are random."),
    repeat: int = typer.Option(1, "--repeat", help="Runs to accumulate."),
    counts: Optional[str] = typer.Option(None, "--counts", help="A run's counters instead of running: 'profile <i> <count>' lines (and 'cycles <n>'), or a JSON list."),
    unit: str = typer.Option("cycles", "--unit", help="With -counts: what the counts are, after -scale (cycles, instructions, ns...)."),
    scale: int = typer.Option(1, "--scale", help="With -counts: units per counter tick (the Cortex-M7 runner under QEMU -icount shift=2: -unit=instructions -scale=10)."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the profile JSON to this file ('-': print only the JSON)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show internals on errors."),
):
    from glowpy.bundle_info import find_bundle, load_manifest
    name = find_bundle(directory, network_name)
    man = load_manifest(directory, name)
    if counts:
        try:
            with open(counts) as f:
                values, total = parse_counts(f.read())
        except OSError as e:
            raise UsageError(f"-counts={show(counts)}: {e.strerror}") from None
        if scale < 1:
            raise UsageError(f"-scale={scale}: expected a positive integer")
        prof = build(man, values, total, unit=unit, scale=scale)
    else:
        from glowpy.runtime import Bundle, host_refusal
        if not (man.get("instrumentation") or {}).get("profile"):
            raise ModelError(f"bundle '{show(name)}' has no profile counters; compile it "
                             "with -instrument-profile")
        reason = host_refusal(man["target"])
        if reason:
            raise ModelError(f"bundle '{show(name)}' {reason}: run it there and give its "
                             "counters with -counts")
        prof = Bundle(directory, name).profile(_inputs(man, input or []), repeat=repeat)
    if json_out == "-":
        print(json.dumps(prof, indent=1))
        return
    if json_out:
        with open(json_out, "w") as f:
            json.dump(prof, f, indent=1)
    print(table(prof))


def main():
    from glowpy.cli import run
    sys.exit(run(sys.argv[1:], "bundle-profile", typer.main.get_command(app)))


if __name__ == "__main__":
    main()

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

The profile itself (glowpy/perf_profile.py): see there."""
from __future__ import annotations

import json
from typing import List, Optional

import numpy as np
import typer

from glowpy.errors import ModelError, UsageError, show
from glowpy.ir.dtypes import named
from glowpy.perf_profile import build, parse_counts, table

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})


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
            dt = named(p["dtype"])
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
    repeat: int = typer.Option(1, "--repeat", help="Runs to accumulate (on the host after one uncounted warm-up call)."),
    counts: Optional[str] = typer.Option(None, "--counts", help="A run's counters instead of running: 'profile <i> <count>' lines (and 'cycles <n>'), or a JSON list."),
    unit: str = typer.Option("cycles", "--unit", help="With -counts: what the counts are, after -scale (cycles, instructions, ns...)."),
    scale: int = typer.Option(1, "--scale", help="With -counts: units per counter tick (the Cortex-M7 runner under QEMU -icount shift=2: -unit=instructions -scale=10)."),
    dump_report: Optional[str] = typer.Option(None, "--dump-report", help="Also write an HTML report of the bundle with this profile (regions, constants, code per kernel, per-op time and ticks per MAC; model-compiler -dump-report -report-profile adds the memory plan and the graph). Needs matplotlib."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the profile JSON to this file ('-': print only the JSON)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show internals on errors."),
):
    from glowpy.bundle_info import find_bundle, load_manifest
    name = find_bundle(directory, network_name)
    man = load_manifest(directory, name)
    if dump_report:
        from glowpy.report import require
        require()
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
    if dump_report:
        from glowpy import report
        from glowpy.bundle_info import code_sizes
        report.write_bundle(dump_report, man, code_sizes(directory, name)["functions"], prof,
                            "bundle-profile")
    if json_out == "-":
        print(json.dumps(prof, indent=1))
        return
    if json_out:
        with open(json_out, "w") as f:
            json.dump(prof, f, indent=1)
    print(table(prof))


def main():
    from glowpy.cli import exit_main
    exit_main("bundle-profile", app)


if __name__ == "__main__":
    main()

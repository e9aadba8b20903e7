"""`bundle-info`: what a bundle holds and whether it is whole (the dump tool of PopEF's
containers, for bundles). Reads NAME.json (network, target, options, regions, placeholders,
constants with the layout the compiler stored them in), the object's symbol table (code size of
the entry and of each kernel function: st_size) and checks the bundle's integrity: the manifest
records the size and SHA-256 of NAME.o and NAME.weights.bin; a missing, truncated or modified
file is one line `bundle-info: error: ...` and exit status 1.

    bundle-info out/                     bundle-info -bundle=out/ -network-name=mnist -json
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

import typer

from glowpy import elf
from glowpy.errors import ModelError, UsageError, show

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})

NAME_WIDTH = 60  # characters of a model name in a table (fused names run to hundreds)
BINARY_FILES = (".o", ".weights.bin")  # hashed by the compiler (codegen/bundle.py: integrity)


def find_bundle(directory: str, name: str | None) -> str:
    """The bundle's name: `name`, or the only NAME.json in `directory` beside a NAME.h."""
    if not os.path.isdir(directory):
        raise UsageError(f"-bundle={show(directory)}: not a directory; give the directory "
                         "model-compiler -emit-bundle wrote")
    if name is not None:
        return name
    files = set(os.listdir(directory))
    names = sorted(f[:-5] for f in files if f.endswith(".json") and f[:-5] + ".h" in files)
    if len(names) != 1:
        raise UsageError(f"-bundle={show(directory)}: {len(names)} bundles found "
                         f"({', '.join(show(n) for n in names) or 'no NAME.json beside a NAME.h'}); "
                         "give -network-name")
    return names[0]


def load_manifest(directory: str, name: str) -> dict:
    path = os.path.join(directory, name + ".json")
    try:
        with open(path) as f:
            m = json.load(f)
    except OSError as e:
        raise ModelError(f"{show(name)}.json: cannot read it ({e.strerror}); not a bundle, or a "
                         "partial one: compile it again") from None
    except ValueError as e:
        raise ModelError(f"{show(name)}.json: not valid JSON ({e}); compile the bundle again") from None
    for key in ("network_name", "entry", "inputs", "outputs", "constants", "memory", "target"):
        if not isinstance(m, dict) or key not in m:
            raise ModelError(f"{show(name)}.json: no '{key}'; not a glowpy bundle manifest")
    return m


def check_integrity(directory: str, name: str, manifest: dict) -> dict:
    """{suffix: "ok"} for each recorded file; raises ModelError naming the first file that is
    missing, of another size or another SHA-256 than the manifest records."""
    recorded = manifest.get("integrity")
    if not recorded:
        return {s: "not recorded (a bundle from a glowpy before integrity hashes)"
                for s in BINARY_FILES}
    out = {}
    for suffix, rec in recorded.items():
        path = os.path.join(directory, name + suffix)
        fname = show(name + suffix)
        if not os.path.isfile(path):
            raise ModelError(f"{fname} is missing: the bundle is partial; compile it again")
        size = os.path.getsize(path)
        if size != rec["bytes"]:
            what = "truncated" if size < rec["bytes"] else "longer than written"
            raise ModelError(f"{fname} has {size} bytes, the manifest records {rec['bytes']} "
                             f"({what}); compile the bundle again")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != rec["sha256"]:
            raise ModelError(f"{fname}: SHA-256 {h.hexdigest()[:16]}... differs from the "
                             f"manifest's {rec['sha256'][:16]}... (modified since it was "
                             "compiled); compile the bundle again")
        out[suffix] = "ok"
    return out


def code_sizes(directory: str, name: str) -> dict:
    """{"text_bytes": .text size, "functions": [{name, bytes}] in address order}."""
    path = os.path.join(directory, name + ".o")
    try:
        obj = elf.read(path)
        syms = [s for s in obj.symbols() if s.type == "func" and s.defined]
    except (OSError, elf.ElfError) as e:
        raise ModelError(f"{show(name)}.o: cannot read its symbols ({e}); compile the bundle "
                         "again") from None
    syms.sort(key=lambda s: (s.shndx, s.value))
    return {"text_bytes": sum(obj.section_bytes(elf.SHF_EXECINSTR).values()),
            "functions": [{"name": s.name, "bytes": s.size} for s in syms]}


def describe(directory: str, name: str | None = None) -> dict:
    """Everything bundle-info prints, as a dict (the -json output); raises on a broken bundle."""
    name = find_bundle(directory, name)
    m = load_manifest(directory, name)
    integrity = check_integrity(directory, name, m)
    return {"bundle": name, "directory": directory, "glowpy_version": m.get("glowpy_version"),
            "network_name": m["network_name"], "entry": m["entry"],
            "bundle_api": m.get("bundle_api"), "target": m["target"],
            "options": m.get("options", {}), "memory": m["memory"],
            "placeholders": [{"kind": kind, **p} for kind in ("inputs", "outputs") for p in m[kind]],
            "constants": m["constants"], "code": code_sizes(directory, name),
            "integrity": integrity}


def _table(rows: list[list], head: list[str]) -> list[str]:
    rows = [head] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def text(d: dict) -> str:
    t, mem = d["target"], d["memory"]
    lines = [f"bundle {show(d['bundle'])} in {show(d['directory'])} (glowpy {d['glowpy_version']}, "
             f"{d['bundle_api']} API)",
             f"network: {show(d['network_name'])}  entry: {show(d['entry'])}",
             f"target: {t.get('triple')}  cpu {t.get('cpu')}  float ABI {t.get('float_abi')}  "
             f"relocation {t.get('relocation_model')}  code model {t.get('code_model')}",
             "features: " + (",".join(f for f in t.get("features", "").split(",")
                                      if f.startswith("+")) or "(the CPU's)"),
             "options: " + "  ".join(f"{k}={json.dumps(v)}" for k, v in d["options"].items()),
             f"regions (alignment {mem.get('alignment')}): constant {mem['constant']:,} B  mutable "
             f"{mem['mutable']:,} B  activations {mem['activations']:,} B (lower bound "
             f"{mem.get('activations_lower_bound', 0):,}, kernel scratch "
             f"{mem.get('activations_scratch', 0):,})",
             f"placeholders ({len(d['placeholders'])}):"]
    lines += _table([[p["kind"][:-1], show(p["name"], NAME_WIDTH), p["symbol"], p["dtype"], p["shape"],
                      p["offset"], p["bytes"]] for p in d["placeholders"]],
                    ["kind", "name", "symbol", "dtype", "shape", "offset", "bytes"])
    cs = d["constants"]
    lines.append(f"constants ({len(cs)}, {sum(c['bytes'] for c in cs):,} B):")
    lines += _table([[show(c["name"], NAME_WIDTH), c["dtype"], c["shape"], c["offset"], c["bytes"],
                      c.get("layout", "?") + (f" for {c['kernel']}" if c.get("kernel") else "")
                      + (f" ({c['variant']})" if c.get("variant") else "")] for c in cs],
                    ["name", "dtype", "shape", "offset", "bytes", "stored layout"])
    code = d["code"]
    lines.append(f"code (.text {code['text_bytes']:,} B, {len(code['functions'])} functions):")
    lines += _table([[f["name"], f["bytes"]] for f in code["functions"]], ["function", "bytes"])
    lines.append("integrity: " + "  ".join(f"{show(d['bundle'])}{s} {v}"
                                           for s, v in d["integrity"].items()))
    return "\n".join(lines)


@app.command(help="Print what a bundle holds (network, target, options, regions, placeholders, "
                  "constants and their stored layout, code size per kernel) and check its "
                  "integrity against the hashes in NAME.json (exit 1 when a file is missing, "
                  "truncated or modified).")
def bundle_info(
    directory: Optional[str] = typer.Argument(None, help="The bundle directory (or -bundle)."),
    bundle: Optional[str] = typer.Option(None, "--bundle", help="The bundle directory (model-compiler -emit-bundle)."),
    network_name: Optional[str] = typer.Option(None, "--network-name", help="The bundle's name when the directory holds several."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    dump_report: Optional[str] = typer.Option(None, "--dump-report", help="Also write an HTML report of the bundle: regions, constants by size, code per kernel (model-compiler -dump-report adds the memory plan and the graph). Needs matplotlib."),
    verbose: bool = typer.Option(False, "--verbose", help="Show internals on errors."),
):
    d = bundle or directory
    if not d:
        raise UsageError("give the bundle directory: bundle-info DIR or -bundle=DIR")
    if dump_report:
        from glowpy.report import require
        require()
    info = describe(d, network_name)
    if dump_report:
        from glowpy import report
        report.write_bundle(dump_report, load_manifest(d, info["bundle"]),
                            info["code"]["functions"], None, "bundle-info")
    print(json.dumps(info, indent=2) if as_json else text(info))


def main():
    from glowpy.cli import exit_main
    exit_main("bundle-info", app)


if __name__ == "__main__":
    main()

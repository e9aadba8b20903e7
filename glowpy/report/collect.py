"""The report's data, gathered where it exists: the compile (memory plan, optimized graph,
kernels, constants, the object's code sizes), a profile (bundle-profile -json, host or
Cortex-M7 run) and model-verify's per-layer figures. Everything here is plain JSON (the page
embeds it), and every number the page shows comes from here: the memory section from
ir/report.py's memory_report, the very dict -dump-memory-report writes."""
from __future__ import annotations

import json

import numpy as np

from glowpy import elf
from glowpy.errors import UsageError, show
from glowpy.ir import epilogue


def family(op: str) -> str:
    """The op family (the glowpy/ir/ops module) of an op or kernel op: "Conv+Relu" and
    "ConvWinograd" are conv, "QConv" qops; an unregistered name counts as "other"."""
    from glowpy.ir.ops import registry
    base = op.split("+")[0]
    if registry.has_op(base):
        return type(registry.get_op(base)).__module__.rsplit(".", 1)[-1]
    # kernel ops named after their op (ConvWinograd, ConvPointwiseInPlace): longest prefix
    known = [n for n in registry.all_ops() if base.startswith(n)]
    if known:
        return type(registry.get_op(max(known, key=len))).__module__.rsplit(".", 1)[-1]
    return "other"


def _shapes(values) -> str:
    return ", ".join(f"{np.dtype(v.dtype).name}{list(v.shape)}" for v in values if v is not None)


def graph_nodes(graph, prog) -> list[dict]:
    """One row per node of the optimized graph: its instruction(s), kernel function, variant,
    shapes, fused epilogue and what the planner did with it (view, in place)."""
    instrs: dict = {}
    for i, ins in enumerate(prog.instrs):
        if ins.node is not None:
            instrs.setdefault(id(ins.node), []).append(i)
    overlapping = {i for i, _, _, _ in prog.overlaps}
    rows = []
    for n, node in enumerate(graph.nodes):
        idx = instrs.get(id(node), [])
        flags = []
        if "view" in node.opdef.traits:
            flags.append("view (no copy)" if not idx else "view")
        for i in idx:
            extra = {k: v for k, v in prog.instrs[i].attrs.items() if k != "variant"}
            if extra:
                flags.append("in place " + json.dumps(extra, default=str))
            if i in overlapping:
                flags.append("overlaps its input")
        variants = [prog.instrs[i].attrs.get("variant") for i in idx]
        rows.append({
            "id": f"n{n}", "name": node.name, "op": epilogue.label(node), "base_op": node.op,
            "family": family(node.op),
            "epilogue": [s["op"] for s in epilogue.steps(node)],
            "instructions": idx,
            "kernel": ", ".join(dict.fromkeys(prog.kernels[i] for i in idx
                                              if i < len(prog.kernels))),
            "variant": ", ".join(v["name"] if isinstance(v, dict) else str(v)
                                 for v in variants if v),
            "inputs": _shapes(node.inputs), "outputs": _shapes(node.outputs),
            "flags": flags})
    return rows


def code_sizes(obj: bytes, prog) -> list[dict]:
    """Each function of the object with its code bytes and the instructions it runs (a kernel
    shared by identical instructions counts once), largest first."""
    funcs = elf.Elf(obj).functions()
    users: dict = {}
    for i, (ins, fn) in enumerate(zip(prog.instrs, prog.kernels)):
        users.setdefault(fn, []).append(i)
    rows = []
    for name, size in funcs.items():
        idx = users.get(name, [])
        ops = list(dict.fromkeys(prog.instrs[i].op for i in idx))
        rows.append({"name": name, "bytes": int(size), "instructions": idx,
                     "ops": ops, "family": family(ops[0]) if ops else "entry"})
    return sorted(rows, key=lambda r: (-r["bytes"], r["name"]))


def from_bundle(manifest: dict, functions: list[dict], profile: dict | None, source: str) -> dict:
    """What a bundle (and a profile of it) tell without the compile (bundle-info,
    bundle-profile): regions, constants, code per kernel (`functions`: bundle_info.code_sizes;
    the instructions from the manifest's instrumentation, when it has one)."""
    users: dict = {}
    for row in (manifest.get("instrumentation") or {}).get("instructions", []):
        users.setdefault(row["kernel"], []).append(row)
    code = []
    for f in functions:
        rows = users.get(f["name"], [])
        ops = list(dict.fromkeys(r["op"] for r in rows))
        code.append({"name": f["name"], "bytes": f["bytes"], "instructions":
                     [r["id"] for r in rows], "ops": ops,
                     "family": family(ops[0]) if ops else "entry"})
    m = manifest["memory"]
    return {"network": manifest["network_name"], "target": manifest["target"],
            "source": source, "options": manifest.get("options", {}),
            "glowpy_version": manifest.get("glowpy_version"),
            "regions": {"constant": m["constant"], "mutable": m["mutable"],
                        "activation": m["activations"]},
            "memory": None, "naive_bound": None, "nodes": None,
            "constants": sorted(manifest["constants"], key=lambda c: (-c["bytes"], c["offset"])),
            "code": sorted(code, key=lambda r: (-r["bytes"], r["name"])),
            "profile": profile_section(profile) if profile else None, "verify": None}


def naive_bound(models: list[str], symbols: dict) -> int | None:
    """The ONNX yardstick (ir/naive_bound.py) for a single .onnx model; None when it does not
    apply (Caffe2 nets) or ONNX shape inference cannot give it."""
    if len(models) != 1 or not models[0].endswith(".onnx"):
        return None
    from glowpy.ir.naive_bound import naive_liveness_bound
    try:
        return naive_liveness_bound(models[0], symbols)
    except Exception:  # noqa: BLE001 - a yardstick, not the compile: the chart omits it
        return None


def from_compile(prog, graph, manifest: dict, obj: bytes, models: list[str],
                 symbols: dict) -> dict:
    from glowpy.ir.report import memory_report
    mem = memory_report(prog)
    return {"network": manifest["network_name"], "target": manifest["target"],
            "source": "model-compiler", "regions": mem["regions"],
            "options": manifest.get("options", {}), "glowpy_version": manifest.get("glowpy_version"),
            "memory": mem, "naive_bound": naive_bound(models, symbols),
            "constants": sorted(manifest["constants"], key=lambda c: (-c["bytes"], c["offset"])),
            "code": code_sizes(obj, prog), "nodes": graph_nodes(graph, prog),
            "profile": None, "verify": None}


def load_profile(path: str, option: str = "report-profile") -> dict:
    """A profile bundle-profile -json wrote (perf_profile.FORMAT, glowpy-profile/N; not
    imported: perf_profile reaches the CLI, which imports the compiler, which imports this)."""
    try:
        with open(path) as f:
            p = json.load(f)
    except OSError as e:
        raise UsageError(f"-{option}={show(path)}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise UsageError(f"-{option}={show(path)}: not JSON ({e}); give the file "
                         "bundle-profile -json wrote") from None
    if not isinstance(p, dict) or not str(p.get("format")).startswith("glowpy-profile/") or \
            "programs" not in p:
        raise UsageError(f"-{option}={show(path)}: not a glowpy profile; give the file "
                         "bundle-profile -json wrote")
    return profile_section(p)


def profile_section(p: dict) -> dict:
    """Per op type ticks and per instruction ticks per MAC, each with its op family."""
    unit = p["target"]["unit"]
    ops = [{"op": op, "family": family(op), "count": o["count"], "value": o[unit],
            "percent": o["percent"], "macs": o["macs"]} for op, o in p["ops"].items()]
    per_mac = [{"id": r["id"], "op": r["op"], "node": r.get("node", ""),
                "family": family(r["op"]), "value": r[unit], "macs": r["macs"],
                "per_mac": round(r[unit] / r["macs"], 4)}
               for r in p["programs"] if r["macs"]]
    t = p["target"]
    return {"unit": unit, "bundle": p["bundle"], "where": f"{t.get('triple')} (cpu "
            f"{t.get('cpu')}, counter {t.get('counter')})", "runs": p.get("runs"),
            "total": p["total"], "ops": ops, "per_mac": per_mac}


def verify_section(rows, header: dict) -> dict:
    """model-verify's per-layer figures (compare.Row) for the error chart."""
    def num(x):
        return None if x is None or not np.isfinite(x) else float(x)
    return {"run": header.get("run"), "reference": header.get("reference"),
            "layers": [{"index": r.layer.index, "op": r.layer.op, "tensor": r.layer.tensor,
                        "dtype": r.layer.dtype, "max_abs": num(r.max_abs),
                        "tolerance": num(r.tol), "lsb": num(r.lsb), "snr_db": num(r.snr_db),
                        "float_snr_db": num(r.float_snr_db),
                        "ok": bool(r.ok), "output": bool(r.is_output)} for r in rows]}

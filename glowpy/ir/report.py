"""The memory report (-dump-memory-report=FILE.json): where every byte of the activation region
goes. Per activation buffer: its size, offset, first and last use and the instruction that
produces it; the peak of simultaneously live bytes and the instruction where it occurs; the
lower bound and the efficiency (bound / size); the bytes of each region. Per instruction: its
kernel, variant and "executed_macs", the multiply-adds the kernel performs (ir/macs.py)."""
from __future__ import annotations

import json

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.macs import executed_macs
from glowpy.ir.program import ACTIVATION, Program


def _instr_label(ins) -> str:
    if ins.node is None:
        return ins.op
    return epilogue.label(ins.node) if ins.op != "ConvPointwiseInPlace" else \
        "ConvPointwiseInPlace" + "".join("+" + s["op"] for s in epilogue.steps(ins.node))


def memory_report(prog: Program) -> dict:
    info = prog.plan_info
    iv = info.get("intervals", {})
    names = [ins.name for ins in prog.instrs]
    writer: dict = {}
    for i, ins in enumerate(prog.instrs):
        for b in ins.outputs:
            writer.setdefault(id(b.storage), i)
    buffers = []
    for s, (a, b) in sorted(iv.items(), key=lambda kv: (kv[1][0], kv[0].address[1])):
        if s.root.region != ACTIVATION:
            continue
        w = writer.get(id(s))
        d = {"name": s.name, "dtype": np.dtype(s.dtype).name, "shape": list(s.shape),
             "size": s.nbytes, "offset": s.address[1],
             "first_use": {"index": a, "instruction": names[a] if 0 <= a < len(names) else None},
             "last_use": {"index": b, "instruction": names[b] if 0 <= b < len(names) else None},
             "producer": ({"index": w, "instruction": names[w], "op": _instr_label(prog.instrs[w])}
                          if w is not None else None)}
        if s.base is not None:
            d["inside"] = {"buffer": s.base.storage.name, "relation": s.relation,
                           "offset": s.address[1] - s.base.storage.address[1]}
        buffers.append(d)
    prof = info.get("profile", [])
    peak_at = info.get("peak_instr", 0)
    live_at_peak = [s.name for s, (a, b) in iv.items()
                    if s.root.region == ACTIVATION and a <= peak_at <= b]
    act = prog.sizes.get("activation", 0)
    bound = info.get("lower_bound", 0)
    overlapping = {i for i, _, _, _ in prog.overlaps}
    return {
        "network": prog.name,
        "regions": {"constant": prog.sizes.get("constant", 0), "mutable": prog.sizes.get("mutable", 0),
                    "activation": act},
        "activations": {
            "size": act, "lower_bound": bound,
            "efficiency": round(bound / act, 4) if act else 1.0,
            "reuse": info.get("reuse", True), "strategy": info.get("strategy"),
            "schedule": info.get("schedule"),
            **({"patch": info["patch"]} if info.get("patch") else {}),
            "peak": {"bytes": prof[peak_at] if prof else 0, "instruction_index": peak_at,
                     "instruction": names[peak_at] if names else None,
                     "op": _instr_label(prog.instrs[peak_at]) if names else None,
                     "live_buffers": live_at_peak},
        },
        "buffers": buffers,
        "instructions": [{"index": i, "name": ins.name, "op": _instr_label(ins),
                          "kernel": ins.op, "live_bytes": prof[i] if i < len(prof) else 0,
                          **({"variant": ins.attrs["variant"]} if "variant" in ins.attrs else {}),
                          "executed_macs": executed_macs(ins),
                          **({"in_place": in_place} if (in_place := {
                              k: v for k, v in ins.attrs.items() if k != "variant"}) else {}),
                          **({"overlaps_input": True} if i in overlapping else {})}
                         for i, ins in enumerate(prog.instrs)],
        "placeholders": [{"name": p.name, "offset": p.offset, "size": p.nbytes,
                          "kind": "input" if p in prog.inputs else "output"}
                         for p in prog.placeholders],
    }


def memory_report_json(prog: Program) -> str:
    return json.dumps(memory_report(prog), indent=1) + "\n"

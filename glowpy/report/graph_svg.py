"""The optimized graph as SVG for the report: ir/dot.py's DOT with, per node, an id, a tooltip
(op, kernel, variant, shapes, fused epilogue, view / in-place flags), a link to its row in the
node table and a fill that tells fused, view and in-place nodes apart, laid out by Graphviz
(`dot -Tsvg`, Debian package graphviz). Without `dot` the report says so instead."""
from __future__ import annotations

import shutil
import subprocess

from glowpy.ir.dot import to_dot

TIMEOUT = 120  # seconds: the largest shared graph (a few hundred nodes) lays out in ~1 s
NAME = 48  # characters of a node name in its box; the tooltip and the table have all of it
FILL = {"view": "gray92", "in place": "#d8f0d2", "fused": "#fff2c4"}


def _short(s: str) -> str:
    return s if len(s) <= NAME else s[:NAME // 2 - 1] + "…" + s[-(NAME // 2):]


def _attrs(row: dict) -> dict:
    tip = [f"{row['op']}  ({row['name']})"]
    if row["kernel"]:
        tip.append(f"kernel {row['kernel']}" + (f", variant {row['variant']}"
                                                 if row["variant"] else ""))
    tip += [f"in: {row['inputs']}", f"out: {row['outputs']}"]
    if row["epilogue"]:
        tip.append("fused epilogue: " + " + ".join(row["epilogue"]))
    tip += row["flags"]
    kind = ("view" if any(f.startswith("view") for f in row["flags"]) else
            "in place" if any(f.startswith(("in place", "overlaps")) for f in row["flags"]) else
            "fused" if row["epilogue"] else None)
    return {"id": f"node-{row['id']}", "URL": f"#row-{row['id']}", "target": "_self",
            "tooltip": "\n".join(tip), "shape": "box",
            "label": "\n".join((row["op"], _short(row["name"]), row["outputs"])),
            **({"style": "filled", "fillcolor": FILL[kind]} if kind else {})}


def graph_svg(graph, nodes: list[dict]) -> tuple[str | None, str]:
    """(svg, "") or (None, why there is no picture)."""
    dot = shutil.which("dot")
    if not dot:
        return None, ("Graphviz 'dot' is not installed (Debian: apt-get install graphviz), so "
                      "the graph is not drawn; the node table below lists every node")
    text = to_dot(graph, lambda i, n: _attrs(nodes[i]), constants=False)
    try:
        r = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True,
                           timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"Graphviz 'dot' took over {TIMEOUT} s to lay the graph out; not drawn"
    if r.returncode != 0 or "<svg" not in r.stdout:
        err = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"Graphviz 'dot' failed ({err[:200]}); the graph is not drawn"
    return r.stdout[r.stdout.index("<svg"):], ""

"""The package's import graph has no cycle: modules import downward only.

Every `import` and `from ... import` statement of every glowpy module is read (at any depth:
an import inside a function is an edge too; `from pkg import mod` is an edge to the module,
`from mod import name` to the module defining it). A package's __init__ that imports its own
modules for the public API (glowpy.compile) is an ordinary edge too, so the kernel packages'
__init__ files import nothing (kernels/catalog.py lists the families instead). The one
allowed cycle is the op registration between glowpy.ir.graph and glowpy.ir.ops (Graph.add
looks ops up; the op modules build graph values)."""
from __future__ import annotations

import ast
import os

GLOWPY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "glowpy")
ALLOWED = {frozenset({"glowpy.ir.graph", "glowpy.ir.ops"})}


def modules() -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(GLOWPY):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, os.path.dirname(GLOWPY))[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def edges(mods: dict[str, str]) -> dict[str, set[str]]:
    def resolve(name):  # the longest glowpy module a dotted name refers to
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: set() for m in mods}
    for m, path in mods.items():
        pkg = m if path.endswith("__init__.py") else m.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                # `from pkg import mod` imports pkg.mod; `from mod import name` imports mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t) if t.startswith("glowpy") else None
                if r and r != m:
                    graph[m].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_import_graph_has_no_cycle():
    graph = edges(modules())
    assert sum(len(e) for e in graph.values()) > 200  # the reader sees the real imports
    bad = []
    for comp in cycles(graph):
        ops = {m for m in comp if m == "glowpy.ir.ops" or m.startswith("glowpy.ir.ops.")}
        if "glowpy.ir.graph" in comp and set(comp) <= ops | {"glowpy.ir.graph"}:
            continue  # the allowed registration cycle (graph <-> ops package and op modules)
        bad.append(comp)
    assert not bad, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in bad)


def test_the_reader_finds_a_cycle(tmp_path, monkeypatch):
    """The check itself: two modules importing each other (one lazily) form a cycle."""
    graph = {"glowpy.a": {"glowpy.b"}, "glowpy.b": {"glowpy.c"}, "glowpy.c": {"glowpy.a"},
             "glowpy.d": {"glowpy.a"}}
    assert cycles(graph) == [["glowpy.a", "glowpy.b", "glowpy.c"]]
    pkg = tmp_path / "glowpy"
    (pkg / "x").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "x" / "__init__.py").write_text("")
    (pkg / "x" / "y.py").write_text("def f():\n    from glowpy import z\n")
    (pkg / "z.py").write_text("from glowpy.x.y import f\n")
    (pkg / "w.py").write_text("from glowpy.x import y\n")
    monkeypatch.setattr(__import__(__name__), "GLOWPY", str(pkg))
    graph = edges(modules())
    assert graph["glowpy.w"] == {"glowpy.x.y"}
    assert cycles(graph) == [["glowpy.x.y", "glowpy.z"]]

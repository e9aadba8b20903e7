"""-dump-report=FILE.html: one self-contained HTML page per bundle (no network, no CDN: the
charts are inline SVG, the graph too, a few lines of inline script zoom it).

    collect.py    the data (memory plan, graph nodes, constants, code sizes, profile, errors)
    charts.py     matplotlib figures -> SVG text (the optional extra `report`)
    graph_svg.py  the optimized graph through Graphviz `dot -Tsvg`, nodes linked to the table

The page embeds its data as JSON (`<script id="report-data">`), so a test or a tool reads the
numbers the page shows. model-compiler writes it (-dump-report, with -report-profile for a
profile), model-verify adds the per-layer error chart, bundle-profile the profile of a run,
bundle-info what a bundle on disk holds (no memory plan, no graph: those are the compile's)."""
from __future__ import annotations

import sys

import jinja2

from glowpy.output import write_dump
from glowpy.report import charts, collect
from glowpy.report.charts import require

__all__ = ["collect", "graph_picture", "render", "require", "warner", "write", "write_bundle"]

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("glowpy", "templates"),
                          autoescape=True, undefined=jinja2.ChainableUndefined)


def graph_picture(graph, data: dict, warn=None) -> dict:
    """{"svg": text or None, "note": why not} of the optimized graph; `warn(msg)` hears why
    it could not be drawn."""
    from glowpy.report.graph_svg import graph_svg
    svg, note = graph_svg(graph, data["nodes"])
    if svg is None and warn:
        warn(note)
    return {"svg": svg, "note": note}


def render(data: dict, graph: dict | None = None) -> str:
    """The page of `data` (collect.py) with `graph` (graph_picture) in its graph section."""
    graph = graph or {"svg": None, "note": "the graph was not available to this command"}
    return _ENV.get_template("report.html.j2").render(
        d=data, charts=charts.all_charts(data), graph_svg=graph["svg"], graph_note=graph["note"])


def warner(prog: str):
    return lambda msg: print(f"{prog}: warning: -dump-report: {msg}", file=sys.stderr)


def write_bundle(path: str, manifest: dict, functions: list[dict], profile: dict | None,
                 source: str):
    """The page of a bundle on disk (bundle-info, bundle-profile): no memory plan, no graph;
    `functions`: bundle_info.code_sizes (not imported here: bundle_info reaches the CLI)."""
    write(path, collect.from_bundle(manifest, functions, profile, source),
          {"svg": None, "note": f"{source} has no graph; model-compiler -dump-report draws it"})


def write(path: str, data: dict, graph: dict | None = None):
    """Renders `data` and writes it to `path` (-dump-report; output.write_dump's rules)."""
    write_dump("dump-report", path, render(data, graph))

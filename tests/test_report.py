"""-dump-report pages, opened in headless Chromium (playwright driving the system's
/usr/bin/chromium; no browser is downloaded): for every shared float and int8 model the page
loads without console errors, every chart's SVG is laid out with a non-empty box, the graph is
drawn with one box per node, a full-page screenshot is not blank, and the numbers the page
shows (region sizes, peak, floor, every buffer's offset and size) are the ones
-dump-memory-report writes in the same compile. Then the page's other sources: a host profile
(-report-profile), model-verify's per-layer errors, and the fallbacks (no Graphviz: the page
says so; no matplotlib: a one-line usage error)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from toolchains import require_tool
from util import FLOAT_MODELS, MODELS, REPO, model_path

INT8_MODELS = sorted(f[:-5] for f in os.listdir(MODELS) if f.endswith("_int8_qdq.onnx"))
CHROMIUM = "/usr/bin/chromium"


def cli(tool: str, *args: str) -> int:
    """One of glowpy's commands, in this process, exactly as its console script runs it."""
    import typer
    from glowpy.cli import run
    if tool == "model-compiler":
        from glowpy.cli import app
    elif tool == "bundle-profile":
        from glowpy.bundle_profile import app
    else:
        from glowpy.verify.cli import app
    return run(list(args), tool, typer.main.get_command(app))


@pytest.fixture(scope="module")
def browser():
    require_tool("dot", "graphviz")
    if not os.path.exists(CHROMIUM):
        require_tool("chromium", "chromium")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, path: str):
    """(page, console errors) of the report at `path`; a request for anything but the page
    itself counts as an error (the page is self-contained: no network, no CDN)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list = []
    url = "file://" + os.path.abspath(path)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"request {r.url}")
            if r.url != url and not r.url.startswith("data:") else None)
    page.goto(url)
    page.wait_for_load_state("load")
    return page, errors


def chart_boxes(page) -> dict:
    """{chart id: (width, height, drawn elements)} of every chart on the page."""
    return {k: tuple(v) for k, v in page.eval_on_selector_all(
        ".chart", "els => els.map(e => { const s = e.querySelector('svg'); "
        "const r = s.getBoundingClientRect(); "
        "return [e.id, [r.width, r.height, s.querySelectorAll('path, rect, use, text').length]]; })")}


def number(page, selector: str) -> int:
    return int(page.inner_text(selector).replace(",", ""))


def assert_not_blank(png: bytes):
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("RGB")
    colors = img.getcolors(maxcolors=1 << 20)
    assert img.width >= 1000 and img.height > 2000
    assert colors is None or len(colors) > 50  # charts and text, not one flat colour


@pytest.mark.parametrize("name", FLOAT_MODELS + INT8_MODELS)
def test_report_renders_and_shows_the_memory_reports_numbers(name, browser, tmp_path):
    html, mem_json = tmp_path / "report.html", tmp_path / "memory.json"
    assert cli("model-compiler", f"-model={model_path(name)}", f"-emit-bundle={tmp_path}/b",
               f"-dump-report={html}", f"-dump-memory-report={mem_json}") == 0
    mem = json.loads(mem_json.read_text())
    page, errors = open_page(browser, str(html))
    try:
        assert errors == []
        charts = chart_boxes(page)
        assert {"chart-regions", "chart-placement", "chart-constants", "chart-code"} <= set(charts)
        for cid, (w, h, drawn) in charts.items():
            assert w > 100 and h > 50 and drawn > 5, (cid, w, h, drawn)
        # the graph: one box per node of the table, laid out
        n_nodes = page.locator("#nodes tr[id^=row-]").count()
        assert n_nodes > 0 and page.locator("#graph-view svg g.node[id^=node-n]").count() == n_nodes
        box = page.locator("#graph-view svg").bounding_box()
        assert box["width"] > 50 and box["height"] > 50
        # each node's tooltip names its kernel function and output shapes, as its table row does
        tips = page.eval_on_selector_all(
            "#graph-view svg g.node[id^=node-n]", "gs => gs.map(g => [g.id.slice(5), "
            "g.querySelector('a').getAttributeNS('http://www.w3.org/1999/xlink', 'title')])")
        rows = dict(page.eval_on_selector_all("#nodes tr[id^=row-]", "rs => rs.map(r => "
                                              "[r.id.slice(4), r.children[3].textContent])"))
        assert len(tips) == len(rows)
        for nid, tip in tips:
            assert (f"kernel {rows[nid]}" in tip) if rows[nid] else ("kernel" not in tip), tip
        page.click("button[data-zoom='1.25']")  # the zoom buttons scale the picture
        wider = page.locator("#graph-view svg").bounding_box()
        assert wider["width"] == pytest.approx(1.25 * box["width"], rel=0.02)
        assert_not_blank(page.screenshot(full_page=True))
        # the numbers
        for key, want in (("region-constant", mem["regions"]["constant"]),
                          ("region-mutable", mem["regions"]["mutable"]),
                          ("region-activation", mem["regions"]["activation"]),
                          ("peak", mem["activations"]["peak"]["bytes"]),
                          ("floor", mem["activations"]["lower_bound"])):
            assert number(page, f"[data-key={key}]") == want, key
        rows = page.eval_on_selector_all(
            "#buffers tr[data-buffer]", "rs => rs.map(r => [r.children[1].innerText, "
            "r.querySelector('.offset').innerText, r.querySelector('.size').innerText])")
        assert [(n, int(o.replace(",", "")), int(s.replace(",", ""))) for n, o, s in rows] == \
            [(b["name"], b["offset"], b["size"]) for b in mem["buffers"]]
        assert mem["activations"]["peak"]["bytes"] <= mem["regions"]["activation"]
    finally:
        page.close()


def test_report_with_a_host_profile(browser, tmp_path):
    """bundle-profile -json of a host run, shown by model-compiler -report-profile: per-op
    bars and ticks per MAC, the numbers of the profile."""
    model = model_path("mnist8")
    assert cli("model-compiler", f"-model={model}", f"-emit-bundle={tmp_path}/p",
               "-instrument-profile") == 0
    prof_path = tmp_path / "profile.json"
    assert cli("bundle-profile", f"{tmp_path}/p", "-repeat=3", f"-json={prof_path}") == 0
    prof = json.loads(prof_path.read_text())
    html = tmp_path / "report.html"
    assert cli("model-compiler", f"-model={model}", f"-emit-bundle={tmp_path}/b",
               f"-dump-report={html}", f"-report-profile={prof_path}") == 0
    page, errors = open_page(browser, str(html))
    try:
        assert errors == []
        charts = chart_boxes(page)
        assert {"chart-profile-ops", "chart-profile-per-mac"} <= set(charts)
        assert all(w > 100 and h > 50 and n > 5 for w, h, n in charts.values())
        shown = page.eval_on_selector_all(
            "#profile-table tr", "rs => rs.slice(1).map(r => [r.children[0].textContent, "
            "r.children[3].textContent])")
        assert {op: int(v.replace(",", "")) for op, v in shown} == \
            {op: o["cycles"] for op, o in prof["ops"].items()}
    finally:
        page.close()


def test_report_from_model_verify(browser, tmp_path):
    html = tmp_path / "verify.html"
    name = "mnist8"
    rc = cli("model-verify", f"-model={model_path(name)}", f"-test-data={MODELS}/{name}_data",
             f"-json={tmp_path}/layers.json", f"-dump-report={html}")
    assert rc == 0
    layers = json.loads((tmp_path / "layers.json").read_text())["layers"]
    page, errors = open_page(browser, str(html))
    try:
        assert errors == []
        w, h, drawn = chart_boxes(page)["chart-verify"]
        assert w > 100 and h > 50 and drawn > len(layers)
        shown = page.eval_on_selector_all("#verify-table tr", "rs => rs.slice(1).map(r => "
                                          "[r.children[2].textContent, r.children[8].textContent])")
        assert shown == [[L["tensor"], "yes" if L["ok"] else "no"] for L in layers]
    finally:
        page.close()


def run_tool(args: list[str], env: dict, prelude: str = "") -> subprocess.CompletedProcess:
    code = prelude + "import sys; from glowpy.cli import main; sys.argv[1:] = " + repr(args) + \
        "; main()"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_report_without_graphviz_says_so(browser, tmp_path):
    """No `dot` on PATH: one warning line, the graph section says why, the rest is there."""
    empty = tmp_path / "bin"
    empty.mkdir()
    html = tmp_path / "r.html"
    r = run_tool([f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/b",
                  f"-dump-report={html}"], {**os.environ, "PATH": str(empty)})
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "-dump-report" in ln]
    assert len(warn) == 1 and "Graphviz" in warn[0] and "graphviz" in warn[0]
    page, errors = open_page(browser, str(html))
    try:
        assert errors == [] and "not installed" in page.inner_text("#graph-missing")
        assert page.locator("#graph-view").count() == 0
        assert {"chart-regions", "chart-placement"} <= set(chart_boxes(page))
    finally:
        page.close()


def test_report_without_matplotlib_is_a_usage_error(tmp_path):
    # sys.modules[name] = None is how Python spells "this module is not installed"
    r = run_tool([f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/b",
                  f"-dump-report={tmp_path}/r.html"], dict(os.environ),
                 prelude="import sys; sys.modules['matplotlib'] = None; ")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "model-compiler: error: -dump-report needs matplotlib (the optional extra 'report'): "
        "pip install 'glowpy[report]'"]
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(tmp_path / "r.html")


def test_report_profile_needs_dump_report(tmp_path):
    assert cli("model-compiler", f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}",
               f"-report-profile={tmp_path}/p.json") == 2


def test_report_from_bundle_profile(browser, tmp_path):
    """bundle-profile -dump-report: what the bundle and the run tell (no memory plan)."""
    assert cli("model-compiler", f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/p",
               "-instrument-profile") == 0
    html, prof_path = tmp_path / "r.html", tmp_path / "profile.json"
    assert cli("bundle-profile", f"{tmp_path}/p", f"-json={prof_path}",
               f"-dump-report={html}") == 0
    prof = json.loads(prof_path.read_text())
    page, errors = open_page(browser, str(html))
    try:
        assert errors == []
        assert {"chart-regions", "chart-constants", "chart-code", "chart-profile-ops",
                "chart-profile-per-mac"} == set(chart_boxes(page))
        assert number(page, "[data-key=region-activation]") == \
            prof["memory"]["regions"]["activations"]
        assert "model-compiler -dump-report" in page.inner_text("#placement-missing")
        code = page.eval_on_selector_all("#code-table tr", "rs => rs.slice(1).map(r => "
                                         "[r.children[0].textContent, r.children[1].textContent])")
        kernels = {r["kernel"]: r["code_bytes"] for r in prof["programs"]}
        assert {k: int(b.replace(",", "")) for k, b in code if k in kernels} == kernels
    finally:
        page.close()


def test_report_to_a_directory_is_refused_before_the_bundle_is_written(tmp_path):
    (tmp_path / "r.html").mkdir()
    assert cli("model-compiler", f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/b",
               f"-dump-report={tmp_path}/r.html") == 2
    assert not os.path.exists(tmp_path / "b")


@pytest.mark.parametrize("text, what", [("{\"format\": \"other\"}", "not a glowpy profile"),
                                        ("[1, 2", "not JSON")])
def test_report_profile_that_is_not_a_profile(capsys, tmp_path, text, what):
    (tmp_path / "p.json").write_text(text)
    assert cli("model-compiler", f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/b",
               f"-dump-report={tmp_path}/r.html", f"-report-profile={tmp_path}/p.json") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and what in err[0] and "-report-profile=" in err[0]
    assert not os.path.exists(tmp_path / "b")


def test_report_from_bundle_info(browser, tmp_path):
    """bundle-info -dump-report: regions, constants and code per kernel of a bundle on disk."""
    import typer
    from glowpy.bundle_info import app
    from glowpy.cli import run
    assert cli("model-compiler", f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}/b",
               f"-dump-memory-report={tmp_path}/m.json") == 0
    html = tmp_path / "r.html"
    assert run([f"{tmp_path}/b", f"-dump-report={html}"], "bundle-info",
               typer.main.get_command(app)) == 0
    mem = json.loads((tmp_path / "m.json").read_text())
    page, errors = open_page(browser, str(html))
    try:
        assert errors == []
        assert set(chart_boxes(page)) == {"chart-regions", "chart-constants", "chart-code"}
        for region in ("constant", "mutable", "activation"):
            assert number(page, f"[data-key=region-{region}]") == mem["regions"][region]
        assert "bundle-info does not have the memory plan" in page.inner_text("#placement-missing")
    finally:
        page.close()

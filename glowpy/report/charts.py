"""The report's charts: matplotlib figures rendered to SVG text at report time, inlined into the
page (no image files, no script: the page shows them as they are). matplotlib is the optional
extra `report`; require() says how to get it.

Every chart is a Figure of its own (no pyplot: no global figure state, no GUI backend), with
its SVG ids salted by the chart's name so that several charts inline in one page never share
an id, and without a date so that the same bundle gives the same page."""
from __future__ import annotations

import io
import math

from glowpy.errors import UsageError

LABEL = 42  # characters of a model name on an axis (fused names run to hundreds)
TOP = 30  # bars of the "largest N" charts; the tables below them list everything


def require():
    """matplotlib, or the one-line usage error that says how to install it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("-dump-report needs matplotlib (the optional extra 'report'): "
                         "pip install 'glowpy[report]'") from None


def _label(s: str, n: int = LABEL) -> str:
    s = s if len(s) <= n else s[:n // 2 - 1] + "…" + s[-(n - n // 2):]
    return s.replace("$", r"\$")  # a model string is never mathtext


def _figure(width: float, height: float):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _svg(fig, name: str) -> str:
    import matplotlib
    with matplotlib.rc_context({"svg.hashsalt": name, "svg.fonttype": "none"}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _thousands(axis, largest: float):
    """Plain numbers with thousands separators on byte and tick axes (not 1e6 offsets)."""
    from matplotlib.ticker import FuncFormatter
    axis.set_major_formatter(FuncFormatter(
        (lambda v, _: f"{v:,.0f}") if largest >= 100 else (lambda v, _: f"{v:g}")))


# one colour per op family in every chart (tab10 indices); other groups (constant layouts,
# families not listed) take Set2's colours in name order
FAMILY_COLORS = {"conv": 0, "matmul": 1, "elementwise": 2, "reduce": 3, "tensor": 4, "qops": 5,
                 "quant": 6, "entry": 7, "norm": 8, "recurrent": 9, "region": 1, "bound": 0}


def _colors(groups) -> dict:
    from matplotlib import colormaps
    fam, rest, groups = colormaps["tab10"], colormaps["Set2"], set(groups)
    others = sorted(g for g in set(groups) if g not in FAMILY_COLORS)
    return {g: fam(FAMILY_COLORS[g]) if g in FAMILY_COLORS else rest(others.index(g) % 8)
            for g in sorted(groups)}


def _barh(rows: list[tuple[str, float, str]], xlabel: str, name: str, log: bool = False,
          legend: bool = True) -> str:
    """Horizontal bars, top to bottom in the given order, coloured by group (label, value,
    group)."""
    fig, ax = _figure(9, 0.8 + 0.24 * max(len(rows), 1))
    colors = _colors(g for _, _, g in rows)
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [v for _, v, _ in rows], color=[colors[g] for _, _, g in rows])
    ax.set_yticks(y, [_label(t) for t, _, _ in rows], fontsize=7)
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    else:
        _thousands(ax.xaxis, max((v for _, v, _ in rows), default=0))
    if legend and len(colors) > 1:
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=c, label=_label(g, 20)) for g, c in colors.items()],
                  fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, name)


def placement(mem: dict, naive: int | None) -> str:
    """Every activation buffer as offset x lifetime, the live bytes per instruction, the peak
    and its live buffers, the liveness floor and the naive no-reuse bound of the ONNX model."""
    from matplotlib.patches import Rectangle
    act = mem["activations"]
    n = max(len(mem["instructions"]), 1)
    fig, ax = _figure(11, 5.5)
    peak = act["peak"]
    live = set(peak["live_buffers"])
    for b in mem["buffers"]:
        x0, x1 = b["first_use"]["index"], b["last_use"]["index"] + 1
        inside = "inside" in b
        hot = b["name"] in live
        ax.add_patch(Rectangle((x0, b["offset"]), max(x1 - x0, 0.2), b["size"],
                               facecolor="none" if inside else ("#e4572e" if hot else "#4c78a8"),
                               alpha=0.9 if inside else 0.55, hatch="//" if inside else None,
                               edgecolor="#222" if hot else "white", linewidth=0.6))
    xs = [i["index"] for i in mem["instructions"]]
    ax.step(xs + [n], [i["live_bytes"] for i in mem["instructions"]] +
            [mem["instructions"][-1]["live_bytes"] if xs else 0], where="post", color="#333",
            linewidth=1, label="live bytes (the planner's: an output overlapping its dying input counts once)")
    ax.axvspan(peak["instruction_index"], peak["instruction_index"] + 1, color="#e4572e",
               alpha=0.12, label=f"peak {peak['bytes']:,} B at instruction "
                                 f"{peak['instruction_index']} ({len(live)} buffers live)")
    ax.axhline(act["size"], color="#4c78a8", linestyle="-", linewidth=1.2,
               label=f"activation region {act['size']:,} B")
    ax.axhline(act["lower_bound"], color="#2ca02c", linestyle="--", linewidth=1.2,
               label=f"liveness floor {act['lower_bound']:,} B")
    top = max(act["size"], 1)
    if naive:
        ax.axhline(naive, color="#9467bd", linestyle=":", linewidth=1.5,
                   label=f"naive bound (ONNX order, no fusion) {naive:,} B")
        top = max(top, naive)
    ax.set_xlim(0, n)
    ax.set_ylim(0, top * 1.08)
    _thousands(ax.yaxis, top)
    ax.set_xlabel("instruction (schedule order)")
    ax.set_ylabel("offset in the activation region (bytes)")
    ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
    return _svg(fig, "placement")


def regions(r: dict, mem: dict | None, naive: int | None) -> str:
    rows = [("constant", r["constant"], "region"), ("mutable", r["mutable"], "region"),
            ("activation", r["activation"], "region")]
    if mem:
        rows.append(("activation floor", mem["activations"]["lower_bound"], "bound"))
    if naive:
        rows.append(("naive bound", naive, "bound"))
    return _barh(rows, "bytes", "regions", legend=False)


def constants(consts: list[dict]) -> str:
    rows = [(c["name"], c["bytes"], c.get("layout", "plain")) for c in consts[:TOP]]
    return _barh(rows, "bytes (largest first)", "constants")


def code(funcs: list[dict]) -> str:
    rows = [(f"{f['name']} ({', '.join(f['ops'])})" if f["ops"] else f["name"], f["bytes"],
             f["family"]) for f in funcs[:TOP]]
    return _barh(rows, "code bytes (largest first)", "code")


def profile_ops(p: dict) -> str:
    rows = sorted(((o["op"], o["value"], o["family"]) for o in p["ops"]),
                  key=lambda r: (-r[1], r[0]))
    return _barh(rows, f"{p['unit']} per inference", "profile-ops")


def _by_family(rows: list[dict], key: str) -> list[dict]:
    """Rows grouped by op family (the family with the largest total first), sorted in each."""
    total: dict = {}
    for r in rows:
        total[r["family"]] = total.get(r["family"], 0) + r["value"]
    return sorted(rows, key=lambda r: (-total[r["family"]], r["family"], -r[key]))


def profile_per_mac(p: dict) -> str:
    rows = [(f"{r['id']} {r['op']}", r["per_mac"], r["family"])
            for r in _by_family(p["per_mac"], "per_mac")]
    return _barh(rows, f"{p['unit']} per MAC", "profile-per-mac")


def verify_errors(v: dict) -> str:
    """Per layer: the error over the tolerance (log; 1 is the limit) and the SNR."""
    layers = v["layers"]
    fig, ax = _figure(11, 4.5)
    xs = list(range(len(layers)))
    ratio = []
    for L in layers:
        err = L["lsb"] if L["lsb"] is not None else L["max_abs"]
        tol = L["tolerance"]
        ratio.append(1e-6 if not err else (err / tol if tol else 1e3))
    ax.bar(xs, [max(r, 1e-6) for r in ratio], color=["#4c78a8" if L["ok"] else "#e4572e"
                                                      for L in layers])
    ax.set_yscale("log")
    ax.axhline(1.0, color="#e4572e", linestyle="--", linewidth=1, label="tolerance")
    ax.set_ylabel("error / tolerance (1e-6: exact)")
    ax.set_xticks(xs, [_label(f"{L['index']} {L['op']}", 24) for L in layers], rotation=90,
                  fontsize=6)
    ax2 = None
    for key, what, style in (("snr_db", "SNR vs reference (dB)", "o-"),
                             ("float_snr_db", "SNR vs float model (dB)", "s--")):
        pts = [(x, L[key]) for x, L in zip(xs, layers)
               if L.get(key) is not None and math.isfinite(L[key])]
        if pts:
            ax2 = ax2 or ax.twinx()
            ax2.plot([x for x, _ in pts], [y for _, y in pts], style, color="#333",
                     markersize=3, linewidth=1, label=what)
    if ax2:
        ax2.set_ylabel("SNR (dB)")
        ax2.legend(fontsize=8, loc="upper right")
    ax.legend(fontsize=8, loc="upper left")
    return _svg(fig, "verify")


def all_charts(data: dict) -> dict:
    """{section: svg} of every chart the data has."""
    mem = data.get("memory")
    out = {"regions": regions(data["regions"], mem, data.get("naive_bound"))}
    if mem:
        out["placement"] = placement(mem, data.get("naive_bound"))
    if data.get("constants"):
        out["constants"] = constants(data["constants"])
    if data.get("code"):
        out["code"] = code(data["code"])
    if data.get("profile"):
        out["profile_ops"] = profile_ops(data["profile"])
        if data["profile"]["per_mac"]:
            out["profile_per_mac"] = profile_per_mac(data["profile"])
    if data.get("verify") and data["verify"]["layers"]:
        out["verify"] = verify_errors(data["verify"])
    return out

"""Layer by layer inside one model: the bundle's convolutions and matrix products against
onnxruntime's (one thread), both profiled in the same process, alternating.

    python benchmarks/layer_profile.py model.onnx                          # this host's code
    python benchmarks/layer_profile.py model.onnx --mcpu znver3 --ort-avx2  # AVX2 against AVX2

A single-op probe (op_probe.py) times a layer alone, where onnxruntime reorders its input
into NCHWc blocks and back; inside a model it does not, and the caches hold what the layers
before left. This is where a layer loses inside the model: the bundle compiled with
-instrument-profile (cycle counters around every instruction), onnxruntime with its session
profiler; each layer's minimum over single calls (3 a round on the bundle's side). The two sides' convolution and matrix-product
layers (op_families.py) are matched in order, which holds for chains and may pair the
branches of a block (Inception, a downsampling shortcut) across; the other ops are summed."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

import numpy as np

# the checkout's glowpy, not an installed copy (as perf.py does): a profile of the code in this tree
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("convolution", "matrix product")


def feeds_for(model) -> dict:
    """Random inputs of the model's declared shapes (dynamic dims as 1)."""
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value or 1 for d in t.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32) if t.elem_type == 1 else \
            np.zeros(shape, np.int64)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--mcpu", help="compile the bundle for this LLVM CPU (znver3: AVX2 code)")
    ap.add_argument("--ort-avx2", action="store_true",
                    help="onnxruntime with its AVX-512 kernels off (ort_avx2.py)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--no-winograd", action="store_true",
                    help="compile with -winograd=false (every convolution direct)")
    ap.add_argument("--json", help="also write the matched rows to this file")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        ap.error(f"{a.model}: no such model file")
    if a.ort_avx2:
        import ort_avx2
        print(f"onnxruntime without AVX-512 kernels: {ort_avx2.use()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="layer_profile_") as work:
        compare(a, work)


def compare(a, work: str) -> None:
    """Profile both sides in `work`, print the matched layers (and write --json)."""
    import onnx

    import glowpy
    from glowpy.runtime import Bundle
    from op_families import family, ort_kernel_events, ort_session

    model = onnx.load(a.model, load_external_data=False)
    feeds = feeds_for(model)
    out, report = os.path.join(work, "bundle"), os.path.join(work, "memory.json")
    glowpy.compile(a.model, out, instrument_profile=True, mcpu=a.mcpu, dump_memory_report=report,
                   winograd=not a.no_winograd)
    with open(report) as f:
        info = {i["name"]: i for i in json.load(f)["instructions"]}
    bundle = Bundle(out)
    sess = ort_session(a.model, work)
    sess.run(None, feeds)
    mine: dict = {}
    for _ in range(a.rounds):
        # single calls, as onnxruntime's events are: the minimum of 3-call means was up to
        # 30% above the bundle's best call on a noisy VM (MobileNetV1 as AVX2 code, Zen 4)
        for _ in range(3):
            for row in bundle.profile(feeds, repeat=1)["programs"]:
                mine[row["node"]] = min(mine.get(row["node"], float("inf")), row["cycles"])
        for _ in range(3):
            sess.run(None, feeds)
    theirs: dict = {}
    op_of: dict = {}
    for n, op, dur in ort_kernel_events(sess):
        theirs[n] = min(theirs.get(n, float("inf")), dur)
        op_of[n] = op
    hz = ticks_per_second(bundle, feeds)
    us, first = merge_chunks({n: c / hz * 1e6 for n, c in mine.items()}, theirs)
    info = {n: info.get(first[n], {}) for n in us}
    op_mine = {n: info[n].get("op", "").split("+")[0] for n in us}
    ml = [n for n in us if family(op_mine[n]) in HEAVY]
    tl = [n for n in theirs if family(op_of[n]) in HEAVY]
    print(f"{os.path.basename(a.model)}: bundle {sum(us.values()):.0f} us, onnxruntime "
          f"{sum(theirs.values()):.0f} us (sums of per-layer minima over {a.rounds} rounds)")
    rows = []
    print(f"{'bundle layer':24s} {'op':18s} {'variant':20s} {'us':>8s} {'ort us':>8s} ratio  onnxruntime node")
    for i in range(max(len(ml), len(tl))):
        x = ml[i] if i < len(ml) else None
        y = tl[i] if i < len(tl) else None
        ux, uy = (us[x] if x else 0.0), (theirs[y] if y else 0.0)
        var = ((info.get(x, {}).get("variant") or {}).get("name", "")) if x else ""
        ratio = f"{ux / uy:5.2f}" if x and y else "     "
        print(f"{x or '':24.24s} {info.get(x, {}).get('op', '')[:18]:18s} {var:20.20s} "
              f"{ux:8.0f} {uy:8.0f} {ratio}  {y or ''}")
        rows.append({"bundle": x, "op": info.get(x, {}).get("op"), "variant": var or None,
                     "bundle_us": ux if x else None, "ort_node": y, "ort_us": uy if y else None})
    rest_m = sum(v for n, v in us.items() if n not in ml)
    rest_t = sum(v for n, v in theirs.items() if n not in tl)
    print(f"other ops: bundle {rest_m:.0f} us, onnxruntime {rest_t:.0f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"layers": rows, "other_bundle_us": rest_m, "other_ort_us": rest_t}, f, indent=1)


def merge_chunks(us: dict, theirs: dict) -> tuple[dict, dict]:
    """The bundle's layers with the chunks of one ONNX node summed under its name: a layer
    split over input-channel chunks (split_reduction.py: `conv_232_c0` .. `_c3`, each adding
    onto the last) is one node on onnxruntime's side, and matching chunk by chunk paired every
    later layer with the wrong one. Returns ({name: us}, {name: its first instruction})."""
    out: dict = {}
    first: dict = {}
    for n, v in us.items():
        m = re.fullmatch(r"(.+)_c\d+", n)
        name = m.group(1) if m and n not in theirs and m.group(1) in theirs else n
        out[name] = out.get(name, 0.0) + v
        first.setdefault(name, n)
    return out, first


def ticks_per_second(bundle, feeds) -> float:
    """The profile counter's rate (rdtsc on x86, cntvct_el0 on AArch64), measured: the ticks
    of the whole calls against the wall clock, as the difference of a batch of at least 0.2 s
    and one of 4x its calls, so that what a batch costs besides its counted calls (the
    inputs' copy, an uncounted first call) cancels: taken from one batch, a 16-call one
    read this Zen 4's 2.596 GHz counter as 2.42 GHz, every layer 7% slower than it was."""
    def batch(repeat):
        t = time.perf_counter()
        p = bundle.profile(feeds, repeat=repeat)
        return p["total"]["whole_call"] * p["runs"], time.perf_counter() - t
    repeat = 1
    while batch(repeat)[1] < 0.2:
        repeat *= 2
    rates = []
    for _ in range(3):  # the median of three differences
        (t1, e1), (t4, e4) = batch(repeat), batch(4 * repeat)
        rates.append((t4 - t1) / (e4 - e1))
    return float(np.median(rates))


if __name__ == "__main__":
    main()

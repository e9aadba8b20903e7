"""Where a model's time goes, per op family, in the bundle and in onnxruntime: the profile
behind `python benchmarks/zoo_perf.py --profile`.

The two sides name their work differently: the bundle's instructions are glowpy's ops after
fusion (a Conv with its Relu and residual Add, FusedElementwise for a chain such as SiLU,
ConvWinograd), onnxruntime's nodes are its own after its graph optimizations (FusedConv,
QuickGelu for x * Sigmoid(x), ReorderInput/ReorderOutput around its NCHWc convolutions). Both
are mapped to the families below; each side's family times are its profile's shares of that
side's timed (uninstrumented) call, so the family times add up to the table's bundle and
onnxruntime times. The bundle's shares come from an -instrument-profile build run in process
(cycle counters around every instruction), onnxruntime's from its session profiler
(`enable_profiling`, one thread, the nodes' kernel times over several runs)."""
from __future__ import annotations

import collections
import json
import os

FAMILIES = {
    "convolution": {"Conv", "FusedConv", "ConvWinograd", "ConvPointwiseInPlace", "ConvTranspose",
                    "NhwcConv", "QConv", "QLinearConv", "ConvInteger", "Col2Im"},
    "matrix product": {"MatMul", "Gemm", "FusedMatMul", "FusedGemm", "Einsum", "QGemm",
                       "MatMulInteger", "QLinearMatMul", "BatchMatMul", "QMatMul"},
    "normalization": {"LayerNormalization", "SkipLayerNormalization", "BatchNormalization",
                      "InstanceNormalization", "SimplifiedLayerNormalization", "GroupNorm",
                      "LpNormalization", "MeanVarianceNormalization"},
    "softmax": {"Softmax", "LogSoftmax", "QSoftmax", "QLinearSoftmax"},
    "pooling and reductions": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                               "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                               "ReduceL2", "ReduceSumSquare", "ArgMax", "ArgMin", "QAvgPool",
                               "QMaxPool", "TopK"},
    "recurrent": {"LSTM", "GRU", "RNN", "RecurrentCell"},
    "attention": {"Attention", "MultiHeadAttention", "GroupQueryAttention"},
    "data movement": {"Transpose", "Concat", "Reshape", "Slice", "Gather", "Split", "Pad",
                      "ReorderInput", "ReorderOutput", "Copy", "Flatten", "Squeeze",
                      "Unsqueeze", "Expand", "Tile", "Resize", "Upsample", "DepthToSpace",
                      "SpaceToDepth", "Identity", "Cast", "Shape", "GatherElements",
                      "ScatterND", "ConstantOfShape", "Range", "Where"},
}
OTHER = "elementwise"  # everything else: arithmetic, activations, fused chains
FAMILY_OF = {op: fam for fam, ops in FAMILIES.items() for op in ops}


def family(op: str) -> str:
    return FAMILY_OF.get(op, OTHER)


def shares(times: dict) -> dict:
    """{family: (share of the total, sorted op names)} of {op: time}."""
    total = sum(times.values()) or 1.0
    out: dict = {}
    for op, t in times.items():
        s, ops = out.get(family(op), (0.0, []))
        out[family(op)] = (s + t / total, sorted(ops + [op]))
    return out


def bundle_times(path: str, feeds: dict, work: str, repeat: int = 5,
                 mcpu: str | None = None) -> dict:
    """{instruction op: cycles per inference} of an -instrument-profile build of `path`."""
    import glowpy
    from glowpy.runtime import Bundle
    out = os.path.join(work, "profiled")
    glowpy.compile(path, out, instrument_profile=True, mcpu=mcpu)
    return {op: o["cycles"] for op, o in Bundle(out).profile(feeds, repeat)["ops"].items()}


def ort_session(path: str, work: str):
    """An onnxruntime session on one thread with its profiler on, writing under `work`."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort_profile")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_kernel_events(sess) -> list[tuple[str, str, float]]:
    """(node name, op type, microseconds) of every node run the session's profiler saw, in
    order; the profile ends here (its file is removed)."""
    trace = sess.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    os.remove(trace)
    return [(e["name"][:-len("_kernel_time")], e["args"].get("op_name", ""), e["dur"])
            for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]


def ort_times(path: str, feeds: dict, work: str, runs: int = 6) -> dict:
    """{onnxruntime node op type: microseconds per run} from its session profiler."""
    sess = ort_session(path, work)
    for _ in range(runs + 1):  # the first run warms up and is counted out below
        sess.run(None, feeds)
    per_op: dict = collections.defaultdict(list)
    for _, op, dur in ort_kernel_events(sess):
        per_op[op].append(dur)
    # each node reports once a run: drop every op's first 1/(runs+1) events (the warm-up)
    return {op: sum(d[len(d) // (runs + 1):]) / runs for op, d in per_op.items()}


def profile(path: str, feeds: dict, work: str, bundle_ms: float, ort_ms: float,
            mcpu: str | None = None) -> dict:
    """{family: {"bundle_ms", "ort_ms", "bundle_ops", "ort_ops"}}: the timed calls split by
    each side's profile shares (the bundle built for `mcpu`, as timed)."""
    b, o = shares(bundle_times(path, feeds, work, mcpu=mcpu)), shares(ort_times(path, feeds, work))
    return {fam: {"bundle_ms": b.get(fam, (0.0, []))[0] * bundle_ms,
                  "ort_ms": o.get(fam, (0.0, []))[0] * ort_ms,
                  "bundle_ops": b.get(fam, (0, []))[1], "ort_ops": o.get(fam, (0, []))[1]}
            for fam in sorted(set(b) | set(o))}


def table(rows: list[dict]) -> str:
    """Per family over every profiled model: the summed times, their ratio, the family's share
    of all bundle time, and the models where it loses most against onnxruntime."""
    fams: dict = {}
    for r in rows:
        for fam, f in r.get("families", {}).items():
            a = fams.setdefault(fam, {"b": 0.0, "o": 0.0, "worst": []})
            a["b"] += f["bundle_ms"]
            a["o"] += f["ort_ms"]
            if f["ort_ms"] > 0:
                a["worst"].append((f["bundle_ms"] - f["ort_ms"], r["model"],
                                   f["bundle_ms"] / f["ort_ms"]))
    total = sum(a["b"] for a in fams.values()) or 1.0
    out = ("| op family | bundle ms | onnxruntime ms | ratio | share of bundle time | "
           "most time lost (ms, ratio) |\n|---|--:|--:|--:|--:|---|\n")
    for fam, a in sorted(fams.items(), key=lambda kv: -kv[1]["b"]):
        worst = ", ".join(f"{m} (+{d:.2f}, {q:.2f})" for d, m, q in
                          sorted(a["worst"], reverse=True)[:3] if d > 0)
        ratio = f"{a['b'] / a['o']:.2f}" if a["o"] else "-"
        out += (f"| {fam} | {a['b']:.3f} | {a['o']:.3f} | {ratio} | {100 * a['b'] / total:.1f}% "
                f"| {worst} |\n")
    return out

#!/usr/bin/env python3
"""Bundle speed against XNNPACK (LiteRT's CPU delegate, one thread) and onnxruntime (one
thread) in one run on this machine.

    bash benchmarks/xnnpack_setup.sh              # once: the converter venv and LiteRT
    python benchmarks/xnnpack.py                  # perf.py's models; rewrites its table
    python benchmarks/xnnpack.py --models resnet18,mnist8 --no-docs
    python benchmarks/xnnpack.py --zoo --no-docs  # and every zoo model onnx2tf converts
    python benchmarks/xnnpack.py --mcpu znver3 --ort-avx2 --xnnpack-avx2
                                  # all three on AVX2 code; rewrites the AVX2 table

XNNPACK is the ceiling users cite for float CPU inference on mobile and edge, and it has no
ONNX front end: each model is converted to a float32 .tflite by onnx2tf (NCHW -> NHWC, its own
optimizations), in a virtual environment of its own (`build/xnnpack-venv`, made by
xnnpack_setup.sh: onnx2tf pins TensorFlow, numpy 1.26 and its other dependencies exactly, which
would not sit beside glowpy's test pins). LiteRT (`ai-edge-litert` 2.3.0, installed into
glowpy's venv by the same script) runs it with `num_threads=1`; its default op resolver hands
every float op XNNPACK supports to the XNNPACK delegate, and the run checks that it did (a
DELEGATE node in the interpreter's plan).

For each model the bundle (benchmarks/perf.py's C harness), onnxruntime (perf.OrtTimer) and
XNNPACK (`invoke()` on tensors set once: like onnxruntime's, its time includes one Python call,
about 1 us) alternate for several rounds and the best batch of each counts, on the calling
thread's CPU time by default. XNNPACK's outputs, laid back in ONNX's layout, must agree with
onnxruntime's to the tolerance benchmarks/perf.py uses, and so must the bundle's; a model that
onnx2tf cannot convert is listed with the converter's reason.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import perf  # noqa: E402  (puts the checkout and tests/ on the path)
import glowpy  # noqa: E402

BEGIN, END = "<!-- xnnpack benchmark: begin -->", "<!-- xnnpack benchmark: end -->"
AVX2_BEGIN = "<!-- xnnpack avx2 benchmark: begin -->"
AVX2_END = "<!-- xnnpack avx2 benchmark: end -->"
VENV = os.path.join(perf.ROOT, "build", "xnnpack-venv")
CACHE = os.path.join(perf.ROOT, "build", "xnnpack")
# onnx2tf's dummy inference of a 3-channel image input reads this file from its working
# directory, and downloads it when it is missing (no network here): random pixels in [0, 1)
# serve the same purpose, a shape check of every layer.
SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"


class ConvertError(Exception):
    pass


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node whose inputs are all initializers evaluated into one (onnx's
    reference evaluator). onnx2tf cannot return a constant from a Keras layer: mnist8 reshapes
    its weights with Reshape nodes, and fails there without this."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator
    g = model.graph
    const = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    graph_inputs = {i.name for i in g.input} - set(const)
    keep = []
    for n in g.node:
        ins = [i for i in n.input if i]
        if n.op_type != "Constant" and (not ins or any(i not in const or i in graph_inputs for i in ins)):
            keep.append(n)
            continue
        sub = onnx.helper.make_model(
            onnx.helper.make_graph([n], "fold", [], [onnx.helper.make_tensor_value_info(o, 0, None)
                                                     for o in n.output]),
            opset_imports=model.opset_import)
        try:
            vals = ReferenceEvaluator(sub).run(None, {i: const[i] for i in ins})
        except Exception:  # an op the evaluator lacks stays a node
            keep.append(n)
            continue
        for o, v in zip(n.output, vals):
            const[o] = np.asarray(v)
            g.initializer.append(numpy_helper.from_array(np.asarray(v), o))
    del g.node[:]
    g.node.extend(keep)
    used = {i for n in keep for i in n.input} | {o.name for o in g.output}
    live = [i for i in g.initializer if i.name in used]
    dropped = {i.name for i in g.initializer} - {i.name for i in live}
    del g.initializer[:]
    g.initializer.extend(live)
    # IR 3 lists every initializer as a graph input too (mnist8 as shipped since 2026-11-28):
    # the dropped ones leave the inputs, the folded ones join them
    inputs = [i for i in g.input if i.name not in dropped]
    if model.ir_version < 4:
        listed = {i.name for i in inputs}
        inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in live if t.name not in listed]
    del g.input[:]
    g.input.extend(inputs)
    return model


def ranks_of(model: onnx.ModelProto, feeds: dict) -> dict[str, int]:
    """The rank of every tensor the model computes, from a run of onnxruntime on `feeds` with
    every node output exposed (ONNX's shape inference leaves mnist8's Conv outputs rankless)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=o) for n in m.graph.node for o in n.output
                          if o and o not in have)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return {k: np.ndim(v) for k, v in zip(names, sess.run(None, feeds))} | \
        {k: np.ndim(v) for k, v in feeds.items()}


def explicit_ranks(model: onnx.ModelProto, rank: dict[str, int]) -> onnx.ModelProto:
    """The model with the constant operands of Add, Sub, Mul and Div given the other operand's
    rank by leading 1s (the same broadcast). onnx2tf lays a rank-3 bias (C, 1, 1) beside an
    NHWC tensor as it stands, and mnist8's Add of (8, 1, 1) to (1, 8, 28, 28) fails there."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    uses = {}
    for n in g.node:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    for n in g.node:
        if n.op_type not in ("Add", "Sub", "Mul", "Div") or len(n.input) != 2:
            continue
        for c, other in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
            t = inits.get(c)
            if t is not None and uses[c] == 1 and 0 < len(t.dims) < rank.get(other, 0):
                t.dims[:0] = [1] * (rank[other] - len(t.dims))
                for i in g.input:  # IR 3 also declares it as an input (fold_constants)
                    if i.name == c:
                        i.CopyFrom(onnx.helper.make_tensor_value_info(c, t.data_type, list(t.dims)))
    return model


def convert(name: str, path: str, feeds: dict) -> str:
    """The float32 .tflite of the ONNX model at `path` (cached in build/xnnpack by the model's
    hash), converted by onnx2tf in build/xnnpack-venv."""
    exe = os.path.join(VENV, "bin", "onnx2tf")
    if not os.path.exists(exe):
        sys.exit(f"xnnpack.py: {exe} is missing: run `bash benchmarks/xnnpack_setup.sh` first")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    out = os.path.join(CACHE, f"{name.replace(':', '_')}-{digest}")
    tfl = os.path.join(out, "model_float32.tflite")
    if os.path.exists(tfl):
        return tfl
    with tempfile.TemporaryDirectory(prefix="glowpy-onnx2tf-") as tmp:
        folded = os.path.join(tmp, "model.onnx")
        model = fold_constants(onnx.load(path))
        onnx.save(explicit_ranks(model, ranks_of(model, feeds)), folded)
        np.save(os.path.join(tmp, SAMPLE),
                np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))
        # onnx2tf runs onnxsim, from its venv's bin, as a command
        env = os.environ | {"PATH": os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", "")}
        r = subprocess.run([exe, "-i", folded, "-o", os.path.join(tmp, "tf"), "-n"], cwd=tmp,
                           env=env, capture_output=True, text=True)
        made = os.path.join(tmp, "tf", "model_float32.tflite")
        if r.returncode or not os.path.exists(made):
            lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "Error" in ln or "error" in ln]
            raise ConvertError((lines[-1] if lines else f"onnx2tf exited {r.returncode}")[:160])
        os.makedirs(out, exist_ok=True)
        shutil.copy(made, tfl)
    return tfl


def layouts(rank: int):
    """Axis orders to try between ONNX's layout and onnx2tf's, most likely first: the same,
    channels last (N, spatial..., C), then the others."""
    first = [tuple(range(rank))]
    if rank >= 3:
        first.append((0, *range(2, rank), 1))
    return first + [p for p in itertools.permutations(range(rank)) if p not in first]


def _key(s: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "_", s)


class XnnTimer:
    """A LiteRT interpreter on one thread with XNNPACK, inputs set once from ONNX-layout feeds;
    `outputs` in ONNX's layout (ORT's outputs choose the axis order where shapes allow two)."""

    def __init__(self, tflite: str, feeds: dict, ort_outputs: list, ort_names: list[str]):
        from ai_edge_litert.interpreter import Interpreter
        self.it = Interpreter(model_path=tflite, num_threads=1)
        self.it.allocate_tensors()
        # the default resolver applied XNNPACK where its node is in the plan (its "Created ...
        # delegate" line is logged once a process, so it proves nothing for a second model)
        if not any(d["op_name"] == "DELEGATE" for d in self.it._get_ops_details()):
            raise ConvertError("LiteRT did not apply its XNNPACK delegate")
        # the signature's names are ONNX's (onnx2tf keeps them); a SignatureRunner would hold
        # views of the tensors and forbid invoke(), so the indices come from the list
        sig = next(iter(self.it._get_full_signature_list().values()))
        details = {d["index"]: d for d in self.it.get_tensor_details()}
        ins = {k: details[i] for k, i in sig["inputs"].items()}
        outs = {k: details[i] for k, i in sig["outputs"].items()}
        by_key = {_key(k): v for k, v in ins.items()}
        for i, (k, x) in enumerate(feeds.items()):
            d = by_key.get(_key(k)) or (list(ins.values())[i] if len(ins) == len(feeds) else None)
            if d is None:
                raise ConvertError(f"no LiteRT input for ONNX input {k!r}")
            want = tuple(int(s) for s in d["shape"])
            perm = next((p for p in layouts(x.ndim) if x.transpose(p).shape == want), None)
            if perm is None:
                raise ConvertError(f"input {k!r}: {x.shape} has no layout of LiteRT's {want}")
            self.it.set_tensor(d["index"], np.ascontiguousarray(x.transpose(perm)))
        self.it.invoke()
        by_key = {_key(k): v for k, v in outs.items()}
        self.outputs = []
        for i, (n, ref) in enumerate(zip(ort_names, ort_outputs)):
            d = by_key.get(_key(n)) or (list(outs.values())[i] if len(outs) == len(ort_names) else None)
            if d is None:
                raise ConvertError(f"no LiteRT output for ONNX output {n!r}")
            y = self.it.get_tensor(d["index"])
            cands = [y.transpose(np.argsort(p)) for p in layouts(y.ndim)
                     if y.transpose(np.argsort(p)).shape == ref.shape]
            if not cands:
                raise ConvertError(f"output {n!r}: LiteRT's {y.shape} is no layout of {ref.shape}")
            self.outputs.append(min(cands, key=lambda c: float(np.max(np.abs(c - ref)))))

    def run(self, seconds: float, batches: int, clock: str = "wall") -> float:
        return perf.best_per_call(self.it.invoke, seconds, batches, clock)


def measure(name: str, path: str, feeds: dict, work: str, a) -> dict:
    """One row: the three times, their ratios and whether the outputs agree."""
    row = {"model": name}
    try:
        tfl = convert(name, path, feeds)
    except ConvertError as e:
        return row | {"error": f"onnx2tf: {e}"}
    d = os.path.join(work, name.replace(":", "_"))
    info = glowpy.compile(path, d, mcpu=a.mcpu)
    h = perf.Harness(d, info, d)
    ort = perf.OrtTimer(path, feeds)
    try:
        xnn = XnnTimer(tfl, feeds, ort.outputs, [o.name for o in ort.sess.get_outputs()])
    except ConvertError as e:
        return row | {"error": str(e)}
    by_name = {p["name"]: x for p, x in zip(info.inputs, feeds.values())}
    bt = ot = xt = float("inf")
    outs = None
    for _ in range(a.rounds):
        t, outs = h.run(by_name, a.seconds, a.batches, a.clock)
        bt = min(bt, t)
        ot = min(ot, ort.run(a.seconds, a.batches, a.clock))
        xt = min(xt, xnn.run(a.seconds, a.batches, a.clock))
    ok = lambda got: all(perf.close(g, r, False) is not None for g, r in zip(got, ort.outputs))  # noqa: E731
    flops = 2 * perf.model_macs(path)
    return row | {"bundle_ms": bt, "ort_ms": ot, "xnnpack_ms": xt, "vs_xnnpack": bt / xt,
                  "vs_ort": bt / ot, "xnnpack_vs_ort": xt / ot, "gflops": flops / (bt * 1e-3) / 1e9,
                  "xnnpack_gflops": flops / (xt * 1e-3) / 1e9, "bundle_agrees": ok(outs),
                  "xnnpack_agrees": ok(xnn.outputs)}


def table(rows: list[dict]) -> str:
    out = ("| model | bundle ms | XNNPACK ms | onnxruntime ms | bundle / XNNPACK | "
           "bundle / onnxruntime | XNNPACK / onnxruntime | GFLOP/s: bundle (XNNPACK) | outputs |\n"
           "|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
    for r in rows:
        if "error" in r:
            out += f"| {r['model']} | | | | | | | | not measured: {r['error']} |\n"
            continue
        ok = ("agree" if r["bundle_agrees"] and r["xnnpack_agrees"] else
              f"**bundle {'agrees' if r['bundle_agrees'] else 'differs'}, XNNPACK "
              f"{'agrees' if r['xnnpack_agrees'] else 'differs'}**")
        out += (f"| {r['model']} | {r['bundle_ms']:.4g} | {r['xnnpack_ms']:.4g} | {r['ort_ms']:.4g} | "
                f"{r['vs_xnnpack']:.2f} | {r['vs_ort']:.2f} | {r['xnnpack_vs_ort']:.2f} | "
                f"{r['gflops']:.1f} ({r['xnnpack_gflops']:.1f}) | {ok} |\n")
    return out


def summary(rows: list[dict]) -> str:
    done = [r for r in rows if "error" not in r]
    if not done:
        return f"No model measured: onnx2tf or LiteRT failed on all {len(rows)}."
    slower = [r["model"] for r in done if r["vs_xnnpack"] > 1.0]
    return (f"Over {len(done)} models: geometric mean bundle / XNNPACK "
            f"{perf.geomean(r['vs_xnnpack'] for r in done):.3f}, bundle / onnxruntime "
            f"{perf.geomean(r['vs_ort'] for r in done):.3f}, XNNPACK / onnxruntime "
            f"{perf.geomean(r['xnnpack_vs_ort'] for r in done):.3f}; {len(slower)} slower than "
            "XNNPACK" + (f" ({', '.join(slower)})" if slower else "")
            + (f"; {len(rows) - len(done)} not converted" if len(rows) > len(done) else "") + ".")


def main(argv=None) -> int:
    ap = perf.arguments(__doc__, "do not rewrite the XNNPACK table in docs/performance.md "
                        "(only rewritten when every model is measured)")
    ap.add_argument("--zoo", action="store_true", help="also measure the zoo's models "
                    "(benchmarks/zoo, their perf sizes)")
    ap.add_argument("--xnnpack-avx2", action="store_true", help="time XNNPACK with its AVX-512 "
                    "kernels off, as on an AVX2 machine (cpuinfo's flags cleared in LiteRT before "
                    "XNNPACK reads them, benchmarks/litert_avx2.py); with --mcpu znver3 "
                    "--ort-avx2 all three run AVX2 code, and the AVX2 table in the docs is "
                    "rewritten instead of the host's")
    a = ap.parse_args(argv)
    if a.profile:
        ap.error("--profile is benchmarks/perf.py's and zoo_perf.py's")
    if a.xnnpack_avx2:
        import litert_avx2
        print(f"XNNPACK without AVX-512 kernels: {litert_avx2.use()}", file=sys.stderr)
    models = {n: os.path.join(perf.SHARED_MODELS, n + ".onnx") for n in perf.shared_models()}
    models.update(perf.build_models.build())
    zoo = {}
    if a.zoo:
        from zoo import ZOO
        zoo = {"zoo:" + n: b for n, b in ZOO.items()}
        models |= {n: None for n in zoo}

    def one(name: str, work: str) -> dict:
        path = models[name]
        if path is None:
            model, feeds = zoo[name](perf=True)
            path = os.path.join(work, name.replace(":", "_") + ".onnx")
            onnx.save(model, path)
        else:
            feeds, _ = perf.inputs_for(name, path)
        return measure(name, path, feeds, work, a)

    rows, _, said = perf.measure_all(ap, a, models, one, "xnnpack.py"
                                     + (" --xnnpack-avx2" if a.xnnpack_avx2 else ""))
    import ai_edge_litert
    text = (said.replace("bundle and onnxruntime alternating",
                         f"bundle, onnxruntime and XNNPACK (LiteRT {ai_edge_litert.__version__}, "
                         "num_threads=1, models converted by onnx2tf 1.29.24"
                         + ("; XNNPACK with its AVX-512 kernels off (benchmarks/litert_avx2.py: "
                            "its AVX2/FMA3 kernels, as on an AVX2 machine)" if a.xnnpack_avx2
                            else "") + ") alternating")
            + ". " + summary(rows) + "\n\n" + table(rows))
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    avx2 = (a.ort_avx2 and a.xnnpack_avx2 and a.mcpu
            and perf.target_simd(a.mcpu) == (32, 16))
    if not (a.no_docs or a.models or a.zoo or a.mcpu or a.ort_avx2 or a.xnnpack_avx2):
        perf.write_between(perf.DOC, text, BEGIN, END)
    elif not (a.no_docs or a.models or a.zoo) and avx2:
        # all three on AVX2 code: the figures for XNNPACK, on whatever machine ran it
        perf.write_between(perf.DOC, text, AVX2_BEGIN, AVX2_END)
    elif not a.no_docs and not a.models and not a.zoo:
        print("xnnpack.py: docs/performance.md is only rewritten for the host's CPU with both "
              "peers as installed, or for an AVX2 CPU (--mcpu znver3) with --ort-avx2 and "
              "--xnnpack-avx2", file=sys.stderr)
    measured = [r for r in rows if "error" not in r]
    return 0 if all(r["bundle_agrees"] and r["xnnpack_agrees"] for r in measured) else 1


if __name__ == "__main__":
    sys.exit(main())

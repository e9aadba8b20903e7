#!/usr/bin/env python3
"""The architecture zoo (benchmarks/zoo) at realistic sizes: bundle speed against onnxruntime
(one thread) on this machine.

    python benchmarks/zoo_perf.py                      # every zoo model; rewrites its table
                                                       # in docs/performance.md
    python benchmarks/zoo_perf.py --models resnet18,bert_tiny --no-docs
    python benchmarks/zoo_perf.py --profile            # and the time per op family, both sides
    python benchmarks/zoo_perf.py --shared --no-docs   # and perf.py's models, in one run
    python benchmarks/zoo_perf.py --models resnet50_int8,mobilenet_v2_int8 --no-docs
                                                       # int8 QDQ CNNs (zoo/quantized.py)
    python benchmarks/zoo_perf.py --models resnet18_fp16,vit_tiny_fp16io32 --no-docs
                                                       # float16 models (zoo/half.py)
    python benchmarks/zoo_perf.py --mcpu znver3        # AVX2 code (a Zen 3's) on this host
    python benchmarks/zoo_perf.py --mcpu znver3 --ort-avx2   # and onnxruntime's AVX2 kernels:
                                                       # rewrites the AVX2 zoo table

Each model is built with its `perf=True` size (ImageNet classifiers at 224x224 with their
real widths, BERT-mini/GPT at 128 tokens, ... see each builder's docstring), saved into the
work directory, compiled for the host CPU and measured the way benchmarks/perf.py measures
(its harness and onnxruntime timer: a C timing harness linked with the bundle's object,
onnxruntime with intra_op_num_threads=1, default graph optimizations and IOBinding; the
best batch of back-to-back calls, the two sides alternating for several rounds, the calling
thread's CPU time). The outputs are checked against onnxruntime's with the issue's model
tolerance (1e-3 * max|ref| + 1e-4); the int8 CNNs' (zoo/quantized.py) against the integer
ops' numpy references bit for bit, with their distance from onnxruntime's in output quanta;
the float16 ones' (zoo/half.py) within 4e-3 * max|ref|.
GFLOP/s count 2 per multiply-add of Conv, ConvTranspose, Gemm and MatMul (perf.model_macs,
from the shapes glowpy infers)."""
from __future__ import annotations

import json
import os
import sys
import time

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import op_families  # noqa: E402
import perf  # noqa: E402  (puts the checkout and tests/ on the path)
import glowpy  # noqa: E402
from zoo import ZOO, errors  # noqa: E402
from zoo.half import ZOO_FP16, errors as half_errors  # noqa: E402
from zoo.quantized import ZOO_INT8  # noqa: E402

BEGIN, END = "<!-- zoo benchmark: begin -->", "<!-- zoo benchmark: end -->"
AVX2_BEGIN, AVX2_END = "<!-- zoo avx2 benchmark: begin -->", "<!-- zoo avx2 benchmark: end -->"


def measure(name: str, work: str, rounds: int, seconds: float, batches: int, clock: str,
            profile: bool = False, mcpu: str | None = None) -> dict:
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    model, feeds = (ZOO.get(name) or ZOO_INT8.get(name) or ZOO_FP16[name])(perf=True)
    path = os.path.join(d, name + ".onnx")
    onnx.save(model, path)
    t0 = time.process_time()
    info = glowpy.compile(path, os.path.join(d, "bundle"), dump_memory_report=path + ".memory.json",
                          mcpu=mcpu)
    compile_s = time.process_time() - t0
    executed = perf.executed_macs(path + ".memory.json")
    h = perf.Harness(os.path.join(d, "bundle"), info, d)
    ort = perf.OrtTimer(path, feeds)
    bt = ot = float("inf")
    outs = None
    for _ in range(rounds):
        t, outs = h.run(feeds, seconds, batches, clock)
        bt = min(bt, t)
        ot = min(ot, ort.run(seconds, batches, clock))
    errs = (half_errors if name in ZOO_FP16 else errors)(outs, ort.outputs)
    checks = {"agrees": all(e <= t for e, t in errs), "max_error": max(e / t for e, t in errs)}
    if name in ZOO_INT8:
        checks = int8_checks(path, feeds, outs, ort.outputs)
    flops = 2 * perf.model_macs(path)
    fams = op_families.profile(path, feeds, d, bt, ot, mcpu) if profile else {}
    return {"model": name, "bundle_ms": bt, "ort_ms": ot, "ratio": bt / ot, "gflop": flops / 1e9,
            "gflops": flops / (bt * 1e-3) / 1e9, "ort_gflops": flops / (ot * 1e-3) / 1e9,
            "executed_gflops": None if executed is None else 2 * executed / (bt * 1e-3) / 1e9,
            "weights_mb": info.manifest["memory"]["constant"] / 1e6, "compile_s": compile_s,
            "inputs": ", ".join("x".join(map(str, v.shape)) for v in feeds.values()),
            **checks, **({"families": fams} if profile else {})}


def int8_checks(path: str, feeds: dict, outs: list, ort_outs: list) -> dict:
    """An int8 model's outputs against the integer ops' numpy references (bit for bit: the
    arbiter, as onnxruntime's AVX2 int8 kernels saturate 16-bit sums and its requantization
    rounds in float), and their distance from onnxruntime's in quanta of the output grid."""
    import numpy as np
    from glowpy.frontend.onnx import load_onnx
    from glowpy.ir.evaluate import evaluate
    from glowpy.ir.passes.pipeline import optimize
    refs = evaluate(optimize(load_onnx(path)), feeds)
    return {"agrees": all(np.array_equal(g, r) for g, r in zip(outs, refs)),
            "quanta_from_ort": perf.quanta(outs, ort_outs, grids=refs)}


def measure_shared(name: str, path: str, work: str, a) -> dict:
    """A model of benchmarks/perf.py (../shared/models, ResNet-18 and MobileNetV2 of
    build_models.py) measured by perf.measure, as a row of this table."""
    r = perf.measure(name.split(":")[1], path, work, a.rounds, a.seconds, a.batches, a.clock,
                     a.profile, a.mcpu)
    feeds, _ = perf.inputs_for(name.split(":")[1], path)
    return r | {"model": name, "gflop": r["gflops"] * r["bundle_ms"] * 1e-3,
                "weights_mb": r["weight_bytes"] / 1e6,
                "inputs": ", ".join("x".join(map(str, v.shape)) for v in feeds.values()),
                "agrees": r["agrees_with_ort"] and r.get("matches_reference", True),
                "max_error_abs": r["max_error_vs_ort"]}  # within perf.py's tolerance (tests/util.py)


def table(rows: list[dict], peak: float | None) -> str:
    """One row per model; `% of peak` is the bundle's GFLOP/s over the FMA peak measured in the
    same run, counting the model's multiply-adds (nominal) and the ones its kernels perform
    (executed: a Winograd layer does fewer)."""
    out = ("| model | input | GFLOP | weights MB | bundle ms | onnxruntime ms | ratio | "
           "GFLOP/s (onnxruntime) | % of peak: nominal, executed | compile s | "
           "outputs (max error / tolerance) |\n"
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
    for r in rows:
        ex = r.get("executed_gflops")
        pct = (f"{100 * r['gflops'] / peak:.0f}%, "
               + (f"{100 * ex / peak:.0f}%" if ex else "?")) if peak else "?"
        err = f"{r['max_error']:.2g}" if "max_error" in r else \
            ("perf.py's tolerance" if r.get("max_error_abs") is None else
             f"abs {r['max_error_abs']:.2g}, perf.py's tolerance")
        ok = "agree" if r["agrees"] else "**differ**"
        if "quanta_from_ort" in r:  # an int8 zoo model (int8_checks)
            ok = "match reference" if r["agrees"] else "**differ from reference**"
            err = f"{r['quanta_from_ort']:.0f} output quanta from onnxruntime"
        if not r.get("agrees_with_ort", True) and r.get("matches_reference"):
            ok = "**differ from onnxruntime**, match reference"  # (onnxruntime is off it)
        out += (f"| {r['model']} | {r['inputs']} | {r['gflop']:.3g} | {r['weights_mb']:.3g} | "
                f"{r['bundle_ms']:.4g} | {r['ort_ms']:.4g} | {r['ratio']:.2f} | "
                f"{r['gflops']:.1f} ({r['ort_gflops']:.1f}) | {pct} | {r['compile_s']:.1f} | "
                f"{ok} ({err}) |\n")
    return out


def main(argv=None) -> int:
    ap = perf.arguments(__doc__, "do not rewrite the zoo table in docs/performance.md (only "
                        "rewritten when every model is measured)")
    ap.set_defaults(batches=5)
    ap.add_argument("--shared", action="store_true", help="also measure benchmarks/perf.py's "
                    "models (../shared/models, ResNet-18, MobileNetV2) in the same run")
    a = ap.parse_args(argv)
    models = {n: None for n in list(ZOO) + list(ZOO_INT8) + list(ZOO_FP16)}
    if a.shared:
        models |= {"shared:" + n: p for n, p in (perf.shared_paths() | perf.build_models.build()).items()}
    rows, peak, said = perf.measure_all(ap, a, models, lambda n, work: measure(
        n, work, a.rounds, a.seconds, a.batches, a.clock, a.profile, a.mcpu) if models[n] is None
        else measure_shared(n, models[n], work, a), "zoo_perf.py")
    text = said + "; compile s: CPU seconds. " + perf.summary(rows) + "\n\n" + table(rows, peak)
    if a.profile:
        text += ("\nWhere the time goes, per op family over these models (each side's profile "
                 "shares of its timed call, benchmarks/op_families.py):\n\n"
                 + op_families.table(rows))
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    avx2 = a.ort_avx2 and a.mcpu and perf.target_simd(a.mcpu) == (32, 16)
    if not a.no_docs and not a.models and not a.mcpu and not a.ort_avx2:
        perf.write_between(perf.DOC, text, BEGIN, END)
    elif not a.no_docs and not a.models and avx2:
        # AVX2 code (16 ymm registers) against onnxruntime's AVX2 kernels: the AVX2
        # figures, on whatever machine ran it
        perf.write_between(perf.DOC, text, AVX2_BEGIN, AVX2_END)
    elif not a.no_docs:
        print("zoo_perf.py: docs/performance.md is only rewritten when every model is measured, "
              "for the host's CPU with onnxruntime as installed or for an AVX2 CPU (--mcpu "
              "znver3) with --ort-avx2", file=sys.stderr)
    return 0 if all(r["agrees"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

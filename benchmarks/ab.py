#!/usr/bin/env python3
"""Before/after: one model compiled by several compiler revisions or option sets, timed
alternately in one process against onnxruntime (one thread).

    python benchmarks/ab.py resnet18_int8 70eebef HEAD --mcpu znver3 --ort-avx2
    python benchmarks/ab.py ../shared/models/mnist8/model.onnx HEAD . --rounds 9
    python benchmarks/ab.py efficientnet_b0 "HEAD" "HEAD -winograd=false"

The model is a zoo name (built at its `perf=True` size, with its feeds) or an .onnx path (feeds
from --feeds, else NAME.npz beside the model, else random: standard normal floats, integers
in [0, 255) for uint8 and zeros for other integer inputs). Each variant is a git revision of
this checkout, or `.` for the working tree as it is, followed by model-compiler options; the
revision's source is exported once (git archive) into build/ab/<commit>/ and its compiler run
in a subprocess, so any two revisions compare without checking either out.

Why alternate: the machines these figures come from are shared VMs whose clock moves by 10%
within minutes (3.6-4.0 GHz over one session on the Zen 5 of docs/performance.md), more than
most changes gain. Timing A, then B, then onnxruntime, round after round, and keeping each
side's best batch (benchmarks/perf.py's C harness and onnxruntime timer, the calling thread's
CPU time) puts every side through the same clock. The table gives each variant's time, its
ratio to the first variant and to onnxruntime, its largest difference from the first
variant's outputs and its largest error from onnxruntime's: over the zoo's tolerance
(1e-3 * max|ref| + 1e-4: at most 1 agrees), or for outputs on a quantized grid (made by a
DequantizeLinear, or integers) in quanta of that grid (onnxruntime's AVX2 kernels saturate u8
x s8 pairs and requantize in float; the integer references are the arbiter there:
zoo_perf.int8_checks, tests/test_int8_*.py). A float output after the last DequantizeLinear
(a LogSoftmax) is held to the tolerance: its values have no grid."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import perf  # noqa: E402


def source_tree(rev: str) -> tuple[str, str]:
    """(directory holding the glowpy package of `rev`, the commit it names): the checkout
    itself for `.`, else an export of the commit, made once."""
    if rev == ".":
        return ROOT, "working tree"
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "-q", rev + "^{commit}"],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"ab.py: error: '{rev}' is not a commit of {ROOT}; give a revision or '.'")
    sha = r.stdout.strip()
    d = os.path.join(ROOT, "build", "ab", sha)
    if not os.path.isdir(os.path.join(d, "glowpy")):
        tmp = d + ".part"
        os.makedirs(tmp, exist_ok=True)
        archive = subprocess.run(["git", "-C", ROOT, "archive", sha, "glowpy"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        os.replace(tmp, d)
    return d, sha[:10]


def model_and_feeds(model: str, work: str, feeds_file: str | None) -> tuple[str, dict]:
    if not model.endswith(".onnx"):
        from zoo import ZOO
        from zoo.half import ZOO_FP16
        from zoo.quantized import ZOO_INT8
        build = ZOO.get(model) or ZOO_INT8.get(model) or ZOO_FP16.get(model)
        if build is None:
            sys.exit(f"ab.py: error: '{model}' is neither an .onnx file nor a zoo model")
        m, feeds = build(perf=True)
        path = os.path.join(work, model + ".onnx")
        onnx.save(m, path)
        return path, feeds
    if not os.path.isfile(model):
        sys.exit(f"ab.py: error: model '{model}' does not exist; give an .onnx file or a zoo "
                 "model's name")
    npz = feeds_file or model[:-5] + ".npz"
    if os.path.exists(npz):
        return model, dict(np.load(npz))
    import onnxruntime as ort
    rng = np.random.default_rng(0)
    feeds = {}
    for i in ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.type == "tensor(uint8)":
            feeds[i.name] = rng.integers(0, 255, shape).astype(np.uint8)
        elif "int" in i.type:
            feeds[i.name] = np.zeros(shape, np.int32 if "int32" in i.type else np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return model, feeds


# model-compiler of the glowpy under argv[1], which it checks it imported
COMPILE = ("import sys, glowpy; tree = sys.argv.pop(1)\n"
           "if not glowpy.__file__.startswith(tree):\n"
           "    sys.exit(f'imported {glowpy.__file__}, not the one in {tree}')\n"
           "from glowpy.cli import main; sys.argv[0] = 'model-compiler'; main()")


def compile_variant(spec: str, model: str, out: str, common: list[str]) -> tuple[SimpleNamespace, str, float]:
    """Compile `model` into `out` with the variant's revision and options; (what perf.Harness
    needs of the bundle, the variant's label, compile seconds)."""
    rev, *flags = shlex.split(spec)
    tree, label = source_tree(rev)
    env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", COMPILE, os.path.join(tree, "glowpy", ""),
           f"-model={os.path.abspath(model)}", f"-emit-bundle={os.path.abspath(out)}", *common,
           *flags]
    t0 = time.perf_counter()
    # run in the tree: `python -c` puts its working directory first on the path, before
    # PYTHONPATH (run from a checkout, every variant would import that checkout's glowpy)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if r.returncode:
        sys.exit(f"ab.py: error: variant '{spec}' did not compile: {r.stderr.strip()[-600:]}")
    from glowpy.bundle_info import find_bundle, load_manifest
    name = find_bundle(out, None)
    man = load_manifest(out, name)
    return (SimpleNamespace(name=name, entry=man["entry"], manifest=man),
            " ".join([label] + flags), time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a zoo model's name or an .onnx file")
    ap.add_argument("variants", nargs="+", help="'REV [model-compiler options]'; REV '.' is "
                    "the working tree")
    ap.add_argument("--rounds", type=int, default=7, help="alternations of every side")
    ap.add_argument("--seconds", type=float, default=0.1, help="length of one batch")
    ap.add_argument("--batches", type=int, default=3, help="batches per side per round")
    ap.add_argument("--mcpu", help="compile every variant for this LLVM CPU (-mcpu)")
    ap.add_argument("--mattr", help="and these target features (-mattr)")
    ap.add_argument("--ort-avx2", action="store_true", help="onnxruntime with its AVX-512 and "
                    "AVX-VNNI kernels off (benchmarks/ort_avx2.py)")
    ap.add_argument("--feeds", help="an .npz of the model's inputs")
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "ab", "work"),
                    help="where the model and bundles go")
    a = ap.parse_args(argv)
    if a.ort_avx2:
        import ort_avx2
        print(f"onnxruntime without AVX-512 kernels: {ort_avx2.use()}", file=sys.stderr)
    os.makedirs(a.work, exist_ok=True)
    path, feeds = model_and_feeds(a.model, a.work, a.feeds)
    common = ([f"-mcpu={a.mcpu}"] if a.mcpu else []) + ([f"-mattr={a.mattr}"] if a.mattr else [])
    sides = []
    for n, spec in enumerate(a.variants):
        d = os.path.join(a.work, f"variant{n}")
        shutil.rmtree(d, ignore_errors=True)
        info, label, secs = compile_variant(spec, path, os.path.join(d, "bundle"), common)
        sides.append((label, secs, perf.Harness(os.path.join(d, "bundle"), info, d)))
    ort = perf.OrtTimer(path, feeds)
    best = [float("inf")] * len(sides)
    best_ort = float("inf")
    outs = [None] * len(sides)
    for _ in range(a.rounds):
        for i, (_, _, h) in enumerate(sides):
            t, outs[i] = h.run(feeds, a.seconds, a.batches, "thread")
            best[i] = min(best[i], t)
        best_ort = min(best_ort, ort.run(a.seconds, a.batches, "thread"))
    from zoo import errors
    graph = onnx.load(path, load_external_data=False).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    # outputs on a quantized grid (dequantized or integer) compare in quanta, float ones (a
    # LogSoftmax after the last DequantizeLinear) against the tolerance
    on_grid = [producer.get(o.name) == "DequantizeLinear" or
               o.type.tensor_type.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
               for o in graph.output]
    print(f"{os.path.basename(path)}: best of {a.rounds} rounds, calling thread's CPU time"
          + (f", -mcpu={a.mcpu}" if a.mcpu else "") + (f" -mattr={a.mattr}" if a.mattr else "")
          + (", onnxruntime's AVX2 kernels" if a.ort_avx2 else ""))
    print("| variant | compile (s, wall) | ms | / first | / onnxruntime | max diff from first | "
          "from onnxruntime (/ tolerance or quanta) |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for i, (label, secs, _) in enumerate(sides):
        diff = max(float(np.max(np.abs(np.asarray(o, np.float64) - f), initial=0.0))
                   for o, f in zip(outs[i], outs[0]))
        grid = [(o, e) for o, e, g in zip(outs[i], ort.outputs, on_grid) if g]
        flt = [(o, e) for o, e, g in zip(outs[i], ort.outputs, on_grid) if not g]
        err = "; ".join(([f"{perf.quanta(*map(list, zip(*grid))):.3g} quanta"] if grid else []) +
                        ([f"{max(e / t for e, t in errors(*zip(*flt))):.3g}"] if flt else []))
        print(f"| {label} | {secs:.1f} | {best[i]:.4g} | {best[i] / best[0]:.3f} | "
              f"{best[i] / best_ort:.3f} | {diff:.3g} | {err} |")
    print(f"| onnxruntime | | {best_ort:.4g} | {best_ort / best[0]:.3f} | 1.000 | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Bundle speed against onnxruntime (one thread) on this machine.

    python benchmarks/perf.py                         # every model, rewrites docs/performance.md
    python benchmarks/perf.py --models mnist8,resnet18 --no-docs
    python benchmarks/perf.py --mcpu znver3           # AVX2 code (a Zen 3's) on this host
    python benchmarks/perf.py --mcpu znver3 --ort-avx2   # against onnxruntime's AVX2 kernels

Models: every model in ../shared/models with reference data (float, and int8 with quantization
nodes) plus ResNet-18 and MobileNetV2 from benchmarks/build_models.py (random
weights, BatchNormalization unfused, opset 13, built into build/benchmarks/ if missing).

For each model it
  1. compiles the bundle for the host CPU, or the CPU --mcpu names (the compile time is
     reported; with --mcpu the FMA peak is measured on that CPU's vectors and the docs'
     tables are not rewritten: another target's figures, measured on this host);
  2. links the bundle's object into a small C timing harness (-O2): one call for the outputs,
     then batches of back-to-back calls; the time is the best batch's time per call;
  3. times onnxruntime (CPUExecutionProvider, intra_op_num_threads=1, default graph
     optimizations, inputs and outputs bound once with IOBinding so the Python call overhead
     is as small as the API allows) the same way, on the same inputs, in the same run;
  4. checks that the outputs agree: bundle vs onnxruntime and, for the shared models, vs the
     reference outputs, with the project's model tolerance (tests/util.py);
  5. prints the table: bundle ms, onnxruntime ms, ratio bundle/onnxruntime, GFLOP/s (2 x the
     multiply-accumulates of Conv, ConvTranspose, Gemm and MatMul over the bundle time) and
     compile seconds.
Timings alternate between the bundle and onnxruntime for several rounds and keep the best of
each, so a burst of load from other processes hurts both sides alike and rarely the minimum.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_MODELS = os.path.join(os.path.dirname(ROOT), "shared", "models")
DOC = os.path.join(ROOT, "docs", "performance.md")
README = os.path.join(ROOT, "README.md")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import glowpy  # noqa: E402
from shared_models import shared_models, shared_paths  # noqa: E402,F401
import build_models  # noqa: E402
from glowpy.runtime import find_cc  # noqa: E402

BEGIN, END = "<!-- perf benchmark: begin -->", "<!-- perf benchmark: end -->"
# the targets: bundle / onnxruntime at most this
TARGET_RATIO = {"resnet18": 1.0, "mobilenetv2": 1.0, "mlperf_tiny_resnet8": 0.5,
                "mlperf_tiny_kws_dscnn": 0.5, "mlperf_tiny_vww_mobilenetv1_025": 0.5,
                "mlperf_tiny_ad_autoencoder": 0.5, "mnist8": 0.5}

HARNESS = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "%(header)s"

static uint8_t *region(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, n ? n : 1) != 0) exit(3);
  memset(p, 0, n ? n : 1);
  return (uint8_t *)p;
}
static void rd(const char *path, uint8_t *dst, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f || fread(dst, 1, n, f) != n) { fprintf(stderr, "cannot read %%s\n", path); exit(3); }
  fclose(f);
}
static clockid_t clock_id = CLOCK_MONOTONIC;
static double now(void) {
  struct timespec t;
  clock_gettime(clock_id, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
/* usage: harness WEIGHTS IN OUT SECONDS_PER_BATCH BATCHES [thread|wall]
   prints "best_ns calls_per_batch" */
int main(int argc, char **argv) {
  if (argc < 6) return 2;
  if (argc > 6 && strcmp(argv[6], "thread") == 0) clock_id = CLOCK_THREAD_CPUTIME_ID;
  double per_batch = atof(argv[4]) * 1e9;
  int batches = atoi(argv[5]);
  uint8_t *cw_ = region(%(upper)s_CONSTANT_MEM_SIZE), *mw_ = region(%(upper)s_MUTABLE_MEM_SIZE);
  uint8_t *act_ = region(%(upper)s_ACTIVATIONS_MEM_SIZE);
  rd(argv[1], cw_, %(upper)s_CONSTANT_MEM_SIZE);
  rd(argv[2], mw_, %(upper)s_MUTABLE_MEM_SIZE);
  if (%(entry)s(cw_, mw_, act_) != GLOW_SUCCESS) return 4;
  FILE *out_ = fopen(argv[3], "wb");  /* not `f`: a network named f is called below */
  if (!out_ || fwrite(mw_, 1, %(upper)s_MUTABLE_MEM_SIZE, out_) != (size_t)%(upper)s_MUTABLE_MEM_SIZE) return 3;
  fclose(out_);
  /* calibrate: calls per batch so that one batch takes about SECONDS_PER_BATCH */
  long n = 1;
  for (;;) {
    double t0 = now();
    for (long i = 0; i < n; i++) %(entry)s(cw_, mw_, act_);
    double dt = now() - t0;
    if (dt > per_batch / 4 || n > (1L << 30)) { n = (long)(n * per_batch / (dt > 1 ? dt : 1)) + 1; break; }
    n *= 2;
  }
  double best = 1e300;
  for (int b = 0; b < batches; b++) {
    double t0 = now();
    for (long i = 0; i < n; i++) %(entry)s(cw_, mw_, act_);
    double dt = (now() - t0) / n;
    if (dt < best) best = dt;
  }
  printf("%%.1f %%ld\n", best, n);
  free(cw_); free(mw_); free(act_);
  return 0;
}
"""




def model_macs(path: str) -> int:
    """Multiply-accumulates of the matrix ops (Conv, ConvTranspose, Gemm, MatMul), from the
    graph glowpy loads (static shapes)."""
    from glowpy.compiler import Options, load_graph
    g = load_graph([path], Options())
    macs = 0
    for n in g.nodes:
        if n.op in ("Conv", "ConvTranspose"):
            w, y = n.inputs[1], n.outputs[0]
            # every output element of Conv sums C/group * kernel taps products; ConvTranspose
            # scatters every input element into M/group * kernel taps outputs
            per = int(np.prod(w.shape[1:]))
            count = y.size if n.op == "Conv" else n.inputs[0].size
            macs += count * per
        elif n.op == "Gemm":
            m, k, nn = n.opdef.dims(n)
            macs += m * k * nn
        elif n.op == "MatMul":
            batch, m, k, nn = n.opdef.shapes(n)
            macs += int(np.prod(batch or (1,))) * m * k * nn
    return macs


def inputs_for(name: str, path: str):
    """(feeds {onnx input name: array}, reference outputs or None)."""
    from util import reference_data
    if os.path.dirname(path) == SHARED_MODELS:
        ins, outs = reference_data(name)
        m = onnx.load(path, load_external_data=False)
        init = {i.name for i in m.graph.initializer}
        names = [i.name for i in m.graph.input if i.name not in init]
        return dict(zip(names, ins)), outs
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}, None


class Harness:
    def __init__(self, bundle_dir: str, info, work: str):
        from glowpy.codegen.names import legalize
        self.info = info
        self.dir = bundle_dir
        src = HARNESS % {"header": os.path.join(bundle_dir, info.name + ".h"),
                         "upper": legalize(info.name).upper(), "entry": info.entry}
        c = os.path.join(work, "perf_harness.c")
        with open(c, "w") as f:
            f.write(src)
        self.exe = os.path.join(work, "perf_harness")
        subprocess.run([find_cc(), "-O2", "-std=c11", "-Wall", "-Werror", c,
                        os.path.join(bundle_dir, info.name + ".o"), "-o", self.exe], check=True)
        self.work = work

    def run(self, feeds: dict, seconds: float, batches: int, clock: str = "wall"):
        from glowpy.runtime import Bundle
        man = self.info.manifest
        img = Bundle.mutable_image(type("B", (), {"manifest": man})(), feeds)
        i, o = os.path.join(self.work, "in.bin"), os.path.join(self.work, "out.bin")
        with open(i, "wb") as f:
            f.write(img)
        w = os.path.join(self.dir, self.info.name + ".weights.bin")
        r = subprocess.run([self.exe, w, i, o, str(seconds), str(batches), clock], capture_output=True,
                           text=True, check=True)
        best_ns = float(r.stdout.split()[0])
        with open(o, "rb") as f:
            raw = f.read()
        outs = [np.frombuffer(raw[p["offset"]:p["offset"] + p["bytes"]], dtype=p["dtype"])
                .reshape(p["shape"]).copy() for p in man["outputs"]]
        return best_ns / 1e6, outs


class OrtTimer:
    def __init__(self, path: str, feeds: dict):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3  # no warnings about initializers listed as graph inputs
        self.sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.outputs = self.sess.run(None, feeds)
        self.binding = self.sess.io_binding()
        for k, v in feeds.items():
            self.binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)))
        for o in self.sess.get_outputs():
            self.binding.bind_output(o.name, "cpu")

    def run(self, seconds: float, batches: int, clock: str = "wall") -> float:
        run, b = self.sess.run_with_iobinding, self.binding
        return best_per_call(lambda: run(b), seconds, batches, clock)


def quanta(outs: list, others: list, grids: list | None = None) -> float:
    """The largest distance of a quantized model's (dequantized) `outs` from `others` in steps
    of the output grid: the smallest nonzero spacing of `grids` (default: `outs`) values."""
    worst = 0.0
    for o, e, g in zip(outs, others, grids or outs):
        spacing = np.diff(np.unique(np.asarray(g, np.float64)))
        step = spacing.min() if spacing.size else 1.0
        worst = max(worst, float(np.abs(np.asarray(o, np.float64) - e).max() / step))
    return worst


def best_per_call(call, seconds: float, batches: int, clock: str = "wall") -> float:
    """Milliseconds per call of `call()` in the best of `batches` batches of back-to-back
    calls, each batch about `seconds` long (the peers' timer: onnxruntime, XNNPACK)."""
    now = time.thread_time if clock == "thread" else time.perf_counter
    n = 1
    while True:
        t0 = now()
        for _ in range(n):
            call()
        dt = now() - t0
        if dt > seconds / 4:
            n = int(n * seconds / dt) + 1
            break
        n *= 2
    best = float("inf")
    for _ in range(batches):
        t0 = now()
        for _ in range(n):
            call()
        best = min(best, (now() - t0) / n)
    return best * 1e3


def close(got, ref, tflite: bool) -> float | None:
    """The error of got against ref within the project's model tolerance, else None; integer
    outputs (int8 models) in LSB, within 1 (onnxruntime rounds its requantization in float)."""
    from util import assert_close_to_reference
    if np.asarray(got).dtype.kind in "iu":
        d = int(np.abs(np.asarray(got, np.int64) - np.asarray(ref, np.int64).reshape(np.shape(got))).max())
        return float(d) if d <= 1 else None
    try:
        return assert_close_to_reference(np.asarray(got), np.asarray(ref), tflite)
    except AssertionError:
        return None


def measure(name: str, path: str, work: str, rounds: int, seconds: float, batches: int,
            clock: str, profile: bool = False, mcpu: str | None = None) -> dict:
    from util import is_tflite_reference
    d = os.path.join(work, name)
    t0 = time.perf_counter()
    info = glowpy.compile(path, d, dump_memory_report=d + ".memory.json", mcpu=mcpu)
    compile_s = time.perf_counter() - t0
    executed = executed_macs(d + ".memory.json")
    feeds, refs = inputs_for(name, path)
    h = Harness(d, info, d)
    ort_t = OrtTimer(path, feeds)
    by_name = {p["name"]: x for p, x in zip(info.inputs, feeds.values())}
    bt, ot = float("inf"), float("inf")
    outs = None
    for _ in range(rounds):
        t, outs = h.run(by_name, seconds, batches, clock)
        bt = min(bt, t)
        ot = min(ot, ort_t.run(seconds, batches, clock))
    errs = [close(g, r, False) for g, r in zip(outs, ort_t.outputs)]
    flops = 2 * model_macs(path)
    weights = info.manifest["memory"]["constant"]
    row = {"model": name, "bundle_ms": bt, "ort_ms": ot, "ratio": bt / ot,
           "weight_bytes": weights, "read_gbs": read_bandwidth(work, weights),
           "gflops": flops / (bt * 1e-3) / 1e9, "ort_gflops": flops / (ot * 1e-3) / 1e9,
           "executed_gflops": None if executed is None else 2 * executed / (bt * 1e-3) / 1e9,
           "compile_s": compile_s,
           "agrees_with_ort": all(e is not None for e in errs),
           "max_error_vs_ort": max((e for e in errs if e is not None), default=None)}
    if refs is not None:
        tfl = is_tflite_reference(name)
        # an integer output is held to a reference onnxruntime itself meets (a TFLite int8
        # reference may round otherwise: resnet8's first set is 19 LSB from onnxruntime's)
        rerrs = [close(g, r, tfl) if np.asarray(g).dtype.kind == "f" or close(o, r, tfl) is not None
                 else 0.0 for g, r, o in zip(outs, refs, ort_t.outputs)]
        row["matches_reference"] = all(e is not None for e in rerrs)
    if profile:
        import op_families
        row["families"] = op_families.profile(path, feeds, d, bt, ot, mcpu)
    return row


def executed_macs(report_path: str) -> int | None:
    """Multiply-adds the bundle's kernels perform (-dump-memory-report's per-instruction
    "executed_macs": a Winograd layer's transformed products, else the op's own), or None for a
    report without them."""
    with open(report_path) as f:
        rows = json.load(f)["instructions"]
    return sum(r["executed_macs"] for r in rows) if rows and "executed_macs" in rows[0] else None


def geomean(values) -> float:
    values = list(values)
    return float(np.exp(np.mean(np.log(values))))


def summary(rows: list[dict]) -> str:
    """The sentence on the ratios of a run: geometric mean, median, the models slower than
    onnxruntime."""
    ratios = sorted(r["ratio"] for r in rows)
    slower = [r["model"] for r in rows if r["ratio"] > 1.0]
    return (f"Over {len(rows)} models: geometric mean ratio {geomean(ratios):.3f}, median "
            f"{ratios[len(ratios) // 2]:.2f}, {len(slower)} slower than onnxruntime"
            + (f" ({', '.join(slower)})" if slower else "") + ".")


# Both probes are written for one vector of VB bytes (the host's widest float vector, `host_simd`)
# and CH independent chains that fit its register file: a 64-byte vector type on an AVX2 host is
# split into two ymm halves, its 24 chains need 48 registers of 16 and spill to the stack (the
# probe then measured 13-17 GB/s on a Zen 3, not the machine's bandwidth).
PROBE_HEAD = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define L (VB / 4)
typedef float vf __attribute__((vector_size(VB)));
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
"""

PEAK_C = PROBE_HEAD + r"""
int main(void) {
  vf a[CH], x, y;
  for (int l = 0; l < L; l++) { x[l] = 1.0001f; y[l] = 0.9999f; }
  for (int i = 0; i < CH; i++) for (int l = 0; l < L; l++) a[i][l] = (float)i;
  double best = 1e30;
  for (int r = 0; r < 200; r++) {
    double t0 = now();
    for (long it = 0; it < 20000; it++) {
#pragma GCC unroll 32
      for (int i = 0; i < CH; i++) a[i] = a[i] * x + y;
    }
    double dt = now() - t0;
    if (dt < best) best = dt;
  }
  float s = 0;
  for (int i = 0; i < CH; i++) s += a[i][0];
  printf("%f %f\n", 20000.0 * CH * 2 * L / best, s);
  return 0;
}
"""

BW_C = PROBE_HEAD + r"""
/* usage: bw BYTES -> GB/s of the best timing of passes over BYTES (8 independent vector sums;
   small buffers are read several times a timing so that the clock's cost does not count) */
int main(int argc, char **argv) {
  size_t n = (size_t)atol(argv[1]) / (8 * VB) * 8;
  if (n < 8) n = 8;
  long reps = (long)((4 << 20) / (n * VB)) + 1;
  vf *a, s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, s4 = {0}, s5 = {0}, s6 = {0}, s7 = {0}, x;
  if (posix_memalign((void **)&a, 64, n * VB)) return 3;
  for (size_t i = 0; i < n; i++) for (int l = 0; l < L; l++) a[i][l] = 1.0f;
  for (int l = 0; l < L; l++) x[l] = 1.0001f;
  double best = 1e30, spent = 0;
  for (int r = 0; r < 1000 && (r < 20 || spent < 2e8); r++) {
    double t0 = now();
    for (long p = 0; p < reps; p++)
      for (size_t i = 0; i < n; i += 8) {
        s0 += a[i] * x; s1 += a[i + 1] * x; s2 += a[i + 2] * x; s3 += a[i + 3] * x;
        s4 += a[i + 4] * x; s5 += a[i + 5] * x; s6 += a[i + 6] * x; s7 += a[i + 7] * x;
      }
    double dt = now() - t0;
    spent += dt;
    if (dt < best) best = dt;
  }
  s0 += s1 + s2 + s3 + s4 + s5 + s6 + s7;
  printf("%f %f\n", n * (double)VB * reps / best, (double)s0[0]);
  return 0;
}
"""


def target_simd(mcpu: str | None) -> tuple[int, int]:
    """(vector bytes, vector registers) the bundles use: the host's widest (host_simd), or with
    --mcpu that CPU's as glowpy's target capabilities see it (znver3: AVX2, 32 x 16)."""
    if not mcpu:
        return host_simd()
    from glowpy.codegen.target.resolve import resolve_target
    caps = resolve_target(mcpu=mcpu).caps
    return 4 * caps.float_lanes, caps.vector_registers


def host_simd() -> tuple[int, int]:
    """(bytes of the host's widest float vector, vector registers) from LLVM's host features:
    AVX-512 64 bytes x 32 zmm, AVX 32 x 16 ymm, NEON 16 x 32, otherwise SSE's 16 x 16."""
    from llvmlite import binding as llvm
    llvm.initialize_native_target()
    feats = set(llvm.get_host_cpu_features().flatten().split(","))
    if "+avx512f" in feats:
        return 64, 32
    if "+avx" in feats:
        return 32, 16
    if "+neon" in feats:
        return 16, 32
    return 16, 16


def _run_c(work: str, name: str, src: str, *args, tune: str | None = None,
           cpu: str | None = None) -> float | None:
    """Compiles src (-march=native, for the host's vector width and register count; `cpu`:
    -march for that CPU and its vectors instead; `tune`: another -mtune) in `work` and runs it
    with args: the first number printed."""
    vb, regs = target_simd(cpu)
    c, exe = os.path.join(work, name + ".c"), os.path.join(work, name)
    with open(c, "w") as f:
        f.write(src)
    # FMA chains: three quarters of the registers (the rest hold x, y and the loop)
    r = subprocess.run([find_cc(), "-O2", f"-march={cpu or 'native'}",
                        *([f"-mtune={tune}"] if tune else []),
                        "-ffp-contract=fast", f"-DVB={vb}", f"-DCH={regs * 3 // 4}", c, "-o", exe],
                       capture_output=True, text=True)
    if r.returncode:
        return None
    out = subprocess.run([exe, *map(str, args)], capture_output=True, text=True).stdout.split()
    return float(out[0]) if out else None


def read_bandwidth(work: str, nbytes: int) -> float | None:
    """Single-core read bandwidth (GB/s) for a buffer of `nbytes` read again and again, as a
    bundle reads its weights on back-to-back calls: from L1, L2 or L3 by its size."""
    return _run_c(work, "bw", BW_C, nbytes)


def fma_peak(work: str, cpu: str | None = None) -> float | None:
    """Single-core float32 multiply-add throughput (GFLOP/s) of this machine: independent FMA
    chains of the host's widest vector, 3/4 of its registers (the ceiling any kernel can reach).
    The better of GCC's tuning for this CPU and its generic tuning: for an EPYC that LLVM and
    GCC call znver1, GCC's own tuning kept an operand in memory and the probe ran at 36.8
    GFLOP/s, generic tuning's registers at 39.3-41.1, and a bundle's 512 -> 512 1x1 layer at 42.
    With `cpu` (--mcpu), that CPU's vectors on this machine: the ceiling of its bundles here."""
    runs = [_run_c(work, "peak", PEAK_C, cpu=cpu),
            _run_c(work, "peak", PEAK_C, tune="generic", cpu=cpu)]
    return max((r for r in runs if r is not None), default=None)


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    field = lambda k: (re.search(rf"^{k}:\s*(.+)$", out, re.M) or [None, "?"])[1].strip()  # noqa: E731
    from llvmlite import binding as llvm
    feats = llvm.get_host_cpu_features().flatten().split(",")
    simd = [f[1:] for f in feats if f in ("+avx512f", "+avx2", "+neon", "+sve")]
    per_socket = field(r"Core\(s\) per socket")
    return (f"{field('Model name')}, {os.cpu_count()} cores ({per_socket} per socket), LLVM host CPU `{llvm.get_host_cpu_name()}` ({', '.join(simd) or 'no SIMD'}); "
            f"{platform.system()} {platform.release()}")


def table(rows: list[dict], peak: float | None = None) -> str:
    """The benchmark table. `target` is the issue's ratio goal; `target needs` the GFLOP/s and
    the weight-read GB/s a bundle would need to meet it (from onnxruntime's time), each
    starred when it is above what this machine measurably does: the FMA peak, and the read
    bandwidth for a buffer of the weights' size read again and again (`weights`, GB/s)."""
    out = ("| model | bundle ms | onnxruntime ms | ratio | target | GFLOP/s (onnxruntime) | "
           "target needs GFLOP/s | weights MB (read GB/s) | target needs GB/s | compile s | "
           "outputs |\n"
           "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
    for r in rows:
        tgt = TARGET_RATIO.get(r["model"])
        ok = "agree" if r["agrees_with_ort"] else "**differ from onnxruntime**"
        if "matches_reference" in r:
            ok += ", match reference" if r["matches_reference"] else ", **differ from reference**"
        need = need_bw = ""
        bw = r.get("read_gbs")
        if tgt is not None:
            n = r["ort_gflops"] / tgt
            need = f"{n:.0f}" + (" *" if peak and n > peak else "")
            nb = r["weight_bytes"] / (r["ort_ms"] * tgt * 1e-3) / 1e9
            need_bw = f"{nb:.0f}" + (" *" if bw and nb > bw else "")
        out += (f"| {r['model']} | {r['bundle_ms']:.4g} | {r['ort_ms']:.4g} | {r['ratio']:.2f} | "
                f"{'' if tgt is None else f'<= {tgt}'} | {r['gflops']:.1f} ({r['ort_gflops']:.1f}) | "
                f"{need} | {r['weight_bytes'] / 1e6:.3g} ({f'{bw:.0f}' if bw else '?'}) | {need_bw} | "
                f"{r['compile_s']:.1f} | {ok} |\n")
    return out


def write_between(path: str, text: str, begin: str = BEGIN, end: str = END):
    """Replaces what lies between the markers `begin` and `end` in `path` with `text`."""
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {path} has no benchmark markers ({begin} ... {end})")
    pre, rest = doc.split(begin, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(pre + begin + "\n" + text + end + rest.split(end, 1)[1])


def arguments(doc: str, docs_help: str) -> argparse.ArgumentParser:
    """The command line of the timing benchmarks (this one and zoo_perf.py)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated names (default: all)")
    ap.add_argument("--rounds", type=int, default=3, help="bundle/onnxruntime alternations")
    ap.add_argument("--seconds", type=float, default=0.05, help="target length of one batch")
    ap.add_argument("--batches", type=int, default=7, help="batches per round")
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread",
                    help="thread: CPU time of the calling thread (both sides run on one thread; "
                    "time spent descheduled by other processes is not counted); wall: monotonic")
    ap.add_argument("--mcpu", help="compile the bundles for this LLVM CPU instead of the host's "
                    "(e.g. znver3: AVX2 code on an AVX-512 host) and measure the FMA peak of its "
                    "vectors; the tables in the docs are then left alone")
    ap.add_argument("--ort-avx2", action="store_true", help="time onnxruntime with its AVX-512 "
                    "kernels off, as on an AVX2 machine (a patched copy of the installed wheel, "
                    "benchmarks/ort_avx2.py); with --mcpu znver3 both sides run AVX2 code; the "
                    "tables in the docs are then left alone")
    ap.add_argument("--work", help="keep bundles here (default: a temporary directory)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--no-docs", action="store_true", help=docs_help)
    ap.add_argument("--profile", action="store_true", help="also profile each model per op "
                    "family on both sides (an instrumented build, onnxruntime's profiler; "
                    "benchmarks/op_families.py) and print where the time goes")
    return ap


def measure_all(ap, a, available, measure_one, script: str) -> tuple[list[dict], float | None, str]:
    """Rows of measure_one(name, work) for the models --models names (all of `available` by
    default), the FMA peak, and the sentence that states when, with what and where."""
    names = a.models.split(",") if a.models else list(available)
    unknown = [n for n in names if n not in available]
    if unknown:
        ap.error(f"unknown models {unknown}; available: {', '.join(available)}")
    if a.ort_avx2:
        import ort_avx2
        print(f"onnxruntime without AVX-512 kernels: {ort_avx2.use()}", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="glowpy-perf-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        # the peak before and after the models, the higher kept: one probe in a slow phase of
        # a shared machine read 106 GFLOP/s where the runs around it read 117-118, and every
        # "% of peak" of that table came out 10% high
        peaks = [fma_peak(work, a.mcpu)]
        for n in names:
            print(f"{n} ...", file=sys.stderr, flush=True)
            rows.append(measure_one(n, work))
            print("  " + json.dumps(rows[-1]), file=sys.stderr, flush=True)
        peaks.append(fma_peak(work, a.mcpu))
        peak = max((p for p in peaks if p is not None), default=None)
    clock = ("CPU time of the calling thread" if a.clock == "thread" else "wall-clock time")
    lanes = target_simd(a.mcpu)[0] // 4
    said = (f"Measured {datetime.date.today().isoformat()} with `python benchmarks/{script}"
            + (f" --mcpu {a.mcpu}" if a.mcpu else "") + (" --ort-avx2" if a.ort_avx2 else "")
            + f"` (glowpy {glowpy.__version__}, onnxruntime "
            f"{__import__('onnxruntime').__version__}) on {machine()}"
            + (f"; bundles compiled for `-mcpu={a.mcpu}` ({lanes} float lanes)" if a.mcpu else "")
            + ("; onnxruntime with its AVX-512 kernels off (benchmarks/ort_avx2.py: its AVX2/FMA3 "
               "kernels, as on an AVX2 machine)" if a.ort_avx2 else
               ", onnxruntime with its kernels for this host" if a.mcpu else "")
            + (f"; measured single-core float32 FMA peak {peak:.0f} GFLOP/s"
               + (f" ({lanes}-lane vectors)" if a.mcpu else "") if peak else "")
            + f". Times: best batch of back-to-back calls, {clock}, bundle and onnxruntime "
            f"alternating for {a.rounds} rounds")
    return rows, peak, said


def main(argv=None) -> int:
    ap = arguments(__doc__, "do not rewrite docs/performance.md and README.md (they are only "
                   "rewritten when every model is measured)")
    a = ap.parse_args(argv)
    models = shared_paths()
    models.update(build_models.build())
    rows, peak, said = measure_all(ap, a, models, lambda n, work: measure(
        n, models[n], work, a.rounds, a.seconds, a.batches, a.clock, a.profile, a.mcpu),
        "perf.py")
    text = (said + "; GFLOP/s count 2 per multiply-add of Conv, Gemm "
            f"and MatMul; * marks a target that needs more than the measured FMA peak, or a faster "
            f"read of the weights than this machine's for a buffer of their size. "
            + summary(rows) + "\n\n" + table(rows, peak))
    if a.profile:
        import op_families
        text += "\n" + op_families.table(rows)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not a.no_docs and not a.models and not a.mcpu and not a.ort_avx2:
        write_between(DOC, text)
        write_between(README, text)
    bad = [r["model"] for r in rows if not r["agrees_with_ort"] or not r.get("matches_reference", True)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

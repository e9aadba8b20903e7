#!/usr/bin/env python3
"""Cortex-M7 footprint and speed of every shared float model, measured under QEMU.

    python benchmarks/cortex_m7.py                    # all float models, writes docs/cortex_m7.md
    python benchmarks/cortex_m7.py --models mnist8 --no-docs
    python benchmarks/cortex_m7.py --float-abi hard --no-docs
    python benchmarks/cortex_m7.py --models mlperf_tiny_kws_dscnn --float-abi hard --no-docs --per-layer

For each float model in ../shared/models (every .onnx without quantization nodes) this
compiles a bundle with `-target=arm -mcpu=cortex-m7 -float-abi=hard` and `=soft`, links it into
the bare-metal runner of examples/bundles/cortex_m7 and runs it on QEMU's mps2-an500 board
with test_data_set_0's inputs. It measures:

- `.text`: bytes of code in the bundle object (its executable sections);
- flash: what the bundle puts in read-only memory: every allocated section of the object
  (code, literal pools, unwind tables) plus the constant region (weights);
- RAM: the mutable region (inputs and outputs) + the activation region + the deepest stack
  use during the inference, as the runner measures it (painted stack, includes the ~100
  bytes of the runner's own frame);
- instructions per inference: SysTick ticks counted around the entry call times 10. QEMU
  runs with `-icount shift=2` (every instruction advances the virtual clock by 4 ns) and
  SysTick counts the 25 MHz processor clock (40 ns), so a tick is 10 instructions, and the
  count is identical from run to run. It counts instructions, not Cortex-M7 cycles (QEMU
  does not model the pipeline, caches or memory wait states).

--per-layer adds a per-layer table per model (instructions, % of the inference, MACs, bytes,
kernel code size): a second build with -instrument-profile whose clock is the runner's SysTick
count (QEMU's MPS2 boards do not model DWT CYCCNT), turned into a profile by
glowpy.perf_profile; its layers add up to the instrumented build's whole inference.

It also checks the printed outputs against the model's reference outputs (the tolerance of
tests/test_models.py) and lists the symbols the object leaves undefined.

A model "fits the board" when its flash need (plus the runner and its input data) fits the
4 MiB SSRAM1 used as flash and its mutable + activation regions fit the 16 MiB PSRAM
(examples/bundles/cortex_m7/mps2_an500.ld); models that do not are listed with the reason.
The table is written between the benchmark markers of docs/cortex_m7.md.

int8 (`--int8`, or `--int8-only`): the quantized models (every .onnx with quantization nodes:
the MLPerf Tiny QDQ models) and mlperf_tiny_resnet8 and the anomaly-detection autoencoder
quantized by glowpy itself (profiled on their reference inputs with model-profiler, compiled
with -load-profile), built with -float-abi=hard, measured the same way and set against their
float counterparts and against issue 20's TFLite Micro + CMSIS-NN figures. int8 outputs must
be within 1 LSB of the reference (or of onnxruntime's, for the QDQ models); the profiled
ResNet-8 must give the float model's top-1 class, the autoencoder's reconstruction must be
within AD_TOLERANCE of the float reference's range. With --per-layer each profile is followed
by instructions per MAC by layer type. Those tables are written between the int8 markers of
docs/cortex_m7.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_MODELS = os.path.join(os.path.dirname(ROOT), "shared", "models")
RUNNER = os.path.join(ROOT, "examples", "bundles", "cortex_m7")
DOC = os.path.join(ROOT, "docs", "cortex_m7.md")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "bundles"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import glowpy  # noqa: E402
from shared_models import shared_models  # noqa: E402
from gen_io_header import parse_run_output, write_io_header_from_manifest  # noqa: E402
from util import assert_close_to_reference, is_tflite_reference, reference_data  # noqa: E402

MiB = 1 << 20
FLASH_BYTES = 4 * MiB          # ZBT SSRAM1 at 0x00000000, used as flash
PSRAM_BYTES = 16 * MiB         # mutable + activation regions (.bss.model)
RUNNER_FLASH_RESERVE = 64 << 10  # vectors, runner, newlib-nano printf: ~23-27 KiB measured
STACK_SIZE = 65536
INSTRUCTIONS_PER_TICK = 10     # 40 ns SysTick tick / 4 ns per instruction (-icount shift=2)
BEGIN, END = "<!-- cortex_m7 benchmark: begin -->", "<!-- cortex_m7 benchmark: end -->"
INT8_BEGIN = "<!-- cortex_m7 int8 benchmark: begin -->"
INT8_END = "<!-- cortex_m7 int8 benchmark: end -->"
# glowpy's own int8 models: the float model profiled on its reference inputs (model-profiler),
# compiled with -load-profile
PROFILED = {"mlperf_tiny_resnet8 (-load-profile)": "mlperf_tiny_resnet8",
            "mlperf_tiny_ad_autoencoder (-load-profile)": "mlperf_tiny_ad_autoencoder"}
# int8 model -> its float counterpart
FLOAT_OF = {"mlperf_tiny_kws_dscnn_int8_qdq": "mlperf_tiny_kws_dscnn",
            "mlperf_tiny_resnet8_int8_qdq": "mlperf_tiny_resnet8",
            "mlperf_tiny_vww_int8_qdq": "mlperf_tiny_vww_mobilenetv1_025", **PROFILED}
# issue 20's anchor: TFLite Micro (90b983c) + CMSIS-NN (4ab83cc) on the same ruler (QEMU
# mps2-an500, -icount shift=2, SysTick x 10), the MLPerf Tiny int8 .tflite models
TFLM = {"mlperf_tiny_kws_dscnn_int8_qdq": 7_643_700, "mlperf_tiny_vww_int8_qdq": 24_025_590,
        "mlperf_tiny_resnet8_int8_qdq": 30_026_860,
        "mlperf_tiny_ad_autoencoder (-load-profile)": 583_270}
# the autoencoder's reconstruction from glowpy's int8 against the float model's: the largest
# error in units of the output's range (measured on the 3 reference inputs, per-tensor profile
# of those same inputs: 7.5-8.4% at worst, 2.5-2.6% on average; the anomaly score, the mean
# squared reconstruction error, comes out 12% above the float model's)
AD_TOLERANCE = 0.10






def tool(name: str) -> str:
    from shutil import which
    path = which(name)
    if not path:
        sys.exit(f"cortex_m7.py: {name} not found (Debian: gcc-arm-none-eabi "
                 "libnewlib-arm-none-eabi qemu-system-arm)")
    return path


def object_sections(obj: str) -> dict:
    """{section: size} of the allocated sections of an ARM object (arm-none-eabi-size -A)."""
    out = subprocess.run([tool("arm-none-eabi-size"), "-A", obj], capture_output=True,
                         text=True, check=True).stdout
    sections = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[0].startswith("."):
            sections[parts[0]] = int(parts[1])
    return sections


def undefined_symbols(obj: str) -> list[str]:
    out = subprocess.run([tool("arm-none-eabi-nm"), "-u", obj], capture_output=True, text=True,
                         check=True).stdout
    return sorted({ln.split()[-1] for ln in out.splitlines() if ln.strip()})


def run_on_board(d: str, info, inputs, float_abi: str, timeout: int):
    """Builds the runner for the bundle in `d` with `inputs` and runs it under QEMU."""
    man = info.manifest
    write_io_header_from_manifest(os.path.join(d, "model_io.h"), man,
                                  {p["name"]: x for p, x in zip(man["inputs"], inputs)})
    cmd = ["make", "-s", "-C", RUNNER, f"BUNDLE_DIR={d}", f"NETWORK={info.name}",
           f"FLOAT_ABI={float_abi}", f"BUILD_DIR={os.path.join(d, 'build')}",
           f"STACK_SIZE={STACK_SIZE}", f"TIMEOUT={timeout}", "run"]
    return subprocess.run(cmd, capture_output=True, text=True)


def profile_layers(model: str, options: dict, d: str, inputs, float_abi: str,
                   timeout: int) -> dict:
    """The per-layer profile (glowpy.perf_profile) of an -instrument-profile build whose
    clock is the runner's SysTick count (-instrument-profile-counter=callback), in
    instructions. The instrumented build runs ~1 call of the counter per instruction more
    than the plain one; its per-layer counts add up to its whole call (the profile's
    "coverage")."""
    from glowpy.perf_profile import build, parse_counts
    info = glowpy.compile(model, d, target="arm", mcpu="cortex-m7", float_abi=float_abi,
                          instrument_profile=True, instrument_profile_counter="callback",
                          **options)
    res = run_on_board(d, info, inputs, float_abi, timeout)
    if res.returncode != 0:
        return {"error": (res.stdout + res.stderr).strip().splitlines()[-5:]}
    counts, total = parse_counts(res.stdout)
    return build(info.manifest, counts, total, unit="instructions", scale=INSTRUCTIONS_PER_TICK)


def measure(name: str, work: str, float_abi: str, timeout: int, per_layer: bool = False,
            extra: dict | None = None, tag: str = "") -> dict:
    """One model's row; `extra`: more compile options (benchmarks/patch_m7.py), `tag` names
    their build directory."""
    row = {"model": name, "float_abi": float_abi}
    d = os.path.join(work, f"{name}-{float_abi}{tag}".replace(" ", "_").replace("(", "")
                     .replace(")", ""))
    model, options = name, dict(extra or {})
    if name in PROFILED:  # glowpy's own int8: profile the float model on its reference inputs
        from glowpy.profiler import profile_model
        model = FLOAT_OF[name]
        samples = os.path.join(work, f"profile-samples-{model}")
        os.makedirs(samples, exist_ok=True)
        for i in range(3):
            np.save(os.path.join(samples, f"{i}.npy"), reference_data(model, i)[0][0])
        graph_input = onnx.load(os.path.join(SHARED_MODELS, model + ".onnx")).graph.input[0].name
        options["load_profile"] = os.path.join(work, f"{model}.profile.yaml")
        profile_model(os.path.join(SHARED_MODELS, model + ".onnx"),
                      [f"{graph_input},npy,{samples}"], options["load_profile"])
    t0 = time.time()
    info = glowpy.compile(os.path.join(SHARED_MODELS, model + ".onnx"), d, target="arm",
                          mcpu="cortex-m7", float_abi=float_abi, **options)
    row["compile_s"] = round(time.time() - t0, 1)
    obj = info.files[".o"]
    secs = object_sections(obj)
    # Non-allocated sections (.ARM.attributes, .note.GNU-stack...) take no memory.
    alloc = {s: n for s, n in secs.items()
             if s.startswith((".text", ".rodata", ".ARM.exidx", ".ARM.extab", ".data", ".bss"))}
    mem = info.memory
    row.update(text=sum(n for s, n in alloc.items() if s.startswith(".text")),
               object_readonly=sum(n for s, n in alloc.items()
                                   if not s.startswith((".data", ".bss"))),
               writable=sum(n for s, n in alloc.items() if s.startswith((".data", ".bss"))),
               constant=mem["constant"], mutable=mem["mutable"], activations=mem["activations"],
               undefined=undefined_symbols(obj))
    row["flash"] = row["object_readonly"] + row["constant"]
    inputs, outputs = reference_data(model)
    input_bytes = sum(int(np.asarray(x).nbytes) for x in inputs)
    need_flash = row["flash"] + input_bytes + RUNNER_FLASH_RESERVE
    need_psram = row["mutable"] + row["activations"]
    problems = []
    if need_flash > FLASH_BYTES:
        problems.append(f"needs {need_flash / MiB:.1f} MiB of flash (code + weights + runner + "
                        f"input data), the board has {FLASH_BYTES // MiB} MiB")
    if need_psram > PSRAM_BYTES:
        problems.append(f"needs {need_psram / MiB:.1f} MiB for mutable + activation regions, "
                        f"the board has {PSRAM_BYTES // MiB} MiB of PSRAM")
    if problems:
        row["fits"] = False
        row["reason"] = "; ".join(problems)
        return row
    row["fits"] = True

    man = info.manifest
    t0 = time.time()
    res = run_on_board(d, info, inputs, float_abi, timeout)
    row["run_s"] = round(time.time() - t0, 1)
    if per_layer and res.returncode == 0:
        row["profile"] = profile_layers(os.path.join(SHARED_MODELS, model + ".onnx"), options,
                                        d + "-profile", inputs, float_abi, timeout)
    if res.returncode != 0:
        row["error"] = (res.stdout + res.stderr).strip().splitlines()[-5:]
        return row
    run = parse_run_output(res.stdout)
    row.update(ticks=run["cycles"], instructions=run["cycles"] * INSTRUCTIONS_PER_TICK,
               stack=run["stack"])
    row["output_sha1"] = hashlib.sha1(b"".join(np.ascontiguousarray(o).tobytes()
                                               for o in run["outputs"])).hexdigest()
    row["ram"] = row["mutable"] + row["activations"] + row["stack"]
    m = re.search(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+[0-9a-f]+\s+\S*app\.elf", res.stdout, re.M)
    if m:  # arm-none-eabi-size of the whole firmware, printed by the Makefile
        row["firmware_text"], row["firmware_data"], row["firmware_bss"] = map(int, m.groups())
    if name in PROFILED and "autoencoder" in name:  # a reconstruction: close to the float's
        got = run["outputs"][0].reshape(outputs[0].shape).astype(np.float64)
        ref = outputs[0].astype(np.float64)
        row["max_error_of_range"] = float(np.abs(got - ref).max() / (ref.max() - ref.min()))
        row["matches_reference"] = row["max_error_of_range"] <= AD_TOLERANCE
        return row
    if name in PROFILED:  # the float model's top-1 class
        got = int(np.argmax(run["outputs"][0]))
        row["top1"], row["reference_top1"] = got, int(np.argmax(outputs[0]))
        row["matches_reference"] = got == row["reference_top1"]
        return row
    if man["outputs"][0]["dtype"] in ("int8", "uint8"):
        lsb = max(int(np.abs(got.reshape(ref.shape) - ref.astype(np.float64)).max())
                  for got, ref in zip(run["outputs"], outputs))
        row["max_lsb"] = lsb
        if lsb > 1:  # the TFLite reference may differ from onnxruntime's (resnet8 set 0)
            row["max_lsb_onnxruntime"] = onnxruntime_lsb(name, inputs, run["outputs"])
        row["matches_reference"] = min(lsb, row.get("max_lsb_onnxruntime", lsb)) <= 1
        return row
    try:
        errs = [assert_close_to_reference(got.reshape(ref.shape), ref, is_tflite_reference(name),
                                          f"{name}:{p['name']}")
                for p, got, ref in zip(man["outputs"], run["outputs"], outputs)]
        row["matches_reference"] = len(errs) == len(outputs)
        row["max_error"] = max(errs) if errs else 0.0
    except (AssertionError, ValueError, AttributeError) as e:
        row["matches_reference"] = False
        row["mismatch"] = str(e)
        row["max_diff_from_host"] = host_difference(name, d, man, inputs, run["outputs"])
    return row


def onnxruntime_lsb(name, inputs, m7_outputs) -> int:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(SHARED_MODELS, name + ".onnx"), so,
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
    return max(int(np.abs(g.reshape(w.shape) - w.astype(np.float64)).max())
               for g, w in zip(m7_outputs, want))


def int8_table(rows: list[dict], floats: dict) -> str:
    """int8 rows next to their float counterparts (hard-float builds)."""
    head = ("| model | flash: code + constants (bytes) | RAM: mutable + activations + stack "
            "(bytes) | instructions / inference | vs float: flash, RAM, instructions | "
            "reference |\n|---|--:|--:|--:|---|---|\n")
    lines = []
    for r in rows:
        if "error" in r or not r.get("fits"):
            lines.append(f"| {r['model']} | {fmt(r.get('flash', ''))} | | | | run failed |")
            continue
        f = floats.get(FLOAT_OF.get(r["model"]))
        vs = "" if not f or "instructions" not in f else (
            f"{r['flash'] / f['flash']:.2f}×, {r['ram'] / f['ram']:.2f}×, "
            f"{r['instructions'] / f['instructions']:.2f}× (of {f['model']})")
        if "max_error_of_range" in r:
            ok = (f"max error {r['max_error_of_range']:.1%} of the float reference's range "
                  f"(tolerance {AD_TOLERANCE:.0%})")
            if not r["matches_reference"]:
                ok = "**differs**: " + ok
        elif "top1" in r:
            ok = f"top-1 class {r['top1']} = float model's" if r["matches_reference"] else \
                f"**top-1 {r['top1']} != {r['reference_top1']}**"
        else:
            ok = f"max {r['max_lsb']} LSB from the TFLite reference"
            if "max_lsb_onnxruntime" in r:
                ok += f", {r['max_lsb_onnxruntime']} from onnxruntime"
            if not r["matches_reference"]:
                ok = "**differs**: " + ok
        lines.append(f"| {r['model']} | {fmt(r['flash'])} = {fmt(r['object_readonly'])} + "
                     f"{fmt(r['constant'])} | {fmt(r['ram'])} = {fmt(r['mutable'])} + "
                     f"{fmt(r['activations'])} + {fmt(r['stack'])} | {fmt(r['instructions'])} | "
                     f"{vs} | {ok} |")
    return head + "\n".join(lines) + "\n"


def tflm_table(rows: list[dict], floats: dict) -> str:
    """int8 instructions against TFLite Micro + CMSIS-NN (issue 20: goal <= 0.5x) and the float
    model's instructions over the int8 model's (goal >= 1.5x)."""
    head = ("| model | TFLM + CMSIS-NN | glowpy int8 | ratio | goal (<= 0.5x) | float / int8 "
            "(goal >= 1.5x) |\n|---|--:|--:|--:|--:|--:|\n")
    lines = []
    for r in rows:
        ref, f = TFLM.get(r["model"]), floats.get(FLOAT_OF.get(r["model"]), {})
        if ref is None or "instructions" not in r:
            continue
        ratio = r["instructions"] / ref
        fl = (f"{f['instructions'] / r['instructions']:.2f}" if "instructions" in f else "")
        lines.append(f"| {r['model']} | {fmt(ref)} | {fmt(r['instructions'])} | {ratio:.2f} | "
                     f"{fmt(ref // 2)} ({'met' if ratio <= 0.5 else 'not met'}) | {fl} |")
    return head + "\n".join(lines) + "\n"


def per_mac_table(prof: dict) -> str:
    """Instructions per multiply-accumulate by layer type (op and kernel variant) of a
    --per-layer profile."""
    by: dict = {}
    for p in prof["programs"]:
        if p["macs"]:
            t = by.setdefault(f"{p['op']} {p.get('variant', '')}".strip(), [0, 0, 0])
            t[0] += 1
            t[1] += p["instructions"]
            t[2] += p["macs"]
    out = ("| layer type | layers | instructions | MACs | instructions / MAC |\n"
           "|---|--:|--:|--:|--:|\n")
    return out + "".join(f"| {k} | {n} | {fmt(i)} | {fmt(m)} | {i / m:.2f} |\n"
                         for k, (n, i, m) in sorted(by.items(), key=lambda kv: -kv[1][1]))


def host_difference(name, d, man, inputs, m7_outputs) -> float:
    """max |M7 - host| / max |host| over the outputs of the same model built for the host:
    tells a Cortex-M7 problem from a difference every target has."""
    from glowpy.runtime import Bundle
    info = glowpy.compile(os.path.join(SHARED_MODELS, name + ".onnx"), os.path.join(d, "host"))
    host = Bundle(os.path.join(d, "host"), info.name).run(
        {p["name"]: x for p, x in zip(info.inputs, inputs)})
    worst = 0.0
    for p, got in zip(man["outputs"], m7_outputs):
        h = np.asarray(host[p["name"]], dtype=np.float64).reshape(-1)
        scale = max(float(np.abs(h).max()), 1e-30)
        worst = max(worst, float(np.abs(got.reshape(-1) - h).max()) / scale)
    return worst


def fmt(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def table(rows: list[dict]) -> str:
    head = ("| model | `.text` bytes | flash: code + constants (bytes) | RAM: mutable + "
            "activations + stack (bytes) | instructions / inference | reference |\n"
            "|---|--:|--:|--:|--:|---|\n")
    lines = []
    for r in rows:
        if not r.get("fits"):
            continue
        if "error" in r:
            lines.append(f"| {r['model']} | {fmt(r['text'])} | {fmt(r['flash'])} | | | run "
                         f"failed: {' / '.join(r['error'])[:200]} |")
            continue
        flash = (f"{fmt(r['flash'])} = {fmt(r['object_readonly'])} + {fmt(r['constant'])}")
        ram = (f"{fmt(r['ram'])} = {fmt(r['mutable'])} + {fmt(r['activations'])} + "
               f"{fmt(r['stack'])}")
        if r["matches_reference"]:
            ok = f"matches (max error {r['max_error']:.2g})"
        else:
            what = r["mismatch"].split(";")[0]
            ok = (f"**differs**: {what}; the host build differs alike (M7 vs host: "
                  f"{r['max_diff_from_host']:.1g} of the largest value)")
        lines.append(f"| {r['model']} | {fmt(r['text'])} | {flash} | {ram} | "
                     f"{fmt(r['instructions'])} | {ok} |")
    out = head + "\n".join(lines) + "\n"
    used = {}
    for r in rows:
        for sym in r["undefined"]:
            used.setdefault(sym, []).append(r["model"])
    out += ("\nSymbols the objects leave undefined: "
            + ("; ".join(f"`{sym}` ({', '.join(ms) if len(ms) < len(rows) else 'all'})"
                         for sym, ms in sorted(used.items())) or "none") + ".\n")
    misfits = [r for r in rows if not r.get("fits")]
    if misfits:
        out += "\nDo not fit the board (not run):\n\n"
        out += "".join(f"- {r['model']}: {r['reason']} (flash {fmt(r['flash'])} bytes, "
                       f"mutable + activations {fmt(r['mutable'] + r['activations'])} bytes)\n"
                       for r in misfits)
    return out


def write_doc(text: str, begin: str = BEGIN, end: str = END):
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.exit(f"cortex_m7.py: {DOC} has no benchmark markers ({begin} ... {end})")
    pre, rest = doc.split(begin, 1)
    post = rest.split(end, 1)[1]
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(pre + begin + "\n" + text + end + post)


def print_row(row: dict):
    """A measurement on stderr, its per-layer table (--per-layer) on stdout."""
    prof = row.get("profile")
    print("  " + json.dumps({k: v for k, v in row.items() if k != "profile"}), file=sys.stderr,
          flush=True)
    if prof and "error" not in prof:
        from glowpy.perf_profile import table as profile_table
        print(f"\n{row['model']} -float-abi={row['float_abi']}, per layer:\n"
              + profile_table(prof) + "\ninstructions per MAC by layer type:\n"
              + per_mac_table(prof) + "\n", flush=True)
    elif prof:
        print(f"  per-layer run failed: {prof['error']}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated model names (default: every float model)")
    ap.add_argument("--float-abi", default="hard,soft",
                    help="comma-separated float ABIs to measure: hard, soft (default: both)")
    ap.add_argument("--work", help="keep bundles and firmware here (default: a temporary dir)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per QEMU run")
    ap.add_argument("--json", help="also write the measurements as JSON to this file")
    ap.add_argument("--no-docs", action="store_true",
                    help=f"do not rewrite {os.path.relpath(DOC, ROOT)} (it is only rewritten "
                         "when every float model is measured)")
    ap.add_argument("--per-layer", action="store_true",
                    help="also profile each model per layer (an -instrument-profile build) and "
                         "print its table (glowpy.perf_profile); --json keeps the profiles")
    ap.add_argument("--int8", action="store_true",
                    help="also measure the int8 models (QDQ models and resnet8 -load-profile)")
    ap.add_argument("--int8-only", action="store_true",
                    help="measure only the int8 models and their float counterparts (hard float) "
                         "and rewrite the int8 table of the docs")
    a = ap.parse_args(argv)
    abis = a.float_abi.split(",")
    if not abis or any(x not in ("hard", "soft") for x in abis):
        ap.error(f"--float-abi={a.float_abi}: expected hard, soft or hard,soft")
    for t in ("arm-none-eabi-gcc", "arm-none-eabi-size", "arm-none-eabi-nm", "qemu-system-arm",
              "make"):
        tool(t)
    if a.int8_only:
        return main_int8(a)
    names = a.models.split(",") if a.models else shared_models()
    rows, text = [], ""
    with tempfile.TemporaryDirectory(prefix="glowpy-m7-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        for abi in abis:
            abi_rows = []
            for name in names:
                print(f"{name} -float-abi={abi} ...", file=sys.stderr, flush=True)
                row = measure(name, work, abi, a.timeout, a.per_layer)
                print_row(row)
                abi_rows.append(row)
            text += (f"#### `-target=arm -mcpu=cortex-m7 -float-abi={abi}`\n\n"
                     + table(abi_rows) + "\n")
            rows += abi_rows
    text = (f"Measured with `python benchmarks/cortex_m7.py` (glowpy {glowpy.__version__}; "
            f"QEMU mps2-an500, `-icount shift=2`).\n\n" + text)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not a.no_docs and not a.models:
        write_doc(text)
    bad = [r["model"] for r in rows if r.get("fits") and not r.get("matches_reference")]
    if a.int8:
        bad += [] if main_int8(a, {r["model"]: r for r in rows if r["float_abi"] == "hard"}) \
            == 0 else ["int8"]
    return 1 if bad else 0


def main_int8(a, floats: dict | None = None) -> int:
    """The int8 rows (hard float) and their float counterparts (measured here if missing)."""
    names = shared_models(quantized=True) + list(PROFILED)
    if a.models:
        names = [n for n in names if n in a.models.split(",")]
    floats = dict(floats or {})
    rows = []
    with tempfile.TemporaryDirectory(prefix="glowpy-m7-int8-") as tmp:
        work = a.work or tmp
        os.makedirs(work, exist_ok=True)
        for name in names:
            for model in (FLOAT_OF.get(name), name):
                if model is None or (model != name and model in floats):
                    continue
                print(f"{model} -float-abi=hard ...", file=sys.stderr, flush=True)
                row = measure(model, work, "hard", a.timeout, a.per_layer)
                print_row(row)
                if model == name:
                    rows.append(row)
                else:
                    floats[model] = row
    text = (f"Measured with `python benchmarks/cortex_m7.py --int8-only` (glowpy "
            f"{glowpy.__version__}; QEMU mps2-an500, `-icount shift=2`; "
            "`-target=arm -mcpu=cortex-m7 -float-abi=hard`).\n\n" + int8_table(rows, floats)
            + "\nAgainst TFLite Micro + CMSIS-NN (issue 20's figures, same ruler):\n\n"
            + tflm_table(rows, floats))
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows + list(floats.values()), f, indent=1)
    if not a.no_docs and not a.models:
        write_doc(text, INT8_BEGIN, INT8_END)
    return 0 if all(r.get("matches_reference") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

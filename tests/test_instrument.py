"""-instrument-debug, -instrument-profile (codegen/instrument.py), bundle-profile and the compile
progress (progress.py): a real C program's callback sees every instruction in order with its
operands, the per-instruction counts add up to the whole call (host and emulated Cortex-M7),
bundles built without the flags carry no trace of them, and -verbose prints stage timings."""
from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

import numpy as np
import pytest

import glowpy
from glowpy import elf
from glowpy.perf_profile import build, parse_counts, table
from glowpy.runtime import Bundle, find_cc
from toolchains import require_tool
from util import REPO, assert_close_to_reference, is_tflite_reference, model_path, reference_data

sys.path.insert(0, os.path.join(REPO, "examples", "bundles"))
from gen_io_header import parse_run_output, write_io_header_from_manifest  # noqa: E402

PY = sys.executable
MNIST = model_path("mnist8")
KWS = "mlperf_tiny_kws_dscnn"

APP = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mnist8.h"

static uint8_t constant[MNIST8_CONSTANT_MEM_SIZE] GLOW_MEM_ALIGN(MNIST8_MEM_ALIGN);
static uint8_t mutable_[MNIST8_MUTABLE_MEM_SIZE] GLOW_MEM_ALIGN(MNIST8_MEM_ALIGN);
static uint8_t acts[MNIST8_ACTIVATIONS_MEM_SIZE] GLOW_MEM_ALIGN(MNIST8_MEM_ALIGN);
static FILE *log_;

/* one line per call: kind id n, then region:offset:bytes per operand */
void mnist8_instrument(int kind, int instr_id, int num_operands, uint8_t **operand_addresses,
                       const uint64_t *operand_sizes) {
  fprintf(log_, "%d %d %d", kind, instr_id, num_operands);
  for (int i = 0; i < num_operands; i++) {
    uint8_t *p = operand_addresses[i];
    char r = 'x';
    long off = -1;
    if (p >= constant && p < constant + sizeof constant) { r = 'c'; off = p - constant; }
    else if (p >= mutable_ && p < mutable_ + sizeof mutable_) { r = 'm'; off = p - mutable_; }
    else if (p >= acts && p < acts + sizeof acts) { r = 'a'; off = p - acts; }
    fprintf(log_, " %c:%ld:%llu", r, off, (unsigned long long)operand_sizes[i]);
  }
  fputc('\n', log_);
}

static void slurp(const char *path, uint8_t *dst, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f || fread(dst, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc != 5) return 2;
  slurp(argv[1], constant, sizeof constant);
  slurp(argv[2], mutable_, MNIST8_Plus214_Output_0);  /* the input precedes the output */
  log_ = fopen(argv[4], "w");
  int rc = mnist8(constant, mutable_, acts);
  fclose(log_);
  FILE *out = fopen(argv[3], "wb");
  fwrite(mutable_ + MNIST8_Plus214_Output_0, 1, 40, out);
  fclose(out);
  return rc;
}
"""


def _compile(out, model=MNIST, **opts):
    return glowpy.compile(model, str(out), **opts)


def test_flags_off_leave_no_trace(tmp_path):
    """Without the flags: no declarations, no manifest entry, no references in the object,
    and the bundle is the same as one built with the flags explicitly off; with them: all."""
    plain = _compile(tmp_path / "plain")
    off = _compile(tmp_path / "off", instrument_debug=False, instrument_profile=False)
    both = _compile(tmp_path / "both", instrument_debug=True, instrument_profile=True)
    for suffix in (".o", ".h", ".json", ".weights.bin"):
        with open(plain.files[suffix], "rb") as a, open(off.files[suffix], "rb") as b:
            assert a.read() == b.read(), suffix
    with open(plain.files[".h"]) as f:
        h = f.read()
    assert "instrument" not in h.lower() and "PROFILE" not in h
    assert "instrumentation" not in plain.manifest and "instrument" not in plain.manifest["options"]
    assert elf.read(plain.files[".o"]).undefined() == elf.read(off.files[".o"]).undefined()
    assert not any("instrument" in s for s in elf.read(plain.files[".o"]).undefined())
    with open(both.files[".h"]) as f:
        hb = f.read()
    assert "void mnist8_instrument(int kind" in hb and "#define MNIST8_PROFILE_OFFSET" in hb
    syms = {s.name: s for s in elf.read(both.files[".o"]).symbols()}
    assert syms["mnist8_instrument"].bind == "weak" and not syms["mnist8_instrument"].defined
    x = reference_data("mnist8")[0][0]
    got = Bundle(str(tmp_path / "both")).run({"Input3": x})["Plus214_Output_0"]
    assert np.array_equal(got, Bundle(str(tmp_path / "plain")).run({"Input3": x})[
        "Plus214_Output_0"])  # in process, the weak callback unresolved: the calls skipped
    prof = both.manifest["instrumentation"]["profile"]
    assert both.memory["mutable"] == prof["offset"] + 8 * prof["entries"]
    assert prof["offset"] >= plain.memory["mutable"]


def test_debug_callback_in_c_program(tmp_path):
    """A -Wall -Werror C program's callback sees before/after of every instruction in order,
    with each operand's address (region, offset) and size as NAME.json describes it, and
    the outputs equal the uninstrumented bundle's bit for bit."""
    info = _compile(tmp_path / "b", instrument_debug=True)
    plain = _compile(tmp_path / "plain")
    app = tmp_path / "app.c"
    app.write_text(APP)
    exe = tmp_path / "app"
    subprocess.run([find_cc(), "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path / 'b'}",
                    str(app), info.files[".o"], "-no-pie", "-o", str(exe), "-lm"], check=True)
    x = reference_data("mnist8")[0][0].astype(np.float32)
    (tmp_path / "in.bin").write_bytes(x.tobytes())
    subprocess.run([str(exe), info.files[".weights.bin"], str(tmp_path / "in.bin"),
                    str(tmp_path / "out.bin"), str(tmp_path / "log.txt")], check=True)
    got = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    want = Bundle(str(tmp_path / "plain")).run({"Input3": x})["Plus214_Output_0"].reshape(-1)
    assert np.array_equal(got, want)
    rows = info.manifest["instrumentation"]["instructions"]
    expect = []
    for r in rows:
        ops = " ".join(f"{o['region'][0]}:{o['offset']}:{o['bytes']}" for o in r["operands"])
        expect += [f"{kind} {r['id']} {len(r['operands'])} {ops}" for kind in (0, 1)]
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log == expect
    assert len(log) == 2 * len(rows) == 10  # mnist8: 2 Conv, 2 MaxPool, Gemm
    assert plain.manifest["memory"] == info.manifest["memory"]


def test_trace_in_process_matches_onnxruntime(tmp_path):
    """Bundle.trace on an -instrument-debug bundle: every instruction's output, which for
    mnist8 are all model values; each equals onnxruntime's value of that name."""
    import onnx
    import onnxruntime as ort
    _compile(tmp_path / "b", instrument_debug=True)
    x = reference_data("mnist8")[0][0]
    tr = Bundle(str(tmp_path / "b")).trace({"Input3": x})
    assert [r["op"] for r in tr] == ["Conv", "MaxPool", "Conv", "MaxPool", "Gemm"]
    names = [n for r in tr for n in r["outputs"]]
    m = onnx.load(MNIST)
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names[:-1])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"Input3": x})))
    for r in tr:
        for name, got in r["outputs"].items():
            np.testing.assert_allclose(got, want[name].reshape(got.shape), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{r['id']} {r['op']} {name}")


def test_errors_are_one_line(tmp_path):
    res = _cli([f"-model={MNIST}", f"-emit-bundle={tmp_path / 'a'}", "-instrument-profile",
                "-instrument-profile-counter=tsc"])
    assert res.returncode == 2 and res.stderr == ("model-compiler: error: "
                                                  "-instrument-profile-counter=tsc: expected "
                                                  "auto, cycles, dwt, callback\n")
    _compile(tmp_path / "plain")
    res = subprocess.run([PY, "-m", "glowpy.bundle_profile", str(tmp_path / "plain")],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 1 and res.stderr.count("\n") == 1
    assert "compile it with -instrument-profile" in res.stderr
    _compile(tmp_path / "m7", target="arm", mcpu="cortex-m7", instrument_profile=True)
    res = subprocess.run([PY, "-m", "glowpy.bundle_profile", str(tmp_path / "m7")],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 1 and "give its counters with -counts" in res.stderr


def test_profile_host_adds_up(tmp_path):
    """Per-instruction cycles add up to within 2% of the whole call measured around the
    entry with the same counter; outputs unchanged; the table and JSON say so."""
    info = _compile(tmp_path / "b", model=model_path(KWS), instrument_profile=True)
    inputs, outputs = reference_data(KWS)
    feeds = {p["name"]: x for p, x in zip(info.inputs, inputs)}
    b = Bundle(str(tmp_path / "b"))
    prof = b.profile(feeds, repeat=20)
    t = prof["total"]
    assert prof["runs"] == 20 and prof["target"]["counter"] == "cycles"
    assert 0.98 <= t["coverage"] <= 1.02, t
    assert abs(t["per_instruction_sum"] - t["whole_call"]) <= 0.02 * t["whole_call"]
    assert all(p["cycles"] > 0 for p in prof["programs"])
    assert len(prof["programs"]) == len(info.manifest["instrumentation"]["instructions"])
    assert sum(p["macs"] for p in prof["programs"]) == 2_656_768  # DS-CNN's convolutions, dense
    assert prof["ops"]["Conv"]["code_bytes"] > 0
    assert abs(sum(o["percent"] for o in prof["ops"].values()) - 100) < 0.1
    out = b.run(feeds)
    for p, ref in zip(info.outputs, outputs):
        assert_close_to_reference(out[p["name"]].reshape(ref.shape), ref,
                                  is_tflite_reference(KWS), KWS)
    text = table(prof)
    assert "per op type:" in text and "Conv" in text
    print(text)
    (tmp_path / "p.json").write_text(json.dumps(prof))
    res = subprocess.run([PY, "-m", "glowpy.bundle_profile", str(tmp_path / "b"), "-repeat=5",
                          f"-json={tmp_path / 'cli.json'}"], capture_output=True, text=True,
                         cwd=REPO)
    assert res.returncode == 0, res.stderr
    m = re.search(r"\(([\d.]+)% of the whole call\)", res.stdout)
    assert m and 98 <= float(m.group(1)) <= 102, res.stdout
    assert json.loads((tmp_path / "cli.json").read_text())["format"] == "glowpy-profile/1"


def _profile_on_runner(tmp_path, model: str, runner: str, scale: int, unit: str, make_vars,
                       **target) -> dict:
    """Compiles `model` with -instrument-profile for a cross target, runs it on the example
    runner (QEMU), checks its outputs against the reference (int8: within 1 LSB) and returns
    the profile built from the counters it prints; bundle-profile -counts gives the same."""
    require_tool("make")
    d = tmp_path / runner
    info = _compile(d, model=model_path(model), instrument_profile=True, **target)
    inputs, outputs = reference_data(model)
    man = info.manifest
    write_io_header_from_manifest(str(d / "model_io.h"), man,
                                  {p["name"]: x for p, x in zip(man["inputs"], inputs)})
    res = subprocess.run(["make", "-s", "-C", os.path.join(REPO, "examples", "bundles", runner),
                          f"BUNDLE_DIR={d}", f"NETWORK={info.name}", *make_vars, "run"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run = parse_run_output(res.stdout)
    for got, ref in zip(run["outputs"], outputs):
        if ref.dtype == np.int8:
            assert np.abs(got.reshape(ref.shape) - ref).max() <= 1
        else:
            assert_close_to_reference(got.reshape(ref.shape), ref, is_tflite_reference(model),
                                      model)
    counts, total = parse_counts(res.stdout)
    assert total == run["cycles"] and counts[-1] == 1  # the last entry: one call
    prof = build(man, counts, total, unit=unit, scale=scale)
    print(table(prof))
    assert prof["runs"] == 1
    assert len(prof["programs"]) == len(man["instrumentation"]["instructions"])
    assert sum(o["count"] for o in prof["ops"].values()) == len(prof["programs"])
    assert sum(p["macs"] for p in prof["programs"]) >= 2_656_000  # DS-CNN's convolutions
    (tmp_path / "run.txt").write_text(res.stdout)
    cli = subprocess.run([PY, "-m", "glowpy.bundle_profile", str(d), f"-counts={tmp_path}/run.txt",
                          f"-unit={unit}", f"-scale={scale}", "-json=-"], capture_output=True,
                         text=True, cwd=REPO)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["total"] == prof["total"]
    return prof


@pytest.mark.parametrize("model", [KWS, KWS + "_int8_qdq"])
def test_profile_cortex_m7_kws(tmp_path, model):
    """KWS on QEMU's Cortex-M7 (mps2-an500, -icount shift=2): the per-instruction SysTick
    counts (callback counter: QEMU does not model DWT), 10 instructions a tick, add up to
    within 2% of the count around the entry."""
    require_tool("arm-none-eabi-gcc")
    require_tool("qemu-system-arm")
    prof = _profile_on_runner(tmp_path, model, "cortex_m7", 10, "instructions",
                              ["FLOAT_ABI=hard"], target="arm", mcpu="cortex-m7",
                              float_abi="hard", instrument_profile_counter="callback")
    t = prof["total"]
    assert 0.98 <= t["coverage"] <= 1.02, t
    assert sum(p["instructions"] > 0 for p in prof["programs"]) >= len(prof["programs"]) - 2


def test_profile_aarch64_kws(tmp_path):
    """KWS under qemu-aarch64: the entry reads CNTVCT_EL0 (the runner's own clock around the
    entry); the per-instruction ticks add up to within 2% of the runner's count."""
    require_tool("aarch64-linux-gnu-gcc")
    require_tool("qemu-aarch64", "qemu-user")
    prof = _profile_on_runner(tmp_path, KWS, "aarch64", 1, "ticks", [], target="aarch64")
    assert prof["target"]["counter"] == "cycles"
    t = prof["total"]
    assert t["whole_call"] > 0 and 0.98 <= t["coverage"] <= 1.02, t


def _cli(args, **kw):
    return subprocess.run([PY, "-c", "from glowpy.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=REPO, **kw)


STAGES = ("load", "optimize", "plan", "codegen", "llvm", "write")


def test_verbose_prints_stage_timings(tmp_path):
    res = _cli([f"-model={MNIST}", f"-emit-bundle={tmp_path / 'a'}", "-verbose"])
    assert res.returncode == 0, res.stderr
    got = re.findall(r"^model-compiler: (\w+): ([\d.]+) s$", res.stderr, re.M)
    assert [s for s, _ in got] == list(STAGES) + ["total"]
    assert float(got[-1][1]) >= sum(float(t) for _, t in got[:-1]) - 0.05
    assert "\r" not in res.stderr


def test_quiet_when_not_a_terminal(tmp_path):
    """A compile of over a second (KWS) with stderr a pipe prints nothing at all."""
    res = _cli([f"-model={model_path(KWS)}", f"-emit-bundle={tmp_path / 'a'}",
                "-onnx-define-symbol=unk__128,1"])
    assert res.returncode == 0 and res.stderr == "" and res.stdout == ""


def test_progress_on_a_terminal(tmp_path):
    """stderr a pty: after a second the stage line appears (codegen shows kernels n/N) and
    is erased at the end; a compile of KWS takes longer than a second."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([PY, "-c", "import glowpy.progress as p; p.DELAY = 0.0\n"
                             "from glowpy.cli import main; main()",
                             f"-model={model_path(KWS)}", f"-emit-bundle={tmp_path / 'a'}"],
                            stdout=subprocess.PIPE, stderr=slave, cwd=REPO)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    text = b"".join(chunks).decode()
    assert proc.returncode == 0, text
    assert "model-compiler: load" in text and re.search(r"codegen: kernels \d+/\d+", text)
    assert "model-compiler: llvm" in text
    assert text.endswith("\r\x1b[K")  # the status line is erased

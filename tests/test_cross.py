"""Cross-compiled bundles, run on emulated hardware.

Every bundle here is built through the command line (`model-compiler ... -target=...`),
linked into the example runners of examples/bundles with -Wall -Werror, run, and the outputs
it prints are compared with the model's reference outputs (util.assert_close_to_reference,
the tolerance of test_models.py):

- Cortex-M7 (`-target=arm -mcpu=cortex-m7`): bare-metal firmware (examples/bundles/cortex_m7)
  built with arm-none-eabi-gcc and newlib, run on QEMU's mps2-an500 board; hard-float and
  soft-float bundles each in firmware of their own float ABI. The same runner serves the
  other MPS2 boards of BOARDS (tests/test_int8.py runs int8 keyword spotting on them).
- AArch64 Linux (`-target=aarch64`): a static executable (examples/bundles/aarch64) built
  with aarch64-linux-gnu-gcc and run with qemu-aarch64.

The Cortex-M7 objects are also checked to be fit for bare metal: they reference no symbol
beyond memcpy/memmove/memset and the ARM EABI run-time helpers (`__aeabi_*`, in libgcc and
newlib), have no writable data (no .data/.bss: the static API keeps all state in the
caller's three regions), and their stack use is measured by the runner and bounded. Wrong
target options are one-line usage errors (exit status 2) that write no bundle file.
"""
from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from toolchains import require_tool
from util import REPO, assert_close_to_reference, is_tflite_reference, model_path, \
    reference_data

EXAMPLES = os.path.join(REPO, "examples", "bundles")
sys.path.insert(0, EXAMPLES)
from gen_io_header import parse_run_output, write_io_header_from_manifest  # noqa: E402

M7 = ["-target=arm", "-mcpu=cortex-m7"]
M7_TRIPLE = {"hard": "thumbv7em-unknown-none-eabihf", "soft": "thumbv7em-unknown-none-eabi"}
# The runner's stack (examples/bundles/cortex_m7, STACK_SIZE default) and the most any of
# these models may use of it: the kernels keep their state in registers and small fixed
# frames, never in stack arrays that grow with the model.
M7_STACK_SIZE = 65536
M7_STACK_BOUND = 4096

# The QEMU boards the Cortex-M runner takes (make BOARD=...): their core (-mcpu), and how many
# instructions one SysTick tick (the runner's `cycles`) stands for under -icount shift=2,
# where every instruction advances the virtual clock by 4 ns and SysTick counts the processor
# clock: 25 MHz on the MPS2 boards (40 ns), 20 MHz on the AN505's SSE-200 (50 ns).
BOARDS = {"mps2-an500": ("cortex-m7", 10), "mps2-an386": ("cortex-m4", 10),
          "mps2-an385": ("cortex-m3", 10), "mps2-an505": ("cortex-m33", 12.5)}

BUNDLE_SUFFIXES = (".o", ".h", ".weights.bin", ".weights.txt", ".json")


# ---------------------------------------------------------------------------------------------
# helpers


def model_compiler(*args: str) -> subprocess.CompletedProcess:
    """Runs the `model-compiler` command (glowpy.cli:main, the console script's entry) of this
    source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = "import sys; from glowpy.cli import main; sys.argv[0] = 'model-compiler'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)


def compile_bundle(model: str, out_dir, *target_args: str) -> dict:
    """model-compiler -model=... -emit-bundle=out_dir <target_args>; returns the manifest."""
    res = model_compiler(f"-model={model_path(model)}", f"-emit-bundle={out_dir}", *target_args)
    assert res.returncode == 0, res.stderr
    with open(os.path.join(out_dir, f"{model}.json")) as f:
        return json.load(f)


def run_runner(runner: str, bundle_dir, manifest: dict, model: str, **make_vars) -> dict:
    """Writes model_io.h with test_data_set_0's inputs, builds and runs the example runner;
    returns parse_run_output's dict after checking the outputs against the reference."""
    require_tool("make")
    inputs, outputs = reference_data(model)
    assert len(inputs) == len(manifest["inputs"]) and len(outputs) == len(manifest["outputs"])
    write_io_header_from_manifest(os.path.join(bundle_dir, "model_io.h"), manifest,
                                  {p["name"]: x for p, x in zip(manifest["inputs"], inputs)})
    cmd = ["make", "-s", "-C", os.path.join(EXAMPLES, runner), f"BUNDLE_DIR={bundle_dir}",
           f"NETWORK={manifest['network_name']}", *(f"{k}={v}" for k, v in make_vars.items()),
           "run"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    run = parse_run_output(res.stdout)
    assert len(run["outputs"]) == len(outputs), res.stdout[-3000:]
    for p, got, ref in zip(manifest["outputs"], run["outputs"], outputs):
        assert got.size == ref.size, f"{model}:{p['name']}: {got.size} values, expected {ref.size}"
        assert_close_to_reference(got.reshape(ref.shape), ref, is_tflite_reference(model),
                                  f"{model}:{p['name']} on {runner}")
    assert run["cycles"] is not None and run["cycles"] > 0, res.stdout[-500:]
    assert run["stack"] is not None and run["stack"] > 0, res.stdout[-500:]
    return run


def run_on_aarch64(model, feeds: dict, out_dir) -> tuple:
    """Compiles an in-memory model for `-target=aarch64`, links it into the AArch64 runner
    (examples/bundles/aarch64) with `feeds` as its inputs and runs it under qemu-aarch64;
    returns (CompileInfo, the outputs it printed, flat)."""
    import glowpy
    import onnx
    for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64", "make"):
        require_tool(tool)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "m.onnx")
    onnx.save(model, path)
    d = os.path.join(out_dir, "b")
    info = glowpy.compile(path, d, target="aarch64")
    write_io_header_from_manifest(os.path.join(d, "model_io.h"), info.manifest, feeds)
    res = subprocess.run(["make", "-s", "-C", os.path.join(EXAMPLES, "aarch64"), f"BUNDLE_DIR={d}",
                          f"NETWORK={info.manifest['network_name']}", "run"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return info, parse_run_output(res.stdout)["outputs"]


def elf_info(path) -> tuple[dict, list]:
    """({section name: (flags, size, type)}, [undefined global symbol names]) of a
    little-endian ELF32/ELF64 relocatable object."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[5] == 1, f"{path}: not a little-endian ELF file"
    is64 = data[4] == 2
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        sh_fmt, sym_fmt, sym_size = "<IIQQQQIIQQ", "<IBBHQQ", 24
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
        sh_fmt, sym_fmt, sym_size = "<IIIIIIIIII", "<IIIBBH", 16
    shdrs = [struct.unpack_from(sh_fmt, data, shoff + i * shentsize) for i in range(shnum)]

    def cstr(table_off, off):
        end = data.index(b"\0", table_off + off)
        return data[table_off + off:end].decode()

    strtab_off = shdrs[shstrndx][4]
    sections, undefined = {}, []
    for sh in shdrs:
        name_off, sh_type, flags, _addr, offset, size, link = sh[:7]
        sections[cstr(strtab_off, name_off)] = (flags, size, sh_type)
        if sh_type == 2:  # SHT_SYMTAB
            names_off = shdrs[link][4]
            for k in range(1, size // sym_size):
                fields = struct.unpack_from(sym_fmt, data, offset + k * sym_size)
                if is64:
                    st_name, st_info, _other, st_shndx = fields[:4]
                else:
                    st_name, _value, _size, st_info, _other, st_shndx = fields
                if st_shndx == 0 and st_info >> 4 in (1, 2) and st_name:  # UNDEF, GLOBAL/WEAK
                    undefined.append(cstr(names_off, st_name))
    return sections, sorted(undefined)


SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4

# What a Cortex-M7 bundle may reference (docs/cortex_m7.md lists what they do reference):
# the C library's block copies, and the ARM run-time ABI helpers (__aeabi_memcpy*, integer
# division, and for -float-abi=soft the float arithmetic, comparisons and conversions, all
# in libgcc). Anything else (malloc, printf, libm, __errno...) is a failure.
M7_ALLOWED_UNDEFINED = re.compile(r"(memcpy|memmove|memset|__aeabi_\w+)$")
# Soft-float helpers under their generic libgcc names (the EABI ones match __aeabi_).
SOFT_FLOAT_HELPERS = re.compile(
    r"__(add|sub|mul|div|neg|cmp|eq|ne|lt|le|gt|ge|unord|fix|fixuns|float|floatun|extend|"
    r"trunc|powi)\w*[sdh]f\d?$")
AARCH64_ALLOWED_UNDEFINED = re.compile(r"(memcpy|memmove|memset)$")


def check_bare_metal_object(obj, soft_float: bool) -> list:
    """The object needs nothing newlib/libgcc cannot give, and owns no writable memory."""
    sections, undefined = elf_info(obj)
    bad = [s for s in undefined if not M7_ALLOWED_UNDEFINED.match(s)
           and not (soft_float and SOFT_FLOAT_HELPERS.match(s))]
    assert not bad, f"{obj} references symbols a bare-metal program may not have: {bad}"
    writable = {n: size for n, (flags, size, sh_type) in sections.items()
                if flags & SHF_ALLOC and flags & SHF_WRITE and size > 0}
    assert not writable, f"{obj} has writable data sections: {writable}"
    code = sum(size for flags, size, _ in sections.values() if flags & SHF_EXECINSTR)
    assert code > 0
    return undefined


# ---------------------------------------------------------------------------------------------
# Cortex-M7 under QEMU mps2-an500


@pytest.fixture(scope="module")
def m7_bundles(tmp_path_factory):
    """Bundles compiled once per (model, float ABI) and shared by the tests of this module."""
    cache = {}

    def get(model, abi):
        if (model, abi) not in cache:
            d = tmp_path_factory.mktemp(f"m7_{abi}_{model}")
            cache[model, abi] = (d, compile_bundle(model, d, *M7, f"-float-abi={abi}"))
        return cache[model, abi]
    return get


M7_CASES = [("mnist8", "hard"), ("mlperf_tiny_kws_dscnn", "hard"),
            ("mlperf_tiny_resnet8", "hard"), ("mnist8", "soft")]


@pytest.mark.parametrize("model, abi", M7_CASES, ids=[f"{a}-{m}" for m, a in M7_CASES])
def test_cortex_m7_firmware_matches_reference(model, abi, m7_bundles):
    require_tool("arm-none-eabi-gcc")
    require_tool("qemu-system-arm")
    d, man = m7_bundles(model, abi)
    assert man["target"]["triple"] == M7_TRIPLE[abi], man["target"]
    assert man["target"]["cpu"] == "cortex-m7"
    run = run_runner("cortex_m7", d, man, model, FLOAT_ABI=abi, STACK_SIZE=M7_STACK_SIZE)
    # The runner reports the deepest stack use during the inference (its own frame, ~100
    # bytes, included); it must be small and independent of the tensors' sizes.
    assert run["stack"] <= M7_STACK_BOUND, f"{model}: {run['stack']} bytes of stack"


@pytest.mark.parametrize("model, abi", M7_CASES, ids=[f"{a}-{m}" for m, a in M7_CASES])
def test_cortex_m7_object_is_self_contained(model, abi, m7_bundles):
    d, man = m7_bundles(model, abi)
    check_bare_metal_object(os.path.join(d, f"{model}.o"), soft_float=abi == "soft")


def test_cortex_m7_soft_float_object_has_no_fpu_code(m7_bundles):
    """-float-abi=soft must not use the FPU at all (firmware may leave it off)."""
    objdump = require_tool("arm-none-eabi-objdump", "binutils-arm-none-eabi")
    d, _ = m7_bundles("mnist8", "soft")
    res = subprocess.run([objdump, "-d", os.path.join(d, "mnist8.o")], capture_output=True,
                         text=True, check=True)
    fpu = [ln for ln in res.stdout.splitlines() if re.search(r"\tv[a-z0-9]+(\.[a-z0-9]+)*\s", ln)]
    assert not fpu, f"FPU instructions in a -float-abi=soft object: {fpu[:5]}"
    hard_d, _ = m7_bundles("mnist8", "hard")
    res = subprocess.run([objdump, "-d", os.path.join(hard_d, "mnist8.o")], capture_output=True,
                         text=True, check=True)
    assert re.search(r"\tvfma\.f32|\tvmla\.f32|\tvmul\.f32", res.stdout), \
        "the hard-float object does not use the FPU"


@pytest.mark.parametrize("abi, firmware_abi", [("hard", "soft"), ("soft", "hard")])
def test_cortex_m7_firmware_of_the_other_float_abi_does_not_link(abi, firmware_abi, m7_bundles,
                                                                   tmp_path):
    """The object's build attributes are real: GNU ld refuses a mismatched bundle instead of
    producing firmware that passes floats in the wrong registers."""
    require_tool("arm-none-eabi-gcc")
    require_tool("make")
    d, man = m7_bundles("mnist8", abi)
    inputs, _ = reference_data("mnist8")
    io_header = tmp_path / "model_io.h"
    write_io_header_from_manifest(io_header, man, {man["inputs"][0]["name"]: inputs[0]})
    res = subprocess.run(["make", "-s", "-C", os.path.join(EXAMPLES, "cortex_m7"),
                          f"BUNDLE_DIR={d}", "NETWORK=mnist8", f"IO_HEADER={io_header}",
                          f"FLOAT_ABI={firmware_abi}", f"BUILD_DIR={tmp_path / 'build'}", "all"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "VFP register arguments" in res.stderr, res.stderr[-2000:]
    assert not (tmp_path / "build" / "app.elf").exists()


@pytest.mark.parametrize("board", ["mps2-an500", "mps2-an505"])
def test_cortex_m_stack_overflow_faults(board, tmp_path):
    """A stack too small is a reported fault (exit status 3), never silent
    garbage: the MPU region below RAM catches it on Armv7-M (M7), the stack limit register
    PSPLIM on Armv8-M Mainline (M33)."""
    require_tool("arm-none-eabi-gcc")
    require_tool("qemu-system-arm")
    require_tool("make")
    man = compile_bundle("mnist8", tmp_path, "-target=arm", f"-mcpu={BOARDS[board][0]}",
                         "-float-abi=hard")
    inputs, _ = reference_data("mnist8")
    write_io_header_from_manifest(tmp_path / "model_io.h", man,
                                  {man["inputs"][0]["name"]: inputs[0]})
    res = subprocess.run(["make", "-s", "-C", os.path.join(EXAMPLES, "cortex_m7"),
                          f"BUNDLE_DIR={tmp_path}", "NETWORK=mnist8", f"BOARD={board}",
                          "STACK_SIZE=128", "run"], capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr  # the fault report is semihosting console output (stderr)
    assert res.returncode != 0 and "Error 3" in res.stderr and "(stack overflow)" in out, out
    assert f"fault {'UsageFault' if board == 'mps2-an505' else 'MemManage'} " in out, out


# ---------------------------------------------------------------------------------------------
# AArch64 Linux under qemu-aarch64

AARCH64_MODELS = ["mnist8", "mlperf_tiny_vww_mobilenetv1_025"]


@pytest.mark.parametrize("model", AARCH64_MODELS)
def test_aarch64_matches_reference(model, tmp_path):
    require_tool("aarch64-linux-gnu-gcc")
    require_tool("qemu-aarch64", "qemu-user")
    man = compile_bundle(model, tmp_path, "-target=aarch64")
    assert man["target"]["triple"] == "aarch64-unknown-linux-gnu", man["target"]
    assert man["target"]["cpu"] == "generic"
    obj = tmp_path / f"{model}.o"
    _, undefined = elf_info(obj)
    assert all(AARCH64_ALLOWED_UNDEFINED.match(s) for s in undefined), undefined
    # The generic AArch64 CPU has Advanced SIMD: the kernels must be vectorized with it.
    objdump = require_tool("aarch64-linux-gnu-objdump", "binutils-aarch64-linux-gnu")
    asm = subprocess.run([objdump, "-d", obj], capture_output=True, text=True, check=True).stdout
    simd_fp = re.findall(r"\tf(?:mla|mul|add|max|maxnm|min|minnm)\s+v\d+\.4s", asm)
    assert len(simd_fp) >= 4, "no NEON float arithmetic (f* v<n>.4s) in the aarch64 object"
    run_runner("aarch64", tmp_path, man, model)


def test_aarch64_object_optimized_in_parts_matches_reference(tmp_path, monkeypatch):
    """A module optimized in parts on threads (codegen/optimize.py, forced here for a small
    model by lowering its threshold) links into the AArch64 runner and matches the reference:
    the linked-back kernels and the entry are one working object for a cross target too."""
    require_tool("aarch64-linux-gnu-gcc")
    require_tool("qemu-aarch64", "qemu-user")
    import glowpy
    from glowpy.codegen import optimize
    monkeypatch.setattr(optimize, "SPLIT_TEXT", 1)
    monkeypatch.setattr(optimize, "PARTS", 3)
    parts = []
    split = optimize.split
    monkeypatch.setattr(optimize, "split", lambda mod: parts.append(len(split(mod)[0]))
                        or split(mod))
    glowpy.compile(model_path("mnist8"), str(tmp_path), target="aarch64")
    assert parts == [3], parts
    with open(tmp_path / "mnist8.json") as f:
        run_runner("aarch64", tmp_path, json.load(f), "mnist8")


def test_aarch64_vector_kernels_match_onnxruntime(tmp_path):
    """The row kernels at NEON's 4 lanes, compiled for the generic AArch64 CPU and run under
    qemu-aarch64: Softmax over rows of 5, 37 and 577 (wide vectors, then single registers, the
    last masked; -inf entries) and over a non-last axis, LogSoftmax, ArgMax/ArgMin on the
    lanes (integer values: ties within and across lanes, select_last_index), the dot-product
    Gemm on a run-time B, and Sigmoid/Erf (exp_scaled). Tolerances: rtol 1e-5, atol 1e-6;
    indices exact."""
    from util import GraphBuilder, memory_report, run_onnxruntime
    rng = np.random.default_rng(7)

    def f(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    feeds = {}
    for n in (5, 37, 577):
        x = f(3, n, scale=4)
        x[1, n // 2] = -np.inf
        feeds[f"s{n}"] = x
    feeds["c"] = f(2, 7, 9, scale=3)
    for n in (21, 300):
        feeds[f"a{n}"] = rng.integers(-3, 4, (6, n)).astype(np.float32)
    feeds["ga"], feeds["gb"], feeds["u"] = f(5, 64), f(40, 64), f(4, 300, scale=3)
    g = GraphBuilder(**feeds)
    for n in (5, 37, 577):
        g.node("Softmax", [f"s{n}"], axis=-1)
    g.node("LogSoftmax", ["s577"], axis=-1)
    g.node("Softmax", ["c"], axis=1)
    for n in (21, 300):
        g.node("ArgMax", [f"a{n}"], axis=-1, keepdims=1)
        g.node("ArgMin", [f"a{n}"], axis=-1, keepdims=1, select_last_index=1)
    g.node("Gemm", ["ga", "gb"], transB=1)
    g.node("Sigmoid", ["u"])
    g.node("Erf", ["u"])
    m = g.model(13)
    plan = memory_report(m, tmp_path / "plan", target="aarch64")["instructions"]
    assert [(i["op"], i["variant"]["name"]) for i in plan if i["op"] in ("ArgMax", "Gemm")] == \
        [("ArgMax", "vector"), ("ArgMax", "vector"), ("Gemm", "dot")]
    assert {i["variant"]["name"] for i in plan if "Softmax" in i["op"]} == {"vector"}
    info, got = run_on_aarch64(m, feeds, str(tmp_path / "run"))
    assert len(got) == len(info.outputs) == 12
    for p, out, want in zip(info.outputs, got, run_onnxruntime(m, feeds)):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-6,
                                       err_msg=p["name"])
        else:
            np.testing.assert_array_equal(out.reshape(want.shape), want, err_msg=p["name"])


# ---------------------------------------------------------------------------------------------
# Wrong target options: one usage error line, exit status 2, no bundle written


@pytest.mark.parametrize("args, expect", [
    (M7 + ["-float-abi=hardfp"], [r"-float-abi=hardfp", r"soft", r"hard"]),
    (["-target=arm", "-mcpu=cortex-m3", "-float-abi=hard"], [r"-float-abi=hard", r"FPU", r"soft"]),
    (["-target=aarch64", "-float-abi=soft"], [r"-float-abi=soft", r"aarch64"]),
    (["-target=arm", "-mcpu=cortex-m99", "-float-abi=hard"], [r"-mcpu=cortex-m99", r"cortex-m7"]),
    (["-target=aarch64", "-mcpu=cortex-m7"], [r"-mcpu=cortex-m7", r"cortex-a53"]),
], ids=["float-abi-unknown", "float-abi-hard-without-fpu", "float-abi-aarch64-soft",
        "mcpu-unknown", "mcpu-wrong-architecture"])
def test_wrong_target_options_are_usage_errors(args, expect, tmp_path):
    out = tmp_path / "bundle"
    res = model_compiler(f"-model={model_path('mnist8')}", f"-emit-bundle={out}", *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("model-compiler: error: "), res.stderr
    for pattern in expect:
        assert re.search(pattern, lines[0]), f"{pattern!r} not in: {lines[0]}"
    assert "Traceback" not in res.stderr and res.stdout == ""
    written = [f for f in (os.listdir(out) if out.exists() else []) if f.endswith(BUNDLE_SUFFIXES)]
    assert not written, f"bundle files written despite the error: {written}"

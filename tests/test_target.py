"""glowpy.codegen.target: triples, CPUs, float ABIs and errors, checked on real objects.

Objects are emitted for a tiny float function and inspected with readelf/objdump,
linked with arm-none-eabi-gcc against firmware of the matching float ABI, and
finally run under QEMU through the bare-metal and AArch64 bundle runners of
examples/bundles (the numbers they print are compared with numpy)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import llvmlite.binding as llvm

from glowpy.codegen.target import (
    TargetError, TargetSpec, available_cpus, available_targets, host_target,
    initialize_llvm, normalize_triple, resolve_target)
from toolchains import require_tool

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "examples" / "bundles"
sys.path.insert(0, str(BUNDLES))
from gen_io_header import parse_run_output, write_io_header  # noqa: E402

FLOAT_IR = """
define float @f(float %a, float %b) {
  %m = fmul float %a, %b
  %r = fadd float %m, 1.0
  ret float %r
}
"""

FIRMWARE_MAIN = r"""
#include <stdio.h>
float f(float, float);
int main(void) { volatile float a = 2.5f, b = 3.0f; printf("%d\n", (int)(f(a, b) * 100.0f)); return 0; }
"""


def emit(spec: TargetSpec, ir_text: str = FLOAT_IR, opt: int = 3) -> bytes:
    initialize_llvm()
    tm = spec.target_machine(opt=opt)
    mod = llvm.parse_assembly(ir_text)
    mod.triple = spec.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return tm.emit_object(mod)


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


# ----------------------------------------------------------------------------
# Triples


@pytest.mark.parametrize("raw, normalized", [
    ("thumbv7em-none-eabihf", "thumbv7em-unknown-none-eabihf"),
    ("thumbv7em-none-eabi", "thumbv7em-unknown-none-eabi"),
    ("thumbv7em-unknown-none-eabihf", "thumbv7em-unknown-none-eabihf"),
    ("x86_64-linux-gnu", "x86_64-unknown-linux-gnu"),
    ("aarch64-linux-gnu", "aarch64-unknown-linux-gnu"),
    ("riscv32-none-elf", "riscv32-unknown-none-elf"),
    ("armv7a-linux-gnueabihf", "armv7a-unknown-linux-gnueabihf"),
    ("i686-pc-linux-gnu", "i686-pc-linux-gnu"),
    ("x86_64-linux", "x86_64-unknown-linux-unknown"),
    ("linux-x86_64", "x86_64-unknown-linux-unknown"),
])
def test_normalize_triple(raw, normalized):
    assert normalize_triple(raw) == normalized


@pytest.mark.parametrize("kwargs, triple, cpu, float_abi", [
    (dict(target="arm", mcpu="cortex-m7", float_abi="hard"), "thumbv7em-unknown-none-eabihf", "cortex-m7", "hard"),
    (dict(target="arm", mcpu="cortex-m7", float_abi="soft"), "thumbv7em-unknown-none-eabi", "cortex-m7", "soft"),
    (dict(target="arm", mcpu="cortex-m7", float_abi="softfp"), "thumbv7em-unknown-none-eabi", "cortex-m7", "softfp"),
    (dict(target="arm", mcpu="cortex-m7"), "thumbv7em-unknown-none-eabi", "cortex-m7", "default"),
    (dict(target="arm", mcpu="cortex-m4", float_abi="hard"), "thumbv7em-unknown-none-eabihf", "cortex-m4", "hard"),
    (dict(target="arm", mcpu="cortex-m33", float_abi="hard"), "thumbv8m.main-unknown-none-eabihf", "cortex-m33", "hard"),
    (dict(target="arm", mcpu="cortex-m55", float_abi="hard"), "thumbv8.1m.main-unknown-none-eabihf", "cortex-m55", "hard"),
    (dict(target="arm", mcpu="cortex-m0"), "thumbv6m-unknown-none-eabi", "cortex-m0", "default"),
    (dict(target="arm", mcpu="cortex-m3", float_abi="soft"), "thumbv7m-unknown-none-eabi", "cortex-m3", "soft"),
    (dict(target="thumb", mcpu="cortex-m7", float_abi="hard"), "thumbv7em-unknown-none-eabihf", "cortex-m7", "hard"),
    (dict(target="arm", mcpu="cortex-a7"), "armv7a-unknown-linux-gnueabihf", "cortex-a7", "hard"),
    (dict(target="arm", mcpu="cortex-a53", float_abi="soft"), "armv8a-unknown-linux-gnueabi", "cortex-a53", "soft"),
    (dict(target="arm", march="armv7e-m", float_abi="soft"), "thumbv7em-unknown-none-eabi", "generic", "soft"),
    (dict(target="arm", march="armv8.1-m.main"), "thumbv8.1m.main-unknown-none-eabi", "generic", "default"),
    (dict(target="arm", march="armv8-a"), "armv8a-unknown-linux-gnueabihf", "generic", "hard"),
    (dict(target="thumbv7em-none-eabihf", mcpu="cortex-m7"), "thumbv7em-unknown-none-eabihf", "cortex-m7", "hard"),
    (dict(target="thumbv7em-none-eabihf", mcpu="cortex-m7", float_abi="soft"), "thumbv7em-unknown-none-eabi", "cortex-m7", "soft"),
    (dict(target="thumbv7em-none-eabi", mcpu="cortex-m4", float_abi="hard"), "thumbv7em-unknown-none-eabihf", "cortex-m4", "hard"),
    (dict(target="aarch64"), "aarch64-unknown-linux-gnu", "generic", "default"),
    (dict(target="arm64", mcpu="cortex-a72"), "aarch64-unknown-linux-gnu", "cortex-a72", "default"),
    (dict(target="riscv32"), "riscv32-unknown-none-elf", "generic-rv32", "soft"),
    (dict(target="riscv64"), "riscv64-unknown-linux-gnu", "generic-rv64", "hard"),
    (dict(target="x86_64"), "x86_64-unknown-linux-gnu", "x86-64", "default"),
    (dict(target="x86"), "i686-unknown-linux-gnu", "i686", "default"),
    (dict(target="i386"), "i386-unknown-linux-gnu", "i386", "default"),
    (dict(target="x86_64-linux-gnu", mcpu="skylake"), "x86_64-unknown-linux-gnu", "skylake", "default"),
])
def test_resolve_target(kwargs, triple, cpu, float_abi):
    spec = resolve_target(**kwargs)
    assert (spec.triple, spec.cpu, spec.float_abi) == (triple, cpu, float_abi)
    assert len(spec.triple.split("-")) == 4
    assert spec.target_machine().triple == spec.triple


def test_march_aarch64_and_riscv_features():
    assert resolve_target("aarch64", march="armv8.2-a").features == "+v8.2a"
    assert resolve_target("aarch64", march="armv9-a").features == "+v9a"
    rv = resolve_target("riscv32", march="rv32imafc", float_abi="hard")
    assert rv.features.split(",") == ["+m", "+a", "+f", "+c"] and rv.abi == "ilp32f"
    rv = resolve_target("riscv64", march="rv64gc", float_abi="hard")
    assert rv.abi == "lp64d" and "+d" in rv.features.split(",")
    assert resolve_target("riscv64", float_abi="soft").abi == "lp64"


def test_soft_float_disables_the_fpu():
    soft = resolve_target("arm", mcpu="cortex-m7", float_abi="soft")
    assert "-fpregs" in soft.features.split(",")
    assert soft.fpu is None
    assert resolve_target("arm", mcpu="cortex-m7", float_abi="hard").fpu == "fpv5-d16"
    assert resolve_target("arm", mcpu="cortex-m4", float_abi="hard").fpu == "fpv4-sp-d16"
    assert resolve_target("arm", mcpu="cortex-m33", float_abi="hard").fpu == "fpv5-sp-d16"
    assert resolve_target("arm", mcpu="cortex-m7", float_abi="softfp").fpu == "fpv5-d16"


def test_describe_and_properties():
    spec = resolve_target("arm", mcpu="cortex-m7", float_abi="hard", relocation_model="pic")
    assert spec.describe() == {
        "triple": "thumbv7em-unknown-none-eabihf", "cpu": "cortex-m7", "features": "",
        "float_abi": "hard", "relocation_model": "pic", "code_model": "small"}
    assert spec.pointer_bits == 32 and not spec.is_host
    assert resolve_target("aarch64").pointer_bits == 64
    assert resolve_target("riscv64").describe()["abi"] == "lp64d"
    cm = resolve_target("x86_64", code_model="large", relocation_model="static")
    assert cm.describe()["code_model"] == "large"


def test_host_target():
    spec = host_target()
    assert spec == resolve_target()
    assert spec.triple == normalize_triple(llvm.get_process_triple())
    assert spec.cpu == llvm.get_host_cpu_name()
    assert spec.is_host
    assert spec.pointer_bits == 8 * np.dtype(np.intp).itemsize
    try:
        host_feats = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        host_feats = ""
    assert spec.features == host_feats
    # -mcpu without -target: host triple, that CPU, its own features
    if spec.arch == "x86_64":
        s = resolve_target(mcpu="x86-64-v2")
        assert (s.triple, s.cpu, s.features) == (spec.triple, "x86-64-v2", "")


def test_available_lists():
    names = available_targets()
    for t in ("arm", "thumb", "aarch64", "x86_64", "riscv32", "riscv64", "x86"):
        assert t in names
    cpus = available_cpus("arm")
    assert "cortex-m7" in cpus and "cortex-m0" in cpus and len(cpus) > 50


# ----------------------------------------------------------------------------
# Errors: one line, name the option, list what is available; nothing on stderr


@pytest.mark.parametrize("kwargs, patterns", [
    (dict(target="arm", mcpu="cortex-m0", float_abi="hard"), ["-float-abi=hard", "cortex-m0", "FPU"]),
    (dict(target="arm", mcpu="cortex-m3", float_abi="hard"), ["-float-abi=hard", "cortex-m3", "FPU"]),
    (dict(target="arm", mcpu="cortex-m7", mattr="-fpregs", float_abi="hard"), ["-float-abi=hard", "FPU"]),
    (dict(target="arm", mcpu="cortex-m7", float_abi="hardfp"), ["-float-abi=hardfp", "soft", "hard", "default"]),
    (dict(target="arm", mcpu="cortex-m77"), ["-mcpu=cortex-m77", "did you mean cortex-m7", "cortex-m4", "cortex-a53"]),
    (dict(target="x86_64", mcpu="skylakee"), ["-mcpu=skylakee", "skylake", "znver"]),
    (dict(target="aarch64", mcpu="cortex-m7"), ["-mcpu=cortex-m7", "cortex-a53"]),
    (dict(target="arm", mcpu="cortex-m7", mattr="+bogus"), ["+bogus", "-mattr", "fp-armv8", "dsp"]),
    (dict(target="arm", mcpu="cortex-m7", mattr="+dsp,+vfp9"), ["+vfp9", "vfp4"]),
    (dict(target="riscv64", mattr="+zzz"), ["+zzz", "-mattr"]),
    (dict(target="foo"), ["-target", "foo", "arm", "aarch64", "x86_64", "riscv32"]),
    (dict(target="foo-unknown-linux-gnu"), ["-target", "foo", "arm", "x86_64"]),
    (dict(target="arm", march="armv99-z"), ["-march=armv99-z", "armv7e-m", "armv8-a"]),
    (dict(target="aarch64", march="armv8.2"), ["-march=armv8.2", "armv8.2-a"]),
    (dict(target="riscv32", march="rv64gc"), ["-march=rv64gc", "riscv32"]),
    (dict(target="aarch64", float_abi="soft"), ["-float-abi=soft", "aarch64"]),
    (dict(target="x86_64", float_abi="soft"), ["-float-abi=soft", "x86_64"]),
    (dict(target="riscv32", float_abi="hard"), ["-float-abi=hard", "F or D"]),
    (dict(target="x86_64", relocation_model="rwpi"), ["-relocation-model=rwpi", "static", "pic"]),
    (dict(target="x86_64", code_model="huge"), ["-code-model=huge", "small", "large"]),
])
def test_errors(kwargs, patterns, capfd):
    with pytest.raises(TargetError) as info:
        resolve_target(**kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    for p in patterns:
        assert p in msg, (p, msg)
    out, err = capfd.readouterr()
    assert "not a recognized" not in err and "not a recognized" not in out


def test_target_machine_rejects_bad_spec_and_opt():
    spec = resolve_target("arm", mcpu="cortex-m7")
    with pytest.raises(TargetError):
        spec.target_machine(opt=4)
    bogus = TargetSpec("thumbv7em-unknown-none-eabi", "cortex-m99", "", "default", "static", "small")
    with pytest.raises(TargetError, match="cortex-m99"):
        bogus.target_machine()


# ----------------------------------------------------------------------------
# Objects: build attributes, ELF flags


def _attrs(tmp_path, spec, name="f.o"):
    readelf = require_tool("arm-none-eabi-readelf")
    obj = tmp_path / name
    obj.write_bytes(emit(spec))
    return obj, run([readelf, "-A", obj]).stdout


def test_hard_float_object_has_vfp_args(tmp_path):
    for cpu, fp_arch in (("cortex-m7", "FPv5/FP-D16"), ("cortex-m4", "VFPv4-D16")):
        _, attrs = _attrs(tmp_path, resolve_target("arm", mcpu=cpu, float_abi="hard"))
        assert "Tag_ABI_VFP_args: VFP registers" in attrs, attrs
        assert f"Tag_CPU_name: \"{cpu}\"" in attrs
        assert "Tag_CPU_arch: v7E-M" in attrs
        assert fp_arch in attrs


def test_three_part_triple_keeps_hard_float(tmp_path):
    spec = resolve_target("thumbv7em-none-eabihf", mcpu="cortex-m7")
    _, attrs = _attrs(tmp_path, spec)
    assert "Tag_ABI_VFP_args: VFP registers" in attrs


def test_soft_float_object_uses_no_fpu(tmp_path):
    objdump = require_tool("arm-none-eabi-objdump")
    obj, attrs = _attrs(tmp_path, resolve_target("arm", mcpu="cortex-m7", float_abi="soft"))
    assert "Tag_ABI_VFP_args" not in attrs
    assert "Tag_FP_arch" not in attrs
    dis = run([objdump, "-d", obj]).stdout
    assert "__aeabi_fmul" in dis and "__aeabi_fadd" in dis
    assert not re.search(r"\bv(mul|add|mla|fma|ldr|str|mov)\b", dis), dis


def test_softfp_object_uses_fpu_with_base_pcs(tmp_path):
    objdump = require_tool("arm-none-eabi-objdump")
    obj, attrs = _attrs(tmp_path, resolve_target("arm", mcpu="cortex-m7", float_abi="softfp"))
    assert "Tag_ABI_VFP_args" not in attrs
    assert "Tag_FP_arch" in attrs
    assert re.search(r"\bv(mul|mla|fma)\.f32\b", run([objdump, "-d", obj]).stdout)


def test_riscv_float_abi_in_elf_flags(tmp_path):
    readelf = require_tool("readelf", "binutils")
    for kwargs, flag in ((dict(target="riscv64"), "double-float ABI"),
                         (dict(target="riscv32", march="rv32imafc", float_abi="hard"), "single-float ABI"),
                         (dict(target="riscv32"), "soft-float ABI")):
        obj = tmp_path / "rv.o"
        obj.write_bytes(emit(resolve_target(**kwargs)))
        flags = run([readelf, "-h", obj]).stdout
        assert flag in flags, (kwargs, flags)


# ----------------------------------------------------------------------------
# Linking into firmware with arm-none-eabi-gcc


GCC_FP = {"hard": ["-mfloat-abi=hard", "-mfpu=fpv5-d16"], "soft": ["-mfloat-abi=soft"]}


def _link(tmp_path, obj, fw_abi, fpu="fpv5-d16"):
    gcc = require_tool("arm-none-eabi-gcc")
    main = tmp_path / "main.c"
    main.write_text(FIRMWARE_MAIN)
    flags = ["-mfloat-abi=hard", f"-mfpu={fpu}"] if fw_abi == "hard" else ["-mfloat-abi=soft"]
    return run([gcc, "-mcpu=cortex-m7", "-mthumb", *flags, "-Wall", "-Werror", "--specs=nosys.specs",
                main, obj, "-o", tmp_path / "fw.elf"])


@pytest.mark.parametrize("abi, fpu", [("hard", "fpv5-d16"), ("hard", "fpv5-sp-d16"), ("soft", None)])
def test_links_with_matching_firmware(tmp_path, abi, fpu):
    obj = tmp_path / "f.o"
    obj.write_bytes(emit(resolve_target("arm", mcpu="cortex-m7", float_abi=abi)))
    res = _link(tmp_path, obj, abi, fpu)
    assert res.returncode == 0, res.stderr
    assert "VFP register arguments" not in res.stderr


@pytest.mark.parametrize("abi, fw_abi", [("hard", "soft"), ("soft", "hard")])
def test_mismatched_firmware_is_rejected(tmp_path, abi, fw_abi):
    """The attributes are real: GNU ld refuses to mix the two calling conventions."""
    obj = tmp_path / "f.o"
    obj.write_bytes(emit(resolve_target("arm", mcpu="cortex-m7", float_abi=abi)))
    res = _link(tmp_path, obj, fw_abi)
    assert res.returncode != 0
    assert "VFP register arguments" in res.stderr


# ----------------------------------------------------------------------------
# End to end: an LLVM-built stand-in bundle run by the example runners under QEMU

N = 16  # y[i] = x[i] * w[i] + 1 over float32[16]; x at mutable offset 0, y at 64

BUNDLE_IR = """
define i32 @{name}(ptr %c, ptr %m, ptr %a) {{
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %pw = getelementptr float, ptr %c, i32 %i
  %px = getelementptr float, ptr %m, i32 %i
  %j = add i32 %i, 16
  %py = getelementptr float, ptr %m, i32 %j
  %w = load float, ptr %pw
  %x = load float, ptr %px
  %p = fmul float %w, %x
  %r = fadd float %p, 1.0
  store float %r, ptr %py
  %i1 = add i32 %i, 1
  %done = icmp eq i32 %i1, 16
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}}
"""

BUNDLE_H = """// Bundle API auto-generated header file. Do not edit!
#ifndef _GLOW_BUNDLE_{U}_H
#define _GLOW_BUNDLE_{U}_H
#include <stdint.h>
#ifndef _GLOW_BUNDLE_COMMON_DEFS
#define _GLOW_BUNDLE_COMMON_DEFS
#define GLOW_SUCCESS 0
#define GLOW_MEM_ALIGN(size)  __attribute__((aligned(size)))
#define GLOW_GET_ADDR(mutableBaseAddr, placeholderOff)  (((uint8_t*)(mutableBaseAddr)) + placeholderOff)
#endif
#ifdef __cplusplus
extern "C" {{
#endif
#define {U}_x  0
#define {U}_y  64
#define {U}_CONSTANT_MEM_SIZE     64
#define {U}_MUTABLE_MEM_SIZE      128
#define {U}_ACTIVATIONS_MEM_SIZE  0
#define {U}_MEM_ALIGN  64
int {name}(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);
#ifdef __cplusplus
}}
#endif
#endif
"""


def _stand_in_bundle(directory: Path, spec: TargetSpec, name: str = "stand"):
    rng = np.random.default_rng(7)
    w = rng.standard_normal(N).astype(np.float32)
    x = (rng.standard_normal(N) * 100).astype(np.float32)
    x[:3] = [1e-8, -0.0, 3.4e38]
    (directory / f"{name}.o").write_bytes(emit(spec, BUNDLE_IR.format(name=name)))
    (directory / f"{name}.h").write_text(BUNDLE_H.format(U=name.upper(), name=name))
    img = w.tobytes()
    (directory / f"{name}.weights.txt").write_text(
        "\n".join("".join(f" 0X{b:02X}," for b in img[i:i + 20]) for i in range(0, len(img), 20)) + "\n")
    write_io_header(directory / "model_io.h", name, [("x", x)], [("y", np.float32, N)])
    return x * w + np.float32(1.0)


def _check_run(res, expect):
    assert res.returncode == 0, res.stdout + res.stderr
    out = parse_run_output(res.stdout)
    got = out["outputs"][0].astype(np.float32)
    np.testing.assert_array_equal(got, expect)
    assert out["cycles"] is not None and out["cycles"] > 0
    assert out["stack"] is not None and 0 < out["stack"] < 4096
    return out


@pytest.mark.parametrize("abi", ["hard", "soft"])
def test_cortex_m7_runner_under_qemu(tmp_path, abi):
    require_tool("arm-none-eabi-gcc")
    require_tool("qemu-system-arm")
    make = require_tool("make")
    spec = resolve_target("arm", mcpu="cortex-m7", float_abi=abi)
    expect = _stand_in_bundle(tmp_path, spec)
    cmd = [make, "-s", "-C", BUNDLES / "cortex_m7", f"BUNDLE_DIR={tmp_path}", "NETWORK=stand",
           f"FLOAT_ABI={abi}", f"BUILD_DIR={tmp_path / 'build'}", "run"]
    out = _check_run(run(cmd, timeout=300), expect)
    # deterministic virtual clock: the same count again
    again = parse_run_output(run(cmd, timeout=300).stdout)
    assert again["cycles"] == out["cycles"]


def test_aarch64_runner_under_qemu_user(tmp_path):
    require_tool("aarch64-linux-gnu-gcc")
    require_tool("qemu-aarch64", "qemu-user")
    make = require_tool("make")
    expect = _stand_in_bundle(tmp_path, resolve_target("aarch64"))
    cmd = [make, "-s", "-C", BUNDLES / "aarch64", f"BUNDLE_DIR={tmp_path}", "NETWORK=stand",
           f"BUILD_DIR={tmp_path / 'build'}", "run"]
    _check_run(run(cmd, timeout=300), expect)

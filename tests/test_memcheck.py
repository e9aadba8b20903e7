"""Generated-code safety: the bundle of every model in ../shared/models stays inside its three
regions, and compiling is reproducible.

* valgrind memcheck: the C harness allocates each region at exactly the size the header gives
  (posix_memalign), so any read or write past a region is an "Invalid read/write". valgrind
  3.19 cannot decode the AVX-512 instructions LLVM emits for this machine's CPU, so these
  bundles are built for x86-64-v3 (AVX2 + FMA), the newest level valgrind runs;
  `--vex-guest-max-insns=25` keeps its translation of the large unrolled kernels within VEX's
  fixed scratch space ("VEX temporary storage exhausted" otherwise).
* guard pages: bundles for the host CPU itself (AVX-512 here) run with every region flush
  against an inaccessible page, after it and then before it (harness -DGLOWPY_GUARD_PAGES), so
  an overrun faults at native speed.
* AddressSanitizer (+ UBSan) on the host harness that loads, runs and unloads the bundle.
* Reproducible builds: two compiles into different directories give byte-identical files.

The model that takes minutes under memcheck (LARGE) runs in its own test, marked
`memcheck_large` (`-m memcheck_large` / `-m "not memcheck_large"` split a CI run, and a
parallel run keeps it in one process); nothing is skipped. Every run's
outputs are compared bit for bit with a plain native run of the same bundle."""
import filecmp
import glob
import os
import platform
import shutil
import subprocess

import numpy as np
import pytest

import glowpy
from glowpy.runtime import Bundle, RuntimeError_
from util import MODELS, reference_data

NAMES = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(MODELS, "*.onnx")))
# minutes under memcheck (super_resolution_10: 3 GMAC, ~3 CPU-minutes even without
# undefined-value tracking; every other model takes seconds)
LARGE = ("super_resolution_10",)
X86 = platform.machine() in ("x86_64", "AMD64")
VG_CPU = "x86-64-v3" if X86 else None
VALGRIND = ["valgrind", "--tool=memcheck", "--error-exitcode=99", "--vex-guest-max-insns=25",
            "--undef-value-errors=yes", "-q"]
FILES = (".o", ".h", ".weights.bin", ".weights.txt", ".json")


def need(tool):
    if shutil.which(tool) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is required under CI")
        pytest.skip(f"{tool} not installed")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """name -> (BundleInfo, directory) of the valgrind-CPU bundle, compiled on first use."""
    root = tmp_path_factory.mktemp("memcheck")
    cache = {}

    def get(name, cpu=VG_CPU, sub="vg"):
        key = (name, cpu, sub)
        if key not in cache:
            d = root / sub / name
            cache[key] = (glowpy.compile(os.path.join(MODELS, name + ".onnx"), str(d), mcpu=cpu), d)
        return cache[key]
    return get


def feeds(info, name):
    inputs, _ = reference_data(name)
    assert len(inputs) == len(info.inputs)
    return {p["name"]: x for p, x in zip(info.inputs, inputs)}


def same(a: dict, b: dict, what: str):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert np.array_equal(a[k], b[k], equal_nan=True), f"{what}: output '{k}' differs"


def memcheck(name, builds, extra=()):
    need("valgrind")
    info, d = builds(name)
    x = feeds(info, name)
    native = Bundle(str(d), info.name).run(x)
    b = Bundle(str(d), info.name, runner=VALGRIND + list(extra))
    got = b.run(x, timeout=3600)  # exit status 99 on any memcheck error raises RuntimeError_
    assert "Invalid" not in b.last_stderr and "uninitialised" not in b.last_stderr, b.last_stderr
    same(got, native, f"{name} under memcheck")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in LARGE])
def test_memcheck(name, builds):
    memcheck(name, builds)


@pytest.mark.memcheck_large
def test_memcheck_large_models(builds):
    """Addressability only (invalid reads and writes; no undefined-value tracking, which
    halves the time): its kernels are the same emitters the fully checked models use."""
    assert set(LARGE) <= set(NAMES)
    for name in LARGE:
        memcheck(name, builds, ["--undef-value-errors=no"])


@pytest.mark.parametrize("name", NAMES)
def test_host_cpu_bundle_with_guard_pages_and_asan(name, builds):
    need("cc")
    info, d = builds(name, cpu=None, sub="host")
    x = feeds(info, name)
    native = Bundle(str(d), info.name).run(x)
    for mode in ("1", "2"):
        same(Bundle(str(d), info.name, cflags=[f"-DGLOWPY_GUARD_PAGES={mode}"]).run(x), native,
             f"{name} with guard pages ({mode})")
    asan = Bundle(str(d), info.name, cflags=["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                                             "-fno-sanitize-recover=all"])
    same(asan.run(x), native, f"{name} with AddressSanitizer")
    assert "ERROR: AddressSanitizer" not in asan.last_stderr


@pytest.mark.parametrize("name", NAMES)
def test_reproducible_build(name, builds, tmp_path):
    """Compiling twice, into directories with different paths, gives byte-identical files."""
    info, d = builds(name)
    other = tmp_path / "a" / "much" / "longer" / "path"
    glowpy.compile(os.path.join(MODELS, name + ".onnx"), str(other), mcpu=VG_CPU)
    for sfx in FILES:
        assert filecmp.cmp(d / (info.name + sfx), other / (info.name + sfx), shallow=False), \
            f"{info.name}{sfx} differs between two compiles"


# -- the checks themselves catch overruns -------------------------------------------------------

EVIL = r"""
#include <stdint.h>
int mnist8(uint8_t *c, uint8_t *m, uint8_t *a) {
  volatile uint8_t *p = OFFENDER;
  p[INDEX] = 1;  /* one byte outside a region */
  (void)c; (void)m; (void)a;
  return 0;
}
"""


@pytest.mark.parametrize("offender, index", [("m", "MNIST8_MUTABLE_MEM_SIZE"), ("a", "-1")])
def test_the_checks_catch_an_out_of_region_write(offender, index, builds, tmp_path):
    """A stand-in for a miscompiled bundle: mnist8's header and weights with an object that
    writes one byte past the mutable region (or before the activations)."""
    need("cc")
    info, d = builds("mnist8", cpu=None, sub="host")
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    src = tmp_path / "evil.c"
    src.write_text(f'#include "{bad}/mnist8.h"\n' + EVIL.replace("OFFENDER", offender)
                   .replace("INDEX", index))
    for mode in ("1", "2"):
        subprocess.run(["cc", "-c", "-O1", str(src), "-o", str(bad / "mnist8.o")], check=True)
        hits = {"m": "1", "a": "2"}[offender] == mode  # which guard sits on that side
        b = Bundle(str(bad), "mnist8", cflags=[f"-DGLOWPY_GUARD_PAGES={mode}"])
        if hits:
            with pytest.raises(RuntimeError_, match=r"exit -11"):
                b.run(feeds(info, "mnist8"))
    if shutil.which("valgrind"):
        subprocess.run(["cc", "-c", "-O1", str(src), "-o", str(bad / "mnist8.o")], check=True)
        b = Bundle(str(bad), "mnist8", runner=VALGRIND)
        with pytest.raises(RuntimeError_, match=r"exit 99.*Invalid write of size 1"):
            b.run(feeds(info, "mnist8"))
    subprocess.run(["cc", "-c", "-O1", "-fsanitize=address", str(src), "-o", str(bad / "mnist8.o")],
                   check=True)
    b = Bundle(str(bad), "mnist8", cflags=["-fsanitize=address"])
    with pytest.raises(RuntimeError_, match=r"AddressSanitizer: heap-buffer-overflow"):
        b.run(feeds(info, "mnist8"))

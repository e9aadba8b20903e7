"""benchmarks/zoo_perf.py's per-op-family profile (benchmarks/op_families.py), driven through
the real path on the zoo's smallest model: an instrumented bundle run in process and
onnxruntime's session profiler split the two timed calls by op family."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "benchmarks")
sys.path.insert(0, BENCH)

import op_families  # noqa: E402
from util import SHARED  # noqa: E402
from vector_levels import RUNNABLE, params  # noqa: E402


def test_families_and_shares():
    assert op_families.family("ConvWinograd") == op_families.family("FusedConv") == "convolution"
    assert op_families.family("QuickGelu") == op_families.family("FusedElementwise") == "elementwise"
    assert op_families.family("ReorderInput") == "data movement"
    s = op_families.shares({"Conv": 3.0, "FusedConv": 1.0, "Sigmoid": 4.0})
    assert s == {"convolution": (0.5, ["Conv", "FusedConv"]), "elementwise": (0.5, ["Sigmoid"])}


@pytest.mark.parametrize("model", ["autoencoder"])
def test_zoo_profile_adds_up(model, tmp_path):
    """The families' times add up to each side's timed call, and every op of the bundle's
    profile falls in a family."""
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "zoo_perf.py"), "--models", model,
                        "--rounds", "1", "--batches", "2", "--seconds", "0.01", "--profile",
                        "--no-docs", "--json", str(out), "--work", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    row, = json.loads(out.read_text())
    fams = row["families"]
    assert sum(f["bundle_ms"] for f in fams.values()) == pytest.approx(row["bundle_ms"], rel=1e-6)
    assert sum(f["ort_ms"] for f in fams.values()) == pytest.approx(row["ort_ms"], rel=1e-6)
    assert fams["matrix product"]["bundle_ops"] == ["Gemm"]  # the autoencoder's Gemm chain
    assert fams["matrix product"]["bundle_ms"] > 0.5 * row["bundle_ms"]
    assert "| matrix product |" in r.stdout and "geometric mean ratio" in r.stdout


@pytest.mark.parametrize("level", params([lv for lv in RUNNABLE if lv.cpu == "x86-64"]))
def test_benchmark_for_another_cpu(level, tmp_path):
    """--mcpu: the bundles (timed and profiled) are built for that CPU, the FMA peak is measured
    on its vectors, the sentence says so, and the docs tables are left alone. SSE2's baseline
    (tests/vector_levels.py) runs on every x86-64 host."""
    import perf
    assert perf.target_simd("x86-64") == (16, 16)
    assert perf.target_simd("x86-64-v3") == (32, 16)
    assert perf.target_simd("x86-64-v4") == (64, 32)
    doc = os.path.join(os.path.dirname(HERE), "docs", "performance.md")
    before = open(doc).read()
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "zoo_perf.py"), "--models",
                        "autoencoder", "--mcpu", "x86-64", "--ort-avx2", "--rounds", "1",
                        "--batches", "2", "--seconds", "0.01", "--profile", "--json", str(out),
                        "--work", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "bundles compiled for `-mcpu=x86-64` (4 float lanes)" in r.stdout
    assert "(4-lane vectors)" in r.stdout and "--mcpu x86-64 --ort-avx2`" in r.stdout
    assert "onnxruntime with its AVX-512 kernels off" in r.stdout
    assert "(NCHWc blocks of 8 floats, u8 x s8 pairs saturating as on AVX2)" in r.stderr
    row, = json.loads(out.read_text())
    assert row["agrees"] and row["bundle_ms"] > 0
    # the timed bundle and the instrumented one the profile ran
    manifests = [m for m in map(lambda p: json.loads(p.read_text()), tmp_path.rglob("*.json"))
                 if isinstance(m, dict) and "target" in m and "bundle_api" in m]
    assert len(manifests) == 2
    assert [m["target"]["cpu"] for m in manifests] == ["x86-64", "x86-64"]
    assert sorted("instrumentation" in m for m in manifests) == [False, True]
    assert open(doc).read() == before


def test_ort_avx2_loads_the_avx2_kernels():
    """--ort-avx2's copy of onnxruntime runs MLAS's AVX2 kernels on any x86-64 host: 8-float
    NCHWc blocks where the installed wheel uses 16 on an AVX-512 host (8 on an AVX2 one), and
    u8 x s8 pairs summed into AVX2's saturated int16 where the installed wheel uses VNNI on a
    host with AVX512-VNNI or AVX-VNNI (exact sums). On another architecture it refuses with
    one error line."""
    def probe(patched: bool) -> subprocess.CompletedProcess:
        code = ("import sys; sys.path.insert(0, %r); import ort_avx2; %s "
                "print(ort_avx2.nchwc_block(), ort_avx2.u8s8_saturates())"
                % (BENCH, "sys.path.insert(0, ort_avx2.patched_copy());" if patched else ""))
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300)
    patched = probe(True)
    if os.uname().machine != "x86_64":
        assert patched.returncode == 1 and patched.stderr.startswith("error: --ort-avx2")
        return
    assert patched.returncode == 0, patched.stderr[-2000:]
    assert patched.stdout.split() == ["8", "True"]
    flags = set(open("/proc/cpuinfo").read().split())
    vnni = bool(flags & {"avx512_vnni", "avx_vnni"})
    assert probe(False).stdout.split() == ["16" if "avx512f" in flags else "8", str(not vnni)]


@pytest.mark.parametrize("level", params([lv for lv in RUNNABLE if lv.cpu == "x86-64"]))
def test_layer_profile_matches_layers(level, tmp_path):
    """benchmarks/layer_profile.py on ResNet-8 (SSE2 code, runs on every x86-64 host): its 9
    convolutions and the Linear layer are matched one to one with onnxruntime's nodes in order,
    every one with a time on both sides, the convolutions' variants named."""
    model = os.path.join(SHARED, "models", "mlperf_tiny_resnet8.onnx")
    out = tmp_path / "layers.json"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "layer_profile.py"), model,
                        "--mcpu", level.cpu, "--rounds", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["layers"]
    assert len(rows) == 10
    assert [row["op"].split("+")[0] for row in rows] == ["Conv"] * 9 + ["Gemm"]
    assert all(row["bundle_us"] > 0 and row["ort_us"] > 0 and row["ort_node"] for row in rows)
    assert all(row["variant"] for row in rows)


@pytest.mark.parametrize("level", params([lv for lv in RUNNABLE if lv.lanes >= 8]))
def test_layer_profile_without_winograd(level, tmp_path):
    """layer_profile.py --no-winograd compiles every convolution direct (-winograd=false): the
    3x3 layers Winograd takes by default (test_reuse.chain_model: room made for the scratch)
    are profiled with a direct variant instead, every layer timed on both sides."""
    import onnx
    from test_reuse import chain_model
    model = str(tmp_path / "chain.onnx")
    onnx.save(chain_model(), model)

    def variants(*extra):
        out = tmp_path / "layers.json"
        r = subprocess.run([sys.executable, os.path.join(BENCH, "layer_profile.py"), model,
                            "--mcpu", level.cpu, "--rounds", "1", "--json", str(out), *extra],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        rows = json.loads(out.read_text())["layers"]
        assert all(row["bundle_us"] > 0 and row["ort_us"] > 0 for row in rows)
        return [row["variant"] for row in rows]
    default, direct = variants(), variants("--no-winograd")
    assert len(default) == len(direct) == 4  # the 1x1 and three 3x3 layers
    assert default[1:] == ["winograd"] * 3
    assert direct[0] == default[0] and all(v and v != "winograd" for v in direct)


def test_layer_profile_sums_the_chunks_of_one_node():
    """A layer split over input-channel chunks (split_reduction.py: `conv_232_c0` .. `_c3`) is
    one node of onnxruntime's: its chunks are summed under the node's name and the layers after
    it keep their own partners; a name that only looks like a chunk stays as it is."""
    import layer_profile
    us = {"conv_1": 5.0, "conv_232_c0": 1.0, "conv_232_c1": 2.0, "conv_232_c2": 4.0,
          "conv_233": 7.0, "head_c1": 3.0}
    theirs = {"conv_1": 1, "conv_232": 1, "conv_233": 1, "head_c1": 1}
    merged, first = layer_profile.merge_chunks(us, theirs)
    assert merged == {"conv_1": 5.0, "conv_232": 7.0, "conv_233": 7.0, "head_c1": 3.0}
    assert list(merged) == ["conv_1", "conv_232", "conv_233", "head_c1"]
    assert first["conv_232"] == "conv_232_c0" and first["conv_233"] == "conv_233"

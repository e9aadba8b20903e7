"""glowpy.runtime's in-process path: shared models give the same bits as the subprocess
harness (the object linked by the C compiler), it runs with no C compiler on PATH, sessions
of one Bundle share the constant region and agree bit for bit from 4 threads, bundles for
another target are refused with one line."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

import glowpy
from bundle_cache import compiled
from glowpy.runtime import Bundle, RuntimeError_
from glowpy.runtime.inprocess import host_refusal
from toolchains import require_tool
from vector_levels import HOST, LEVELS, RUNNABLE
from util import REPO, assert_close_to_reference, is_tflite_reference, model_path, reference_data

MODELS = ["mnist8", "mnist_onnx2c_atmega14x14", "mlperf_tiny_ad_autoencoder",
          "mlperf_tiny_kws_dscnn", "mlperf_tiny_kws_dscnn_int8_qdq"]


def feeds_of(info, name):
    ins, _ = reference_data(name)
    return {p["name"]: x for p, x in zip(info.inputs, ins)}


@pytest.mark.parametrize("api", ["static", "dynamic"])
@pytest.mark.parametrize("name", MODELS)
def test_in_process_matches_harness_bit_for_bit(name, api):
    require_tool("cc")
    info, d, _ = compiled(name, bundle_api=api)
    feeds = feeds_of(info, name)
    b, h = Bundle(d, info.name), Bundle(d, info.name, harness=True)
    assert (b.mode, h.mode) == ("inprocess", "harness")
    got, ref = b.run(feeds), h.run(feeds)
    assert list(got) == [p["name"] for p in info.outputs]
    for k in ref:
        assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape
        np.testing.assert_array_equal(got[k].view(np.uint8), ref[k].view(np.uint8), err_msg=k)
    if "int8" not in name:  # and it is the right answer (the float models' references)
        for p, r in zip(info.outputs, reference_data(name)[1]):
            assert_close_to_reference(got[p["name"]], r, is_tflite_reference(name), p["name"])
    assert b.best_ns > 0


CHILD = r"""
import shutil, sys
import numpy as np
assert not any(shutil.which(c) for c in ("cc", "gcc", "clang", "ld")), "a C toolchain is on PATH"
from glowpy.runtime import Bundle
x = np.load(sys.argv[2])
b = Bundle(sys.argv[1])
out = b.run({"Input3": x})["Plus214_Output_0"]
np.save(sys.argv[3], out)
print(b.mode)
"""


def test_runs_with_no_c_compiler_on_path(tmp_path):
    """A python whose PATH holds only python (no cc, gcc, clang, ld) runs mnist8 in process and
    returns what the harness, linked by the C compiler in this process, returns."""
    require_tool("cc")
    info, d, _ = compiled("mnist8")
    x = reference_data("mnist8")[0][0]
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python")
    (tmp_path / "child.py").write_text(CHILD)
    env = {"PATH": str(tmp_path / "bin"), "PYTHONPATH": REPO, "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, str(tmp_path / "child.py"), d, str(tmp_path / "x.npy"),
                        str(tmp_path / "y.npy")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["inprocess"]
    ref = Bundle(d, harness=True).run({"Input3": x})["Plus214_Output_0"]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), ref)


def test_four_threads_with_their_own_sessions_agree_bit_for_bit():
    """4 threads x 1,000 calls on one Bundle: each thread its session and its inputs, the
    constant region shared; every result equals the single-threaded one for that input."""
    info, d, _ = compiled("mnist8")
    b = Bundle(d, info.name)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1, 1, 28, 28)).astype(np.float32) * 50 for _ in range(4)]
    expected = [b.run({"Input3": x})["Plus214_Output_0"] for x in xs]
    results = [None] * 4
    sessions = [b.session() for _ in range(4)]
    assert len({s._args[0].value for s in sessions}) == 1  # one constant region
    assert len({s.mutable.ctypes.data for s in sessions}) == 4

    def work(i):
        s, bad = sessions[i], 0
        for j in range(1000):
            # alternate this thread's input with a zero input so a stale result would show
            x = xs[i] if j % 2 == 0 else np.zeros_like(xs[i])
            y = s.run({"Input3": x}, copy=False)["Plus214_Output_0"]
            if j % 2 == 0:
                bad += not np.array_equal(y.view(np.uint32), expected[i].view(np.uint32))
        results[i] = bad
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0, 0, 0, 0]
    # Bundle.run itself gives each calling thread its own session
    got = [None] * 4
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(
        i, [b.run({"Input3": xs[i]})["Plus214_Output_0"] for _ in range(200)])) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        for y in got[i]:
            np.testing.assert_array_equal(y, expected[i])


def test_session_views_are_the_mutable_region():
    info, d, _ = compiled("mnist8")
    b = Bundle(d, info.name)
    x = reference_data("mnist8")[0][0]
    s = b.session()
    s.inputs["Input3"][...] = x
    s.invoke()
    out = s.outputs["Plus214_Output_0"]
    assert np.shares_memory(out, s.mutable) and np.shares_memory(s.inputs["Input3"], s.mutable)
    assert s.mutable.ctypes.data % 64 == 0 and s.activations.ctypes.data % 64 == 0
    np.testing.assert_array_equal(out, b.run({"Input3": x})["Plus214_Output_0"])
    view = s.run({"Input3": np.zeros_like(x)}, copy=False)["Plus214_Output_0"]
    assert view is out or np.shares_memory(view, out)
    copy = s.run({"Input3": x})["Plus214_Output_0"]
    assert not np.shares_memory(copy, s.mutable)
    # the constant region is one read-only image per Bundle
    with pytest.raises(ValueError):
        b._loaded.constant[0] = 1
    assert b._loaded.constant_addr % 64 == 0
    with pytest.raises(RuntimeError_, match="missing input 'Input3'"):
        s.run({})


def test_cross_target_bundle_is_refused_in_one_line(tmp_path):
    info = glowpy.compile(model_path("mnist8"), str(tmp_path / "a64"), target="aarch64")
    with pytest.raises(RuntimeError_) as e:
        Bundle(str(tmp_path / "a64"), info.name)
    msg = str(e.value)
    assert "\n" not in msg and "aarch64" in msg and "runner=" in msg


def test_missing_cpu_feature_is_refused():
    have = llvm.get_host_cpu_features()
    lacking = sorted(f for f, on in have.items() if not on)
    assert lacking, "this host has every CPU feature LLVM knows"
    info, _, _ = compiled("mnist8")  # the host's own target
    target = info.manifest["target"]
    assert host_refusal(target) is None
    refusal = host_refusal({**target, "features": target["features"] + f",+{lacking[0]}"})
    assert lacking[0] in refusal and "\n" not in refusal


def test_truncated_weights_refused(tmp_path):
    info, d, _ = compiled("mnist8")
    bad = tmp_path / "b"
    shutil.copytree(d, bad)
    w = bad / "mnist8.weights.bin"
    w.write_bytes(w.read_bytes()[:-100])
    with pytest.raises(RuntimeError_, match="weights.bin has .* bytes, the manifest's constant region"):
        Bundle(str(bad), "mnist8")


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_vector_levels_run_where_the_host_executes_them(level, tmp_path):
    """A bundle for an x86 level this host executes runs in process (the same bits as the
    harness); one for a wider level is refused in one line instead of faulting the process."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        level = HOST
    d = str(tmp_path / level.name)
    info = glowpy.compile(model_path("mnist_onnx2c_atmega14x14"), d, **level.options)
    x = reference_data("mnist_onnx2c_atmega14x14")[0][0]
    feeds = {info.inputs[0]["name"]: x}
    if level in RUNNABLE or level is HOST:
        got = Bundle(d).run(feeds)
        require_tool("cc")
        ref = Bundle(d, harness=True).run(feeds)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])
    else:
        with pytest.raises(RuntimeError_) as e:
            Bundle(d)
        assert "\n" not in str(e.value) and f"-mcpu={level.cpu}" in str(e.value)

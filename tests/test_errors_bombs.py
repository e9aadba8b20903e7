"""Tiny models that asked for huge work: absurd window attributes, unused external data of
gigabytes, NaN/inf where a size is computed, hostile profiles and option values. Each ends in
one line and the right status within seconds (the elapsed-time asserts are only hang guards);
legitimate large strides still compile and match onnxruntime."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import HANG_GUARD, const, model, one_error, refused, save, vi
from util import REPO, check_against_onnxruntime

RNG = np.random.default_rng(7)


def pool(op, shape, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], name="p", **attrs)], [vi("x", list(shape))],
                 [vi("y", None)])


def conv(shape, w, **attrs):
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="c", **attrs)],
                 [vi("x", list(shape))], [vi("y", None)], [const("w", w)])


# -- window attributes ------------------------------------------------------------------------

@pytest.mark.parametrize("stride", [4096, 2 ** 14, 2 ** 40])
def test_stride_past_the_input_is_normalized(tmp_path, stride):
    """One output position whatever the stride: compiled as the stride of the padded input
    (it used to run for minutes at 4096 and abort LLVM at 2^14)."""
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    t0 = time.monotonic()
    check_against_onnxruntime(pool("MaxPool", x.shape, kernel_shape=[2, 2], strides=[stride] * 2),
                              {"x": x}, tmp_path / "p")
    w = RNG.standard_normal((2, 1, 3, 3)).astype(np.float32)
    check_against_onnxruntime(conv(x.shape, w, strides=[stride] * 2, group=2), {"x": x},
                              tmp_path / "c")
    assert time.monotonic() - t0 < HANG_GUARD


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_large_legitimate_pool_stride_matches_onnxruntime(tmp_path, op):
    """16 lanes x stride 100 is past the vector cap: lane-by-lane loads, same values."""
    x = RNG.standard_normal((1, 2, 3, 1000)).astype(np.float32)
    check_against_onnxruntime(pool(op, x.shape, kernel_shape=[2, 3], strides=[1, 100]),
                              {"x": x}, tmp_path, rtol=1e-5)


@pytest.mark.parametrize("group", [1, 2])
def test_large_legitimate_conv_stride_matches_onnxruntime(tmp_path, group):
    x = RNG.standard_normal((1, 2, 3, 1000)).astype(np.float32)
    w = RNG.standard_normal((2, 2 // group, 2, 3)).astype(np.float32)
    check_against_onnxruntime(conv(x.shape, w, strides=[1, 97], group=group, pads=[1, 1, 0, 2]),
                              {"x": x}, tmp_path)


def test_pads_past_the_input_and_the_window(capsys, tmp_path):
    m = pool("AveragePool", (1, 2, 8, 8), kernel_shape=[2, 2], pads=[2 ** 20] * 4,
             strides=[2 ** 20] * 2)
    assert refused(capsys, tmp_path, m) == (
        "node 'p' (AveragePool): pads [1048576, 1048576, 1048576, 1048576] reach 1048576 past "
        "the input along spatial dim 0; more than the input's extent 8 plus the window's 2 "
        "(kernel_shape [2, 2], dilations [1, 1]) reads only padding")
    # the bound itself: pads of input + window still compile (a Conv's border is its bias)
    x = np.random.default_rng(2).standard_normal((1, 2, 8, 8)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((3, 2, 1, 1)).astype(np.float32)
    check_against_onnxruntime(conv(x.shape, w, pads=[9, 9, 9, 9]), {"x": x}, tmp_path / "ok")


def test_conv_dilation_past_twice_the_input(capsys, tmp_path):
    """The bound holds for the taps that land: here the first and the last both land (pads
    11 give 12 output positions), 19 apart over 8 inputs. (A dilation whose outer taps read
    only padding compiles to the taps that land: tests/test_conv_taps.py.)"""
    m = conv((1, 2, 8, 8), np.ones((2, 2, 3, 3), np.float32), dilations=[9, 9], pads=[11] * 4)
    assert refused(capsys, tmp_path, m) == (
        "node 'c' (Conv): kernel_shape [3, 3] (dilations [9, 9]) spans more than "
        "twice the input [8, 8] along spatial dim 0")


# -- NaN and inf where sizes are computed ----------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_range_with_nan_or_inf(capsys, tmp_path, bad):
    m = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="r")], [], [vi("y", None)],
              [const("s", np.float32(0)), const("l", np.float32(bad)), const("d", np.float32(1))])
    assert refused(capsys, tmp_path, m) == (
        f"node 'r' (Range): start 0.0, limit {np.float32(bad)} and delta 1.0 must be finite "
        "numbers")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_resize_scales_nan_or_inf(capsys, tmp_path, bad):
    m = model([helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs")], [vi("x", [1, 1, 4, 4])],
              [vi("y", None)], [const("s", np.array([1, 1, bad, 2], np.float32))])
    assert refused(capsys, tmp_path, m) == (
        f"node 'rs' (Resize): scales [1.0, 1.0, {float(np.float32(bad))}, 2.0] must be positive "
        "finite numbers")


# -- external data ---------------------------------------------------------------------------

def external(t, location, offset, length):
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        t.external_data.add(key=k, value=str(v))
    return t


def huge_initializer_model(d, used: bool):
    """y = x + w; `big` (4 GiB of float32, a sparse file) is unused, or added to y."""
    with open(os.path.join(d, "big.bin"), "wb") as f:
        f.truncate(2 ** 32)
    big = external(const("big", np.zeros(1, np.float32)), "big.bin", 0, 2 ** 32)
    del big.dims[:]
    big.dims.extend([2 ** 30])
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    if used:
        nodes = [helper.make_node("Add", ["x", "big"], ["y"], name="add")]
    m = model(nodes, [vi("x", [1])], [vi("y", None)], [big])
    return save(m, os.path.join(d, "m.onnx"))


def test_unused_huge_external_initializer_is_not_read(tmp_path):
    """A 4 GiB sparse file behind an unused initializer: the compile succeeds and its peak
    memory stays that of a small model (it used to read the whole file)."""
    path = huge_initializer_model(tmp_path, used=False)
    code = ("import resource, sys, glowpy; glowpy.compile(sys.argv[1], sys.argv[2]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    env = dict(os.environ, PYTHONPATH=REPO)
    res = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    # KiB: the compiler itself takes 0.5-0.7 GB here; reading the file would add 4 GiB
    assert int(res.stdout.split()[-1]) < 2 * 1024 * 1024
    assert (tmp_path / "out" / "m.o").exists()


def test_used_external_initializer_over_the_limit(capsys, tmp_path):
    path = huge_initializer_model(tmp_path, used=True)
    msg = one_error(capsys, f"-model={path}", f"-emit-bundle={tmp_path / 'out'}",
                    "-max-region-size=64M", status=1)
    assert msg == ("tensor 'big': external data 'big.bin' needs 4294967296 bytes, more than the "
                   "limit of 67108864 bytes (the target's address space, or -max-region-size)")


@pytest.mark.parametrize("text", ["\u0663", "\u00b2", "1\u0660"])
def test_unicode_digits_in_external_offset(capsys, tmp_path, text):
    with open(tmp_path / "w.bin", "wb") as f:
        f.write(b"\0" * 64)
    w = external(const("w", np.zeros(2, np.float32)), "w.bin", text, 8)
    m = model([helper.make_node("Add", ["x", "w"], ["y"], name="a")], [vi("x", [2])],
              [vi("y", None)], [w])
    msg = one_error(capsys, f"-model={save(m, tmp_path / 'm.onnx')}",
                    f"-emit-bundle={tmp_path / 'out'}", status=1)
    assert msg.startswith("tensor 'w': external data 'w.bin': offset '")
    assert msg.endswith("' is not a non-negative integer")


# -- hostile option values and side files ------------------------------------------------------

@pytest.mark.parametrize("spec, expect", [
    ("x,int8q,0.1,500,[1,4]", "-model-input=x,int8q: offset 500 is outside the int8 range -128..127"),
    ("x,uint8q,0.1,-1,[1,4]", "-model-input=x,uint8q: offset -1 is outside the uint8 range 0..255"),
    ("x,int8q,nan,0,[1,4]", "-model-input=x,int8q: scale nan must be a positive finite number"),
])
def test_quantized_input_out_of_range(capsys, tmp_path, spec, expect):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [1, 4])],
              [vi("y", [1, 4])])
    assert refused(capsys, tmp_path, m, f"-model-input={spec}", status=2) == expect


@pytest.mark.parametrize("body", [b"\xff\xfe\x00garbage", b"[" * 100000 + b"]" * 100000,
                                  b"{\"a\": " * 50000 + b"1" + b"}" * 50000])
def test_hostile_profile(capsys, tmp_path, body):
    prof = tmp_path / "p.json"
    prof.write_bytes(body)
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [1, 4])],
              [vi("y", [1, 4])])
    msg = refused(capsys, tmp_path, m, f"-load-profile={prof}")
    assert msg.startswith(f"-load-profile={prof}: not a glowpy quantization profile")


def test_deeply_nested_caffe2_text_net(capsys, tmp_path):
    d = tmp_path / "c2"
    d.mkdir()
    depth = 20000
    (d / "predict_net.pbtxt").write_text('name: "n" op { type: "Relu" input: "x" output: "y" '
                                         + 'arg { name: "a" n { ' * depth + "} }" * depth + " }")
    (d / "init_net.pbtxt").write_text('name: "i"')
    msg = one_error(capsys, f"-model={d}", f"-emit-bundle={tmp_path / 'out'}", status=1)
    assert msg == (f"'{d / 'predict_net.pbtxt'}' is not a usable Caffe2 NetDef: its messages are "
                   "nested too deeply")


def test_profiler_dataset_of_strings(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [1, 2])],
              [vi("y", [1, 2])])
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    code = "import sys; from glowpy.profiler import main; sys.argv[0] = 'model-profiler'; main()"
    res = subprocess.run([sys.executable, "-c", code, f"-model={save(m, tmp_path / 'm.onnx')}",
                          f"-input-dataset=x,npy,{tmp_path / 's.npy'}",
                          f"-dump-profile={tmp_path / 'p.yaml'}"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO),
                         timeout=120)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"model-profiler: error: -input-dataset=x,npy,{tmp_path / 's.npy'}: "
        f"'{tmp_path / 's.npy'}' holds <U1 values; input 'x' is float32"]

"""The newest ops of decoder models, against onnx's reference implementation (onnxruntime 1.32
does not load them): CausalConvWithState (opset 27), TensorScatter (24), SwiGLU (28); and
BitCast (26) against numpy's view. Tolerances rtol 1e-5, atol 1e-6 (float32 sums in another
order, SiLU's sigmoid); indices, copies and bit casts exact."""
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from hostile import refused
from util import compile_and_run, reference_of

RNG = np.random.default_rng(27)


@pytest.fixture(autouse=True)
def _data_of_its_own(request):
    """Each test draws its data from a seed of its own name, whatever order pytest-xdist runs
    the tests in."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def model(op, feeds: dict, inputs: list, n_out: int = 1, inits: dict | None = None,
          opset: int = 28, **attrs):
    outs = [f"y{i}" for i in range(n_out)]
    g = helper.make_graph(
        [helper.make_node(op, inputs, outs, **attrs)], op,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outs],
        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check(m, feeds, tmp_path, exact=False):
    got = compile_and_run(m, feeds, tmp_path)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("length, k, past, bias, act", [
    (16, 4, False, False, "none"),       # prefill, zero state
    (16, 4, True, True, "silu"),         # prefill after a state
    (1, 4, True, True, "silu"),          # one decode step
    (2, 4, False, True, "swish"),        # shorter than the state
    (9, 2, True, False, "none"),
])
def test_causal_conv_with_state(length, k, past, bias, act, tmp_path):
    """Both outputs (the convolution and the present state) equal the reference's."""
    feeds = {"x": f32(2, 8, length)}
    inits = {"w": f32(8, 1, k)}
    ins = ["x", "w", "b" if bias else ""]
    if bias:
        inits["b"] = f32(8)
    if past:
        feeds["s"] = f32(2, 8, k - 1)
        ins.append("s")
    m = model("CausalConvWithState", feeds, ins, 2, inits, opset=27, activation=act)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_kv_cache(mode, tmp_path):
    """A KV cache (batch, heads, 10 positions, 16) updated with 3 new positions per batch row
    from run-time write indices (circular: wrapping past the end), and a prefill without
    write_indices."""
    feeds = {"past": f32(3, 2, 10, 16), "upd": f32(3, 2, 3, 16),
             "at": np.array([0, 4, 7 if mode == "linear" else 9], np.int64)}
    check(model("TensorScatter", feeds, ["past", "upd", "at"], opset=24, mode=mode), feeds,
          tmp_path / "decode", exact=True)
    feeds = {"past": f32(3, 10, 16), "upd": f32(3, 4, 16)}
    check(model("TensorScatter", feeds, ["past", "upd"], opset=24, axis=1, mode=mode), feeds,
          tmp_path / "prefill", exact=True)


def test_tensor_scatter_past_the_end_writes_nothing(tmp_path):
    """Linear mode, positions past the cache's end (onnx's reference fails there): they are
    not written, the rest is, as the numpy reference says."""
    feeds = {"past": f32(2, 6, 4), "upd": f32(2, 3, 4), "at": np.array([5, 100], np.int64)}
    m = model("TensorScatter", feeds, ["past", "upd", "at"], opset=24)
    got = compile_and_run(m, feeds, tmp_path)[0]
    want = feeds["past"].copy()
    want[0, 5] = feeds["upd"][0, 0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(reference_of(m, feeds)[0], want)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu(alpha, tmp_path):
    feeds = {"a": f32(4, 64) * 3, "b": f32(4, 64)}
    check(model("SwiGLU", feeds, ["a", "b"], alpha=alpha), feeds, tmp_path)


@pytest.mark.parametrize("src, to", [(np.float32, TensorProto.INT32), (np.int32, TensorProto.FLOAT),
                                     (np.int8, TensorProto.UINT8), (np.bool_, TensorProto.UINT8)])
def test_bitcast(src, to, tmp_path):
    """Bit for bit numpy's view, NaN and infinity patterns included."""
    bits = RNG.integers(0, 1 << 32, (5, 7), dtype=np.uint64).astype(np.uint32)
    bits[0, :3] = [0x7FC00001, 0x7F800000, 0xFF800000]
    x = bits.view(np.int32).astype(np.int32).view(np.float32) if src == np.float32 else \
        bits.view(np.int32).astype(src) if src != np.bool_ else bits.astype(np.bool_)
    feeds = {"x": np.ascontiguousarray(x.astype(src, copy=False))}
    got = compile_and_run(model("BitCast", feeds, ["x"], opset=26, to=to), feeds, tmp_path)[0]
    want = feeds["x"].view(helper.tensor_dtype_to_np_dtype(to))
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("op, feeds, attrs, fix", [
    ("SwiGLU", {"a": (2, 8), "b": (2, 1)}, {}, "must have one shape and type"),
    ("TensorScatter", {"a": (2, 6, 4), "b": (2, 7, 4)}, {"axis": 1}, "update float32[2, 7, 4]"),
    ("BitCast", {"a": (3,)}, {"to": TensorProto.INT8}, "BitCast keeps the bit width"),
])
def test_bad_new_ops_are_refused(op, feeds, attrs, fix, capsys, tmp_path):
    arrays = {n: np.zeros(s, np.float32) for n, s in feeds.items()}
    m = model(op, arrays, list(arrays), opset=28, **attrs)
    msg = refused(capsys, tmp_path, m)
    assert msg.startswith(f"node 'y0' ({op}): ") and fix in msg, msg

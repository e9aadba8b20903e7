"""Weights computed at run time: the weights are a graph input here, as a StyleGAN2
modulation, a CondConv mixture or a hypernetwork computes them. Each case is compiled for
each runnable x86 vector level, run and compared with onnxruntime.

* Conv (glowpy/codegen/kernels/conv/runtime_weights.py): the memory report must show a
  register-tiled variant (not the scalar direct loop) and, where time comes first, the packing
  scratch as the instruction's own buffer of the weights' size. With -activation-memory=min
  there is no scratch and the pixel tiles read the model's layout.
* ConvTranspose (glowpy/ir/passes/convtranspose.py): re-laid out by graph nodes into the
  Conv or the 1x1 product + Col2Im, as constant weights are at compile time.
* Gemm with transB: for a few rows of A, dot products over B's rows (glowpy/codegen/kernels/
  gemm/dot.py); for more, a Transpose (glowpy/ir/passes/gemm_operands.py) and the vector kernel."""

import numpy as np
import pytest

import vector_levels
from util import GraphBuilder, check_against_onnxruntime, memory_report

RNG = np.random.default_rng(17)

CASES = {  # (C, M, spatial, kernel, stride, dilation, group, pads)
    "3x3_deep": (32, 48, (20, 20), 3, 1, 1, 1, 1),
    "3x3_stride2": (16, 24, (17, 17), 3, 2, 1, 1, 1),
    "1x1": (24, 40, (9, 11), 1, 1, 1, 1, 0),
    "grouped": (16, 32, (12, 12), 3, 1, 1, 4, 1),
    "depthwise_5x5": (12, 12, (15, 15), 5, 1, 1, 12, 2),
    "dilated": (8, 16, (14, 14), 3, 1, 2, 1, 2),
    "conv1d": (16, 20, (50,), 5, 1, 1, 1, 2),
}


def model(c, m, spatial, k, s, d, g, p):
    nd = len(spatial)
    w = (RNG.standard_normal((m, c // g) + (k,) * nd) / np.sqrt(c // g * k ** nd)).astype(np.float32)
    gb = GraphBuilder(x=RNG.standard_normal((1, c) + spatial).astype(np.float32), w=w)
    gb.node("Conv", ["x", "w", (0.1 * RNG.standard_normal(m)).astype(np.float32)],
            kernel_shape=[k] * nd, strides=[s] * nd, dilations=[d] * nd, group=g, pads=[p] * 2 * nd)
    return gb.model(opset=13), gb.feeds


def conv_plan(m, tmp_path, **options):
    """(variant name, the Conv's scratch buffers: name -> bytes) from the memory report."""
    report = memory_report(m, tmp_path, **options)
    conv, = [i for i in report["instructions"] if i["op"] == "Conv"]
    scratch = {b["name"]: b["size"] for b in report["buffers"]
               if b["name"].endswith("_packed_weights")}
    return conv["variant"]["name"], scratch


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("case", sorted(CASES))
def test_runtime_weights_match_onnxruntime(case, level, tmp_path):
    m, feeds = model(*CASES[case])
    name, scratch = conv_plan(m, tmp_path / "plan", **level.options)
    assert name in ("pixel_vectorized", "channel_vectorized"), name
    assert list(scratch.values()) == [feeds["w"].nbytes], scratch
    check_against_onnxruntime(m, feeds, tmp_path / "run", rtol=1e-4, atol=1e-4, **level.options)


@pytest.mark.parametrize("case", ["3x3_deep", "grouped", "conv1d"])
def test_memory_first_reads_the_model_layout(case, tmp_path):
    """No scratch where bytes come first: the pixel tiles read the weights unpacked."""
    m, feeds = model(*CASES[case])
    assert conv_plan(m, tmp_path / "plan", activation_memory="min") == ("pixel_vectorized", {})
    check_against_onnxruntime(m, feeds, tmp_path / "run", rtol=1e-4, atol=1e-4,
                              activation_memory="min")


def test_deep_3x3_takes_the_channel_tiles(tmp_path):
    """The layer constant weights would run channel-vectorized does so with run-time ones."""
    m, _ = model(*CASES["3x3_deep"])
    for level in vector_levels.LEVELS:
        if level.lanes >= 8:
            assert conv_plan(m, tmp_path / level.name, **level.options)[0] == "channel_vectorized"


def kernels(m, tmp_path, **options):
    return [(i["op"], i["variant"]["name"] if i.get("variant") else None)
            for i in memory_report(m, tmp_path, **options)["instructions"]]


CONV_T = {  # (C, M, spatial, kernel, attributes), the instructions expected
    "4x4_stride2": ((16, 8, (9, 9), 4, dict(strides=[2, 2], pads=[1] * 4)),
                    ["Transpose", "Conv", "Col2Im", "Add"]),
    "3x3_stride2_output_padding": ((8, 12, (7, 6), 3, dict(strides=[2, 2], pads=[1] * 4,
                                                           output_padding=[1, 1])),
                                   ["Transpose", "Conv", "Col2Im", "Add"]),
    "3x3_stride1_grouped": ((12, 4, (10, 10), 3, dict(group=2, pads=[1] * 4)),
                            ["Slice", "Transpose", "Conv"]),  # (the Slice flips the taps)
}


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("case", sorted(CONV_T))
def test_conv_transpose_matches_onnxruntime(case, level, tmp_path):
    (c, m, spatial, k, attrs), expected = CONV_T[case]
    g = attrs.get("group", 1)
    gb = GraphBuilder(x=RNG.standard_normal((1, c) + spatial).astype(np.float32),
                      w=(RNG.standard_normal((c, m // g, k, k)) / np.sqrt(c * k)).astype(np.float32))
    gb.node("ConvTranspose", ["x", "w", (0.1 * RNG.standard_normal(m)).astype(np.float32)],
            kernel_shape=[k, k], **attrs)
    model = gb.model(opset=13)
    got = kernels(model, tmp_path / "plan", **level.options)
    assert [op for op, _ in got] == expected, got
    assert dict(got)["Conv"] != "direct", got
    check_against_onnxruntime(model, gb.feeds, tmp_path / "run", rtol=1e-4, atol=1e-4,
                              **level.options)


GEMMS = {  # name: (M, K, N, transA, the kernels where time comes first)
    "one_row": (1, 70, 19, 0, [("Gemm+Relu", "dot")]),
    "one_row_transA": (1, 40, 9, 1, [("Gemm+Relu", "dot")]),
    "few_rows": (5, 33, 17, 0, [("Gemm+Relu", "dot")]),
    "many_rows": (40, 33, 17, 0, [("Transpose", "default"), ("Gemm+Relu", "vector")]),
}


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("case", sorted(GEMMS))
def test_gemm_runtime_transposed_b(case, beta, level, tmp_path):
    """Y = Relu(alpha A B^T + beta C) with B a graph input: up to gemm/dot.py's DOT_MAX_M rows
    of A, dot products over B's rows as they are; more, a Transpose and the vector kernel;
    where bytes come first neither Transpose nor scratch. The same values each way (K and N
    not whole vectors: the masked tail of each dot product and the partial block of B's
    rows)."""
    m, kk, n, trans_a, expected = GEMMS[case]
    a = RNG.standard_normal((kk, m) if trans_a else (m, kk)).astype(np.float32)
    gb = GraphBuilder(a=a, b=RNG.standard_normal((n, kk)).astype(np.float32))
    y = gb.node("Gemm", ["a", "b", RNG.standard_normal((1, n)).astype(np.float32)], output=False,
                transA=trans_a, transB=1, alpha=0.7, beta=beta)
    gb.node("Relu", [y])
    model = gb.model(opset=13)
    assert kernels(model, tmp_path / "plan", **level.options) == expected
    check_against_onnxruntime(model, gb.feeds, tmp_path / "run", rtol=1e-4, atol=1e-4,
                              **level.options)
    assert [op for op, _ in kernels(model, tmp_path / "min", activation_memory="min")] == ["Gemm+Relu"]
    check_against_onnxruntime(model, gb.feeds, tmp_path / "run_min", rtol=1e-4, atol=1e-4,
                              activation_memory="min")

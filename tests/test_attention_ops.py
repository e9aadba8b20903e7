"""ONNX Attention (opsets 23 to 25) and RotaryEmbedding (opset 23) through the whole compiler
(glowpy/ir/ops/attention.py) against onnxruntime where it runs the form, else onnx's reference
implementation, within 1e-5 of the largest output (Softmax's exp and the products' order):
3-D and 4-D inputs, grouped-query heads, a past cache and the present outputs, boolean and
float masks shorter than the keys, is_causal with and without a cache, softcap, scale,
nonpad_kv_seqlen at run time, a sliding window, a row with every key masked (0, not NaN), the
qk_matmul_output modes; rotary embeddings in halves and interleaved, partial, with
position_ids and 3-D inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from hostile import refused
from util import compile_and_run, make_graph_model, run_onnxruntime

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(got, want, tol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(float(np.abs(want).max()), 1e-6)
    assert float(np.abs(got - want).max()) <= tol * scale


def check(model, feeds, tmp_path, ort=True):
    got = compile_and_run(model, feeds, tmp_path)
    want = run_onnxruntime(model, feeds) if ort else ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)
    return got


def attention(ins: dict, inits: dict, outs=("y",), opset=23, **attrs):
    names = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    used = [n if n in ins or n in inits else "" for n in names]
    while used and not used[-1]:
        used.pop()
    node = helper.make_node("Attention", used, list(outs), **attrs)
    return make_graph_model([node], ins, [o for o in outs if o], inits, opset=opset)


CASES = {  # name: (inputs, attributes, outputs, onnxruntime)
    "3d_gqa_causal": (dict(Q=rand(2, 6, 32), K=rand(2, 6, 16), V=rand(2, 6, 24)),
                      dict(q_num_heads=4, kv_num_heads=2, is_causal=1), ("y",), True),
    "4d_bool_mask": (dict(Q=rand(2, 3, 5, 8), K=rand(2, 3, 7, 8), V=rand(2, 3, 7, 4),
                          attn_mask=RNG.random((2, 1, 5, 7)) > 0.3), {}, ("y",), True),
    # a mask shorter than the keys: onnxruntime refuses it, the reference pads it with False
    "4d_bool_mask_short": (dict(Q=rand(2, 3, 5, 8), K=rand(2, 3, 7, 8), V=rand(2, 3, 7, 4),
                                attn_mask=RNG.random((5, 6)) > 0.3), {}, ("y",), False),
    "4d_float_mask_scale_softcap": (dict(Q=rand(1, 2, 4, 8), K=rand(1, 2, 6, 8),
                                         V=rand(1, 2, 6, 8), attn_mask=rand(1, 2, 4, 6)),
                                    dict(scale=0.3, softcap=2.5), ("y",), True),
    "4d_past_causal_present": (dict(Q=rand(1, 4, 3, 8), K=rand(1, 2, 3, 8), V=rand(1, 2, 3, 8),
                                    past_key=rand(1, 2, 5, 8), past_value=rand(1, 2, 5, 8)),
                               dict(is_causal=1), ("y", "pk", "pv"), True),
    "4d_masked_row_and_qk": (dict(Q=rand(1, 1, 3, 4), K=rand(1, 1, 4, 4), V=rand(1, 1, 4, 4),
                                  attn_mask=np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]],
                                                     bool)),
                             dict(qk_matmul_output_mode=3), ("y", "", "", "qk"), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention(case, tmp_path):
    ins, attrs, outs, ort = CASES[case]
    got = check(attention(ins, {}, outs, **attrs), ins, tmp_path, ort)
    if case == "4d_masked_row_and_qk":
        assert np.all(got[0][0, 0, 1] == 0) and np.all(got[1][0, 0, 1] == 0)  # every key masked
        assert np.isfinite(got[0]).all()


def test_attention_nonpad_kv_and_window(tmp_path):
    """Opset 24's nonpad_kv_seqlen (run time) with is_causal, and opset 25's sliding window
    with a cache, against onnx's reference implementation."""
    ins = dict(Q=rand(2, 2, 3, 8), K=rand(2, 2, 7, 8), V=rand(2, 2, 7, 8),
               nonpad_kv_seqlen=np.array([5, 7], np.int64))
    check(attention(ins, {}, opset=24, is_causal=1), ins, tmp_path / "a", ort=False)
    ins = dict(Q=rand(1, 2, 4, 8), K=rand(1, 2, 4, 8), V=rand(1, 2, 4, 8),
               past_key=rand(1, 2, 6, 8), past_value=rand(1, 2, 6, 8))
    check(attention(ins, {}, opset=25, is_causal=1, left_window_size=3), ins, tmp_path / "b",
          ort=False)


@pytest.mark.parametrize("shape, attrs, positions", [
    ((2, 4, 5, 16), {}, False),
    ((2, 4, 5, 16), {"interleaved": 1}, True),
    ((2, 5, 48), {"num_heads": 3, "rotary_embedding_dim": 8}, True),
    ((1, 3, 6, 8), {"interleaved": 1, "rotary_embedding_dim": 4}, False),
])
def test_rotary_embedding(shape, attrs, positions, tmp_path):
    b = shape[0]
    seq = shape[2] if len(shape) == 4 else shape[1]
    rd = attrs.get("rotary_embedding_dim") or (shape[3] if len(shape) == 4
                                               else shape[2] // attrs["num_heads"])
    angles = np.arange(32)[:, None] * (1e-2 ** (np.arange(rd // 2) / (rd // 2)))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    ins = {"x": rand(*shape)}
    inputs = ["x", "cos", "sin"]
    if positions:
        ins["pos"] = RNG.integers(0, 32, (b, seq)).astype(np.int64)
        inputs.append("pos")
        inits = {"cos": cos, "sin": sin}
    else:
        inits = {"cos": np.broadcast_to(cos[:seq], (b, seq, rd // 2)).copy(),
                 "sin": np.broadcast_to(sin[:seq], (b, seq, rd // 2)).copy()}
    node = helper.make_node("RotaryEmbedding", inputs, ["y"], **attrs)
    model = make_graph_model([node], ins, ["y"], inits, opset=23)
    check(model, ins, tmp_path)


def test_huge_causal_mask_is_refused(capsys, tmp_path):
    """50,000 x 50,000 positions: one error line, before the mask is built."""
    m = make_graph_model([helper.make_node("Attention", ["q", "q", "q"], ["y"], name="at",
                                           is_causal=1)],
                         {"q": np.zeros((1, 1, 50000, 1), np.float32)}, ["y"], opset=23)
    msg = refused(capsys, tmp_path, m)
    assert "node 'at' (Attention)" in msg and "constant" in msg, msg

"""ONNX's own attention ops (opset 23 and later): Attention and RotaryEmbedding, what PyTorch's
exporter writes for scaled_dot_product_attention and a rotary embedding at opset 23, as
`Composite`s of the MatMul, Softmax and elementwise ops (so the products run on the run-time-B
GEMM and the masks fold where they are constants). The arithmetic is onnx's reference
implementation's (reference/ops/op_attention.py, op_rotary_embedding.py), step for step.

Attention: 3-D inputs [batch, seq, heads x head_size] (q_num_heads, kv_num_heads) or 4-D
[batch, heads, seq, head_size]; a past key/value cache concatenated (the present outputs);
grouped-query attention (K and V heads repeated); Q and K each scaled by sqrt(scale); softcap;
an additive bias from a boolean or float mask (padded with -inf to the keys' length), is_causal
(bottom-right aligned with a cache), a sliding window (opset 25) and nonpad_kv_seqlen (opset
24, per-batch valid keys known at run time); rows whose bias is -inf everywhere give 0. The
fourth output (qk_matmul_output) as the reference gives it: modes 0 and 1 Q K^T (softcapped),
2 with the bias added, 3 after the Softmax."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.composite_std import _axes as _i64  # an int64 constant
from glowpy.ir.ops.contrib import Composite, add
from glowpy.ir.ops.registry import register
from glowpy.ir.validate import FOLD_BYTES

F32 = np.float32
NEG_INF = F32(-np.inf)


def _err(node, msg):
    return ModelError(f"node '{show(node.name)}' ({node.op}): {msg}")


def _heads_first(g, node, x, heads, tag):
    """[B, S, H x D] -> [B, H, S, D]."""
    b, s, hidden = x.shape
    if heads is None or heads < 1 or hidden % heads:
        raise _err(node, f"{tag} [{b}, {s}, {hidden}]: 3-D inputs need q_num_heads and "
                         "kv_num_heads dividing their hidden sizes")
    t = add(g, node, "Reshape", [x, _i64(g, [b, s, heads, hidden // heads])], tag=tag + "_4d")[0]
    return add(g, node, "Transpose", [t], {"perm": [0, 2, 1, 3]}, tag=tag + "_heads")[0]


@register
class Attention(Composite):
    inputs = ("Q", "K", "V", "attn_mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?")
    num_outputs = 4
    attrs = {"is_causal": 0, "kv_num_heads": None, "q_num_heads": None,
             "qk_matmul_output_mode": 0, "scale": None, "softcap": 0.0,
             "softmax_precision": None, "left_window_size": -1, "right_window_size": -1}
    attr_kinds = {"kv_num_heads": int, "q_num_heads": int, "scale": float,
                  "softmax_precision": int}
    since = 23

    def expand(self, g, node, ins, n_out):
        q, k, v, mask, past_k, past_v, nonpad = ins + [None] * (7 - len(ins))
        a = node.attrs
        if not (q.dtype == k.dtype == v.dtype == np.float32):
            raise _err(node, f"Q, K, V of {q.dtype}, {k.dtype}, {v.dtype}: float32 only")
        rank = len(q.shape)
        if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
            raise _err(node, f"Q {list(q.shape)}, K {list(k.shape)}, V {list(v.shape)}: all 3-D "
                             "or all 4-D")
        if (past_k is None) != (past_v is None) or (nonpad is not None and past_k is not None):
            raise _err(node, "past_key and past_value go together, and not with "
                             "nonpad_kv_seqlen")
        if a["qk_matmul_output_mode"] not in (0, 1, 2, 3):
            raise _err(node, f"qk_matmul_output_mode {a['qk_matmul_output_mode']}: 0 to 3")
        if rank == 3:
            q = _heads_first(g, node, q, a["q_num_heads"], "q")
            k = _heads_first(g, node, k, a["kv_num_heads"], "k")
            v = _heads_first(g, node, v, a["kv_num_heads"], "v")
        nb, hq, sq, d = q.shape
        hk = k.shape[1]
        if k.shape[0] != nb or v.shape[:3] != k.shape[:3] or k.shape[3] != d or hq % hk:
            raise _err(node, f"Q {list(q.shape)}, K {list(k.shape)}, V {list(v.shape)} (as "
                             "[batch, heads, seq, head_size]): K must match Q's head size, V "
                             "K's keys, and K's heads divide Q's")
        past = 0
        if past_k is not None:
            past = past_k.shape[2]
            k = add(g, node, "Concat", [past_k, k], {"axis": 2}, tag="present_key")[0]
            v = add(g, node, "Concat", [past_v, v], {"axis": 2}, tag="present_value")[0]
        outs_kv = [k, v]
        skv = k.shape[2]
        if hq != hk:  # grouped-query attention: each K/V head serves hq / hk query heads
            reps = hq // hk
            k, v = (add(g, node, "Reshape", [add(g, node, "Expand", [
                add(g, node, "Unsqueeze", [t, _i64(g, [2])], tag=f"{n}_group")[0],
                _i64(g, [nb, hk, reps] + list(t.shape[2:]))], tag=f"{n}_repeat")[0],
                _i64(g, [nb, hq] + list(t.shape[2:]))], tag=f"{n}_heads")[0]
                for t, n in ((k, "k"), (v, "v")))
        scale = a["scale"] if a["scale"] is not None else 1 / np.sqrt(d)
        root = g.constant(F32(np.sqrt(scale)), "sqrt_scale")
        qs = add(g, node, "Mul", [q, root], tag="q_scaled")[0]
        kt = add(g, node, "Transpose", [k], {"perm": [0, 1, 3, 2]}, tag="k_t")[0]
        kt = add(g, node, "Mul", [kt, root], tag="k_scaled")[0]
        qk = add(g, node, "MatMul", [qs, kt], tag="qk")[0]
        cap = float(a["softcap"] or 0.0)
        if cap > 0:
            c = g.constant(F32(cap), "softcap")
            qk = add(g, node, "Mul", [add(g, node, "Tanh", [
                add(g, node, "Div", [qk, c], tag="capped")[0]], tag="tanh")[0], c],
                tag="softcapped")[0]
        bias = self._bias(g, node, mask, nonpad, nb, sq, skv, past)
        logits = qk if bias is None else add(g, node, "Add", [qk, bias], tag="biased")[0]
        p = add(g, node, "Softmax", [logits], {"axis": -1}, tag="softmax")[0]
        if bias is not None and not (bias.is_const and np.all(bias.const.max(-1) > NEG_INF)):
            # a row with every key masked: 0 (the reference's guard), not Softmax's NaN
            dead = add(g, node, "Equal", [add(g, node, "ReduceMax", [bias, _i64(g, [-1])],
                                              {"keepdims": 1}, tag="row_max")[0],
                                          g.constant(NEG_INF)], tag="row_masked")[0]
            p = add(g, node, "Where", [dead, g.constant(F32(0)), p], tag="probs")[0]
        y = add(g, node, "MatMul", [p, v], tag="y")[0]
        if rank == 3:
            y = add(g, node, "Transpose", [y], {"perm": [0, 2, 1, 3]}, tag="y_seq")[0]
            y = add(g, node, "Reshape", [y, _i64(g, [nb, sq, hq * v.shape[3]])], tag="y_3d")[0]
        qk_out = [qk, qk, logits, p][a["qk_matmul_output_mode"]]
        return ([y] + outs_kv + [qk_out])[:n_out]

    def _bias(self, g, node, mask, nonpad, nb, sq, skv, past):
        """The additive bias (0 or -inf, or the float mask's values) or None: the mask, then
        the causal and sliding-window frontiers, then nonpad_kv_seqlen's padding."""
        a = node.attrs
        bias = None
        if mask is not None:
            if mask.shape[-1] > skv:
                raise _err(node, f"attn_mask {list(mask.shape)} for {skv} keys")
            if mask.dtype == np.bool_:
                mask = add(g, node, "Where", [mask, g.constant(F32(0)), g.constant(NEG_INF)],
                           tag="mask_bias")[0]
            elif mask.dtype != np.float32:
                raise _err(node, f"attn_mask of {mask.dtype}: bool or float32")
            if mask.shape[-1] < skv:  # the missing keys masked
                r = len(mask.shape)
                pads = [0] * (2 * r)
                pads[2 * r - 1] = skv - mask.shape[-1]
                mask = add(g, node, "Pad", [mask, _i64(g, pads), g.constant(NEG_INF)],
                           tag="mask_padded")[0]
            bias = mask
        i = np.arange(sq).reshape(sq, 1)
        j = np.arange(skv).reshape(1, skv)
        left, right = a["left_window_size"], a["right_window_size"]
        frontier = a["is_causal"] or left >= 0 or right >= 0
        if frontier:
            if nonpad is None and sq * skv * 4 > FOLD_BYTES:
                raise _err(node, f"a causal or windowed mask over {sq} x {skv} positions would "
                                 f"be a {sq * skv * 4}-byte constant, more than {FOLD_BYTES}")
            if nonpad is None:  # the offset known now: a constant bias
                diff = i + past - j
                ok = np.ones((sq, skv), bool)
                if a["is_causal"]:
                    ok &= diff >= 0
                if left >= 0:
                    ok &= diff <= left
                if right >= 0:
                    ok &= -diff <= right
                fixed = g.constant(np.where(ok, F32(0), NEG_INF), "frontier")
            else:  # offset[b] = nonpad[b] - sq, at run time: diff [B, 1, sq, skv]
                off = add(g, node, "Sub", [self._lens(g, node, nonpad, nb),
                                           _i64(g, sq)], tag="offset")[0]
                diff = add(g, node, "Add", [off, g.constant((i - j).astype(np.int64))],
                           tag="diff")[0]
                ok = None
                for cond, tag in ((a["is_causal"], "causal"), (left >= 0, "left"),
                                  (right >= 0, "right")):
                    if not cond:
                        continue
                    if tag == "causal":
                        c = add(g, node, "GreaterOrEqual", [diff, _i64(g, 0)], tag=tag)[0]
                    elif tag == "left":
                        c = add(g, node, "LessOrEqual", [diff, _i64(g, left)], tag=tag)[0]
                    else:
                        c = add(g, node, "GreaterOrEqual", [diff, _i64(g, -right)], tag=tag)[0]
                    ok = c if ok is None else add(g, node, "And", [ok, c], tag=tag + "_too")[0]
                fixed = add(g, node, "Where", [ok, g.constant(F32(0)), g.constant(NEG_INF)],
                            tag="frontier")[0]
            bias = fixed if bias is None else add(g, node, "Add", [bias, fixed], tag="bias")[0]
        if nonpad is not None:
            keys = add(g, node, "Less", [g.constant(np.arange(skv, dtype=np.int64)),
                                         self._lens(g, node, nonpad, nb)], tag="valid_keys")[0]
            pad = add(g, node, "Where", [keys, g.constant(F32(0)), g.constant(NEG_INF)],
                      tag="padding")[0]
            bias = pad if bias is None else add(g, node, "Add", [bias, pad], tag="bias_pad")[0]
        return bias

    def _lens(self, g, node, nonpad, nb):
        """nonpad_kv_seqlen as int64 [B, 1, 1, 1]."""
        if nonpad.shape != (nb,):
            raise _err(node, f"nonpad_kv_seqlen {list(nonpad.shape)}: one length per batch entry")
        n = nonpad if nonpad.dtype == np.int64 else \
            add(g, node, "Cast", [nonpad], {"to": np.dtype(np.int64)}, tag="lens64")[0]
        return add(g, node, "Reshape", [n, _i64(g, [nb, 1, 1, 1])], tag="lens")[0]


@register
class RotaryEmbedding(Composite):
    """x's first rotary_embedding_dim features of each head rotated in pairs (halves, or
    neighbours when interleaved) by the cached cos and sin of each position (the caches indexed
    by position_ids when given)."""
    inputs = ("X", "cos_cache", "sin_cache", "position_ids?")
    attrs = {"interleaved": 0, "num_heads": 0, "rotary_embedding_dim": 0}
    since = 23

    def expand(self, g, node, ins, n_out):
        x, cos, sin, pos = ins + [None] * (4 - len(ins))
        a = node.attrs
        if x.dtype != np.float32 or len(x.shape) not in (3, 4):
            raise _err(node, f"X {list(x.shape)} of {x.dtype}: float32 [batch, heads, seq, "
                             "head_size] or [batch, seq, hidden]")
        if len(x.shape) == 4:
            nb, heads, seq, hd = x.shape
            t = add(g, node, "Transpose", [x], {"perm": [0, 2, 1, 3]}, tag="seq_first")[0]
        else:
            nb, seq, hidden = x.shape
            heads = a["num_heads"]
            if heads < 1 or hidden % heads:
                raise _err(node, f"X [{nb}, {seq}, {hidden}]: 3-D inputs need num_heads "
                                 "dividing the hidden size")
            hd = hidden // heads
            t = add(g, node, "Reshape", [x, _i64(g, [nb, seq, heads, hd])], tag="heads")[0]
        rd = a["rotary_embedding_dim"] or hd
        if rd > hd or rd % 2:
            raise _err(node, f"rotary_embedding_dim {rd} for heads of {hd}: even, at most "
                             "the head size")
        if pos is not None:
            cos = add(g, node, "Gather", [cos, pos], {"axis": 0}, tag="cos_at")[0]
            sin = add(g, node, "Gather", [sin, pos], {"axis": 0}, tag="sin_at")[0]
        if cos.shape != (nb, seq, rd // 2) or sin.shape != cos.shape:
            raise _err(node, f"cos/sin caches give {list(cos.shape)} per position; need "
                             f"[{nb}, {seq}, {rd // 2}]")
        cos, sin = (add(g, node, "Unsqueeze", [c, _i64(g, [2])], tag=n)[0]
                    for c, n in ((cos, "cos"), (sin, "sin")))

        def part(src, lo, hi, tag):
            return add(g, node, "Slice", [src, _i64(g, [lo]), _i64(g, [hi]), _i64(g, [-1])],
                       tag=tag)[0]
        rot = part(t, 0, rd, "rotated") if rd < hd else t
        if a["interleaved"]:
            pairs = add(g, node, "Reshape", [rot, _i64(g, [nb, seq, heads, rd // 2, 2])],
                        tag="pairs")[0]
            x1, x2 = (add(g, node, "Reshape", [part(pairs, i, i + 1, f"x{i + 1}_pair"),
                                               _i64(g, [nb, seq, heads, rd // 2])],
                          tag=f"x{i + 1}")[0] for i in (0, 1))
        else:
            x1, x2 = part(rot, 0, rd // 2, "x1"), part(rot, rd // 2, rd, "x2")
        real = add(g, node, "Sub", [add(g, node, "Mul", [cos, x1], tag="cos_x1")[0],
                                    add(g, node, "Mul", [sin, x2], tag="sin_x2")[0]],
                   tag="real")[0]
        imag = add(g, node, "Add", [add(g, node, "Mul", [sin, x1], tag="sin_x1")[0],
                                    add(g, node, "Mul", [cos, x2], tag="cos_x2")[0]],
                   tag="imag")[0]
        if a["interleaved"]:
            both = add(g, node, "Concat", [
                add(g, node, "Unsqueeze", [real, _i64(g, [-1])], tag="real_pair")[0],
                add(g, node, "Unsqueeze", [imag, _i64(g, [-1])], tag="imag_pair")[0]],
                {"axis": -1}, tag="rotated_pairs")[0]
            out = add(g, node, "Reshape", [both, _i64(g, [nb, seq, heads, rd])],
                      tag="rotated_back")[0]
        else:
            out = add(g, node, "Concat", [real, imag], {"axis": -1}, tag="rotated_back")[0]
        if rd < hd:
            out = add(g, node, "Concat", [out, part(t, rd, hd, "kept")], {"axis": -1},
                      tag="whole")[0]
        if len(x.shape) == 4:
            return [add(g, node, "Transpose", [out], {"perm": [0, 2, 1, 3]}, tag="y")[0]]
        return [add(g, node, "Reshape", [out, _i64(g, list(x.shape))], tag="y")[0]]

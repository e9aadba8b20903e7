"""com.microsoft Attention and EmbedLayerNormalization, what onnxruntime's transformer optimizer
(onnxruntime.transformers.optimizer) fuses a BERT/GPT-2's layers and embeddings into, and
QAttention and QEmbedLayerNormalization, what quantize_dynamic makes of them.

EmbedLayerNormalization: word + position (+ segment) embeddings gathered and summed, then
LayerNormalization; its mask_index output counts each row's 1s of the mask (zeros without a
mask), as onnxruntime's kernel does (contrib_ops/cpu/bert/embed_layer_norm.cc).

Attention, expanded into the ops it means: one MatMul by the packed Q/K/V weights (+ bias),
the heads split by Reshape/Transpose, softmax(scale * Q K^T + mask [+ attention_bias]) V, the
heads joined again.

The mask follows onnxruntime's CPU kernel (contrib_ops/cpu/bert/attention_helper.h): an additive
mask of mask_filter_value (default -10000, not -inf: a row masked everywhere becomes uniform,
as there) where a key may not be attended: mask_index [B] (keys from this end position on),
[2B] (end positions, then start positions: keys before the start too), [B, T] or [B, S, T]
(raw 0/1 masks: 0 masks); unidirectional adds mask_filter_value again above the diagonal.
A past state (the incremental-decoding form), 4-D Megatron masks and rotary embeddings are
refused with an error naming them."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import MS, Composite, add
from glowpy.ir.ops.contrib_quant import _dq, _zero
from glowpy.ir.ops.registry import REQUIRED, register


@register
class Attention(Composite):
    names = (MS + "Attention",)
    inputs = ("input", "weights", "bias?", "mask_index?", "past?", "attention_bias?",
              "past_sequence_length?")
    num_outputs = 2
    attrs = {"num_heads": REQUIRED, "unidirectional": 0, "qkv_hidden_sizes": None,
             "mask_filter_value": -10000.0, "scale": 0.0, "do_rotary": 0,
             "past_present_share_buffer": 0, "rotary_embedding_dim": 0}
    attr_kinds = {"num_heads": int, "qkv_hidden_sizes": list}

    def _bad(self, node, what):
        return ModelError(f"node '{show(node.name)}' ({node.op}): {what}")

    def operands(self, ins):
        """(input, weights, bias, mask_index, past, attention_bias) of the node's inputs."""
        x, w, bias, mask, past, abias, _ = ins + [None] * (7 - len(ins))
        return x, w, bias, mask, past, abias

    def projection(self, g, node, ins):
        """The packed Q/K/V projection [B, S, hidden_q + hidden_k + hidden_v] (with the bias)."""
        x, w, bias = self.operands(ins)[:3]
        y = add(g, node, "MatMul", [x, w], tag="qkv")[0]
        return y if bias is None else add(g, node, "Add", [y, bias], tag="qkv_bias")[0]

    def expand(self, g, node, ins, n_out):
        x, w, _, mask, past, abias = self.operands(ins)
        a = node.attrs
        if past is not None or n_out > 1:
            raise self._bad(node, "a past state (input 'past', output 'present': incremental "
                                  "decoding) is not supported; export the model without it")
        if a["do_rotary"]:
            raise self._bad(node, "do_rotary (rotary embeddings inside Attention) is not supported")
        if len(x.shape) != 3 or len(w.shape) != 2 or w.shape[0] != x.shape[2]:
            raise self._bad(node, f"input {list(x.shape)} and weights {list(w.shape)} must be "
                                  "[B, S, D] and [D, hidden_q + hidden_k + hidden_v]")
        bsz, s, _ = x.shape
        heads = int(a["num_heads"])
        sizes = [int(v) for v in a["qkv_hidden_sizes"]] if a["qkv_hidden_sizes"] else \
            [w.shape[1] // 3] * 3
        if len(sizes) != 3 or sum(sizes) != w.shape[1] or sizes[0] != sizes[1] or \
                heads < 1 or any(v % heads for v in sizes):
            raise self._bad(node, f"qkv_hidden_sizes {sizes} must be three sizes (Q and K equal) "
                                  f"summing to the weights' {w.shape[1]} columns, each a multiple "
                                  f"of num_heads {heads}")

        def c(v, dtype=np.int64):
            return g.constant(np.asarray(v, dtype))
        y = self.projection(g, node, ins)
        q, k, v = add(g, node, "Split", [y, c(sizes)], {"axis": 2}, 3, tag="split")

        def split_heads(t, size, perm, tag):
            t = add(g, node, "Reshape", [t, c([bsz, s, heads, size // heads])], tag=tag + "_heads")[0]
            return add(g, node, "Transpose", [t], {"perm": perm}, tag=tag + "_transpose")[0]
        q = split_heads(q, sizes[0], [0, 2, 1, 3], "q")
        k = split_heads(k, sizes[1], [0, 2, 3, 1], "k")
        v = split_heads(v, sizes[2], [0, 2, 1, 3], "v")
        scale = a["scale"] or 1.0 / np.sqrt(sizes[0] // heads)
        scores = add(g, node, "MatMul", [q, k], tag="scores")[0]
        scores = add(g, node, "Mul", [scores, c(scale, np.float32)], tag="scaled")[0]
        m = self._mask(g, node, mask, bsz, s, float(a["mask_filter_value"]), bool(a["unidirectional"]))
        if m is not None:
            scores = add(g, node, "Add", [scores, m], tag="masked")[0]
        if abias is not None:
            scores = add(g, node, "Add", [scores, abias], tag="attention_bias")[0]
        p = add(g, node, "Softmax", [scores], {"axis": -1})[0]
        o = add(g, node, "MatMul", [p, v], tag="context")[0]
        o = add(g, node, "Transpose", [o], {"perm": [0, 2, 1, 3]}, tag="context_transpose")[0]
        return [add(g, node, "Reshape", [o, c([bsz, s, sizes[2]])], tag="output")[0]]

    def _mask(self, g, node, mask, bsz, s, fill, causal):
        """The additive mask, broadcast against the scores [B, heads, S, T] (T = S), or None."""
        def c(v, dtype=np.float32):
            return g.constant(np.asarray(v, dtype))
        out = None
        if mask is not None:
            shape = tuple(mask.shape)
            if mask.dtype != np.int32:
                raise self._bad(node, f"mask_index '{show(mask.name)}' is {mask.dtype.name}; "
                                      "onnxruntime's Attention takes int32")
            if shape in ((bsz, s), (bsz, s, s)):  # raw 0/1 masks
                keep = add(g, node, "Greater", [mask, c(0, np.int32)], tag="mask_keep")[0]
                r = (bsz, 1, 1, s) if len(shape) == 2 else (bsz, 1, s, s)
            elif shape in ((bsz,), (2 * bsz,)):  # end (and start) positions of the keys
                pos = c(np.arange(s).reshape(1, s), np.int32)
                ends = add(g, node, "Slice", [mask, c([0], np.int64), c([bsz], np.int64)],
                           tag="mask_ends")[0]
                ends = add(g, node, "Reshape", [ends, c([bsz, 1], np.int64)], tag="mask_ends_col")[0]
                keep = add(g, node, "Less", [pos, ends], tag="mask_keep")[0]
                if shape == (2 * bsz,):
                    st = add(g, node, "Slice", [mask, c([bsz], np.int64), c([2 * bsz], np.int64)],
                             tag="mask_starts")[0]
                    st = add(g, node, "Reshape", [st, c([bsz, 1], np.int64)], tag="mask_starts_col")[0]
                    after = add(g, node, "Less", [pos, st], tag="mask_before_start")[0]
                    after = add(g, node, "Not", [after], tag="mask_after_start")[0]
                    keep = add(g, node, "And", [keep, after], tag="mask_keep_both")[0]
                r = (bsz, 1, 1, s)
            else:
                raise self._bad(node, f"mask_index '{show(mask.name)}' of shape {list(shape)} is "
                                      f"not supported ([B], [2B], [B, T] or [B, S, T] with B "
                                      f"{bsz}, S = T {s})")
            out = add(g, node, "Where", [keep, c(0.0), c(fill)], tag="mask_additive")[0]
            out = add(g, node, "Reshape", [out, c(r, np.int64)], tag="mask_broadcast")[0]
        if causal:
            tri = np.where(np.arange(s)[None, :] > np.arange(s)[:, None], np.float32(fill),
                           np.float32(0)).astype(np.float32)
            out = c(tri) if out is None else add(g, node, "Add", [out, c(tri)], tag="causal")[0]
        return out


@register
class QAttention(Attention):
    """Attention whose input and packed weights are quantized (quantize_dynamic of an optimized
    BERT: a DynamicQuantizeLinear before each): the projection is MatMulInteger of the centred
    integers times input_scale * weight_scale (per tensor or per column) plus the float bias,
    which the passes run as an integer QMatMul with a run-time zero point; the rest is
    Attention's."""
    names = (MS + "QAttention",)
    inputs = ("input", "weight", "bias", "input_scale", "weight_scale", "mask_index?",
              "input_zero_point?", "weight_zero_point?", "past?")

    def operands(self, ins):
        x, w, bias, _, _, mask, _, _, past = ins + [None] * (9 - len(ins))
        return x, w, bias, mask, past, None

    def projection(self, g, node, ins):
        x, w, bias, sx, sw, _, zx, zw = (ins + [None] * 9)[:8]
        acc = add(g, node, "MatMulInteger", [x, w, _zero(g, zx, x.dtype), _zero(g, zw, w.dtype)],
                  tag="qkv_integer")[0]
        y = add(g, node, "Cast", [acc], {"to": np.dtype(np.float32)}, tag="qkv_float")[0]
        scale = add(g, node, "Mul", [sx, sw], tag="qkv_scale")[0]
        y = add(g, node, "Mul", [y, scale], tag="qkv_scaled")[0]
        return add(g, node, "Add", [y, bias], tag="qkv_bias")[0]


@register
class EmbedLayerNormalization(Composite):
    names = (MS + "EmbedLayerNormalization",)
    inputs = ("input_ids", "segment_ids?", "word_embedding", "position_embedding",
              "segment_embedding?", "gamma", "beta?", "mask?", "position_ids?")
    num_outputs = 3
    # mask_index_type only tells onnxruntime's shape inference whether output 1 exists
    attrs = {"epsilon": 1e-12, "mask_index_type": 1}

    def indices(self, ins):
        """(input_ids, segment_ids, mask, position_ids) of the node's inputs."""
        ins = ins + [None] * (9 - len(ins))
        return ins[0], ins[1], ins[7], ins[8]

    def tables(self, g, node, ins):
        """(word, position, segment, gamma, beta) as float tensors."""
        return (ins + [None] * 9)[2:7]

    def expand(self, g, node, ins, n_out):
        ids, seg, mask, pos_ids = self.indices(ins)
        word, pos, segw, gamma, beta = self.tables(g, node, ins)
        if len(ids.shape) != 2 or ids.dtype.kind not in "iu":
            raise ModelError(f"node '{show(node.name)}' ({node.op}): input_ids "
                             f"'{show(ids.name)}' must be integer [batch, sequence], got "
                             f"{ids.dtype.name} {list(ids.shape)}")
        bsz, s = ids.shape
        if (seg is None) != (segw is None):
            raise ModelError(f"node '{show(node.name)}' ({node.op}): segment_ids and "
                             "segment_embedding come together")
        e = add(g, node, "Gather", [word, ids], tag="word")[0]
        if pos_ids is None:
            pos_ids = g.constant(np.arange(s, dtype=np.int64).reshape(1, s))
        e = add(g, node, "Add", [e, add(g, node, "Gather", [pos, pos_ids], tag="position")[0]],
                tag="sum_position")[0]
        if seg is not None:
            e = add(g, node, "Add", [e, add(g, node, "Gather", [segw, seg], tag="segment")[0]],
                    tag="sum_segment")[0]
        y = add(g, node, "LayerNormalization", [e, gamma] + ([beta] if beta is not None else []),
                {"axis": -1, "epsilon": node.attrs["epsilon"]})[0]
        outs = [y]
        if n_out > 1:
            if mask is None:
                outs.append(g.constant(np.zeros(bsz, np.int32)))
            else:
                ones = add(g, node, "Equal", [mask, g.constant(np.asarray(1, mask.dtype))],
                           tag="mask_ones")[0]
                ones = add(g, node, "Cast", [ones], {"to": np.dtype(np.int32)}, tag="mask_int")[0]
                outs.append(add(g, node, "ReduceSum", [ones, g.constant(np.array([1], np.int64))],
                                {"keepdims": 0}, tag="mask_index")[0])
        if n_out > 2:
            outs.append(e)
        return outs


@register
class QEmbedLayerNormalization(EmbedLayerNormalization):
    """EmbedLayerNormalization whose tables, gamma and beta are quantized (quantize_dynamic of an
    optimized BERT), each dequantized with its own scale and zero point (the DequantizeLinear
    of constants folds into float tables at compile time)."""
    names = (MS + "QEmbedLayerNormalization",)
    inputs = ("input_ids", "segment_ids?", "word_embedding_quant", "position_embedding_quant",
              "segment_embedding?", "layer_norm_weight", "layer_norm_bias", "mask?",
              "word_embedding_scale", "position_embedding_scale", "segment_embedding_scale?",
              "layer_norm_weight_scale", "layer_norm_bias_scale", "word_embedding_zero_point",
              "position_embedding_zero_point", "segment_embedding_zero_point?",
              "layer_norm_weight_zero_point", "layer_norm_bias_zero_point")
    num_outputs = 2

    def indices(self, ins):
        return ins[0], ins[1], ins[7] if len(ins) > 7 else None, None

    def tables(self, g, node, ins):
        ins = ins + [None] * (18 - len(ins))
        out = []
        for t, sc, zp, tag in zip(ins[2:7], ins[8:13], ins[13:18],
                                  ("word", "position", "segment", "gamma", "beta")):
            out.append(None if t is None else _dq(g, node, t, sc, zp, f"dequantize_{tag}"))
        return out

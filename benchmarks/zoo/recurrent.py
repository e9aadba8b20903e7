"""Recurrent nets as PyTorch exports them: a text classifier (Embedding -> 2-layer
bidirectional nn.LSTM -> last step -> Linear), a batch-first nn.GRU tagger
(linear_before_reset=1, Squeeze of the direction axis, per-step Linear) and a CRNN-style
OCR recognizer (conv front end, permute to a sequence, bidirectional LSTM, Linear +
LogSoftmax over classes). Recurrent weights are scaled 1/sqrt(hidden) as torch initializes
them (larger ones make a 100-step recurrence chaotic, and any two implementations drift)."""
from __future__ import annotations

import numpy as np

from .net import Net


def _lstm_layers(net, x, isz, hid, layers, op="LSTM", gates=4, **attrs):
    """torch's stacked bidirectional export: Y [T, 2, B, H] -> Transpose(0, 2, 1, 3) ->
    Reshape(0, 0, -1) into the next layer."""
    s = 1 / np.sqrt(hid)
    for l in range(layers):
        i = isz if l == 0 else 2 * hid
        w = net.weight((2, gates * hid, i), scale=s)
        r = net.weight((2, gates * hid, hid), scale=s)
        b = net.weight((2, 2 * gates * hid), scale=s)
        y, _, *_ = net.ops(op, [x, w, r, b], 3 if op == "LSTM" else 2, hidden_size=hid,
                           direction="bidirectional", **attrs)
        t = net.node("Transpose", [y], perm=[0, 2, 1, 3])
        x = net.node("Reshape", [t, net.i64([0, 0, -1])])
    return x


def lstm_classifier(perf=False):
    """Token ids [B, T] -> Gather embeddings -> time major -> 2-layer biLSTM -> last step ->
    Linear to classes."""
    seq, batch, vocab, emb, hid, classes = (64, 4, 5000, 128, 128, 10) if perf else \
        (12, 2, 100, 16, 16, 5)
    net = Net("lstm_classifier", 31, opset=14)
    ids = net.input("tokens", (batch, seq), np.int64, high=vocab)
    e = net.node("Gather", [net.weight((vocab, emb), scale=1.0), ids])
    x = net.node("Transpose", [e], perm=[1, 0, 2])
    y = _lstm_layers(net, x, emb, hid, 2)
    last = net.node("Gather", [y, net.const(np.array(seq - 1, np.int64), "last")], axis=0)
    return net.model(net.linear(last, 2 * hid, classes))


def gru_tagger(perf=False):
    """nn.GRU(batch_first=True) over features [B, T, F], then a per-step Linear (MatMul + Add
    on the 3-D sequence) to tag scores."""
    seq, batch, feat, hid, tags = (100, 2, 64, 128, 20) if perf else (9, 3, 6, 12, 4)
    net = Net("gru_tagger", 32, opset=14)
    x = net.input("features", (batch, seq, feat))
    t = net.node("Transpose", [x], perm=[1, 0, 2])
    s = 1 / np.sqrt(hid)
    y, _ = net.ops("GRU", [t, net.weight((1, 3 * hid, feat), scale=s),
                           net.weight((1, 3 * hid, hid), scale=s),
                           net.weight((1, 6 * hid), scale=s)], 2,
                   hidden_size=hid, linear_before_reset=1)
    y = net.node("Transpose", [net.node("Squeeze", [y, net.i64([1])])], perm=[1, 0, 2])
    return net.model(net.linear(y, hid, tags, rank=3))


def crnn_lstm(perf=False):
    """Image [1, 1, 32, W] -> Conv-BN-Relu + MaxPool (height to 1) -> Squeeze(2) ->
    permute(2, 0, 1) to [T, 1, C] -> biLSTM -> Linear -> LogSoftmax (CTC's input)."""
    w, c, hid, classes = (256, 64, 128, 37) if perf else (48, 8, 16, 11)
    net = Net("crnn_lstm", 33, opset=14)
    x = net.input("image", (1, 1, 32, w))
    x = net.conv_bn(x, 1, c, 3)
    x = net.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = net.conv_bn(x, c, 2 * c, 3)
    x = net.node("MaxPool", [x], kernel_shape=[16, 1], strides=[16, 1])
    x = net.node("Transpose", [net.node("Squeeze", [x, net.i64([2])])], perm=[2, 0, 1])
    y = _lstm_layers(net, x, 2 * c, hid, 1)
    return net.model(net.node("LogSoftmax", [net.linear(y, 2 * hid, classes, rank=3)], axis=-1))

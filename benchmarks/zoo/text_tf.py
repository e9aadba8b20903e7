"""Text transformers as Hugging Face's exporter writes them: a BERT-tiny encoder (opset 13:
LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div) and a GPT-2-style decoder (opset 17)
with a causal mask (Trilu + Equal + Where), both from int64 token ids."""
from __future__ import annotations

import numpy as np

from . import attention
from .net import Net

INT_MAX = np.iinfo(np.int64).max


def _prefix(net: Net, buffer: np.ndarray, n: str) -> str:
    """self.buffer[:, :seq_length] with seq_length from x.size(1): Slice on a constant."""
    return net.node("Slice", [net.const(buffer, "buffer"), net.i64([0]), net.unsq(n), net.i64([1])])


def bert(perf=False):
    """BERT: word + token-type + position embeddings (Gather), the token types a buffer
    sliced and expanded to (batch, seq), the extended attention mask
    (1.0 - mask[:, None, None, :].float()) * finfo.min, post-norm layers with erf GELU,
    the pooler (x[:, 0] -> Linear -> Tanh). Outputs: last_hidden_state, pooler_output."""
    net = Net("bert_tiny", 128, opset=13)
    seq, c, heads, layers, vocab = (128, 256, 4, 4, 30522) if perf else (32, 64, 2, 2, 1000)
    ids = net.input("input_ids", (1, seq), np.int64, high=vocab)
    mask = net.input("attention_mask", (1, seq), np.int64, high=2)
    net.feeds[mask] = np.ones((1, seq), np.int64)
    net.feeds[mask][:, -seq // 4:] = 0              # right padding, as a tokenizer writes it
    b, n = net.dim(ids, 0), net.dim(ids, 1)
    emb = lambda rows: net.init("emb", 0.02 * net.rng.standard_normal((rows, c)))  # noqa: E731
    pos = _prefix(net, np.arange(512, dtype=np.int64)[None], n)
    types = net.node("Expand", [_prefix(net, np.zeros((1, 512), np.int64), n),
                                net.node("Concat", [net.unsq(b), net.unsq(n)], axis=0)])
    x = net.node("Gather", [emb(vocab), ids], axis=0)
    x = net.node("Add", [x, net.node("Gather", [emb(2), types], axis=0)])
    x = net.node("Add", [x, net.node("Gather", [emb(512), pos], axis=0)])
    x = net.layernorm(x, c, 1e-12)
    m = net.node("Unsqueeze", [net.node("Unsqueeze", [mask, net.i64([1])]), net.i64([2])])
    m = net.node("Sub", [net.f32(1.0), net.node("Cast", [m], to=1)])
    m = net.node("Mul", [m, net.f32(np.finfo(np.float32).min)])
    for _ in range(layers):
        x = net.layernorm(net.node("Add", [attention.hf(net, x, c, heads, m), x]), c, 1e-12)
        y = net.linear(net.act(net.linear(x, c, 4 * c, rank=3), "gelu"), 4 * c, c, rank=3)
        x = net.layernorm(net.node("Add", [y, x]), c, 1e-12)
    first = net.node("Gather", [x, net.const(np.int64(0), "idx")], axis=1)
    return net.model([x, net.act(net.linear(first, c, c), "tanh")])


def _gelu_new(net: Net, x: str) -> str:
    """GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))."""
    inner = net.node("Add", [x, net.node("Mul", [net.f32(0.044715), net.node("Pow", [x, net.f32(3.0)])])])
    t = net.node("Tanh", [net.node("Mul", [net.f32(np.sqrt(2 / np.pi)), inner])])
    return net.node("Mul", [net.node("Mul", [net.f32(0.5), x]), net.node("Add", [net.f32(1.0), t])])


def gpt(perf=False):
    """GPT-2-style decoder: token + position embeddings (position ids from Range(0, seq)),
    pre-norm blocks with causal self-attention and gelu_new MLP, final LayerNorm, and the
    language-model head tied to the token embedding (MatMul by its transpose)."""
    net = Net("gpt_decoder", 2, opset=17)
    seq, c, heads, layers, vocab = (128, 256, 4, 4, 8192) if perf else (32, 64, 2, 2, 512)
    ids = net.input("input_ids", (1, seq), np.int64, high=vocab)
    n = net.dim(ids, 1)
    pos = net.node("Range", [net.const(np.int64(0), "start"), n, net.const(np.int64(1), "delta")])
    pos = net.node("Unsqueeze", [pos, net.i64([0])])
    wte = 0.02 * net.rng.standard_normal((vocab, c))
    x = net.node("Gather", [net.init("wte", wte), ids], axis=0)
    x = net.node("Add", [x, net.node("Gather", [net.init("wpe", 0.02 * net.rng.standard_normal((512, c))),
                                                pos], axis=0)])
    for _ in range(layers):
        x = net.node("Add", [x, attention.gpt(net, net.layernorm(x, c), c, heads)])
        y = net.linear(_gelu_new(net, net.linear(net.layernorm(x, c), c, 4 * c, rank=3)), 4 * c, c, rank=3)
        x = net.node("Add", [x, y])
    x = net.layernorm(x, c)
    return net.model(net.node("MatMul", [x, net.init("wte_T", wte.T)]))

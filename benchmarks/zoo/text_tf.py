"""Text transformers as Hugging Face's exporter writes them: a BERT-tiny encoder (opset 13:
LayerNorm decomposed into ReduceMean/Sub/Pow/Sqrt/Div), a GPT-2-style decoder (opset 17)
with a causal mask (Trilu + Equal + Where) and a LLaMA-style decoder (RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU), all from int64 token ids."""
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


def _rmsnorm(net: Net, x: str, c: int, eps=1e-6) -> str:
    """LlamaRMSNorm: weight * (x * rsqrt(mean(x ** 2, -1) + eps)), rsqrt exported as
    Reciprocal(Sqrt)."""
    v = net.node("ReduceMean", [net.node("Pow", [x, net.f32(2.0)])], axes=[-1], keepdims=1)
    r = net.node("Reciprocal", [net.node("Sqrt", [net.node("Add", [v, net.f32(eps)])])])
    return net.node("Mul", [net.init("rms_g", 1.0 + 0.1 * net.rng.standard_normal(c)),
                            net.node("Mul", [x, r])])


def _rope(net: Net, t: str, cos: str, sin: str, d: int) -> str:
    """Rotary embedding: t * cos + rotate_half(t) * sin, rotate_half = cat(-t2, t1) of the
    head dim's halves (Slice, Neg, Concat)."""
    t1 = net.node("Slice", [t, net.i64([0]), net.i64([d // 2]), net.i64([-1])])
    t2 = net.node("Slice", [t, net.i64([d // 2]), net.i64([INT_MAX]), net.i64([-1])])
    rot = net.node("Concat", [net.node("Neg", [t2]), t1], axis=-1)
    return net.node("Add", [net.node("Mul", [t, cos]), net.node("Mul", [rot, sin])])


def _heads(net: Net, t: str, seq: int, heads: int, d: int) -> str:
    return net.node("Transpose", [net.node("Reshape", [t, net.i64([1, seq, heads, d])])],
                    perm=[0, 2, 1, 3])


def llama(perf=False):
    """A LLaMA-style decoder (TinyLlama's layout, narrowed; opset 14): RMSNorm, rotary
    position embeddings from constant cos/sin tables, grouped-query attention (each key and
    value head repeated for its query heads: Unsqueeze, Expand, Reshape), an additive causal
    mask, the SwiGLU MLP (down(silu(gate(x)) * up(x))), bias-free Linears, untied LM head."""
    net = Net("llama", 7, opset=14)
    seq, c, heads, kv, layers, inter, vocab = ((128, 512, 8, 2, 4, 1408, 8192) if perf
                                               else (16, 64, 4, 2, 2, 128, 256))
    d = c // heads
    ids = net.input("input_ids", (1, seq), np.int64, high=vocab)
    x = net.node("Gather", [net.init("emb", 0.02 * net.rng.standard_normal((vocab, c))), ids], axis=0)
    f = np.outer(np.arange(seq), 1.0 / 10000 ** (np.arange(0, d, 2) / d))
    angles = np.concatenate([f, f], -1)[None, None]
    cos, sin = (net.const(g(angles).astype(np.float32), "rope") for g in (np.cos, np.sin))
    mask = net.const(np.triu(np.full((1, 1, seq, seq), np.finfo(np.float32).min, np.float32), 1), "mask")
    for _ in range(layers):
        h = _rmsnorm(net, x, c)
        q = _rope(net, _heads(net, net.linear(h, c, c, bias=False, rank=3), seq, heads, d), cos, sin, d)
        k = _rope(net, _heads(net, net.linear(h, c, kv * d, bias=False, rank=3), seq, kv, d), cos, sin, d)
        v = _heads(net, net.linear(h, c, kv * d, bias=False, rank=3), seq, kv, d)
        k, v = (net.node("Reshape", [net.node("Expand", [net.node("Unsqueeze", [t, net.i64([2])]),
                                                        net.i64([1, kv, heads // kv, seq, d])]),
                                     net.i64([1, heads, seq, d])]) for t in (k, v))
        s = net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])])
        s = net.node("Add", [net.node("Div", [s, net.f32(np.sqrt(d))]), mask])
        o = net.node("Transpose", [attention.softmax_attend(net, s, v)], perm=[0, 2, 1, 3])
        o = net.node("Reshape", [o, net.i64([1, seq, c])])
        x = net.node("Add", [x, net.linear(o, c, c, bias=False, rank=3)])
        h = _rmsnorm(net, x, c)
        g = net.act(net.linear(h, c, inter, bias=False, rank=3), "swish")
        y = net.node("Mul", [g, net.linear(h, c, inter, bias=False, rank=3)])
        x = net.node("Add", [x, net.linear(y, inter, c, bias=False, rank=3)])
    return net.model(net.linear(_rmsnorm(net, x, c), c, vocab, bias=False, rank=3))


def t5_encoder(perf=False):
    """A T5 v1.1 encoder (T5-small's sizes, 256 tokens): RMSNorm, attention without the
    1/sqrt(d) scaling plus a relative position bias (one constant [1, heads, n, n] table, as
    the bucketed bias folds to in an export at a fixed length), the gated-GELU FFN
    (gelu(wi_0 x) * wi_1 x), bias-free Linears, the token embedding as Gather."""
    net = Net("t5_encoder", 45)
    n, c, heads, ff, layers, vocab = ((256, 512, 8, 1024, 6, 32128) if perf
                                      else (16, 64, 4, 128, 2, 100))
    d = c // heads
    ids = net.input("input_ids", (1, n), np.int64, high=vocab)
    x = net.node("Gather", [net.init("emb", net.rng.standard_normal((vocab, c)) * 0.5), ids], axis=0)
    bias = net.init("relbias", net.rng.standard_normal((1, heads, n, n)) * 0.5)
    for _ in range(layers):
        h = _rmsnorm(net, x, c)
        q, k, v = (_heads(net, net.linear(h, c, c, bias=False, rank=3), n, heads, d) for _ in range(3))
        s = net.node("Add", [net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])]), bias])
        o = attention.merge_heads(net, attention.softmax_attend(net, s, v), c)
        x = net.node("Add", [x, net.linear(o, c, c, bias=False, rank=3)])
        h = _rmsnorm(net, x, c)
        g = net.act(net.linear(h, c, ff, bias=False, rank=3), "gelu")
        u = net.linear(h, c, ff, bias=False, rank=3)
        x = net.node("Add", [x, net.linear(net.node("Mul", [g, u]), ff, c, bias=False, rank=3)])
    return net.model(_rmsnorm(net, x, c))

"""Multi-head attention the three ways exporters write it, on (B, N, C) activations:
  hf      Hugging Face BERT: separate q/k/v Linears, transpose_for_scores = view(x.size()[:-1]
          + (heads, head_dim)).permute(0, 2, 1, 3), scores / sqrt(head_dim), + additive mask;
  timm    ViT/Swin: one qkv Linear, reshape(B, N, 3, heads, C // heads) with C // heads
          exported as floor division (Sub(C, Mod(C, heads)) / heads), permute(2, 0, 3, 1, 4),
          unbind (Gather 0/1/2), q * scale, an optional bias/mask added to the scores;
  gpt     GPT-2: c_attn (3C) then split(C, dim=2) (Split), heads as in hf, the causal mask
          applied with Where (a boolean mask from Trilu), scores / sqrt(head_dim).
Every size comes from Shape -> Gather as torch traces x.size(); glowpy folds them."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .net import Net


def heads_first(net: Net, t: str, heads: int, head_dim: int) -> str:
    """view(B, N, heads, head_dim).permute(0, 2, 1, 3) with B, N from t.size()."""
    b, n = net.dim(t, 0), net.dim(t, 1)
    return net.node("Transpose", [net.view(t, [b, n, heads, head_dim])], perm=[0, 2, 1, 3])


def merge_heads(net: Net, o: str, c: int) -> str:
    """o: (B, heads, N, D) -> permute(0, 2, 1, 3) -> view(B, N, C)."""
    o = net.node("Transpose", [o], perm=[0, 2, 1, 3])
    return net.view(o, [net.dim(o, 0), net.dim(o, 1), c])


def softmax_attend(net: Net, scores: str, v: str) -> str:
    return net.node("MatMul", [net.node("Softmax", [scores], axis=-1), v])


def hf(net: Net, x: str, c: int, heads: int, mask: str | None = None) -> str:
    d = c // heads
    q, k, v = (heads_first(net, net.linear(x, c, c, rank=3), heads, d) for _ in range(3))
    s = net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])])
    s = net.node("Div", [s, net.f32(np.sqrt(d))])
    if mask is not None:
        s = net.node("Add", [s, mask])
    return net.linear(merge_heads(net, softmax_attend(net, s, v), c), c, c, rank=3)


def timm(net: Net, x: str, c: int, heads: int, bias: str | None = None,
         windows: int | None = None, mask: str | None = None) -> str:
    """`bias` (heads, N, N) is added to every window's scores; `mask` (windows, N, N) is added
    per window after view(B_ // windows, windows, heads, N, N), as Swin does."""
    b, n, ch = net.dim(x, 0), net.dim(x, 1), net.dim(x, 2)
    nh = net.const(np.int64(heads), "heads")
    hd = net.node("Div", [net.node("Sub", [ch, net.node("Mod", [ch, nh])]), nh])
    qkv = net.view(net.linear(x, c, 3 * c, rank=3), [b, n, 3, heads, hd])
    qkv = net.node("Transpose", [qkv], perm=[2, 0, 3, 1, 4])
    q, k, v = (net.node("Gather", [qkv, net.const(np.int64(i), "idx")], axis=0) for i in range(3))
    q = net.node("Mul", [q, net.f32((c // heads) ** -0.5)])
    s = net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])])
    if bias is not None:
        s = net.node("Add", [s, bias])
    if mask is not None:
        s = net.view(s, [net.node("Div", [b, net.const(np.int64(windows), "nw")]), windows, heads, n, n])
        s = net.node("Add", [s, net.unsq(net.node("Unsqueeze", [mask, net.i64([1])]))])
        s = net.view(s, [-1, heads, n, n])
    o = net.node("Transpose", [softmax_attend(net, s, v)], perm=[0, 2, 1, 3])
    return net.linear(net.view(o, [b, n, c]), c, c, rank=3)


def gpt(net: Net, x: str, c: int, heads: int) -> str:
    d = c // heads
    q, k, v = net.ops("Split", [net.linear(x, c, 3 * c, rank=3), net.i64([c, c, c])], 3, axis=2)
    q, k, v = (heads_first(net, t, heads, d) for t in (q, k, v))
    s = net.node("Div", [net.node("MatMul", [q, net.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                         net.f32(np.sqrt(d))])
    # causal mask: ones(N, N) from the sizes, Trilu (lower), Equal 0 -> masked with finfo.min
    n = net.dim(x, 1)
    ones = net.node("ConstantOfShape", [net.node("Concat", [net.unsq(n), net.unsq(n)], axis=0)],
                    value=numpy_helper.from_array(np.ones(1, np.float32)))
    masked = net.node("Equal", [net.node("Trilu", [ones], upper=0), net.f32(0.0)])
    s = net.node("Where", [masked, net.f32(np.finfo(np.float32).min), s])
    return net.linear(merge_heads(net, softmax_attend(net, s, v), c), c, c, rank=3)

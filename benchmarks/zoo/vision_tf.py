"""Vision transformers and MLP-Mixer as timm and Hugging Face export them (opset 17,
LayerNormalization op): ViT-tiny, a Swin stage pair (padding with Mod, shifted windows,
relative position bias, constant attention mask, patch merging), MLP-Mixer, SegFormer-B0
(attention with spatially reduced keys and values, tokens viewed as maps and back) and
MobileViT-XS (convolutions and transformers over unfolded 2x2 patches)."""
from __future__ import annotations

import numpy as np

from . import attention
from .net import Net

INT_MAX = np.iinfo(np.int64).max


def _patch_embed(net: Net, x: str, cin: int, c: int, p: int) -> str:
    """Conv(k=p, stride=p) then x.flatten(2).transpose(1, 2): (B, N, C)."""
    y = net.convnd(x, cin, c, p, p, pads=[0, 0, 0, 0])
    return net.node("Transpose", [net.view(y, [net.dim(y, 0), c, -1])], perm=[0, 2, 1])


def _mlp(net: Net, x: str, c: int, hidden: int) -> str:
    return net.linear(net.act(net.linear(x, c, hidden, rank=3), "gelu"), hidden, c, rank=3)


def vit(perf=False):
    """ViT: patch embedding, cls token expanded to the batch (Expand on a shape from
    x.size(0)) and concatenated, position embedding Add, pre-norm blocks (timm attention,
    GELU MLP), final LayerNorm, x[:, 0] (Gather) and the Gemm head."""
    net = Net("vit_tiny", 16, opset=17)
    hw, p, c, heads, depth = (224, 16, 192, 3, 12) if perf else (32, 4, 32, 2, 2)
    x = net.input("input", (1, 3, hw, hw))
    x = _patch_embed(net, x, 3, c, p)
    n = (hw // p) ** 2
    b = net.dim(x, 0)
    cls = net.node("Expand", [net.init("cls", 0.02 * net.rng.standard_normal((1, 1, c))),
                              net.node("Concat", [net.unsq(b), net.i64([1]), net.i64([c])], axis=0)])
    x = net.node("Concat", [cls, x], axis=1)
    x = net.node("Add", [x, net.init("pos", 0.02 * net.rng.standard_normal((1, n + 1, c)))])
    for _ in range(depth):
        x = net.node("Add", [x, attention.timm(net, net.layernorm(x, c, 1e-6), c, heads)])
        x = net.node("Add", [x, _mlp(net, net.layernorm(x, c, 1e-6), c, 4 * c)])
    x = net.layernorm(x, c, 1e-6)
    x = net.node("Gather", [x, net.const(np.int64(0), "idx")], axis=1)
    return net.model(net.linear(x, c, 1000 if perf else 10))


def mixer(perf=False):
    """MLP-Mixer: token mixing on x.transpose(1, 2) (MatMul over patches), channel mixing,
    both pre-norm with GELU MLPs; mean over tokens (ReduceMean) and the head."""
    net = Net("mlp_mixer", 21, opset=17)
    hw, p, c, depth = (224, 16, 256, 8) if perf else (32, 4, 32, 2)
    x = net.input("input", (1, 3, hw, hw))
    x = _patch_embed(net, x, 3, c, p)
    n = (hw // p) ** 2
    for _ in range(depth):
        y = net.node("Transpose", [net.layernorm(x, c, 1e-6)], perm=[0, 2, 1])
        y = _mlp(net, y, n, n // 2 if perf else 2 * n)
        x = net.node("Add", [x, net.node("Transpose", [y], perm=[0, 2, 1])])
        x = net.node("Add", [x, _mlp(net, net.layernorm(x, c, 1e-6), c, 4 * c)])
    x = net.node("ReduceMean", [net.layernorm(x, c, 1e-6)], axes=[1], keepdims=0)
    return net.model(net.linear(x, c, 1000 if perf else 10))


def _roll(net: Net, x: str, shift: int, size: int) -> str:
    """torch.roll(x, shifts=(shift, shift), dims=(1, 2)): per dim Slice + Concat."""
    k = shift % size
    for axis in (1, 2):
        tail = net.node("Slice", [x, net.i64([size - k]), net.i64([INT_MAX]), net.i64([axis])])
        head = net.node("Slice", [x, net.i64([0]), net.i64([size - k]), net.i64([axis])])
        x = net.node("Concat", [tail, head], axis=axis)
    return x


def _window_mask(hp: int, ws: int, s: int) -> np.ndarray:
    """Swin's attention mask for shifted windows: (windows, N, N), -100 between regions."""
    img = np.zeros((hp, hp))
    cnt = 0
    for h in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
        for w in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
            img[h, w] = cnt
            cnt += 1
    win = img.reshape(hp // ws, ws, hp // ws, ws).transpose(0, 2, 1, 3).reshape(-1, ws * ws)
    diff = win[:, None, :] - win[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)


def _rel_bias(net: Net, ws: int, heads: int) -> str:
    """relative_position_bias_table[index].view(N, N, heads).permute(2, 0, 1).unsqueeze(0)."""
    coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    index = (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).reshape(-1)
    table = net.init("rpb", 0.02 * net.rng.standard_normal(((2 * ws - 1) ** 2, heads)))
    b = net.node("Gather", [table, net.const(index.astype(np.int64), "rpi")], axis=0)
    b = net.node("Reshape", [b, net.i64([ws * ws, ws * ws, heads])])
    return net.unsq(net.node("Transpose", [b], perm=[2, 0, 1]))


def _swin_block(net: Net, x: str, hw: int, c: int, heads: int, ws: int, shift: int) -> str:
    shortcut = x
    b = net.dim(x, 0)
    x = net.view(net.layernorm(x, c), [b, hw, hw, c])
    # pad H and W to multiples of the window: pad = (ws - H % ws) % ws from x.size()
    wsc = net.const(np.int64(ws), "ws")
    pad = [net.unsq(net.node("Mod", [net.node("Sub", [wsc, net.node("Mod", [net.dim(x, a), wsc])]), wsc]))
           for a in (1, 2)]
    x = net.node("Pad", [x, net.node("Concat", [net.i64([0, 0, 0, 0, 0])] + pad + [net.i64([0])], axis=0)])
    hp = -(-hw // ws) * ws
    nw = (hp // ws) ** 2
    if shift:
        x = _roll(net, x, -shift, hp)
    x = net.view(x, [b, hp // ws, ws, hp // ws, ws, c])
    x = net.view(net.node("Transpose", [x], perm=[0, 1, 3, 2, 4, 5]), [-1, ws * ws, c])
    mask = net.const(_window_mask(hp, ws, shift), "attn_mask") if shift else None
    x = attention.timm(net, x, c, heads, bias=_rel_bias(net, ws, heads), windows=nw, mask=mask)
    x = net.view(x, [b, hp // ws, hp // ws, ws, ws, c])
    x = net.view(net.node("Transpose", [x], perm=[0, 1, 3, 2, 4, 5]), [b, hp, hp, c])
    if shift:
        x = _roll(net, x, shift, hp)
    x = net.node("Slice", [x, net.i64([0, 0]), net.i64([hw, hw]), net.i64([1, 2])])
    x = net.node("Add", [shortcut, net.view(x, [b, hw * hw, c])])
    return net.node("Add", [x, _mlp(net, net.layernorm(x, c), c, 4 * c)])


def _patch_merging(net: Net, x: str, hw: int, c: int) -> str:
    """x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2] concatenated,
    LayerNorm, Linear 4C -> 2C without bias."""
    b = net.dim(x, 0)
    x = net.view(x, [b, hw, hw, c])
    parts = [net.node("Slice", [x, net.i64([i, j]), net.i64([INT_MAX, INT_MAX]), net.i64([1, 2]),
                                net.i64([2, 2])]) for i, j in ((0, 0), (1, 0), (0, 1), (1, 1))]
    x = net.view(net.node("Concat", parts, axis=-1), [b, -1, 4 * c])
    return net.linear(net.layernorm(x, 4 * c), 4 * c, 2 * c, bias=False, rank=3)


def swin(perf=False):
    """Swin-T's first two stages (two blocks each: regular then shifted windows) with patch
    merging between; the test size pads its 10x10 and 5x5 maps to the window (Pad by Mod)."""
    net = Net("swin", 7, opset=17)
    hw, c, heads, ws = (224, 96, 3, 7) if perf else (40, 16, 2, 4)
    x = net.input("input", (1, 3, hw, hw))
    x = net.layernorm(_patch_embed(net, x, 3, c, 4), c)
    r = hw // 4
    for stage in range(2):
        for i in range(2):
            shift = ws // 2 if i % 2 and r > ws else 0
            x = _swin_block(net, x, r, c, heads, ws, shift)
        if stage == 0:
            x = _patch_merging(net, x, r, c)
            r, c, heads = (r + 1) // 2, 2 * c, 2 * heads
    x = net.node("ReduceMean", [net.layernorm(x, c)], axes=[1], keepdims=0)
    return net.model(net.linear(x, c, 1000 if perf else 10))


def _tokens(net: Net, x: str, c: int) -> str:
    """x.flatten(2).transpose(1, 2): a (1, C, H, W) map as (1, H*W, C) tokens."""
    return net.node("Transpose", [net.node("Reshape", [x, net.i64([1, c, -1])])], perm=[0, 2, 1])


def _map(net: Net, t: str, c: int, s: int) -> str:
    """t.transpose(1, 2).reshape(1, C, s, s): (1, s*s, C) tokens as a map."""
    return net.node("Reshape", [net.node("Transpose", [t], perm=[0, 2, 1]), net.i64([1, c, s, s])])


def segformer(perf=False):
    """SegFormer-B0 (Xie et al., 2021) at 512x512, 19 classes: four stages of overlapping patch
    embeddings (Conv 7x7/4, then 3x3/2; LayerNorm on the tokens), efficient self-attention
    whose keys and values come from a Conv k = stride = sr (8, 4, 2, 1) and a LayerNorm,
    Mix-FFN (Linear, a depthwise 3x3 on the tokens viewed as a 2-D map, GELU, Linear), and the
    all-MLP decoder (a Linear per stage, bilinear Resize to 1/4, Concat, 1x1 + BN + Relu, the
    classifier)."""
    net = Net("segformer", 41, opset=17)
    hw, e = (512, 256) if perf else (64, 16)
    dims, heads = ((32, 64, 160, 256), (1, 2, 5, 8)) if perf else ((8, 16, 16, 32), (1, 2, 2, 4))
    x = net.input("pixel_values", (1, 3, hw, hw))
    cin, s, feats = 3, hw, []
    for i, (c, h, sr) in enumerate(zip(dims, heads, (8, 4, 2, 1))):
        k, st = (7, 4) if i == 0 else (3, 2)
        x, s = net.convnd(x, cin, c, k, st), s // st
        t = net.layernorm(_tokens(net, x, c), c)
        for _ in range(2 if perf else 1):
            y = net.layernorm(t, c)
            kv = y if sr == 1 else net.layernorm(
                _tokens(net, net.convnd(_map(net, y, c, s), c, c, sr, sr, pads=[0, 0, 0, 0]), c), c)
            q, kk, v = (attention.heads_first(net, net.linear(z, c, c, rank=3), h, c // h)
                        for z in (y, kv, kv))
            sc = net.node("MatMul", [q, net.node("Transpose", [kk], perm=[0, 1, 3, 2])])
            sc = net.node("Div", [sc, net.f32(np.sqrt(c // h))])
            o = attention.merge_heads(net, attention.softmax_attend(net, sc, v), c)
            t = net.node("Add", [t, net.linear(o, c, c, rank=3)])
            m = _map(net, net.linear(net.layernorm(t, c), c, 4 * c, rank=3), 4 * c, s)
            m = net.act(_tokens(net, net.convnd(m, 4 * c, 4 * c, 3, group=4 * c), 4 * c), "gelu")
            t = net.node("Add", [t, net.linear(m, 4 * c, c, rank=3)])
        x = _map(net, net.layernorm(t, c), c, s)
        feats.append((x, c, s))
        cin = c
    ups = []
    for f, c, s in reversed(feats):
        y = _map(net, net.linear(_tokens(net, f, c), c, e, rank=3), e, s)
        if s != hw // 4:
            y = net.node("Resize", [y, net.const(np.zeros(0, np.float32), "roi"),
                                    net.const(np.zeros(0, np.float32), "scales"),
                                    net.const(np.array([1, e, hw // 4, hw // 4], np.int64), "sizes")],
                         mode="linear")
        ups.append(y)
    y = net.conv_bn(net.node("Concat", ups, axis=1), 4 * e, e, 1)
    return net.model(net.convnd(y, e, 19, 1))


def _mobilevit_block(net: Net, x: str, c: int, dim: int, depth: int, h: int) -> str:
    """MobileViT's block: 3x3 and 1x1 convs to `dim`, unfold into 2x2 patches (each of the
    four pixel positions a sequence of h*h/4 patches: Reshape, Transpose, Reshape), pre-norm
    transformer layers (SiLU MLP of 2 x dim), fold back, 1x1 to c, Concat with the input and
    a 3x3 fusion conv."""
    y = net.conv(net.conv_bn(x, c, c, 3, act="swish"), c, dim, 1)
    p, n = 2, h // 2
    t = net.node("Transpose", [net.node("Reshape", [y, net.i64([dim, n, p, n, p])])], perm=[2, 4, 1, 3, 0])
    t = net.node("Reshape", [t, net.i64([p * p, n * n, dim])])
    for _ in range(depth):
        t = net.node("Add", [t, attention.timm(net, net.layernorm(t, dim), dim, 4)])
        m = net.act(net.linear(net.layernorm(t, dim), dim, 2 * dim, rank=3), "swish")
        t = net.node("Add", [t, net.linear(m, 2 * dim, dim, rank=3)])
    t = net.node("Reshape", [net.layernorm(t, dim), net.i64([p, p, n, n, dim])])
    y = net.node("Reshape", [net.node("Transpose", [t], perm=[4, 2, 0, 3, 1]), net.i64([1, dim, h, h])])
    y = net.conv_bn(y, dim, c, 1, act="swish")
    return net.conv_bn(net.node("Concat", [x, y], axis=1), 2 * c, c, 3, act="swish")


def mobilevit(perf=False):
    """MobileViT-XS (Mehta & Rastegari, 2022) on 256x256: MobileNetV2 blocks with SiLU
    (expansion 4), MobileViT blocks at 1/8, 1/16 and 1/32 of the input (dims 96, 120, 144;
    2, 4 and 3 transformer layers), 1x1 to 384 and the pooled classifier."""
    net = Net("mobilevit", 12, opset=17)
    hw = 256 if perf else 64
    x = net.conv_bn(net.input("input", (1, 3, hw, hw)), 3, 16, 3, 2, act="swish")
    mv2 = lambda x, ci, co, s: net.inverted_residual(x, ci, 4 * ci, co, 3, s, "swish")  # noqa: E731
    x = mv2(x, 16, 32, 1)
    x = mv2(mv2(mv2(x, 32, 48, 2), 48, 48, 1), 48, 48, 1)
    x = _mobilevit_block(net, mv2(x, 48, 64, 2), 64, 96, 2, hw // 8)
    x = _mobilevit_block(net, mv2(x, 64, 80, 2), 80, 120, 4, hw // 16)
    x = _mobilevit_block(net, mv2(x, 80, 96, 2), 96, 144, 3, hw // 32)
    x = net.conv_bn(x, 96, 384, 1, act="swish")
    return net.model(net.classifier(x, 384, 1000 if perf else 10))


def detr(perf=False):
    """DETR's transformer (d=256, 8 heads of 32, post-norm) over a 25x34 map: a 1x1
    projection of the backbone's 2048 channels, 3 encoder layers (positional embeddings
    added to the queries and keys), 3 decoder layers of 100 object queries (self-attention,
    cross-attention to the memory), FFN 2048, the class head and the box MLP with Sigmoid."""
    net = Net("detr", 44, opset=17)
    hh, ww, nq = (25, 34, 100) if perf else (5, 6, 10)
    c, heads, n = 256, 8, hh * ww
    d = c // heads
    x = net.convnd(net.input("features", (1, 2048, hh, ww)), 2048, c, 1)
    x = net.node("Transpose", [net.node("Reshape", [x, net.i64([1, c, n])])], perm=[0, 2, 1])
    pos = net.init("pos", net.rng.standard_normal((1, n, c)) * 0.1)
    qpos = net.init("qpos", net.rng.standard_normal((1, nq, c)) * 0.1)

    def heads_of(t, count, perm):
        return net.node("Transpose", [net.node("Reshape", [net.linear(t, c, c, rank=3),
                                                           net.i64([1, count, heads, d])])], perm=perm)

    def mha(q_in, k_in, v_in, nqs, nks):
        q = heads_of(q_in, nqs, [0, 2, 1, 3])
        s = net.node("MatMul", [net.node("Mul", [q, net.f32(d ** -0.5)]), heads_of(k_in, nks, [0, 2, 3, 1])])
        o = attention.softmax_attend(net, s, heads_of(v_in, nks, [0, 2, 1, 3]))
        o = net.node("Reshape", [net.node("Transpose", [o], perm=[0, 2, 1, 3]), net.i64([1, nqs, c])])
        return net.linear(o, c, c, rank=3)

    def ffn(t):
        return net.linear(net.node("Relu", [net.linear(t, c, 2048, rank=3)]), 2048, c, rank=3)
    for _ in range(3):
        qk = net.node("Add", [x, pos])
        x = net.layernorm(net.node("Add", [x, mha(qk, qk, x, n, n)]), c)
        x = net.layernorm(net.node("Add", [x, ffn(x)]), c)
    mem, keys = x, net.node("Add", [x, pos])
    t = net.init("tgt", np.zeros((1, nq, c)))
    for _ in range(3):
        qk = net.node("Add", [t, qpos])
        t = net.layernorm(net.node("Add", [t, mha(qk, qk, t, nq, nq)]), c)
        t = net.layernorm(net.node("Add", [t, mha(net.node("Add", [t, qpos]), keys, mem, nq, n)]), c)
        t = net.layernorm(net.node("Add", [t, ffn(t)]), c)
    box = net.node("Relu", [net.linear(net.node("Relu", [net.linear(t, c, c, rank=3)]), c, c, rank=3)])
    return net.model([net.linear(t, c, 92, rank=3), net.node("Sigmoid", [net.linear(box, c, 4, rank=3)])])

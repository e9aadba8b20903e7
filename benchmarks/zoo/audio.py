"""Speech and audio nets as PyTorch exports them, the class of Conv1d over long sequences and
of transformers over hundreds to thousands of frames: an x-vector TDNN (dilated Conv1d over
512 channels on hundreds of frames, statistics pooling), a HiFi-GAN generator
(ConvTranspose1d upsampling, multi-receptive-field blocks of dilated Conv1d with LeakyRelu,
over thousands of samples), Whisper's encoder (attention over 1500 frames: 9 MB of scores a
head), a Conformer (depthwise Conv1d k31, GLU) and wav2vec 2.0 (strided Conv1d from the raw
waveform, GroupNorm, a grouped k128 positional Conv1d). The TDNN's wide layers read inputs of
0.6 MB, past half a Zen 3's L2; HiFi-GAN's planes of 256 to 8,192 samples lie a multiple of
1 KiB apart and collide in L1's sets. The channel-vectorized tiles take the reduction of
both in chunks of input channels (conv/channel_chunks.chunk_channels, collision_chunk)."""
from __future__ import annotations

from . import attention
from .net import Net


def tdnn(perf=False):
    """x-vector speaker embedding (Snyder et al., 2018): five TDNN layers as Conv1d (80 -> 512
    k5, 512 -> 512 k3 dilation 2, k3 dilation 3, 1x1, 512 -> 1500 1x1), each Relu + BatchNorm;
    statistics pooling (mean and standard deviation over the frames, the variance as
    ReduceMean of the squared deviations); two Linear layers to the 512-wide embedding."""
    net = Net("tdnn", 17)
    frames, c, pooled, d = (300, 512, 1500, 1) if perf else (40, 512, 1500, 8)
    c, pooled = c // d, pooled // d
    x = net.input("input", (1, 80 // d, frames))
    cin = 80 // d
    for cout, k, dil in ((c, 5, 1), (c, 3, 2), (c, 3, 3), (c, 1, 1), (pooled, 1, 1)):
        x = net.bn(net.act(net.convnd(x, cin, cout, k, dilation=dil, pads=[0, 0], dims=1),
                           "relu"), cout)
        cin = cout
    mean = net.node("ReduceMean", [x], axes=[2], keepdims=1)
    dev = net.node("Sub", [x, mean])
    var = net.node("ReduceMean", [net.node("Mul", [dev, dev])], axes=[2], keepdims=0)
    std = net.node("Sqrt", [net.node("Add", [var, net.f32(1e-5)])])
    x = net.node("Concat", [net.node("Squeeze", [mean, net.i64([2])]), std], axis=1)
    x = net.act(net.linear(x, 2 * pooled, c), "relu")
    return net.model(net.linear(x, c, c))


def hifigan(perf=False):
    """HiFi-GAN generator (Kong et al., 2020, V2's widths): Conv1d k7 from 80 mel bands, then
    per upsampling stage LeakyRelu(0.1), ConvTranspose1d (stride u, kernel 2u, padding u/2)
    halving the channels, and a multi-receptive-field fusion: three residual blocks (kernels
    3, 7, 11) of three pairs LeakyRelu -> Conv1d dilated 1/3/5 -> LeakyRelu -> Conv1d, added
    to their input, their outputs averaged; LeakyRelu, Conv1d k7 to one channel, Tanh."""
    net = Net("hifigan", 18)
    frames, ch, rates = (32, 128, (8, 8, 2, 2)) if perf else (8, 32, (4, 2))
    x = net.input("mel", (1, 80, frames))
    x = net.convnd(x, 80, ch, 7, dims=1)

    def leaky(x):
        return net.node("LeakyRelu", [x], alpha=0.1)

    c = ch
    for u in rates:
        w = net.weight((c, c // 2, 2 * u), fan_in=c * 2)
        y = leaky(x)
        bias = net.init("b", net.rng.standard_normal(c // 2) * 0.1)
        x = net.node("ConvTranspose", [y, w, bias], kernel_shape=[2 * u], strides=[u],
                     pads=[u // 2, u // 2])
        c //= 2
        total = None
        for k in (3, 7, 11):
            y = x
            for dil in (1, 3, 5):
                t = net.convnd(leaky(y), c, c, k, dilation=dil, dims=1)
                y = net.node("Add", [y, conv1d(net, leaky(t), c, k)])
            total = y if total is None else net.node("Add", [total, y])
        x = net.node("Mul", [total, net.f32(1.0 / 3)])
    x = net.convnd(leaky(x), c, 1, 7, dims=1)
    return net.model(net.node("Tanh", [x]))


def conv1d(net, x, c, k):
    """A residual branch's closing Conv1d, c -> c, its weights at a quarter of He's scale (as
    trained generators keep them small): with He's, each of the nine residual additions of a
    stage doubled the signal and three quarters of the output sat in Tanh's saturation, where
    the comparison with onnxruntime checks nothing."""
    w = net.weight((c, c, k), scale=0.25 * (2.0 / (c * k)) ** 0.5)
    return net.node("Conv", [x, w, net.init("b", net.rng.standard_normal(c) * 0.1)],
                    kernel_shape=[k], pads=[k // 2, k // 2])


def whisper_encoder(perf=False):
    """Whisper-tiny's encoder (Radford et al., 2022): Conv1d 80 -> 384 k3 and k3 stride 2,
    each GELU, over 3000 mel frames; a learned positional embedding; four pre-LayerNorm
    blocks (6 heads of 64 over 1500 frames, MLP 4x with GELU); a final LayerNorm."""
    net = Net("whisper_encoder", 32)
    frames, d, heads, layers = (3000, 384, 6, 4) if perf else (64, 48, 2, 1)
    x = net.input("mel", (1, 80, frames))
    x = net.act(net.convnd(x, 80, d, 3, dims=1), "gelu")
    x = net.act(net.convnd(x, d, d, 3, 2, dims=1), "gelu")
    x = net.node("Transpose", [x], perm=[0, 2, 1])
    x = net.node("Add", [x, net.init("pos", net.rng.standard_normal((frames // 2, d)) * 0.02)])
    for _ in range(layers):
        x = net.node("Add", [x, attention.hf(net, net.layernorm(x, d), d, heads)])
        h = net.act(net.linear(net.layernorm(x, d), d, 4 * d, rank=3), "gelu")
        x = net.node("Add", [x, net.linear(h, 4 * d, d, rank=3)])
    return net.model(net.layernorm(x, d))


def conformer(perf=False):
    """A Conformer encoder (Gulati et al., 2020) as torchaudio writes it: Conv2d subsampling
    by 4 (two 3x3 stride 2, Relu) of 80-bin features, a Linear to d; blocks of half-step FFN
    (LayerNorm, Linear 4d, SiLU, Linear), self-attention, the convolution module (LayerNorm,
    pointwise Conv1d to 2d, GLU as Split + Sigmoid + Mul, depthwise Conv1d k31, BatchNorm,
    SiLU, pointwise Conv1d), a second half-step FFN and a LayerNorm."""
    net = Net("conformer", 30)
    frames, d, heads, layers = (400, 256, 4, 4) if perf else (64, 32, 2, 1)
    x = net.input("features", (1, 1, frames, 80))
    for cin in (1, d):
        x = net.act(net.convnd(x, cin, d, 3, 2, pads=[0, 0, 0, 0]), "relu")
    t, f = (frames - 3) // 2 // 2, (80 - 3) // 2 // 2  # two unpadded 3x3 stride 2
    x = net.node("Reshape", [net.node("Transpose", [x], perm=[0, 2, 1, 3]), net.i64([1, t, d * f])])
    x = net.linear(x, d * f, d, rank=3)

    def ffn(x):
        h = net.act(net.linear(net.layernorm(x, d), d, 4 * d, rank=3), "swish")
        return net.node("Add", [x, net.node("Mul", [net.linear(h, 4 * d, d, rank=3), net.f32(0.5)])])
    for _ in range(layers):
        x = ffn(x)
        x = net.node("Add", [x, attention.hf(net, net.layernorm(x, d), d, heads)])
        h = net.convnd(net.node("Transpose", [net.layernorm(x, d)], perm=[0, 2, 1]), d, 2 * d, 1, dims=1)
        a, gate = net.ops("Split", [h, net.i64([d, d])], 2, axis=1)
        h = net.convnd(net.node("Mul", [a, net.node("Sigmoid", [gate])]), d, d, 31, group=d, dims=1)
        h = net.convnd(net.act(net.bn(h, d), "swish"), d, d, 1, dims=1)
        x = net.layernorm(ffn(net.node("Add", [x, net.node("Transpose", [h], perm=[0, 2, 1])])), d)
    return net.model(x)


def wav2vec2(perf=False):
    """wav2vec 2.0 base (Baevski et al., 2020) on one second of 16 kHz audio: the feature
    encoder's seven Conv1d (512 channels; k10 stride 5, four k3 stride 2, two k2 stride 2;
    no bias), GroupNorm with a group per channel after the first, GELU after each; LayerNorm
    and the projection to 768; the positional Conv1d (k128, 16 groups, padding 64, its last
    frame dropped, GELU) added; two post-LayerNorm transformer blocks (12 heads)."""
    net = Net("wav2vec2", 22)
    samples, c, d, k_pos, layers = (16000, 512, 768, 128, 2) if perf else (1600, 64, 96, 16, 1)
    x = net.node("Unsqueeze", [net.input("input_values", (1, samples)), net.i64([1])])
    t, cin = samples, 1
    for i, (k, s) in enumerate([(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2):
        x = net.convnd(x, cin, c, k, s, bias=False, pads=[0, 0], dims=1)
        t, cin = (t - k) // s + 1, c
        x = net.act(net.groupnorm(x, c, c, [t]) if i == 0 else x, "gelu")
    x = net.linear(net.layernorm(net.node("Transpose", [x], perm=[0, 2, 1]), c), c, d, rank=3)
    p = net.convnd(net.node("Transpose", [x], perm=[0, 2, 1]), d, d, k_pos, group=16,
                   pads=[k_pos // 2] * 2, dims=1)
    p = net.node("Slice", [p, net.i64([0]), net.i64([-1]), net.i64([2])])
    x = net.layernorm(net.node("Add", [x, net.node("Transpose", [net.act(p, "gelu")], perm=[0, 2, 1])]), d)
    for _ in range(layers):
        x = net.layernorm(net.node("Add", [x, attention.hf(net, x, d, 12)]), d)
        h = net.act(net.linear(x, d, 4 * d, rank=3), "gelu")
        x = net.layernorm(net.node("Add", [x, net.linear(h, 4 * d, d, rank=3)]), d)
    return net.model(x)

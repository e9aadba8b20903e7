"""Image generation and restoration nets as PyTorch exports them: a latent-diffusion UNet
(GroupNorm as Reshape + InstanceNormalization, SiLU, a time embedding broadcast over the
planes, self-attention over 8x8 latents, nearest upsampling and skip Concats) and a
Real-ESRGAN-style x4 generator (residual-in-residual dense blocks: every 3x3 conv reads the
Concat of all before it; LeakyRelu; nearest x2 upsampling twice) and a StyleGAN2 generator
(modulated convolutions: weights computed at run time from a style vector); ESPCN and FSRCNN
super-resolution on 640x360 (sub-pixel DepthToSpace; a 9x9/2 ConvTranspose) and SRCNN on
256x256 (9x9 and 5x5 convolutions)."""
from __future__ import annotations

import numpy as np

from . import attention
from .net import Net


def _nearest2(net, x):
    return net.node("Resize", [x, net.const(np.zeros(0, np.float32), "roi"),
                               net.const(np.array([1, 1, 2, 2], np.float32), "scales")], mode="nearest")


def diffusion_unet(perf=False):
    """A DDPM/latent-diffusion UNet on 4-channel 32x32 latents: ResBlocks (GroupNorm(32) +
    SiLU + 3x3 conv, the time embedding's SiLU + Linear added per channel, again, a 1x1
    shortcut where the width changes) at widths 128, 256, 256 with strided 3x3 downsampling;
    ResBlock, single-head self-attention, ResBlock at 4x4; nearest x2 upsampling, each with
    the skip Concat and a ResBlock; GroupNorm, SiLU and a 3x3 conv back to 4 channels."""
    net = Net("diffusion_unet", 24)
    hw, ch, groups = (32, 128, 32) if perf else (16, 32, 8)
    x = net.input("latent", (1, 4, hw, hw))
    temb = net.act(net.input("temb", (1, 4 * ch)), "swish")

    def res(x, cin, cout, s):
        h = net.convnd(net.act(net.groupnorm(x, cin, groups, [s, s]), "swish"), cin, cout, 3)
        h = net.node("Add", [h, net.node("Unsqueeze", [net.linear(temb, 4 * ch, cout), net.i64([2, 3])])])
        h = net.convnd(net.act(net.groupnorm(h, cout, groups, [s, s]), "swish"), cout, cout, 3)
        return net.node("Add", [x if cin == cout else net.convnd(x, cin, cout, 1), h])

    def attend(x, c, s):
        h = net.node("Reshape", [net.groupnorm(x, c, groups, [s, s]), net.i64([1, c, s * s])])
        h = attention.hf(net, net.node("Transpose", [h], perm=[0, 2, 1]), c, 1)
        h = net.node("Reshape", [net.node("Transpose", [h], perm=[0, 2, 1]), net.i64([1, c, s, s])])
        return net.node("Add", [x, h])
    x, c, s, skips = net.convnd(x, 4, ch, 3), ch, hw, []
    for mult in (1, 2, 2):
        x, c = res(x, c, ch * mult, s), ch * mult
        skips.append((x, c))
        x, s = net.convnd(x, c, c, 3, stride=2), s // 2
    x = res(attend(res(x, c, c, s), c, s), c, c, s)
    for skip, kc in reversed(skips):
        x, s = _nearest2(net, x), s * 2
        x, c = res(net.node("Concat", [x, skip], axis=1), c + kc, kc, s), kc
    x = net.act(net.groupnorm(x, c, groups, [s, s]), "swish")
    return net.model(net.convnd(x, c, 4, 3))


def esrgan(perf=False):
    """Real-ESRGAN's x4 generator (Wang et al., 2021) narrowed to 2 RRDBs on a 64x64 input:
    3x3 conv to 64 channels; residual-in-residual dense blocks (three dense blocks of five
    3x3 convs with growth 32, each on the Concat of the block's input and every output
    before it, LeakyRelu(0.2); each dense block's output scaled by 0.2 and added); a trunk
    conv added to the first features; nearest x2 + conv + LeakyRelu twice; two convs to RGB."""
    net = Net("esrgan", 33)
    hw, nf, gc, blocks = (64, 64, 32, 2) if perf else (16, 16, 8, 1)
    x = net.input("lr", (1, 3, hw, hw))

    def lrelu(t):
        return net.node("LeakyRelu", [t], alpha=0.2)

    def scaled_add(t, r):
        return net.node("Add", [net.node("Mul", [t, net.f32(0.2)]), r])
    fea = net.convnd(x, 3, nf, 3)
    t = fea
    for _ in range(blocks):
        block_in = t
        for _ in range(3):
            feats = [t]
            for i in range(4):
                inp = t if i == 0 else net.node("Concat", feats, axis=1)
                feats.append(lrelu(net.convnd(inp, nf + i * gc, gc, 3)))
            t = scaled_add(net.convnd(net.node("Concat", feats, axis=1), nf + 4 * gc, nf, 3), t)
        t = scaled_add(t, block_in)
    t = net.node("Add", [fea, net.convnd(t, nf, nf, 3)])
    for _ in range(2):
        t = lrelu(net.convnd(_nearest2(net, t), nf, nf, 3))
    return net.model(net.convnd(lrelu(net.convnd(t, nf, nf, 3)), nf, 3, 3))


def _modulated_conv(net, x, w, zdim, cin, cout, k, demodulate=True):
    """StyleGAN2's modulated convolution at batch 1: style = Linear(w) per input channel,
    weight = w0 * style, demodulated by rsqrt(sum(weight^2) + 1e-8) per output channel, the
    weight reshaped to (cout, cin, k, k) and convolved: weights computed at run time."""
    style = net.node("Reshape", [net.linear(w, zdim, cin), net.i64([1, 1, cin, 1, 1])])
    w0 = net.init("w", net.rng.standard_normal((1, cout, cin, k, k)) / np.sqrt(cin * k * k))
    wt = net.node("Mul", [w0, style])
    if demodulate:
        ss = net.node("ReduceSum", [net.node("Mul", [wt, wt]), net.i64([2, 3, 4])], keepdims=1)
        wt = net.node("Mul", [wt, net.node("Reciprocal", [net.node("Sqrt", [
            net.node("Add", [ss, net.f32(1e-8)])])])])
    wt = net.node("Reshape", [wt, net.i64([cout, cin, k, k])])
    return net.node("Conv", [x, wt], kernel_shape=[k, k], pads=[k // 2] * 4)


def stylegan2(perf=False):
    """A StyleGAN2 generator, narrowed: the mapping network (z normalized, eight Linear +
    LeakyRelu(0.2)) to w, a learned 4x4 constant, per resolution two modulated 3x3 convs
    (noise and bias added, LeakyRelu(0.2) x sqrt(2)) after a nearest x2 upsampling, and a
    modulated 1x1 toRGB without demodulation at 64x64."""
    net = Net("stylegan2", 22)
    zdim, widths, depth = (256, (256, 256, 256, 128, 64), 8) if perf else (32, (16, 16, 8), 2)
    z = net.input("z", (1, zdim))
    ms = net.node("ReduceMean", [net.node("Mul", [z, z])], axes=[1], keepdims=1)
    w = net.node("Div", [z, net.node("Sqrt", [net.node("Add", [ms, net.f32(1e-8)])])])
    for _ in range(depth):
        w = net.node("LeakyRelu", [net.linear(w, zdim, zdim)], alpha=0.2)
    x, cin, res = net.init("const", net.rng.standard_normal((1, widths[0], 4, 4))), widths[0], 4
    for i, c in enumerate(widths):
        if i:
            x, res = _nearest2(net, x), 2 * res
        for _ in range(2):
            y = _modulated_conv(net, x, w, zdim, cin, c, 3)
            y = net.node("Add", [y, net.init("noise", 0.1 * net.rng.standard_normal((1, 1, res, res)))])
            y = net.node("Add", [y, net.init("b", 0.1 * net.rng.standard_normal((1, c, 1, 1)))])
            x, cin = net.node("Mul", [net.node("LeakyRelu", [y], alpha=0.2), net.f32(np.sqrt(2))]), c
    return net.model(_modulated_conv(net, x, w, zdim, cin, 3, 1, demodulate=False))


def espcn(perf=False):
    """ESPCN x3 (Shi et al., 2016) on a 640x360 luma plane: 5x5 conv to 64 + Tanh, 3x3 to 32 +
    Tanh, 3x3 to 9, DepthToSpace(3), Sigmoid. Its 3x3 64 -> 32 on 640 columns holds more V a
    tile row than Winograd's scratch bound (column blocks)."""
    net = Net("espcn", 49)
    h, w = (360, 640) if perf else (20, 150)
    x = net.input("input", (1, 1, h, w))
    x = net.act(net.convnd(x, 1, 64, 5), "tanh")
    x = net.act(net.convnd(x, 64, 32, 3), "tanh")
    x = net.node("DepthToSpace", [net.convnd(x, 32, 9, 3)], blocksize=3, mode="CRD")
    return net.model(net.act(x, "sigmoid"))


def srcnn(perf=False):
    """SRCNN 9-5-5 (Dong et al., 2014) on a 256x256 luma plane (bicubic-upscaled beforehand):
    9x9 to 64 + Relu, 5x5 64 -> 32 + Relu (Winograd F(2x2, 5x5)), 5x5 to 1."""
    net = Net("srcnn", 62)
    h, w = (256, 256) if perf else (20, 26)
    x = net.input("input", (1, 1, h, w))
    x = net.act(net.convnd(x, 1, 64, 9), "relu")
    x = net.act(net.convnd(x, 64, 32, 5), "relu")
    return net.model(net.convnd(x, 32, 1, 5))


def fsrcnn(perf=False):
    """FSRCNN x2 (Dong et al., 2016) on a 640x360 luma plane: 5x5 feature extraction to 56,
    1x1 shrink to 12, four 3x3 maps, 1x1 expansion, PReLU after each, and a 9x9 stride-2
    ConvTranspose (pad 4, output padding 1) to 1280x720: taps 20x its output per stride^2
    (the phase Conv of ir/passes/convtranspose.py)."""
    net = Net("fsrcnn", 52)
    h, w = (360, 640) if perf else (12, 20)
    d, s = 56, 12
    x = net.input("input", (1, 1, h, w))

    def prelu(y, c):
        return net.node("PRelu", [y, net.init("a", np.full((c, 1, 1), 0.25))])
    x = prelu(net.convnd(x, 1, d, 5), d)
    x = prelu(net.convnd(x, d, s, 1), s)
    for _ in range(4):
        x = prelu(net.convnd(x, s, s, 3), s)
    x = prelu(net.convnd(x, s, d, 1), d)
    return net.model(net.node("ConvTranspose", [x, net.weight((d, 1, 9, 9), fan_in=d * 9),
                                                 net.init("b", np.zeros(1))],
                              kernel_shape=[9, 9], strides=[2, 2], pads=[4, 4, 4, 4],
                              output_padding=[1, 1]))

"""Speech and audio nets as PyTorch exports them, the class of Conv1d over long sequences:
an x-vector TDNN (dilated Conv1d over 512 channels on hundreds of frames, statistics pooling)
and a HiFi-GAN generator (ConvTranspose1d upsampling, multi-receptive-field blocks of dilated
Conv1d with LeakyRelu, over thousands of samples). The TDNN's wide layers read inputs of
0.6 MB, past half a Zen 3's L2; HiFi-GAN's planes of 256 to 8,192 samples lie a multiple of
1 KiB apart and collide in L1's sets. The channel-vectorized tiles take the reduction of
both in chunks of input channels (conv/channel_chunks.chunk_channels, collision_chunk)."""
from __future__ import annotations

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

"""Video and volume nets as torchvision (and the papers' reference code) export them:
R(2+1)D (torchvision.models.video.r2plus1d_18's layout): every 3x3x3 convolution factored into a 1x3x3 spatial and a 3x1x1 temporal Conv3d with
BatchNorm3d and Relu between, residual basic blocks whose first block of a stage strides (2, 2,
2) (a 1x1x1 strided Conv3d + BatchNorm3d on the shortcut), AdaptiveAvgPool3d(1) exported as
GlobalAveragePool, Flatten, Linear; X3D (depthwise 3x3x3 Conv3d in bottlenecks with
squeeze-and-excitation); a 3-D U-Net (3x3x3 Conv3d pairs, MaxPool3d, ConvTranspose3d, skips).
The 3-D convolutions run as 2-D ones over the output depths (glowpy/ir/passes/window3d.py).
As AVX2 code on a Zen 4 against onnxruntime's AVX2 kernels: X3D 0.39-0.47 of its time, the 3-D
U-Net 0.44 (0.84 and 0.51 before the depth-major forms of window3d.py)."""
from __future__ import annotations

from .net import Net


def _conv3(net, x, cin, cout, k, stride=(1, 1, 1), act="relu"):
    pads = [d // 2 for d in k] * 2
    w = net.weight((cout, cin) + tuple(k), fan_in=cin * k[0] * k[1] * k[2])
    y = net.bn(net.node("Conv", [x, w], kernel_shape=list(k), strides=list(stride), pads=pads), cout)
    return net.act(y, act)


def _factored(net, x, cin, cout, stride=1, act="relu"):
    """Conv2Plus1D: 1x3x3 (stride (1, s, s)) to the midplanes, BN, Relu, 3x1x1 (stride (s, 1,
    1)); midplanes = cin*cout*27 // (cin*9 + 3*cout), as torchvision computes them."""
    mid = cin * cout * 27 // (cin * 9 + 3 * cout)
    y = _conv3(net, x, cin, mid, (1, 3, 3), (1, stride, stride))
    return _conv3(net, y, mid, cout, (3, 1, 1), (stride, 1, 1), act)


def r2plus1d(perf=False):
    """R(2+1)D-18's layout on 8 frames of 112x112 (perf) or 4 of 16x16, widths 64-128-256-512
    (perf) or 8-16-16-32, one basic block a stage (two in torchvision's)."""
    net = Net("r2plus1d", 14)
    frames, hw, widths, classes = (8, 112, (64, 128, 256, 512), 400) if perf else \
        (4, 16, (8, 16, 16, 32), 10)
    x = net.input("input", (1, 3, frames, hw, hw))
    # the stem: 3 -> 45 1x7x7 stride (1, 2, 2), 45 -> 64 3x1x1
    x = _conv3(net, x, 3, 45 if perf else 6, (1, 7, 7), (1, 2, 2))
    x = _conv3(net, x, 45 if perf else 6, widths[0], (3, 1, 1))
    cin = widths[0]
    for i, c in enumerate(widths):
        s = 1 if i == 0 else 2
        y = _factored(net, _factored(net, x, cin, c, s), c, c, act=None)
        sc = x if s == 1 and cin == c else _conv3(net, x, cin, c, (1, 1, 1), (s, s, s), None)
        x = net.node("Relu", [net.node("Add", [y, sc])])
        cin = c
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x])], axis=1)
    return net.model(net.linear(x, cin, classes))


def x3d(perf=False):
    """X3D-S's layout (Feichtenhofer, 2020) on 13 frames of 160x160 (perf) or 4 of 16x16: a
    1x3x3 stride (1, 2, 2) stem and a 5x1x1 depthwise temporal Conv3d; bottleneck blocks of a
    1x1x1 expansion (x2.25), a 3x3x3 depthwise Conv3d (the first block of a stage strides
    (1, 2, 2)), squeeze-and-excitation on every other block, Swish, a 1x1x1 projection and the
    residual; widths 24-48-96-192 (1, 2, 3, 2 blocks: fewer than X3D-S's 3, 5, 11, 7)."""
    net = Net("x3d", 110)
    frames, hw, depths, classes = (13, 160, (1, 2, 3, 2), 400) if perf else \
        (4, 16, (1, 2, 1, 1), 10)
    x = net.input("input", (1, 3, frames, hw, hw))
    x = _conv3(net, x, 3, 24, (1, 3, 3), (1, 2, 2), None)
    w = net.weight((24, 1, 5, 1, 1), fan_in=5)
    x = net.act(net.bn(net.node("Conv", [x, w], kernel_shape=[5, 1, 1], pads=[2, 0, 0, 2, 0, 0],
                                group=24), 24), "relu")
    cin = 24
    for c, n in zip((24, 48, 96, 192), depths):
        for i in range(n):
            e, s = int(c * 2.25), (1, 2, 2) if i == 0 else (1, 1, 1)
            y = _conv3(net, x, cin, e, (1, 1, 1))
            wd = net.weight((e, 1, 3, 3, 3), fan_in=27)
            y = net.bn(net.node("Conv", [y, wd], kernel_shape=[3, 3, 3], strides=list(s),
                                pads=[1] * 6, group=e), e)
            if i % 2 == 0:
                q = max(8, e // 16)
                g = net.act(net.convnd(net.node("GlobalAveragePool", [y]), e, q, 1, dims=3), "relu")
                y = net.node("Mul", [y, net.act(net.convnd(g, q, e, 1, dims=3), "sigmoid")])
            y = _conv3(net, net.act(y, "swish"), e, c, (1, 1, 1), act=None)
            sc = x if i else _conv3(net, x, cin, c, (1, 1, 1), s, None)
            x = net.node("Relu", [net.node("Add", [y, sc])])
            cin = c
    x = _conv3(net, x, cin, 432, (1, 1, 1))
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x])], axis=1)
    return net.model(net.linear(x, 432, classes))


def unet3d(perf=False):
    """A 3-D U-Net (Cicek et al., 2016) for volumes, on 64^3 (perf) or 8^3: per level two
    3x3x3 Conv3d + Relu, MaxPool3d 2; ConvTranspose3d 2x2x2 stride 2 up, the skip concatenated;
    widths 16-32-64 (perf) or 4-8-16, two output classes by a 1x1x1 Conv3d."""
    net = Net("unet3d", 107)
    side, widths = (64, (16, 32, 64)) if perf else (8, (4, 8, 16))
    x = net.input("input", (1, 1, side, side, side))

    def block(t, ci, co):
        t = net.act(net.convnd(t, ci, co, 3, dims=3), "relu")
        return net.act(net.convnd(t, co, co, 3, dims=3), "relu")
    skips, cin = [], 1
    for c in widths[:-1]:
        x = block(x, cin, c)
        skips.append((x, c))
        x, cin = net.node("MaxPool", [x], kernel_shape=[2, 2, 2], strides=[2, 2, 2]), c
    x, cin = block(x, cin, widths[-1]), widths[-1]
    for sk, c in reversed(skips):
        w = net.weight((cin, c, 2, 2, 2), fan_in=cin * 8)
        x = net.node("ConvTranspose", [x, w], kernel_shape=[2, 2, 2], strides=[2, 2, 2])
        x, cin = block(net.node("Concat", [x, sk], axis=1), 2 * c, c), c
    return net.model(net.convnd(x, cin, 2, 1, dims=3))

"""Video nets as torchvision exports them: R(2+1)D (torchvision.models.video.r2plus1d_18's
layout): every 3x3x3 convolution factored into a 1x3x3 spatial and a 3x1x1 temporal Conv3d with
BatchNorm3d and Relu between, residual basic blocks whose first block of a stage strides (2, 2,
2) (a 1x1x1 strided Conv3d + BatchNorm3d on the shortcut), AdaptiveAvgPool3d(1) exported as
GlobalAveragePool, Flatten, Linear. The 3-D convolutions run as 2-D ones over the output depths
(glowpy/ir/passes/window3d.py)."""
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

"""Classic convolutional classifiers as torchvision exports them (Conv without bias +
BatchNormalization unfused, Relu, MaxPool, GlobalAveragePool/Flatten/Gemm, opset 13):
AlexNet (with its LocalResponseNormalization), VGG, ResNet (basic and bottleneck blocks),
ResNeXt, RegNetY, SqueezeNet, DenseNet and an Inception-v3-style network. `perf=False` gives
the small test size, `perf=True` a realistic one for timing."""
from __future__ import annotations

from .net import Net


def alexnet(perf=False):
    """AlexNet as in the Caffe model zoo (Krizhevsky et al., 2012, one tower): 11x11/4 to 64,
    LRN, 3x3/2 max pool, 5x5 to 192 (Winograd F(2x2, 5x5)), LRN, pool, three 3x3s, pool and
    the two 4,096-wide Gemms (narrowed for the test size)."""
    net = Net("alexnet", 61)
    hw, c, hidden = (224, (64, 192, 384, 256, 256), 4096) if perf else \
        (115, (16, 48, 64, 32, 32), 128)
    x = net.input("input", (1, 3, hw, hw))

    def conv(x, cin, cout, k, stride=1, pad=None):
        p = k // 2 if pad is None else pad
        w = net.weight((cout, cin, k, k), fan_in=cin * k * k)
        b = net.init("b", net.rng.standard_normal(cout) * 0.1)
        return net.node("Relu", [net.node("Conv", [x, w, b], kernel_shape=[k, k],
                                          strides=[stride, stride], pads=[p] * 4)])

    def lrn_pool(x):
        x = net.node("LRN", [x], size=5, alpha=1e-4, beta=0.75, bias=2.0)
        return net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = lrn_pool(conv(x, 3, c[0], 11, 4, 2))
    x = lrn_pool(conv(x, c[0], c[1], 5))
    x = conv(conv(conv(x, c[1], c[2], 3), c[2], c[3], 3), c[3], c[4], 3)
    x = net.node("Flatten", [net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])], axis=1)
    side = (hw + 4 - 11) // 4 + 1
    for _ in range(3):  # the three 3x3/2 pools
        side = (side - 3) // 2 + 1
    feat = c[4] * side ** 2
    x = net.act(net.linear(x, feat, hidden), "relu")
    x = net.act(net.linear(x, hidden, hidden), "relu")
    return net.model(net.linear(x, hidden, 1000))


def vgg(perf=False):
    """VGG-11 layout (cfg 'A') with BatchNorm, narrowed; the classifier's two hidden Gemms."""
    net = Net("vgg_small", 11)
    hw, widths = (112, (32, 64, 128, 256, 256)) if perf else (32, (8, 16, 32, 32, 32))
    x = net.input("input", (1, 3, hw, hw))
    cin = 3
    for i, c in enumerate(widths):
        for _ in range(1 if i < 2 else 2):
            x = net.act(net.bn(net.convnd(x, cin, c, 3), c), "relu")
            cin = c
        x = net.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = net.node("Flatten", [x], axis=1)
    feat = cin * (hw // 32) ** 2
    hidden = 512 if perf else 64
    x = net.act(net.linear(x, feat, hidden), "relu")
    x = net.act(net.linear(x, hidden, hidden), "relu")
    return net.model(net.linear(x, hidden, 10))


def _stem(net, hw, c):
    x = net.input("input", (1, 3, hw, hw))
    x = net.conv_bn(x, 3, c, 7, 2)
    return net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def basic_stages(net, x, widths):
    """ResNet-18's four stages of two basic blocks (3x3, 3x3, residual; a strided 1x1
    shortcut where the shape changes) on the stem's output of widths[0] channels."""
    cin = widths[0]
    for stage, c in enumerate(widths):
        for block in range(2):
            s = 2 if stage > 0 and block == 0 else 1
            y = net.conv_bn(net.conv_bn(x, cin, c, 3, s), c, c, 3, act=None)
            short = x if s == 1 and cin == c else net.conv_bn(x, cin, c, 1, s, act=None)
            x = net.node("Relu", [net.node("Add", [y, short])])
            cin = c
    return x


def resnet18(perf=False):
    net = Net("resnet18", 18)
    hw, widths = (224, (64, 128, 256, 512)) if perf else (32, (8, 16, 32, 64))
    x = basic_stages(net, _stem(net, hw, widths[0]), widths)
    return net.model(net.classifier(x, widths[-1], 1000 if perf else 10))


def _bottlenecks(net, x, cin, widths, blocks, group=1, width_per_group=None, se=False):
    """torchvision's Bottleneck (1x1, 3x3 with groups and stride, 1x1 x4), ResNeXt's
    grouped variant, and RegNetY's (SE after the 3x3, expansion 1)."""
    for stage, (c, n) in enumerate(zip(widths, blocks)):
        out = c if se else c * 4
        mid = c * width_per_group // 64 * group if width_per_group else c
        for block in range(n):
            s = 2 if stage > 0 and block == 0 else 1
            y = net.conv_bn(x, cin, mid, 1)
            y = net.conv_bn(y, mid, mid, 3, s, group=group)
            if se:
                y = net.se(y, mid, max(1, cin // 4))
            y = net.conv_bn(y, mid, out, 1, act=None)
            short = x if s == 1 and cin == out else net.conv_bn(x, cin, out, 1, s, act=None)
            x = net.node("Relu", [net.node("Add", [y, short])])
            cin = out
    return x, cin


def resnet50(perf=False):
    net = Net("resnet50", 50)
    hw, widths, blocks = ((224, (64, 128, 256, 512), (3, 4, 6, 3)) if perf
                          else (32, (4, 8, 16, 32), (1, 2, 2, 1)))
    x = _stem(net, hw, widths[0])
    x, c = _bottlenecks(net, x, widths[0], widths, blocks)
    return net.model(net.classifier(x, c, 1000 if perf else 10))


def resnext(perf=False):
    """ResNeXt-50 32x4d layout (groups 32, 4 channels per group at the first stage)."""
    net = Net("resnext", 32)
    hw, widths, blocks, groups = ((160, (64, 128, 256, 512), (2, 2, 2, 2), 32) if perf
                                  else (32, (8, 16, 32, 64), (1, 1, 1, 1), 4))
    x = _stem(net, hw, 16 if not perf else 64)
    x, c = _bottlenecks(net, x, 16 if not perf else 64, widths, blocks, group=groups,
                        width_per_group=4 if perf else 16)
    return net.model(net.classifier(x, c, 1000 if perf else 10))


def regnet(perf=False):
    """RegNetY-style: group width 8 (RegNetY-400MF has 8), SE with ratio 1/4 of the input."""
    net = Net("regnet_y", 400)
    hw, widths, blocks = ((224, (48, 104, 208, 440), (1, 3, 6, 6)) if perf
                          else (32, (16, 24, 32, 48), (1, 1, 2, 1)))
    x = net.input("input", (1, 3, hw, hw))
    x = net.conv_bn(x, 3, 32 if perf else 16, 3, 2)
    cin = 32 if perf else 16
    for stage, (c, n) in enumerate(zip(widths, blocks)):
        for block in range(n):
            s = 2 if block == 0 else 1
            y = net.conv_bn(x, cin, c, 1)
            y = net.conv_bn(y, c, c, 3, s, group=c // 8)
            y = net.se(y, c, max(1, cin // 4))
            y = net.conv_bn(y, c, c, 1, act=None)
            short = x if s == 1 and cin == c else net.conv_bn(x, cin, c, 1, s, act=None)
            x = net.node("Relu", [net.node("Add", [y, short])])
            cin = c
    return net.model(net.classifier(x, cin, 1000 if perf else 10))


def squeezenet(perf=False):
    """SqueezeNet 1.1: fire modules (squeeze 1x1, expand 1x1 and 3x3 concatenated), ceil-mode
    MaxPool, a 1x1 Conv classifier, GlobalAveragePool and Flatten (no Gemm)."""
    net = Net("squeezenet", 11)
    hw, m = (224, 1) if perf else (48, 4)
    x = net.input("input", (1, 3, hw, hw))
    x = net.node("Relu", [net.convnd(x, 3, 64 // m, 3, 2, pads=[0, 0, 0, 0])])

    def pool(x):
        return net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    def fire(x, cin, sq, ex):
        s = net.node("Relu", [net.convnd(x, cin, sq, 1)])
        a = net.node("Relu", [net.convnd(s, sq, ex, 1)])
        b = net.node("Relu", [net.convnd(s, sq, ex, 3)])
        return net.node("Concat", [a, b], axis=1), 2 * ex

    x, c = pool(x), 64 // m
    for i, (sq, ex) in enumerate(((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192),
                                  (64, 256), (64, 256))):
        x, c = fire(x, c, sq // m, ex // m)
        if i in (1, 3):
            x = pool(x)
    x = net.node("Relu", [net.convnd(x, c, 1000 if perf else 10, 1)])
    return net.model(net.node("Flatten", [net.node("GlobalAveragePool", [x])], axis=1))


def densenet(perf=False):
    """DenseNet-BC: dense layers BN-Relu-Conv1x1-BN-Relu-Conv3x3 concatenated onto their
    input; transitions BN-Relu-Conv1x1-AveragePool."""
    net = Net("densenet", 121)
    hw, growth, blocks = (224, 32, (6, 12, 24, 16)) if perf else (32, 8, (2, 3, 3, 2))
    x = _stem(net, hw, 2 * growth)
    c = 2 * growth
    for i, n in enumerate(blocks):
        for _ in range(n):
            y = net.conv(net.act(net.bn(x, c), "relu"), c, 4 * growth, 1)
            y = net.conv(net.act(net.bn(y, 4 * growth), "relu"), 4 * growth, growth, 3)
            x = net.node("Concat", [x, y], axis=1)
            c += growth
        if i < len(blocks) - 1:
            x = net.conv(net.act(net.bn(x, c), "relu"), c, c // 2, 1)
            x = net.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    x = net.act(net.bn(x, c), "relu")
    return net.model(net.classifier(x, c, 1000 if perf else 10))


def inception(perf=False):
    """Inception-v3-style: a stem, then blocks of parallel branches (1x1; 1x1-5x5; 1x1-3x3-3x3;
    AveragePool 3x3 with pads and count_include_pad=0, then 1x1) concatenated on channels,
    a factorized 1x7/7x1 block and a stride-2 reduction block."""
    net = Net("inception", 3)
    hw, m = (149, 1) if perf else (35, 8)
    x = net.input("input", (1, 3, hw, hw))
    x = net.conv_bn(x, 3, 32 // m * 2, 3, 2)
    x = net.conv_bn(x, 32 // m * 2, 64 // m, 3)
    x = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    c = 64 // m

    def conv(x, cin, cout, kh, kw, stride=1):
        w = net.weight((cout, cin, kh, kw), fan_in=cin * kh * kw)
        pads = [0, 0, 0, 0] if stride > 1 else [kh // 2, kw // 2, kh // 2, kw // 2]
        y = net.node("Conv", [x, w], kernel_shape=[kh, kw], strides=[stride] * 2, pads=pads)
        return net.act(net.bn(y, cout), "relu")

    def block_a(x, cin, pool_c):
        b1 = conv(x, cin, 64 // m, 1, 1)
        b2 = conv(conv(x, cin, 48 // m, 1, 1), 48 // m, 64 // m, 5, 5)
        b3 = conv(conv(conv(x, cin, 64 // m, 1, 1), 64 // m, 96 // m, 3, 3), 96 // m, 96 // m, 3, 3)
        p = net.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                     count_include_pad=0)
        b4 = conv(p, cin, pool_c, 1, 1)
        return net.node("Concat", [b1, b2, b3, b4], axis=1), (64 + 64 + 96) // m + pool_c

    x, c = block_a(x, c, 32 // m)
    x, c = block_a(x, c, 64 // m)
    # reduction: a stride-2 3x3, a 1x1-3x3-3x3/2 and a MaxPool, concatenated
    r1 = conv(x, c, 384 // m, 3, 3, 2)
    r2 = conv(conv(conv(x, c, 64 // m, 1, 1), 64 // m, 96 // m, 3, 3), 96 // m, 96 // m, 3, 3, 2)
    r3 = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x, c = net.node("Concat", [r1, r2, r3], axis=1), (384 + 96) // m + c
    # factorized 7x7 (Inception-C style): 1x7 then 7x1
    f = conv(conv(conv(x, c, 128 // m, 1, 1), 128 // m, 128 // m, 1, 7), 128 // m, 192 // m, 7, 1)
    x, c = net.node("Concat", [conv(x, c, 192 // m, 1, 1), f], axis=1), 2 * (192 // m)
    return net.model(net.classifier(x, c, 1000 if perf else 10))

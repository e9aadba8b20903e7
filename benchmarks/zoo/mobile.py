"""Efficient classifiers as torchvision exports them: MobileNetV1/V2/V3-small, EfficientNet-B0
and V2-S, MnasNet, ShuffleNetV2, GhostNet, ConvNeXt and RepLKNet (depthwise kernels up to
31x31). Depthwise convolutions, ReLU6 as Clip, HardSwish and HardSigmoid
(opset 14), SiLU as x*Sigmoid(x), squeeze-and-excitation, channel shuffle with torch's
Shape/Gather size arithmetic and Split, ConvNeXt's LayerNorm over channels via Transpose."""
from __future__ import annotations

from .net import Net


def _div(v, d=8):
    """torchvision's _make_divisible: round to a multiple of d, never down by more than 10%."""
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def mobilenet_v1(perf=False):
    net = Net("mobilenet_v1", 1)
    hw, a = (224, 1.0) if perf else (32, 0.25)
    x = net.input("input", (1, 3, hw, hw))
    c = int(32 * a)
    x = net.conv_bn(x, 3, c, 3, 2)
    for out, s in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)) + ((512, 1),) * 5 + \
            ((1024, 2), (1024, 1)):
        out = int(out * a)
        x = net.conv_bn(net.conv_bn(x, c, c, 3, s, group=c), c, out, 1)
        c = out
    return net.model(net.classifier(x, c, 1000 if perf else 10))


def mobilenet_v2(perf=False):
    net = Net("mobilenet_v2", 2)
    hw, a = (224, 1.0) if perf else (32, 0.25)
    x = net.input("input", (1, 3, hw, hw))
    cin = _div(32 * a)
    x = net.conv_bn(x, 3, cin, 3, 2, act="relu6")
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        c = _div(c * a)
        for i in range(n if perf else min(n, 2)):
            x = net.inverted_residual(x, cin, cin * t, c, stride=s if i == 0 else 1)
            cin = c
    last = 1280 if perf else 64
    x = net.conv_bn(x, cin, last, 1, act="relu6")
    return net.model(net.classifier(x, last, 1000 if perf else 10))


def mobilenet_v3_small(perf=False):
    """torchvision's mobilenet_v3_small: inverted residuals with SE (Relu inside, HardSigmoid
    gate), HardSwish in the later blocks and the head (Linear-HardSwish-Linear), opset 14."""
    net = Net("mobilenet_v3_small", 3, opset=14)
    hw, a = (224, 1.0) if perf else (32, 0.5)
    x = net.input("input", (1, 3, hw, hw))
    cin = _div(16 * a)
    x = net.conv_bn(x, 3, cin, 3, 2, act="hardswish")
    cfg = ((3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2), (3, 88, 24, False, "relu", 1),
           (5, 96, 40, True, "hardswish", 2), (5, 240, 40, True, "hardswish", 1),
           (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1),
           (5, 144, 48, True, "hardswish", 1), (5, 288, 96, True, "hardswish", 2),
           (5, 576, 96, True, "hardswish", 1), (5, 576, 96, True, "hardswish", 1))
    for k, exp, out, use_se, act, s in cfg:
        exp, out = _div(exp * a), _div(out * a)
        se = (lambda y, c: net.se(y, c, _div(c // 4), gate="hardsigmoid")) if use_se else None
        x = net.inverted_residual(x, cin, exp, out, k, s, act, se)
        cin = out
    last = 6 * cin
    x = net.conv_bn(x, cin, last, 1, act="hardswish")
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x])], axis=1)
    hidden = 1024 if perf else 64
    x = net.act(net.linear(x, last, hidden), "hardswish")
    return net.model(net.linear(x, hidden, 1000 if perf else 10))


def efficientnet_b0(perf=False):
    """MBConv blocks: 1x1 expand, depthwise 3x3/5x5, SE (SiLU inside, Sigmoid gate, squeeze =
    input channels / 4), 1x1 project; SiLU written as x*Sigmoid(x) (opset 13)."""
    net = Net("efficientnet_b0", 0)
    hw, a = (224, 1.0) if perf else (32, 0.25)
    x = net.input("input", (1, 3, hw, hw))
    cin = _div(32 * a)
    x = net.conv_bn(x, 3, cin, 3, 2, act="swish")
    for t, k, s, c, n in ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                          (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        c = _div(c * a)
        for i in range(n if perf else 1):
            x, cin = _mbconv(net, x, cin, t, k, s if i == 0 else 1, c), c
    return net.model(_efficientnet_head(net, x, cin, perf))


def _mbconv(net, x, cin, t, k, s, c):
    """EfficientNet's MBConv: inverted residual with SiLU and SE (squeeze = input / 4)."""
    squeeze = max(1, cin // 4)
    return net.inverted_residual(x, cin, cin * t, c, k, s, "swish",
                                 lambda y, h: net.se(y, h, squeeze, inner="swish"))


def _efficientnet_head(net, x, cin, perf):
    """1x1 Conv + BN + SiLU to 1280 channels, then torchvision's pooled Gemm classifier."""
    last = 1280 if perf else 64
    return net.classifier(net.conv_bn(x, cin, last, 1, act="swish"), last, 1000 if perf else 10)


def mnasnet(perf=False):
    """torchvision's mnasnet1_0: a separable stem (3x3 depthwise, linear 1x1 to 16), inverted
    residuals with Relu and 3x3 or 5x5 depthwise (expansion 3 or 6, no SE), the 1x1 to 1280
    and x.mean([2, 3]) exported as ReduceMean over H and W before the Linear."""
    net = Net("mnasnet", 12)
    hw, a = (224, 1.0) if perf else (32, 0.25)
    x = net.input("input", (1, 3, hw, hw))
    c0 = _div(32 * a)
    x = net.conv_bn(x, 3, c0, 3, 2)
    x = net.conv_bn(net.conv_bn(x, c0, c0, 3, group=c0), c0, _div(16 * a), 1, act=None)
    cin = _div(16 * a)
    for t, k, s, c, n in ((3, 3, 2, 24, 3), (3, 5, 2, 40, 3), (6, 5, 2, 80, 3), (6, 3, 1, 96, 2),
                          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)):
        c = _div(c * a)
        for i in range(n if perf else 1):
            x = net.inverted_residual(x, cin, cin * t, c, k, s if i == 0 else 1, "relu")
            cin = c
    last = 1280 if perf else 64
    x = net.node("ReduceMean", [net.conv_bn(x, cin, last, 1)], axes=[2, 3], keepdims=0)
    return net.model(net.linear(x, last, 1000 if perf else 10))


def shufflenet_v2(perf=False):
    """ShuffleNetV2 x1.0: stride-1 units Split the channels in halves, stride-2 units run two
    branches; channel_shuffle is x.view(b, 2, c // 2, h, w).transpose(1, 2).view(b, -1, h, w)
    with the sizes taken from x.size() (Shape -> Gather -> Div -> Unsqueeze -> Concat)."""
    net = Net("shufflenet_v2", 2)
    hw, widths, repeats = ((224, (116, 232, 464), (4, 8, 4)) if perf else (32, (16, 32, 64), (2, 2, 1)))
    x = net.input("input", (1, 3, hw, hw))
    c = 24
    x = net.conv_bn(x, 3, c, 3, 2)
    x = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    def shuffle(x):
        b, ch, h, w = (net.dim(x, i) for i in range(4))
        per = net.node("Div", [ch, net.const(2, "groups")])
        y = net.view(x, [b, 2, per, h, w])
        y = net.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        return net.view(y, [b, -1, h, w])

    def branch(x, cin, out, stride):
        y = net.conv_bn(x, cin, out, 1)
        y = net.conv_bn(y, out, out, 3, stride, group=out, act=None)
        return net.conv_bn(y, out, out, 1)

    for out, n in zip(widths, repeats):
        half = out // 2
        for i in range(n):
            if i == 0:
                b1 = net.conv_bn(net.conv_bn(x, c, c, 3, 2, group=c, act=None), c, half, 1)
                x = net.node("Concat", [b1, branch(x, c, half, 2)], axis=1)
            else:
                x1, x2 = net.ops("Split", [x, net.i64([half, half])], 2, axis=1)
                x = net.node("Concat", [x1, branch(x2, half, half, 1)], axis=1)
            x = shuffle(x)
            c = out
    last = 1024 if perf else 64
    x = net.conv_bn(x, c, last, 1)
    x = net.node("ReduceMean", [x], axes=[2, 3], keepdims=0)  # x.mean([2, 3])
    return net.model(net.linear(x, last, 1000 if perf else 10))


def convnext(perf=False):
    """ConvNeXt-tiny layout: patchify stem (4x4/4 Conv), blocks of depthwise 7x7 -> permute
    -> LayerNorm -> Linear 4x -> GELU (Erf) -> Linear -> layer scale Mul -> permute -> residual
    Add; LayerNorm2d between stages by Transpose, opset 17 (LayerNormalization)."""
    net = Net("convnext", 7, opset=17)
    hw, dims, depths = ((224, (96, 192, 384, 768), (3, 3, 9, 3)) if perf
                        else (32, (8, 16, 24, 32), (1, 1, 2, 1)))
    x = net.input("input", (1, 3, hw, hw))

    def ln2d(x, c):
        y = net.layernorm(net.node("Transpose", [x], perm=[0, 2, 3, 1]), c, eps=1e-6)
        return net.node("Transpose", [y], perm=[0, 3, 1, 2])

    def patchify(x, cin, cout, k):
        return net.convnd(x, cin, cout, k, k, pads=[0, 0, 0, 0])

    x = ln2d(patchify(x, 3, dims[0], 4), dims[0])
    cin = dims[0]
    for stage, (c, n) in enumerate(zip(dims, depths)):
        if stage:
            x = patchify(ln2d(x, cin), cin, c, 2)
        for _ in range(n):
            y = net.convnd(x, c, c, 7, group=c)
            y = net.node("Transpose", [y], perm=[0, 2, 3, 1])
            y = net.layernorm(y, c, eps=1e-6)
            y = net.act(net.linear(y, c, 4 * c, rank=4), "gelu")
            y = net.linear(y, 4 * c, c, rank=4)
            y = net.node("Mul", [net.init("gamma", 0.1 + 0.05 * net.rng.standard_normal(c)), y])
            x = net.node("Add", [x, net.node("Transpose", [y], perm=[0, 3, 1, 2])])
        cin = c
    x = ln2d(net.node("GlobalAveragePool", [x]), cin)
    x = net.node("Flatten", [x], axis=1)
    return net.model(net.linear(x, cin, 1000 if perf else 10))


def efficientnet_v2(perf=False):
    """torchvision's efficientnet_v2_s: fused-MBConv stages (a 3x3 expanding conv and a 1x1
    projection, or one 3x3 where the expansion is 1; residual where the shape is kept), then
    MBConv stages with SE (squeeze = input channels / 4); SiLU throughout."""
    net = Net("efficientnet_v2", 25)
    hw, a = (224, 1.0) if perf else (32, 0.25)
    x = net.input("input", (1, 3, hw, hw))
    cin = _div(24 * a)
    x = net.conv_bn(x, 3, cin, 3, 2, act="swish")
    for fused, t, s, c, n in ((True, 1, 1, 24, 2), (True, 4, 2, 48, 4), (True, 4, 2, 64, 4),
                              (False, 4, 2, 128, 6), (False, 6, 1, 160, 9), (False, 6, 2, 256, 15)):
        c = _div(c * a)
        for i in range(n if perf else 1):
            st = s if i == 0 else 1
            if fused:
                y = net.conv_bn(x, cin, c if t == 1 else cin * t, 3, st, act="swish")
                y = y if t == 1 else net.conv_bn(y, cin * t, c, 1, act=None)
                x = net.node("Add", [x, y]) if st == 1 and cin == c else y
            else:
                x = _mbconv(net, x, cin, t, 3, st, c)
            cin = c
    return net.model(_efficientnet_head(net, x, cin, perf))


def ghostnet(perf=False):
    """GhostNet 1.0 (Han et al., 2020): ghost modules (a 1x1 primary conv to half the width, a
    3x3 depthwise "cheap operation" on it, Concat, Slice to the width where it is odd) in
    bottlenecks with a strided depthwise between the two modules, SE with a HardSigmoid gate,
    and a depthwise + 1x1 shortcut where the shape changes; the head's 1x1 Conv after pooling."""
    net = Net("ghostnet", 31)
    hw, a = (224, 1.0) if perf else (32, 0.25)

    def ghost(x, cin, cout, act):
        half = (cout + 1) // 2
        p = net.conv_bn(x, cin, half, 1, act=act)
        y = net.node("Concat", [p, net.conv_bn(p, half, half, 3, group=half, act=act)], axis=1)
        return y if 2 * half == cout else net.node("Slice", [y, net.i64([0]), net.i64([cout]), net.i64([1])])
    x = net.input("input", (1, 3, hw, hw))
    cin = _div(16 * a, 4)
    x = net.conv_bn(x, 3, cin, 3, 2)
    cfg = ((3, 16, 16, 0, 1), (3, 48, 24, 0, 2), (3, 72, 24, 0, 1), (5, 72, 40, 1, 2),
           (5, 120, 40, 1, 1), (3, 240, 80, 0, 2), (3, 200, 80, 0, 1), (3, 184, 80, 0, 1),
           (3, 184, 80, 0, 1), (3, 480, 112, 1, 1), (3, 672, 112, 1, 1), (5, 672, 160, 1, 2),
           (5, 960, 160, 0, 1), (5, 960, 160, 1, 1), (5, 960, 160, 0, 1), (5, 960, 160, 1, 1))
    for k, exp, out, se, s in cfg if perf else cfg[:6]:
        exp, out = _div(exp * a, 4), _div(out * a, 4)
        y = ghost(x, cin, exp, "relu")
        if s > 1:
            y = net.conv_bn(y, exp, exp, k, s, group=exp, act=None)
        if se:
            y = net.se(y, exp, _div(exp / 4, 4), gate="hardsigmoid")
        y = ghost(y, exp, out, None)
        short = x if s == 1 and cin == out else net.conv_bn(
            net.conv_bn(x, cin, cin, k, s, group=cin, act=None), cin, out, 1, act=None)
        x = net.node("Add", [y, short])
        cin = out
    last, hidden = (960, 1280) if perf else (64, 64)
    x = net.node("GlobalAveragePool", [net.conv_bn(x, cin, last, 1)])
    x = net.node("Flatten", [net.act(net.convnd(x, last, hidden, 1), "relu")], axis=1)
    return net.model(net.linear(x, hidden, 1000 if perf else 10))


def xception(perf=False):
    """Xception at 299x299 (entry flow, 4 of the 8 middle-flow blocks, the exit flow's
    separable conv): separable convolutions (3x3 depthwise then 1x1, no activation between,
    BN after), Relu before them, 1x1/2 shortcuts with BN, MaxPool 3x3/2 with padding."""
    net = Net("xception", 43)
    x = net.input("input", (1, 3) + ((299, 299) if perf else (71, 71)))
    x = net.conv_bn(net.conv_bn(x, 3, 32, 3, 2), 32, 64, 3)

    def sep(x, ci, co):
        return net.bn(net.conv(net.conv(x, ci, ci, 3, group=ci), ci, co, 1), co)
    cin = 64
    for co in (128, 256, 728):
        shortcut = net.bn(net.conv(x, cin, co, 1, 2), co)
        y = sep(net.node("Relu", [x]) if cin != 64 else x, cin, co)
        y = net.node("MaxPool", [sep(net.node("Relu", [y]), co, co)], kernel_shape=[3, 3],
                     strides=[2, 2], pads=[1, 1, 1, 1])
        x, cin = net.node("Add", [y, shortcut]), co
    for _ in range(4 if perf else 1):
        y = x
        for _ in range(3):
            y = sep(net.node("Relu", [y]), 728, 728)
        x = net.node("Add", [x, y])
    return net.model(net.classifier(net.node("Relu", [sep(x, 728, 1024)]), 1024, 1000))


def replknet(perf=False):
    """RepLKNet-31B's layout narrowed (Ding et al., 2022), as the re-parameterized model
    exports: a stem of 3x3 and depthwise convs; per stage blocks of BatchNorm, 1x1, a large
    depthwise kernel (31, 29, 27, 13) + BatchNorm, 1x1, residual Add, then BatchNorm, a 1x1
    4x expansion with GELU and a 1x1 back, residual Add; transitions by 1x1 and a depthwise
    3x3/2. Kernels larger than their planes (27x27 on 14x14)."""
    net = Net("replknet", 42)
    hw, stages = (224, ((64, 31, 2), (128, 29, 2), (256, 27, 4), (512, 13, 2))) if perf else \
        (64, ((16, 31, 1), (24, 13, 1)))
    x = net.input("input", (1, 3, hw, hw))
    c = stages[0][0]
    x = net.conv_bn(net.conv_bn(x, 3, c, 3, 2), c, c, 3, group=c)
    x = net.conv_bn(net.conv_bn(x, c, c, 1), c, c, 3, 2, group=c)
    for i, (out, k, n) in enumerate(stages):
        if i:
            x = net.conv_bn(net.conv_bn(x, c, out, 1), out, out, 3, 2, group=out)
            c = out
        for _ in range(n):
            y = net.conv_bn(net.conv_bn(net.bn(x, c), c, c, 1), c, c, k, group=c, act=None)
            x = net.node("Add", [x, net.conv_bn(y, c, c, 1, act=None)])
            y = net.act(net.convnd(net.bn(x, c), c, 4 * c, 1), "gelu")
            x = net.node("Add", [x, net.convnd(y, 4 * c, c, 1)])
    return net.model(net.classifier(x, c, 1000 if perf else 10))

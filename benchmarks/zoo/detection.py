"""Detection heads beyond the YOLO family (zoo/dense.py): SSDLite on a MobileNetV2 backbone
(separable heads on six maps, predictions permuted, flattened and concatenated) and
EfficientDet-D0's BiFPN (fast normalized fusion of five levels, depthwise-separable convs)."""
from __future__ import annotations

import numpy as np

from .net import Net


def ssdlite(perf=False):
    """SSDLite320-MobileNetV2: the backbone (its 1/16 map after the 96-channel blocks and the
    1280-channel 1/32 map feed the heads), four extra layers (1x1, 3x3/2 depthwise, 1x1),
    box (4) and class (91) heads as separable convs over six anchors on each of the six
    maps, each prediction Transpose -> Reshape (1, -1, k), Concat, Softmax over classes."""
    net = Net("ssdlite", 42)
    x = net.input("input", (1, 3) + ((320, 320) if perf else (64, 64)))
    x = net.conv_bn(x, 3, 32, 3, 2, act="relu6")
    cin, feats = 32, []
    for t, c, n, stride in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                            (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            x = net.inverted_residual(x, cin, cin * t, c, 3, stride if i == 0 else 1)
            cin = c
        if c == 96:
            feats.append((x, 96))
    x = net.conv_bn(x, 320, 1280, 1, act="relu6")
    feats.append((x, 1280))
    for c in (512, 256, 256, 128):
        y = net.conv_bn(x, feats[-1][1], c // 2, 1, act="relu6")
        y = net.conv_bn(y, c // 2, c // 2, 3, 2, group=c // 2, act="relu6")
        x = net.conv_bn(y, c // 2, c, 1, act="relu6")
        feats.append((x, c))
    preds = {4: [], 91: []}
    for f, c in feats:
        for k, out in preds.items():
            y = net.convnd(net.conv_bn(f, c, c, 3, group=c, act="relu6"), c, 6 * k, 1)
            out.append(net.node("Reshape", [net.node("Transpose", [y], perm=[0, 2, 3, 1]),
                                            net.i64([1, -1, k])]))
    return net.model([net.node("Concat", preds[4], axis=1),
                      net.node("Softmax", [net.node("Concat", preds[91], axis=1)], axis=-1)])


def bifpn(perf=False):
    """EfficientDet-D0's BiFPN, 64 channels, three repeats, over the five levels of a 512x512
    input (64x64 .. 4x4, given as inputs): each node a fast normalized fusion
    (Relu(w) / (sum + 1e-4) weights), swish, a 3x3 depthwise + 1x1 conv + BN; nearest x2 up,
    MaxPool 3x3/2 down; the class head (3 separable conv + BN + swish, 9 anchors x 90
    classes) on every level, flattened, concatenated, Sigmoid."""
    net = Net("bifpn", 46)
    c = 64
    p = [net.input(f"p{i}", (1, c, s, s)) for i, s in
         enumerate([64, 32, 16, 8, 4] if perf else [16, 8, 4, 2, 1])]

    def separable(x, cout):
        return net.convnd(net.conv(x, c, c, 3, group=c), c, cout, 1)

    def fuse(xs):
        w = net.node("Relu", [net.init("fusion_w", np.ones(len(xs)))])
        w = net.node("Div", [w, net.node("Add", [net.node("ReduceSum", [w], keepdims=1), net.f32(1e-4)])])
        acc = None
        for i, x in enumerate(xs):
            t = net.node("Mul", [x, net.node("Gather", [w, net.const(np.int64(i), "idx")], axis=0)])
            acc = t if acc is None else net.node("Add", [acc, t])
        return net.bn(separable(net.act(acc, "swish"), c), c)

    def up(x):
        return net.node("Resize", [x, "", net.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                        mode="nearest")

    def down(x):
        return net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for _ in range(3):
        td = p[:]
        for i in (3, 2, 1):
            td[i] = fuse([p[i], up(td[i + 1])])
        out = [fuse([p[0], up(td[1])])]
        for i in (1, 2, 3):
            out.append(fuse([p[i], td[i], down(out[-1])]))
        p = out + [fuse([p[4], down(out[3])])]
    heads = []
    for x in p:
        for _ in range(3):
            x = net.act(net.bn(separable(x, c), c), "swish")
        y = net.node("Transpose", [separable(x, 9 * 90)], perm=[0, 2, 3, 1])
        heads.append(net.node("Reshape", [y, net.i64([1, -1, 90])]))
    return net.model(net.node("Sigmoid", [net.node("Concat", heads, axis=1)]))

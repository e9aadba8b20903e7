"""Dense-prediction and sequence nets as PyTorch exports them: a UNet (ConvTranspose and
bilinear Resize upsampling, skip Concat), FCN-ResNet50 (dilated stages, a 2048-channel 3x3
head, bilinear upsampling to the input), DeepLabV3 (the same backbone, the ASPP head of
atrous 3x3 convolutions at rates 12-36 and image pooling), a YOLOv5-style detector (SiLU backbone, nearest
Resize neck, heads decoded with Sigmoid, Slice, Mul/Add/Pow on constant grids), a dense
autoencoder, a CRNN-style OCR net (conv front end, view/permute to a sequence, Linear,
Softmax), a TCN (dilated causal Conv1d with Slice chomps), a DS-CNN keyword spotter and a
SimpleBaseline pose estimator (three ConvTranspose2d 4x4 stride 2 over a ResNet-18) and
YOLOv8n (C2f blocks of Split and Concat, SPPF, DFL box decoding with Softmax and a 1x1 Conv)."""
from __future__ import annotations

import numpy as np

from .classic import basic_stages
from .net import Net


def _double(net, x, cin, c):
    return net.conv_bn(net.conv_bn(x, cin, c, 3), c, c, 3)


def unet(perf=False):
    """UNet with three levels: the deepest decoder step is ConvTranspose 2x2/2, the next
    nn.Upsample(scale_factor=2, mode='bilinear', align_corners=True), i.e. Resize with
    scales and coordinate_transformation_mode=align_corners."""
    net = Net("unet", 5)
    hw, c = (128, 32) if perf else (32, 8)
    x = net.input("input", (1, 3, hw, hw))
    e1 = _double(net, x, 3, c)
    e2 = _double(net, net.node("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), c, 2 * c)
    b = _double(net, net.node("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 2 * c, 4 * c)
    w = net.weight((4 * c, 2 * c, 2, 2), fan_in=4 * c)
    u = net.node("ConvTranspose", [b, w, net.init("b", np.zeros(2 * c))], kernel_shape=[2, 2],
                 strides=[2, 2])
    d2 = _double(net, net.node("Concat", [e2, u], axis=1), 4 * c, 2 * c)
    u = net.node("Resize", [d2, net.const(np.zeros(0, np.float32), "roi"),
                            net.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                 mode="linear", coordinate_transformation_mode="align_corners")
    d1 = _double(net, net.node("Concat", [e1, u], axis=1), 3 * c, c)
    return net.model(net.convnd(d1, c, 2, 1))


def _dilated_resnet50(net, hw, widths, blocks):
    """torchvision's ResNet-50 with replace_stride_with_dilation=[False, True, True]: the last
    two stages keep stride 1 and dilate instead (each stage's first block at the previous
    dilation, the others at 2 and 4; output stride 8). FCN's and DeepLabV3's backbone."""
    x = net.input("input", (1, 3, hw, hw))
    x = net.conv_bn(x, 3, widths[0], 7, 2)
    x = net.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, dil = widths[0], 1
    for stage, (c, n) in enumerate(zip(widths, blocks)):
        stride, prev = (2 if stage == 1 else 1), dil
        dil = {2: 2, 3: 4}.get(stage, 1)
        for block in range(n):
            s, d = (stride, prev) if block == 0 else (1, dil)
            y = net.conv_bn(x, cin, c, 1)
            y = net.act(net.bn(net.convnd(y, c, c, 3, s, bias=False, dilation=d), c), "relu")
            y = net.conv_bn(y, c, 4 * c, 1, act=None)
            short = x if s == 1 and cin == 4 * c else net.conv_bn(x, cin, 4 * c, 1, s, act=None)
            x = net.node("Relu", [net.node("Add", [y, short])])
            cin = 4 * c
    return x, cin


def _upsample_to(net, x, sizes, mode="half_pixel"):
    """F.interpolate(size=..., mode='bilinear', align_corners=False): Resize to sizes."""
    return net.node("Resize", [x, net.const(np.zeros(0, np.float32), "roi"),
                               net.const(np.zeros(0, np.float32), "scales"),
                               net.const(np.array(sizes, np.int64), "sizes")],
                    mode="linear", coordinate_transformation_mode=mode)


def fcn(perf=False):
    """torchvision's fcn_resnet50 layout: the dilated ResNet-50, the FCNHead (3x3 2048 -> 512
    without bias + BatchNormalization + Relu, 1x1 to 21 classes) and F.interpolate back to
    the input size (Resize to sizes, bilinear, half_pixel). At 520x520, torchvision's
    evaluation size: 65x65 features."""
    net = Net("fcn", 21)
    hw, widths, blocks, head, classes = ((520, (64, 128, 256, 512), (3, 4, 6, 3), 512, 21) if perf
                                         else (64, (4, 8, 8, 16), (1, 2, 2, 2), 16, 5))
    x, cin = _dilated_resnet50(net, hw, widths, blocks)
    x = net.act(net.bn(net.convnd(x, cin, head, 3, bias=False), head), "relu")
    x = net.convnd(x, head, classes, 1)
    return net.model(_upsample_to(net, x, [1, classes, hw, hw]))


def deeplabv3(perf=False):
    """torchvision's deeplabv3_resnet50 layout on the dilated ResNet-50 (narrowed for timing):
    the ASPP head (a 1x1 branch, three 3x3 branches at dilations 12, 24 and 36, image pooling
    whose 1x1 map is upsampled back, Concat, 1x1 projection; BatchNormalization and Relu
    after each), a 3x3 conv, 1x1 to 21 classes and bilinear upsampling to the input. At
    224x224 the features are 28x28: the rate-36 branch's outer taps read only padding (the
    Conv op's window bound refused it before glowpy's pass trimmed them) and at the test size
    every rate is past the map."""
    net = Net("deeplabv3", 36)
    hw, widths, blocks, aspp, classes = ((224, (32, 64, 128, 256), (2, 3, 4, 2), 256, 21) if perf
                                         else (64, (4, 8, 8, 16), (1, 1, 2, 1), 16, 5))
    x, cin = _dilated_resnet50(net, hw, widths, blocks)
    side = hw // 8
    branches = [net.conv_bn(x, cin, aspp, 1)]
    for rate in (12, 24, 36):
        y = net.convnd(x, cin, aspp, 3, bias=False, dilation=rate)
        branches.append(net.act(net.bn(y, aspp), "relu"))
    pooled = net.conv_bn(net.node("GlobalAveragePool", [x]), cin, aspp, 1)
    branches.append(_upsample_to(net, pooled, [1, aspp, side, side], "pytorch_half_pixel"))
    y = net.conv_bn(net.node("Concat", branches, axis=1), 5 * aspp, aspp, 1)
    y = net.convnd(net.conv_bn(y, aspp, aspp, 3), aspp, classes, 1)
    return net.model(_upsample_to(net, y, [1, classes, hw, hw], "pytorch_half_pixel"))


def yolo(perf=False):
    """YOLOv5-style: Conv-BN-SiLU backbone with C3-like residual blocks, an FPN neck (nearest
    Resize x2 + Concat) and Detect heads at strides 8 and 16: view(bs, na, no, ny, nx)
    from x.shape, permute, Sigmoid, xy = (s[..., :2] * 2 - 0.5 + grid) * stride,
    wh = (s[..., 2:4] * 2) ** 2 * anchor_grid, Concat, view(bs, -1, no), Concat of scales."""
    net = Net("yolo", 5)
    hw, c, nc = (320, 32, 80) if perf else (64, 8, 3)
    na, no = 3, nc + 5
    x = net.input("images", (1, 3, hw, hw))
    conv = lambda x, ci, co, k=3, s=1: net.conv_bn(x, ci, co, k, s, act="swish")  # noqa: E731
    x = net.act(net.bn(net.convnd(x, 3, c, 6, 2, bias=False, pads=[2] * 4), c), "swish")  # 6x6/2 stem
    x = conv(x, c, 2 * c, 3, 2)                  # 4
    x = net.node("Add", [x, conv(conv(x, 2 * c, 2 * c, 1), 2 * c, 2 * c)])
    p3 = conv(conv(x, 2 * c, 4 * c, 3, 2), 4 * c, 4 * c)   # 8
    p4 = conv(conv(p3, 4 * c, 8 * c, 3, 2), 8 * c, 8 * c)  # 16
    up = net.node("Resize", [conv(p4, 8 * c, 4 * c, 1), net.const(np.zeros(0, np.float32), "roi"),
                             net.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                  mode="nearest")
    n3 = conv(net.node("Concat", [up, p3], axis=1), 8 * c, 4 * c)
    anchors = {8: [[10, 13], [16, 30], [33, 23]], 16: [[30, 61], [62, 45], [59, 119]]}
    outs = []
    for feat, ch, stride in ((n3, 4 * c, 8), (p4, 8 * c, 16)):
        y = net.convnd(feat, ch, na * no, 1)
        bs, ny, nx = net.dim(y, 0), net.dim(y, 2), net.dim(y, 3)
        y = net.node("Transpose", [net.view(y, [bs, na, no, ny, nx])], perm=[0, 1, 3, 4, 2])
        s = net.node("Sigmoid", [y])
        g = hw // stride
        gy, gx = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
        grid = (np.stack((gx, gy), -1)[None, None] - 0.5).astype(np.float32)  # (1, 1, g, g, 2)
        agrid = np.array(anchors[stride], np.float32).reshape(1, na, 1, 1, 2)
        sl = lambda a, b: net.node("Slice", [s, net.i64([a]), net.i64([b]), net.i64([4])])  # noqa: E731
        xy = net.node("Mul", [net.node("Add", [net.node("Mul", [sl(0, 2), net.f32(2.0)]),
                                               net.const(grid, "grid")]), net.f32(float(stride))])
        wh = net.node("Mul", [net.node("Pow", [net.node("Mul", [sl(2, 4), net.f32(2.0)]), net.f32(2.0)]),
                              net.const(np.broadcast_to(agrid, (1, na, g, g, 2)).copy(), "anchor_grid")])
        y = net.node("Concat", [xy, wh, sl(4, no)], axis=-1)
        outs.append(net.view(y, [bs, -1, no]))
    return net.model(net.node("Concat", outs, axis=1))


def autoencoder(perf=False):
    """A dense autoencoder: Gemm + Relu down to a code and back, Sigmoid output."""
    net = Net("autoencoder", 9)
    widths = (784, 512, 256, 64, 256, 512, 784) if perf else (784, 128, 64, 16, 64, 128, 784)
    x = net.input("input", (1, widths[0]))
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        x = net.act(net.linear(x, a, b), "sigmoid" if i == len(widths) - 2 else "relu")
    return net.model(x)


def crnn(perf=False):
    """CRNN-style OCR without the recurrent layers: conv front end on a 32-pixel text line,
    conv.view(b, c * h, w).permute(2, 0, 1) into a (T, b, features) sequence, two Linear
    layers over it, and Softmax over the character classes."""
    net = Net("crnn", 4)
    w_in, c, classes = (256, 64, 96) if perf else (64, 8, 37)
    x = net.input("input", (1, 1, 32, w_in))
    cin = 1
    for i, (co, pool) in enumerate(((c, (2, 2)), (2 * c, (2, 2)), (4 * c, (2, 1)), (4 * c, (2, 1)))):
        x = net.conv_bn(x, cin, co, 3)
        x = net.node("MaxPool", [x], kernel_shape=list(pool), strides=list(pool))
        cin = co
    b, ch, h, w = (net.dim(x, i) for i in range(4))
    x = net.view(x, [b, net.node("Mul", [ch, h]), w])
    x = net.node("Transpose", [x], perm=[2, 0, 1])
    feat = 4 * c * 2
    x = net.act(net.linear(x, feat, 2 * c, rank=3), "relu")
    x = net.linear(x, 2 * c, classes, rank=3)
    return net.model(net.node("Softmax", [x], axis=2))


def tcn(perf=False):
    """Temporal convolutional network on (1, mel bands, frames): residual blocks of two
    dilated causal Conv1d (padding (k-1)*d on both sides, then the right side chomped off
    with Slice), Relu, a 1x1 Conv1d on the skip when the width changes; the last frame
    (Gather index -1) feeds a Gemm."""
    net = Net("tcn", 1)
    bands, frames, widths = (40, 400, (64, 64, 128, 128, 128, 128)) if perf else (16, 64, (16, 16, 32, 32))
    x = net.input("input", (1, bands, frames))
    cin, k = bands, 3
    for i, c in enumerate(widths):
        d = 2 ** i
        p = (k - 1) * d

        def causal(x, ci):
            y = net.convnd(x, ci, c, k, dilation=d, pads=[p, p], dims=1)
            return net.node("Relu", [net.node("Slice", [y, net.i64([0]), net.i64([-p]), net.i64([2])])])

        y = causal(causal(x, cin), c)
        short = x if cin == c else net.convnd(x, cin, c, 1, dims=1)
        x = net.node("Relu", [net.node("Add", [y, short])])
        cin = c
    last = net.node("Gather", [x, net.const(np.int64(-1), "idx")], axis=2)
    return net.model(net.linear(last, cin, 12 if not perf else 35))


def ds_cnn(perf=False):
    """DS-CNN keyword spotter (MLPerf Tiny layout) on 49x10 MFCCs: a 10x4/2 Conv, depthwise
    separable blocks (dw 3x3 + BN + Relu, pw 1x1 + BN + Relu), AveragePool over the whole
    map, Flatten, Gemm to 12 keywords."""
    net = Net("ds_cnn", 12)
    c, blocks = (172, 4) if perf else (32, 4)
    x = net.input("input", (1, 1, 49, 10))
    w = net.weight((c, 1, 10, 4), fan_in=40)
    x = net.node("Conv", [x, w, net.init("b", np.zeros(c))], kernel_shape=[10, 4], strides=[2, 2],
                 pads=[5, 1, 5, 1])
    x = net.act(net.bn(x, c), "relu")
    for _ in range(blocks):
        x = net.conv_bn(net.conv_bn(x, c, c, 3, group=c), c, c, 1)
    x = net.node("AveragePool", [x], kernel_shape=[25, 5])
    x = net.node("Flatten", [x], axis=1)
    return net.model(net.linear(x, c, 12))


def pose(perf=False):
    """SimpleBaseline (Xiao et al., 2018) for 17 keypoints on 256x192: torchvision's ResNet-18
    trunk (no pooling head), three ConvTranspose2d 4x4 stride 2 padding 1 to 256 channels
    (no bias) + BatchNorm + Relu, a 1x1 Conv to the heatmaps."""
    net = Net("pose", 23)
    (h, w), widths, dc = ((256, 192), (64, 128, 256, 512), 256) if perf else ((64, 48), (8, 16, 32, 64), 32)
    x = net.input("input", (1, 3, h, w))
    x = net.node("MaxPool", [net.conv_bn(x, 3, widths[0], 7, 2)], kernel_shape=[3, 3],
                 strides=[2, 2], pads=[1, 1, 1, 1])
    x, cin = basic_stages(net, x, widths), widths[-1]
    for _ in range(3):
        wt = net.weight((cin, dc, 4, 4), fan_in=cin * 4)
        x = net.node("ConvTranspose", [x, wt], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
        x, cin = net.act(net.bn(x, dc), "relu"), dc
    return net.model(net.convnd(x, cin, 17, 1))


def yolov8(perf=False):
    """Ultralytics YOLOv8n at 640x640: Conv + BN + SiLU, C2f blocks (a 1x1 split in two halves,
    n bottlenecks chained on the second, every output kept and concatenated, a 1x1), SPPF (three
    chained 5x5 MaxPools, Concat), a PAN neck (nearest x2 Resize and Concat up, strided 3x3
    convs down), decoupled box and class heads per level, the boxes decoded by DFL (Reshape to
    4 x 16 bins, Softmax, a 1x1 Conv with arange weights), the classes by Sigmoid."""
    net = Net("yolov8", 40)
    hw, w = (640, (16, 32, 64, 128, 256)) if perf else (64, (8, 8, 16, 16, 32))
    x = net.input("images", (1, 3, hw, hw))

    def conv(x, cin, cout, k=1, s=1):
        return net.conv_bn(x, cin, cout, k, s, act="swish")

    def c2f(x, cin, cout, n, short=True):
        h = cout // 2
        y = conv(x, cin, 2 * h)
        a, b = net.ops("Split", [y, net.i64([h, h])], 2, axis=1)
        outs = [a, b]
        for _ in range(n):
            t = conv(conv(outs[-1], h, h, 3), h, h, 3)
            outs.append(net.node("Add", [outs[-1], t]) if short else t)
        return conv(net.node("Concat", outs, axis=1), (2 + n) * h, cout)

    def up(t):
        return net.node("Resize", [t, net.const(np.zeros(0, np.float32), "roi"),
                                   net.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                        mode="nearest")
    x = conv(x, 3, w[0], 3, 2)
    x = c2f(conv(x, w[0], w[1], 3, 2), w[1], w[1], 1)
    p3 = c2f(conv(x, w[1], w[2], 3, 2), w[2], w[2], 2)
    p4 = c2f(conv(p3, w[2], w[3], 3, 2), w[3], w[3], 2)
    x = c2f(conv(p4, w[3], w[4], 3, 2), w[4], w[4], 1)
    y = conv(x, w[4], w[4] // 2)
    pools = [y]
    for _ in range(3):
        pools.append(net.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4))
    p5 = conv(net.node("Concat", pools, axis=1), 2 * w[4], w[4])
    n4 = c2f(net.node("Concat", [up(p5), p4], axis=1), w[4] + w[3], w[3], 1, False)
    n3 = c2f(net.node("Concat", [up(n4), p3], axis=1), w[3] + w[2], w[2], 1, False)
    d4 = c2f(net.node("Concat", [conv(n3, w[2], w[2], 3, 2), n4], axis=1), w[2] + w[3], w[3], 1, False)
    d5 = c2f(net.node("Concat", [conv(d4, w[3], w[3], 3, 2), p5], axis=1), w[3] + w[4], w[4], 1, False)
    outs = []
    # the heads' widths: box max(16, P3 / 4, 4 x 16 DFL bins), class max(P3, 80 classes)
    c2, c3, nc = (max(16, w[2] // 4, 64), max(w[2], 80), 80) if perf else (16, 16, 80)
    for f, c in ((n3, w[2]), (d4, w[3]), (d5, w[4])):
        box = net.convnd(conv(conv(f, c, c2, 3), c2, c2, 3), c2, 64, 1)
        cls = net.convnd(conv(conv(f, c, c3, 3), c3, c3, 3), c3, nc, 1)
        outs.append(net.node("Reshape", [net.node("Concat", [box, cls], axis=1), net.i64([1, 64 + nc, -1])]))
    x = net.node("Concat", outs, axis=2)
    box, cls = net.ops("Split", [x, net.i64([64, nc])], 2, axis=1)
    b = net.node("Transpose", [net.node("Reshape", [box, net.i64([1, 4, 16, -1])])], perm=[0, 2, 1, 3])
    b = net.node("Softmax", [b], axis=1)
    b = net.node("Conv", [b, net.init("dfl", np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1))])
    b = net.node("Reshape", [b, net.i64([1, 4, -1])])
    return net.model(net.node("Concat", [b, net.node("Sigmoid", [cls])], axis=1))


def hrnet(perf=False):
    """HRNet-W18-style pose network at 256x192: a stride-4 stem, then branches at 1/4, 1/8
    and 1/16 (18, 36, 72 channels) of BasicBlocks, each stage ending in exchange units that
    sum every branch into every other (1x1 conv + BN + nearest upsampling from the lower
    resolutions, chains of 3x3/2 conv + BN from the higher), a 1x1 head of 17 keypoints."""
    net = Net("hrnet", 41)
    x = net.input("input", (1, 3) + ((256, 192) if perf else (64, 48)))
    x = net.conv_bn(net.conv_bn(x, 3, 64, 3, 2), 64, 64, 3, 2)
    ch = [18, 36, 72]

    def basic(x, c):
        y = net.bn(net.conv(net.conv_bn(x, c, c, 3), c, c, 3), c)
        return net.node("Relu", [net.node("Add", [x, y])])

    def into(br, i, j):
        """Branch j brought to branch i's resolution and width."""
        if j > i:
            u = net.bn(net.conv(br[j], ch[j], ch[i], 1), ch[i])
            scale = np.array([1, 1, 2 ** (j - i), 2 ** (j - i)], np.float32)
            return net.node("Resize", [u, "", net.const(scale, "scales")], mode="nearest")
        d = br[j]
        for s in range(i - j):
            last = s == i - j - 1
            d = net.bn(net.conv(d, ch[j], ch[i] if last else ch[j], 3, 2), ch[i] if last else ch[j])
            d = d if last else net.node("Relu", [d])
        return d
    br = [net.conv_bn(x, 64, ch[0], 3)]
    for stage in range(3):
        if stage:
            br.append(net.conv_bn(br[-1], ch[stage - 1], ch[stage], 3, 2))
        for _ in range(2):
            br = [basic(basic(b, c), c) for b, c in zip(br, ch)]
            fused = []
            for i in range(len(br)):
                acc = br[i]
                for j in range(len(br)):
                    if j != i:
                        acc = net.node("Add", [acc, into(br, i, j)])
                fused.append(net.node("Relu", [acc]))
            br = fused
    return net.model(net.convnd(br[0], ch[0], 17, 1))

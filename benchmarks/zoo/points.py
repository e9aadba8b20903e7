"""Point-cloud nets as PyTorch exports them: PointNet's classifier (shared per-point MLPs as
Conv1d 1x1 with BatchNormalization over (1, 3, points), the symmetric max over the points as
ReduceMax, a Linear head). Its widest layer, 128 -> 1024 over 2048 points, is a 1x1 whose
planes are 8 KiB apart: every reduction step's rows fall in one L1 set
(conv/pointwise_packed.pays). NeRF's MLP over a batch of sample points (positional encoding
by Sin and Cos, eight 256-wide Linear layers as Gemm with a skip Concat, density and colour
heads): products whose A (16,384 x 256, 16 MB) is far larger than the L2
(gemm/blocking.row_chunk)."""
from __future__ import annotations

import numpy as np

from .net import Net


def pointnet(perf=False):
    """PointNet (no input/feature transforms): 3 -> 64 -> 64 -> 128 -> 1024 per point, the max
    over the points, 1024 -> 512 -> 256 -> 40 (ModelNet40's classes)."""
    net = Net("pointnet", 13)
    points, d = (2048, 1) if perf else (256, 8)
    x = net.input("input", (1, 3, points))
    cin = 3
    for c in (64 // d, 64 // d, 128 // d, 1024 // d):
        x = net.act(net.bn(net.convnd(x, cin, c, 1, dims=1), c), "relu")
        cin = c
    x = net.node("ReduceMax", [x], axes=[2], keepdims=0)
    x = net.act(net.linear(x, cin, 512 // d), "relu")
    x = net.act(net.linear(x, 512 // d, 256 // d), "relu")
    return net.model(net.linear(x, 256 // d, 40))


def nerf(perf=False):
    """NeRF's MLP: points (N, 3) -> [x, sin(2^k x), cos(2^k x)] for k < 10 (63 features) ->
    eight Linear + Relu of 256 (the encoding concatenated again before the sixth) -> density
    (Linear + Relu) and colour (Linear 128, Linear 3, Sigmoid)."""
    net = Net("nerf", 14)
    # the test size keeps an A of 1 MB, chunked on a host with an L2 of 4 MB or less
    n, w = (16384, 256) if perf else (4096, 64)
    x = net.input("points", (n, 3))
    freqs = (2.0 ** np.arange(10)).reshape(1, 1, 10)
    xb = net.node("Mul", [net.node("Unsqueeze", [x, net.i64([2])]), net.init("freqs", freqs)])
    xb = net.node("Reshape", [xb, net.i64([n, 30])])
    enc = net.node("Concat", [x, net.node("Sin", [xb]), net.node("Cos", [xb])], axis=1)
    y, cin = enc, 63
    for i in range(8):
        if i == 5:
            y, cin = net.node("Concat", [y, enc], axis=1), cin + 63
        y, cin = net.act(net.linear(y, cin, w), "relu"), w
    sigma = net.act(net.linear(y, w, 1), "relu")
    rgb = net.act(net.linear(net.linear(y, w, w // 2), w // 2, 3), "sigmoid")
    return net.model([sigma, rgb])

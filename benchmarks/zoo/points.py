"""Point-cloud nets as PyTorch exports them: PointNet's classifier (shared per-point MLPs as
Conv1d 1x1 with BatchNormalization over (1, 3, points), the symmetric max over the points as
ReduceMax, a Linear head). Its widest layer, 128 -> 1024 over 2048 points, is a 1x1 whose
planes are 8 KiB apart: every reduction step's rows fall in one L1 set
(conv/pointwise_packed.pays)."""
from __future__ import annotations

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

#!/usr/bin/env python3
"""Single-op probes: bundle against onnxruntime (one thread), in one run, µs per call.

    python benchmarks/op_probe.py                      # every probe
    python benchmarks/op_probe.py --probes softmax,pow3
    python benchmarks/op_probe.py --mcpu znver3 --ort-avx2   # AVX2 code against onnxruntime's
                                                       # AVX2 kernels (benchmarks/ort_avx2.py)

The probes are the ops between the matrix products that issue 19 measured (Softmax, Pow by a
small constant, LayerNormalization, the Erf GELU chain as exported), at the transformers'
shapes, multi-head attention's products (a B computed at run time), batch-1 Linear layers
(weights streamed from memory), and the convolutions of the mobile and ResNet-style nets (strided and large-kernel
depthwise layers, strided 1x1 shortcuts). Each is timed the way benchmarks/perf.py times a
model (its C harness and onnxruntime timer, alternating for --rounds, best batch, CPU time of
the calling thread) and its output is checked against onnxruntime's (max |error| / max
|reference| is printed). onnxruntime's time for a single Conv includes the NCHWc reorders
around it, which inside a model are shared by a chain of layers: compare per-layer figures of
a model (-instrument-profile + bundle-profile) before trusting a Conv probe's ratio."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import perf  # noqa: E402  (puts the checkout and tests/ on the path)
import glowpy  # noqa: E402


def _model(nodes, x, inits=None, opset=17):
    g = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", 1, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def softmax(axis, op="Softmax", shape=(1, 4, 128, 128)):
    def build():
        x = _rand(*shape)
        return _model([helper.make_node(op, ["x"], ["y"], axis=axis)], x), x
    return build


def pow_by(c):
    def build():
        x = _rand(128, 1024)
        node = helper.make_node("Pow", ["x", "c"], ["y"])
        return _model([node], x, {"c": np.array(c, np.float32)}), np.abs(x) if c == 0.5 else x
    return build


def layernorm():
    x = _rand(1, 128, 256)
    rng = np.random.default_rng(1)
    inits = {"s": rng.standard_normal(256).astype(np.float32),
             "b": rng.standard_normal(256).astype(np.float32)}
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
    return _model([node], x, inits), x


def gelu_erf():
    """x * 0.5 * (1 + Erf(x / sqrt(2))), node for node as PyTorch exports it."""
    x = _rand(1, 128, 1024)
    inits = {"r2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    return _model(nodes, x, inits), x


def unary(op):
    def build():
        x = _rand(1, 128, 1024)
        return _model([helper.make_node(op, ["x"], ["y"])], x), x
    return build


def depthwise(c, hw, k, stride):
    """A depthwise Conv with bias, 'same' padding, as the mobile nets' blocks run it."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(1)
        inits = {"w": rng.standard_normal((c, 1, k, k)).astype(np.float32),
                 "b": rng.standard_normal(c).astype(np.float32)}
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, kernel_shape=[k, k],
                                strides=[stride] * 2, pads=[k // 2] * 4)
        return _model([node], x, inits), x
    return build


def maxpool(c, hw, k, stride):
    """MaxPool k x k / stride, 'same' padding for odd k: ResNet's 3x3/2 stem pool, the 2x2/2
    pools of VGG, U-Net and YOLO-style backbones."""
    def build():
        x = _rand(1, c, hw, hw)
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k],
                                strides=[stride] * 2, pads=[k // 2 if k % 2 else 0] * 4)
        return _model([node], x), x
    return build


def strided_pointwise(c, m, hw):
    """A 1x1 stride-2 Conv with bias: the downsampling shortcut of ResNet-50 and ResNeXt."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(1)
        inits = {"w": (rng.standard_normal((m, c, 1, 1)) * 0.05).astype(np.float32),
                 "b": rng.standard_normal(m).astype(np.float32)}
        return _model([helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2])], x, inits), x
    return build


def gemv(k, n):
    """A batch-1 Linear (Gemm, transB=1, bias) of k -> n: AlexNet's and VGG's classifier
    layers, whose weights (151 MB for 9216 -> 4096) stream from memory on every call."""
    def build():
        x = _rand(1, k)
        rng = np.random.default_rng(1)
        inits = {"w": (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32),
                 "b": rng.standard_normal(n).astype(np.float32)}
        return _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], x, inits), x
    return build


def bottleneck_1x1(c, mid, hw, blocks=2):
    """ResNet-50's 1x1 layers without the 3x3 between them: c -> mid -> c (+ Relu) `blocks`
    times on an hw x hw plane (256 -> 64 -> 256 at 56x56, 1024 -> 256 -> 1024 at 14x14)."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(1)
        nodes, inits, cur = [], {}, "x"
        chans = [c] + [mid, c] * blocks
        for i, (ci, co) in enumerate(zip(chans, chans[1:])):
            inits[f"w{i}"] = (rng.standard_normal((co, ci, 1, 1)) / np.sqrt(ci)).astype(np.float32)
            inits[f"b{i}"] = rng.standard_normal(co).astype(np.float32) * 0.1
            out = "y" if i == len(chans) - 2 else f"r{i}"
            nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"]),
                      helper.make_node("Relu", [f"c{i}"], [out])]
            cur = out
        return _model(nodes, x, inits), x
    return build


def pointwise_chain(c, h, w, layers=4):
    """`layers` 1x1 Conv + bias + Relu, c -> c channels on an h x w plane: the small-plane
    1x1 stacks of MobileNetV1 (VWW's 128 channels at 6x6, 512 at 14x14, 1024 at 7x7) and the
    keyword-spotting DS-CNN (64 at 25x5). A chain, so that onnxruntime's NCHWc reorders are
    shared by its layers as they are inside a model."""
    def build():
        x = _rand(1, c, h, w)
        rng = np.random.default_rng(1)
        nodes, inits, cur = [], {}, "x"
        for i in range(layers):
            inits[f"w{i}"] = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
            inits[f"b{i}"] = rng.standard_normal(c).astype(np.float32) * 0.1
            out = "y" if i == layers - 1 else f"r{i}"
            nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"]),
                      helper.make_node("Relu", [f"c{i}"], [out])]
            cur = out
        return _model(nodes, x, inits), x
    return build


def conv_transpose(c, m, hw, k, stride, pad=0):
    """ConvTranspose with bias: UNet's 2x2/2 decoder step, a DCGAN/FCN-style 4x4/2 (pad 1)."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(1)
        inits = {"w": (rng.standard_normal((c, m, k, k)) / np.sqrt(c)).astype(np.float32),
                 "b": rng.standard_normal(m).astype(np.float32)}
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[k, k],
                                strides=[stride] * 2, pads=[pad] * 4)
        return _model([node], x, inits), x
    return build


def resize(c, hw, mode, align=False):
    """Resize x2 as torch exports nn.Upsample: nearest (YOLO's neck, asymmetric + floor) or
    bilinear (UNet, FCN; align_corners or half_pixel)."""
    def build():
        x = _rand(1, c, hw, hw)
        attrs = {"mode": mode}
        if mode == "nearest":
            attrs |= {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        else:
            attrs |= {"coordinate_transformation_mode": "align_corners" if align else "half_pixel"}
        inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
        return _model([helper.make_node("Resize", ["x", "roi", "scales"], ["y"], **attrs)], x, inits), x
    return build


def dilated(c, hw, d, layers=2, m=None):
    """3x3 Conv + bias + Relu with dilation d, 'same' padding, c -> c: the dilated bottleneck
    layers of FCN/DeepLab ResNet-50 backbones (dilation 2 and 4 at 28x28)."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(1)
        nodes, inits, cur = [], {}, "x"
        for i in range(layers):
            cin, cout = (c, m or c) if i == 0 else (m or c, m or c)
            inits[f"w{i}"] = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
            inits[f"b{i}"] = rng.standard_normal(cout).astype(np.float32) * 0.1
            out = "y" if i == layers - 1 else f"r{i}"
            nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], pads=[d] * 4,
                                       dilations=[d, d], kernel_shape=[3, 3]),
                      helper.make_node("Relu", [f"c{i}"], [out])]
            cur = out
        return _model(nodes, x, inits), x
    return build


def attention(heads, tokens, d=64, part="all"):
    """Multi-head attention's products over a packed qkv input, as exporters split it:
    Q x K^T / sqrt(d) ("qk"), then Softmax ("qk_softmax"), then x V ("all"); Whisper's
    encoder is 6 heads of 64 over 1500 tokens, ViT-S at 384x384 6 over 577."""
    def build():
        x = _rand(1, heads, tokens, 3 * d)
        inits = {"split": np.array([d, d, d], np.int64), "scale": np.array(np.sqrt(d), np.float32)}
        nodes = [helper.make_node("Split", ["x", "split"], ["q", "k", "v"], axis=3),
                 helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                 helper.make_node("MatMul", ["q", "kt"], ["s"]),
                 helper.make_node("Div", ["s", "scale"], ["y" if part == "qk" else "z"])]
        if part != "qk":
            nodes.append(helper.make_node("Softmax", ["z"], ["y" if part == "qk_softmax" else "p"],
                                          axis=-1))
        if part == "all":
            nodes.append(helper.make_node("MatMul", ["p", "v"], ["y"]))
        return _model(nodes, x, inits), x
    return build


def grid_sample(n, c, hw, out, mode="linear", padding="zeros"):
    """GridSample at the points of a fixed grid: an optical-flow warp (RAFT, PWC-Net: the
    identity grid of the output size plus a flow of a few pixels) where out equals the input's
    size, else deformable attention's sampling (Deformable DETR: 300 queries x 4 points per
    head, anywhere on the level's map)."""
    def build():
        x = _rand(n, c, *hw)
        rng = np.random.default_rng(1)
        if tuple(out) == tuple(hw):
            ys, xs = np.meshgrid(np.linspace(-1, 1, hw[0]), np.linspace(-1, 1, hw[1]),
                                 indexing="ij")
            g = np.stack([xs, ys], -1)[None] + rng.normal(0, 3 / hw[1], (n,) + tuple(hw) + (2,))
        else:
            g = rng.uniform(-1, 1, (n,) + tuple(out) + (2,))
        node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding)
        return _model([node], x, {"g": g.astype(np.float32)}, opset=20), x
    return build


def attention23(tokens, hidden, heads, causal=1):
    """ONNX Attention (opset 23) over x as Q, K and V, 3-D, as PyTorch exports
    scaled_dot_product_attention at opset 23; causal as a decoder's."""
    def build():
        x = _rand(1, tokens, hidden)
        node = helper.make_node("Attention", ["x", "x", "x"], ["y"], q_num_heads=heads,
                                kv_num_heads=heads, is_causal=causal)
        return _model([node], x, opset=23), x
    return build


def stft(seconds, n_fft=400, hop=160):
    """STFT with a Hann window as a speech model's in-graph front end (torch.stft exported at
    opset 17): 16 kHz audio, 25 ms frames every 10 ms."""
    def build():
        x = _rand(1, 16000 * seconds, 1)
        win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float32)
        node = helper.make_node("STFT", ["x", "step", "win"], ["y"], onesided=1)
        return _model([node], x, {"step": np.array(hop, np.int64), "win": win}, opset=17), x
    return build


def deform_conv(c, hw):
    """A DCNv2 layer as torchvision's DeformConv2d blocks write it: a 3x3 Conv computes the 18
    offsets and (through a Sigmoid) the 9 mask values, then the 3x3 DeformConv (opset 19)."""
    def build():
        x = _rand(1, c, hw, hw)
        rng = np.random.default_rng(2)
        w = (rng.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
        wo = (rng.standard_normal((27, c, 3, 3)) * 0.05).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "wo"], ["om"], pads=[1] * 4),
                 helper.make_node("Split", ["om", "split"], ["off", "m"], axis=1),
                 helper.make_node("Sigmoid", ["m"], ["mask"]),
                 helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"],
                                  pads=[1] * 4)]
        inits = {"wo": wo, "w": w, "b": np.zeros(c, np.float32),
                 "split": np.array([18, 9], np.int64)}
        return _model(nodes, x, inits, opset=19), x
    return build


def broadcast_short(shape, bshape, const_first=True):
    """Mul of a constant of `shape` by the input of `bshape`, broadcast with short contiguous
    runs: StyleGAN2's modulated weights (w0 [1, cout, cin, 3, 3] times the style [1, 1, cin, 1,
    1] at run time: runs of 9 floats per style value)."""
    def build():
        x, w = _rand(*bshape), _rand(*shape)
        node = helper.make_node("Mul", ["w", "x"] if const_first else ["x", "w"], ["y"])
        return _model([node], x, {"w": w}), x
    return build


PROBES = {"softmax": softmax(-1), "softmax_axis1": softmax(1), "logsoftmax": softmax(-1, "LogSoftmax"),
          # DETR's encoder self-attention: 8 heads over a 25x34 map
          "softmax_850": softmax(-1, shape=(1, 8, 850, 850)),
          "pow3": pow_by(3.0), "pow2": pow_by(2.0), "pow_half": pow_by(0.5),
          "layernorm": layernorm, "gelu_erf": gelu_erf,
          "erf": unary("Erf"), "tanh": unary("Tanh"), "exp": unary("Exp"),
          "atan": unary("Atan"), "asinh": unary("Asinh"),
          # depthwise layers of EfficientNet-B0, MobileNetV1 and ConvNeXt-T (channels, size, k, stride)
          "dw3s2_96x112": depthwise(96, 112, 3, 2), "dw5s2_144x56": depthwise(144, 56, 5, 2),
          "dw5s1_240x28": depthwise(240, 28, 5, 1), "dw3s1_32x112": depthwise(32, 112, 3, 1),
          "dw3s2_256x56": depthwise(256, 56, 3, 2), "dw7s1_96x56": depthwise(96, 56, 7, 1),
          "dw7s1_384x14": depthwise(384, 14, 7, 1),
          # the same layers at 320x320 inputs (MnasNet, MobileNetV2): planes past 64 KiB of copy
          "dw3s2_48x160": depthwise(48, 160, 3, 2), "dw5s2_144x80": depthwise(144, 80, 5, 2),
          "dw3s2_32x320": depthwise(32, 320, 3, 2),
          "maxpool3s2_64x112": maxpool(64, 112, 3, 2), "maxpool2s2_128x56": maxpool(128, 56, 2, 2),
          "maxpool2s2_16x416": maxpool(16, 416, 2, 2),
          "pw_s2_256x56": strided_pointwise(256, 512, 56), "pw_s2_512x28": strided_pointwise(512, 1024, 28),
          "pw4_128x6x6": pointwise_chain(128, 6, 6), "pw4_256x3x3": pointwise_chain(256, 3, 3),
          "pw4_512x14x14": pointwise_chain(512, 14, 14), "pw4_1024x7x7": pointwise_chain(1024, 7, 7),
          "pw4_64x25x5": pointwise_chain(64, 25, 5),
          "bneck_256x56": bottleneck_1x1(256, 64, 56), "bneck_512x28": bottleneck_1x1(512, 128, 28),
          "bneck_1024x14": bottleneck_1x1(1024, 256, 14), "bneck_2048x7": bottleneck_1x1(2048, 512, 7),
          "gemv_9216x4096": gemv(9216, 4096), "gemv_4096x4096": gemv(4096, 4096),
          "gemv_1024x1000": gemv(1024, 1000),
          "convT2s2_128x32": conv_transpose(128, 64, 32, 2, 2),
          "convT4s2_256x28": conv_transpose(256, 128, 28, 4, 2, 1),
          "resize_nearest_128x40": resize(128, 40, "nearest"),
          "resize_linear_64x64": resize(64, 64, "linear", align=True),
          "resize_linear_hp_256x28": resize(256, 28, "linear"),
          "dil2_256x28": dilated(256, 28, 2), "dil4_512x28": dilated(512, 28, 4),
          "dil1_256x28": dilated(256, 28, 1), "dil2_256x65": dilated(256, 65, 2),
          "dil4_512x65": dilated(512, 65, 4), "fcn_head_2048x28": dilated(2048, 28, 1, 1, 512),
          "fcn_head_2048x65": dilated(2048, 65, 1, 1, 512),
          "attention_qk_1500": attention(6, 1500, part="qk"),
          "attention_qk_softmax_1500": attention(6, 1500, part="qk_softmax"),
          "attention_qk_softmax_850": attention(8, 850, d=32, part="qk_softmax"),
          "attention_1500": attention(6, 1500), "attention_577": attention(6, 577),
          "attention_197": attention(3, 197),
          "gridsample_flow_64x96x128": grid_sample(1, 64, (96, 128), (96, 128)),
          "gridsample_deform_8x32x64": grid_sample(8, 32, (64, 64), (300, 4)),
          "gridsample_bicubic_3x256": grid_sample(1, 3, (256, 256), (256, 256), "cubic", "border"),
          "attention23_128x256": attention23(128, 256, 4),
          "attention23_577x384": attention23(577, 384, 6, causal=0),
          "stft_400x160_10s": stft(10), "stft_512x128_1s": stft(1, 512, 128),
          "deform_conv_64x56": deform_conv(64, 56), "deform_conv_128x28": deform_conv(128, 28),
          "gridsample_nearest_16x128": grid_sample(1, 16, (128, 128), (128, 128), "nearest",
                                                   "reflection"),
          "modulate_256x256x3x3": broadcast_short((1, 256, 256, 3, 3), (1, 1, 256, 1, 1)),
          "modulate_128x64x3x3": broadcast_short((1, 64, 128, 3, 3), (1, 1, 128, 1, 1)),
          "scale_rows_4096x5": broadcast_short((1, 64, 4096, 5), (1, 64, 4096, 1), False)}


def measure(name, work, a):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    model, x = PROBES[name]()
    path = os.path.join(d, "probe_" + name + ".onnx")  # "erf", "exp": names libm declares
    onnx.save(model, path)
    info = glowpy.compile(path, os.path.join(d, "bundle"), kernel_variants=dict(
        v.split(":", 1) for v in a.variant), mcpu=a.mcpu)
    feeds = {"x": x}
    h = perf.Harness(os.path.join(d, "bundle"), info, d)
    ort = perf.OrtTimer(path, feeds)
    bt = ot = float("inf")
    for _ in range(a.rounds):
        t, outs = h.run(feeds, a.seconds, a.batches, a.clock)
        bt = min(bt, t)
        ot = min(ot, ort.run(a.seconds, a.batches, a.clock))
    ref = ort.outputs[0]
    err = float(np.max(np.abs(outs[0] - ref)) / max(np.max(np.abs(ref)), 1e-30))
    return bt * 1e3, ot * 1e3, err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", help=f"comma-separated (default: all of {', '.join(PROBES)})")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.05)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread")
    ap.add_argument("--variant", action="append", default=[], metavar="OP:NAME",
                    help="force a kernel variant, as -kernel-variant (repeatable)")
    ap.add_argument("--mcpu", help="compile the bundles for this CPU (znver3: AVX2 code)")
    ap.add_argument("--ort-avx2", action="store_true", help="onnxruntime with its AVX-512 "
                    "kernels off (benchmarks/ort_avx2.py), against AVX2 bundles")
    a = ap.parse_args(argv)
    if a.ort_avx2:
        import ort_avx2
        print(f"onnxruntime without AVX-512 kernels: {ort_avx2.use()}", file=sys.stderr)
    names = a.probes.split(",") if a.probes else list(PROBES)
    bad = [n for n in names if n not in PROBES]
    if bad:
        ap.error(f"unknown probes {bad}; available: {', '.join(PROBES)}")
    print(f"{'probe':<14} {'bundle us':>10} {'ort us':>10} {'ratio':>6}  rel. error")
    with tempfile.TemporaryDirectory(prefix="glowpy-probe-") as work:
        for n in names:
            b, o, e = measure(n, work, a)
            print(f"{n:<14} {b:>10.1f} {o:>10.1f} {b / o:>6.2f}  {e:.2g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The register-blocked Conv / Gemm / MatMul / pooling kernels (glowpy/codegen/kernels/
conv_fast.py, conv_chan.py, gemm_fast.py, pool_fast.py) on the shapes that pick each of their
code paths: pixel-vectorized flat and row tiles, channel-vectorized tiles with the in-register
transpose, depthwise and grouped convolutions, strides, dilations, asymmetric pads, 1-D
windows, tail blocks, and fused epilogues (residual add accumulated in place, per-channel
operands, Clip). Every graph is checked against onnxruntime, and run with the regions flush
against inaccessible pages on either side, so a masked or strided load or store that strays
out of its tensor's region faults. Every graph is compiled for each x86 vector level the host
executes (tests/vector_levels.py: SSE2's 4 lanes and AVX2's 8 on every host, AVX-512's 16 and
its mask registers where the host has them), never for "the host", so each width's tiles are
checked on every machine that can run them. Also: the vector width each target gets, and
weights packed in place (the constant region does not grow)."""
import json
import os
import re

import numpy as np
import pytest

import glowpy
from util import GraphBuilder, check_against_onnxruntime, make_model
from glowpy.runtime import Bundle
from vector_levels import params

RNG = np.random.default_rng(11)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check_guarded(model, feeds, tmp_path, level, **options):
    """check_against_onnxruntime for `level`, then the same bundle under guard pages (both
    sides)."""
    got, _ = check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                                       **level.options, **options)
    d = os.path.join(str(tmp_path), "bundle")
    for guard in (1, 2):
        b = Bundle(d, cflags=[f"-DGLOWPY_GUARD_PAGES={guard}"])
        res = b.run(feeds)
        outs = [res[p["name"]] for p in b.manifest["outputs"]]
        for g, r in zip(got, outs):
            np.testing.assert_array_equal(g, r)


# (input shape, weight shape, attributes): one graph per list, each conv also feeding an
# epilogue chain (residual add + Relu; per-channel Mul + Clip)
CONVS = {
    "pixel-vectorized": [
        ((1, 3, 12, 12), (8, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 16, 9, 7), (20, 16, 1, 1), {}),
        ((1, 8, 13, 11), (12, 8, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
        ((1, 3, 21, 21), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
        ((1, 5, 8, 8), (7, 5, 3, 3), {}),
        ((1, 4, 17), (7, 4, 3), dict(pads=[1, 1])),
        ((1, 4, 17), (7, 4, 3), dict(strides=[3], pads=[2, 0])),
        ((1, 16, 30, 30), (32, 16, 1, 1), dict(strides=[2, 2])),
        ((1, 1, 28, 29), (8, 1, 5, 5), dict(pads=[2, 2, 2, 2])),  # one channel: row tiles
    ],
    "channel-vectorized": [
        ((1, 64, 7, 7), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 40, 14, 14), (40, 40, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 24, 13, 11), (36, 24, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
        ((2, 20, 8, 8), (20, 20, 5, 5), dict(pads=[2, 2, 2, 2])),
        ((1, 64, 7, 7), (100, 64, 3, 3), dict(pads=[0, 1, 1, 0], dilations=[1, 2])),
        ((1, 48, 9), (50, 48, 3), dict(pads=[1, 1], strides=[2])),
        ((1, 256, 3, 3), (256, 256, 1, 1), {}),
        ((2, 64, 3, 5), (40, 64, 1, 1), {}),
        ((1, 1, 49, 10), (64, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 2])),
    ],
    "grouped": [
        ((2, 6, 10, 10), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
        ((1, 8, 10, 10), (8, 2, 3, 3), dict(group=4, pads=[0, 1, 2, 1], dilations=[2, 1])),
        ((1, 32, 9, 9), (48, 16, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
        ((1, 32, 28, 28), (32, 1, 3, 3), dict(group=32, pads=[1, 1, 1, 1])),
        ((1, 32, 28, 28), (32, 1, 3, 3), dict(group=32, pads=[1, 1, 1, 1], strides=[2, 2])),
        ((1, 64, 25, 5), (64, 1, 3, 3), dict(group=64, pads=[1, 1, 1, 1])),
    ],
    # conv_depthwise.py: flat planes and chunks, row blocks, strided and dilated taps
    "depthwise": [
        ((2, 8, 48, 48), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),
        ((1, 16, 24, 24), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),
        ((1, 16, 23, 21), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1], strides=[2, 2])),
        ((1, 12, 12, 12), (12, 1, 3, 3), dict(group=12, pads=[2, 2, 2, 2], dilations=[2, 2])),
        ((1, 8, 7, 9), (8, 1, 5, 5), dict(group=8, pads=[2, 1, 2, 3])),
        ((1, 16, 3, 3), (16, 1, 3, 3), dict(group=16, pads=[1, 1, 1, 1])),
        ((1, 8, 30), (8, 1, 3), dict(group=8, pads=[1, 1])),
        ((1, 8, 10, 10), (8, 1, 3, 3), dict(group=8)),
        ((1, 6, 40, 40), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1])),
    ],
}


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("plane,nv", [((5, 25), 2), ((9, 7), 1), ((4, 4), 2)])
def test_flat_pointwise_masks_only_the_last_tile(plane, nv, level, tmp_path):
    """A 1x1 convolution over the flat plane (pixel_vectorized, flat): no tap is shifted, so
    every tile but the last reads and writes whole vectors and only the last, partial one is
    masked (constant masks, known at compile time) -- also where masks are free (AVX-512),
    whose run-time masks cost a vector division per vector and masked loads every step (KWS's
    125-position layers 7% slower). Checked against onnxruntime and under guard pages at
    every level the host runs; the kernel's IR has no vector division (the run-time row of a
    lane). 16 positions at 16 lanes: one tile, no mask at all."""
    h, w = plane
    g = GraphBuilder(x=f32(1, 24, h, w), r=f32(1, 40, h, w))
    y = g.node("Conv", ["x", f32(40, 24, 1, 1, scale=0.2), f32(40)], output=False)
    g.node("Relu", [g.node("Add", [y, "r"], output=False)])
    ll, report = tmp_path / "m.ll", tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_llvm_ir=str(ll),
                  dump_memory_report=str(report),
                  kernel_variants={"Conv": ("pixel_vectorized", {"flat": True, "mr": 4,
                                                                 "nv": nv, "chunk": 0})})
    [v] = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert v["name"] == "pixel_vectorized" and v["params"]["flat"]
    body = ll.read_text().split('define internal void @"k0_Conv')[1].split("\n}\n")[0]
    assert not re.search(r"udiv <\d+ x i32>", body)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("kind", sorted(CONVS))
def test_conv_paths_with_epilogues(kind, level, tmp_path):
    feeds, g = {}, None
    g = GraphBuilder()
    for i, (xs, ws, attrs) in enumerate(CONVS[kind]):
        name = f"x{i}"
        feeds[name] = f32(*xs)
        w, b = f32(*ws, scale=0.2), f32(ws[0])
        y = g.node("Conv", [name, w, b], output=False, **attrs)
        y2 = g.node("Conv", [name, f32(*ws, scale=0.2)], output=False, **attrs)
        g.node("Relu", [g.node("Add", [y, y2], output=False)])
        scale = f32(*((ws[0],) + (1,) * (len(xs) - 2)))
        g.node("Clip", [g.node("Mul", [y, scale], output=False), np.float32(-1), np.float32(1)])
    g.feeds = feeds
    check_guarded(g.model(opset=13), feeds, tmp_path, level)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("shape, attrs, choice", [
    ((1, 6, 40, 40), dict(pads=[1, 1, 1, 1]), ("flat", 5)),  # two-row chunks, a loop inside
    ((1, 6, 40, 40), dict(pads=[1, 1, 1, 1]), ("rows", 3, 1)),  # row blocks and column runs
    ((1, 6, 40, 40), dict(pads=[1, 1, 1, 1]), ("rows", 5, 3)),
    ((1, 6, 13, 13), dict(pads=[1, 1, 1, 1]), ("flat", 2)),  # chunks without a row period
    ((1, 6, 13, 13), dict(pads=[0, 2, 1, 0], strides=[1, 3]), ("rows", 4, 1)),
    ((2, 5, 17, 33), dict(pads=[3, 3, 3, 3], dilations=[3, 2], strides=[2, 1]), ("rows", 2, 2)),
])
def test_depthwise_plans(shape, attrs, choice, level, tmp_path):
    """Each depthwise tiling on shapes where the cost model would pick another (forced through
    the kernel registry), against onnxruntime under guard pages; the memory report names it."""
    import json
    c = shape[1]
    g = GraphBuilder(x=f32(*shape))
    y = g.node("Conv", ["x", f32(c, 1, 3, 3, scale=0.3), f32(c)], output=False, group=c, **attrs)
    g.node("Relu", [y])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants={"Conv": ("depthwise", choice)})
    [v] = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert v == {"name": "depthwise", "params": list(choice)}


def _masked_loads_from_input(ir_text: str, index: int) -> int:
    """llvm.masked.load calls in instruction `index`'s kernel whose address is computed from
    its first argument (the convolution's input)."""
    body = re.search(r'define internal void @"k%d_\w+"\((.*?)\n}\n' % index, ir_text, re.S).group(1)
    base = {}
    for name, ptr in re.findall(r'(%"[^"]+") = getelementptr inbounds float, ptr (%"[^"]+")', body):
        base[name] = base.get(ptr, ptr)
    return sum(base.get(p, p) == '%".1"' for p in re.findall(
        r'call <\d+ x float> @"llvm\.masked\.load[^"]*"\(ptr (%"[^"]+")', body))


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("room", [True, False])
def test_depthwise_edge_loads_blend_where_the_region_has_room(room, level, tmp_path):
    """An edge tap's masked-off lanes read the neighbouring rows and planes: with room in the
    region around the input (the tensor between two live ones) the depthwise kernel loads no
    lane with a mask on targets without mask registers (a blend drops them: masked loads are
    microcode on AMD cores); with the input flush against both ends of its region, the first
    and last planes keep their masks in a copy of the edge code. Both against onnxruntime with
    the regions between inaccessible pages."""
    c = 16
    g = GraphBuilder(x=f32(1, c, 10, 10))
    a = g.node("Sigmoid", ["x"], output=False)
    r = g.node("Relu", [a], output=False)
    if room:  # a before the convolution's input, e after it, both live around the convolution
        e = g.node("Tanh", [r], output=False)
    y = g.node("Conv", [r, f32(c, 1, 3, 3), f32(c)], output=False, group=c, pads=[1, 1, 1, 1])
    if room:
        g.node("Add", [g.node("Add", [y, a], output=False), e])
    else:
        g.node("Concat", [y, a], axis=1)
    ir_path, report = tmp_path / "m.ll", tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_llvm_ir=str(ir_path),
                  dump_memory_report=str(report))
    rep = json.load(open(report))
    conv = next(i for i in rep["instructions"] if i["op"].startswith("Conv"))
    assert conv["variant"]["name"] == "depthwise"
    inp = next(b for b in rep["buffers"] if b["producer"]["op"] == "Relu")
    end = inp["offset"] + inp["size"]
    assert (0 < inp["offset"] and end < rep["regions"]["activation"]) if room else \
        (inp["offset"] == 0 and end == rep["regions"]["activation"])
    masked = _masked_loads_from_input(open(ir_path).read(), conv["index"])
    if level.lanes == 16:  # AVX-512: mask registers, masked loads cost nothing extra
        assert masked > 0
    else:
        assert (masked == 0) == room, masked


@pytest.mark.parametrize("level", params())
def test_gemm_and_matmul_paths(level, tmp_path):
    g = GraphBuilder(a=f32(1, 640), b=f32(5, 33), c=f32(33, 5), x=f32(2, 3, 5, 8), v=f32(3, 20),
                     r=f32(3, 70), bt=f32(20, 18))
    g.node("Gemm", ["a", f32(640, 128), f32(128)])  # one row: K-unrolled partial sums
    g.node("Gemm", ["b", f32(33, 47), f32(5, 47)], alpha=0.5, beta=2.0)
    g.node("Gemm", ["c", f32(47, 33), f32(1, 47)], transA=1, transB=1)
    g.node("Gemm", ["v", "bt", f32(3, 1)])  # B not constant: read as rows
    g.node("MatMul", ["x", f32(8, 33)])
    g.node("MatMul", ["x", f32(3, 8, 6)])
    y = g.node("Gemm", ["v", f32(70, 20), f32(70)], output=False, transB=1)
    g.node("Relu", [g.node("Add", [y, "r"], output=False)])
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level)


@pytest.mark.parametrize("level", params())
def test_pools(level, tmp_path):
    x = f32(2, 5, 17, 19)
    g = GraphBuilder(x=x)
    for attrs in (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                  dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1], ceil_mode=1),
                  dict(kernel_shape=[3, 2], dilations=[2, 3])):
        g.node("MaxPool", ["x"], **attrs)
        g.node("AveragePool", ["x"], **{k: v for k, v in attrs.items() if k != "dilations"})
    g.node("AveragePool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
    check_guarded(g.model(opset=19), g.feeds, tmp_path, level)


@pytest.mark.parametrize("level", params())
def test_weights_packed_in_place(level, tmp_path):
    """A convolution's weights are re-laid out in their own bytes: the constant region is the
    weights and the bias, nothing appended."""
    x, w, b = f32(1, 32, 14, 14), f32(48, 32, 3, 3), f32(48)
    m = make_model("Conv", {"x": x}, 1, dict(pads=[1, 1, 1, 1]), {"w": w, "b": b})
    got, _ = check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-4, atol=1e-4,
                                       **level.options)
    import json
    man = json.load(open(os.path.join(str(tmp_path), "bundle", "model.json")))
    align = lambda n: (n + 63) // 64 * 64  # noqa: E731
    assert man["memory"]["constant"] == align(w.nbytes) + align(b.nbytes)


def test_resnet_shapes_compile_for_every_target(tmp_path):
    """The same generator serves the Cortex-M7 (scalar registers) and AArch64 (NEON): the
    kernels of a residual block compile for both."""
    x = f32(1, 16, 8, 8)
    g = GraphBuilder(x=x)
    y = g.node("Conv", ["x", f32(32, 16, 3, 3), f32(32)], output=False, pads=[1, 1, 1, 1])
    z = g.node("Conv", [g.node("Relu", [y], output=False), f32(32, 32, 3, 3)], output=False,
               pads=[1, 1, 1, 1])
    s = g.node("Conv", ["x", f32(32, 16, 1, 1)], output=False)
    g.node("MaxPool", [g.node("Relu", [g.node("Add", [z, s], output=False)], output=False)],
           kernel_shape=[2, 2], strides=[2, 2])
    path = os.path.join(str(tmp_path), "m.onnx")
    import onnx
    onnx.save(g.model(opset=13), path)
    for i, target in enumerate((dict(target="arm", mcpu="cortex-m7", float_abi="hard"),
                                dict(target="arm", mcpu="cortex-m7", float_abi="soft"),
                                dict(target="aarch64"))):
        info = glowpy.compile(path, os.path.join(str(tmp_path), f"t{i}"), **target)
        assert os.path.getsize(info.files[".o"]) > 0


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("ws, attrs", [((16, 8, 1, 1), {}),  # pixel-vectorized
                                       ((48, 32, 3, 3), dict(pads=[1, 1, 1, 1]))])  # channel
def test_fused_activations_on_vectors(ws, attrs, level, tmp_path):
    """Every fused activation runs on whole accumulator vectors; Abs, whose code is scalar only,
    is left to module.py's sweep over the stored output."""
    x = f32(1, ws[1], 9, 9, scale=0.3)
    g = GraphBuilder(x=x)
    for op, extra in [("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}), ("Elu", dict(alpha=0.7)),
                      ("LeakyRelu", dict(alpha=0.1)), ("HardSigmoid", dict(alpha=0.3, beta=0.4)),
                      ("Exp", {}), ("Erf", {}), ("Abs", {}), ("Neg", {})]:
        y = g.node("Conv", ["x", f32(*ws, scale=0.3), f32(ws[0], scale=0.3)], output=False, **attrs)
        g.node(op, [y], **extra)
    y = g.node("Conv", ["x", f32(*ws, scale=0.3), f32(ws[0])], output=False, **attrs)
    g.node("PRelu", [y, f32(ws[0], 1, 1)])
    check_against_onnxruntime(g.model(opset=14), g.feeds, tmp_path, rtol=1e-4, atol=1e-5,
                              **level.options)


def test_in_place_elementwise_shares_one_pointer_and_vectorizes(tmp_path):
    """x * Sigmoid(x) written over x (the planner's in-place reuse): the kernel gets one
    pointer for the operand and the output at that address, so LLVM sees y[i] = f(x[i]) on one
    base and vectorizes it (as two unrelated pointers it stayed scalar, 3.8x slower on
    [1,96,112,112]). Checked in the object for AVX2: the kernel's loop uses ymm registers."""
    import re
    import subprocess
    from toolchains import require_tool
    objdump = require_tool("objdump", "binutils")
    x = f32(1, 8, 20, 20)
    g = GraphBuilder(x=x)
    y = g.node("Conv", ["x", f32(16, 8, 1, 1, scale=0.3)], output=False)
    s = g.node("Mul", [y, g.node("Sigmoid", [y], output=False)], output=False)
    g.node("Conv", [s, f32(16, 1, 3, 3, scale=0.3)], group=16, pads=[1, 1, 1, 1])
    check_against_onnxruntime(g.model(opset=13), g.feeds, tmp_path / "run", rtol=1e-4, atol=1e-5,
                              **params()[-1].values[0].options)  # the widest level here
    ll = tmp_path / "m.ll"  # the structure, for AVX2 on any host (compiled, not run)
    avx2 = glowpy.compile(str(tmp_path / "run" / "model.onnx"),
                                          str(tmp_path / "bundle"), mcpu="x86-64-v3",
                                          dump_llvm_ir=str(ll))
    [sig] = re.findall(r'define internal void @"(k\d+_FusedElementwise)"\(([^)]*)\)', ll.read_text())
    assert sig[1].count("ptr") == 2, sig  # the in-place operand/output pair, the constants
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", avx2.files[".o"]],
                         capture_output=True, text=True, check=True).stdout
    body = asm.split(f"<{sig[0]}>:")[1].split("\n\n")[0]
    assert "ymm" in body, body[:2000]


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("LeakyRelu", dict(alpha=0.1)),
                                      ("Clip", {})])
def test_in_place_select_stores_whole_vectors_on_avx2(op, attrs, tmp_path):
    """A Relu, LeakyRelu or Clip written over its operand (TCN's Slice -> Relu -> Conv) stores
    select(c, v, x) back where x was loaded, which LLVM 22 turns into a masked store of v:
    AVX2's vmaskmovps, microcode on AMD cores (the TCN's in-place Relus 11.7x slower than
    vmaxps). The stored value is frozen (Kernel.store). Checked in the object for
    AVX2 on any host (compiled, not run): one pointer, whole-vector stores, no vmaskmovps;
    the numbers against onnxruntime (NaN, -0 and infinities included) on the widest level
    this host runs."""
    import subprocess
    from toolchains import require_tool
    objdump = require_tool("objdump", "binutils")
    x = f32(1, 16, 66)
    x[0, 0, :6] = [np.nan, -0.0, np.inf, -np.inf, 0.0, -3.0]
    g = GraphBuilder(x=x)
    s = g.node("Slice", ["x", np.array([0], np.int64), np.array([64], np.int64),
                         np.array([2], np.int64)], output=False)
    extra = [np.array(-0.5, np.float32), np.array(0.75, np.float32)] if op == "Clip" else []
    a = g.node(op, [s, *extra], output=False, **attrs)
    g.node("Conv", [a, f32(16, 16, 1, scale=0.3)])
    got, want = check_against_onnxruntime(g.model(opset=13), g.feeds, tmp_path / "run",
                                          rtol=1e-4, atol=1e-5, **params()[-1].values[0].options)
    assert np.isnan(got[0]).any() and np.isnan(want[0]).any()  # the NaN went through
    ll = tmp_path / "m.ll"
    avx2 = glowpy.compile(str(tmp_path / "run" / "model.onnx"), str(tmp_path / "bundle"),
                          mcpu="x86-64-v3", dump_llvm_ir=str(ll))
    [sig] = re.findall(rf'define internal void @"(k\d+_{op})"\(([^)]*)\)', ll.read_text())
    # the in-place operand/output pair and the constants (Clip: and its two bounds)
    assert sig[1].count("ptr") == (4 if op == "Clip" else 2), sig
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", avx2.files[".o"]],
                         capture_output=True, text=True, check=True).stdout
    body = asm.split(f"<{sig[0]}>:")[1].split("\n\n")[0]
    assert "vmovups %ymm" in body and "maskmov" not in body, body[:3000]


def check_pointwise_pair(variant, xs, m, forced, level, tmp_path, **conv):
    """Two 1x1 convolutions of x (with a residual add + Relu into the first, a per-channel Mul
    + Clip after the second) forced onto Conv `variant` (with `forced` params, or its plan's),
    checked against onnxruntime under guard pages; asserts both ran that variant."""
    g = GraphBuilder(x=f32(*xs))
    k = [1] * (len(xs) - 2)
    out = [(d - 1) // s + 1 for d, s in zip(xs[2:], conv.get("strides", k))]
    g.feeds["r"] = f32(xs[0], m, *out)
    y = g.node("Conv", ["x", f32(m, xs[1], *k, scale=0.3), f32(m)], output=False, **conv)
    g.node("Relu", [g.node("Add", [y, "r"], output=False)])  # a residual into the output
    z = g.node("Conv", ["x", f32(m, xs[1], *k, scale=0.3)], output=False, **conv)
    g.node("Clip", [g.node("Mul", [z, f32(m, *k)], output=False), f32(), f32() + 2])
    report = tmp_path / "m.json"
    variants = {"Conv": (variant, forced)} if forced else {"Conv": variant}
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants=variants)
    got = [i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert got == [variant] * 2

"""Stride-2 lanes on 8-lane AVX vectors (Vec.load_pairs): every kernel that reads an input
with stride 2 -- depthwise rows and the phase copy, the register-blocked row tiles, strided 1x1
and im2col -- gets its lanes from four 128-bit loads and in-lane shuffles, never a
lane-crossing permute (vpermpd/vpermps: three micro-ops of throughput 2 on Zen 1; the 3x3/2
depthwise layer on 512 channels of 14x14 went 46.6 -> 37.1 us without it). Each case is forced
onto its kernel, compiled for x86-64-v3 (AVX2 on any host), checked against onnxruntime under
guard pages where the host runs AVX2, and its kernel read in the object."""
import json
import re
import subprocess

import onnx
import pytest

import glowpy
from test_kernels_fast import check_guarded, f32
from toolchains import require_tool
from util import GraphBuilder
from vector_levels import LEVELS, plan_only

AVX2 = next(lv for lv in LEVELS if lv.name == "avx2")


def depthwise(shape, k, **attrs):
    c = shape[1]
    g = GraphBuilder(x=f32(*shape))
    y = g.node("Conv", ["x", f32(c, 1, k, k, scale=0.3), f32(c)], output=False, group=c, **attrs)
    g.node("Relu", [y])
    return g


def conv(shape, m, k, **attrs):
    g = GraphBuilder(x=f32(*shape))
    g.node("Conv", ["x", f32(m, shape[1], k, k, scale=0.3), f32(m)], **attrs)
    return g


S2 = dict(strides=[2, 2])
CASES = {  # id: (graph, kernel, forced Conv variant)
    # 23x21: the first tile's pad lanes, a row remainder and a column tail
    "depthwise-3x3": (depthwise((1, 6, 23, 21), 3, pads=[1, 1, 1, 1], **S2), "Conv", "depthwise"),
    "depthwise-5x5": (depthwise((2, 5, 29, 30), 5, pads=[2, 2, 2, 2], **S2), "Conv", "depthwise"),
    "depthwise-phase": (depthwise((1, 4, 33, 35), 3, pads=[1, 1, 1, 1], **S2), "Conv",
                        "depthwise_phase"),
    "row-tiles": (conv((1, 3, 21, 21), 16, 7, pads=[3, 3, 3, 3], **S2), "Conv", "pixel_vectorized"),
    "pointwise": (conv((1, 16, 30, 30), 32, 1, **S2), "Conv", "pointwise_strided"),
    "im2col": (conv((1, 3, 25, 27), 16, 3, pads=[1, 1, 1, 1], **S2), "Conv", "im2col"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_stride_two_lanes_without_lane_crossing(case, tmp_path):
    g, kernel, variant = CASES[case]
    report = tmp_path / "m.json"
    forced = dict(kernel_variants={"Conv": variant})
    if plan_only(AVX2):  # a host without AVX2 compiles it only
        onnx.save(g.model(opset=13), str(tmp_path / "model.onnx"))
        glowpy.compile(str(tmp_path / "model.onnx"), str(tmp_path / "bundle"), mcpu=AVX2.cpu,
                       dump_memory_report=str(report), **forced)
    else:
        check_guarded(g.model(opset=13), g.feeds, tmp_path, AVX2, dump_memory_report=str(report),
                      **forced)
    ran = [i for i in json.loads(report.read_text())["instructions"] if i["kernel"] == kernel]
    assert ran and all(i["variant"]["name"] == variant for i in ran), ran
    objdump = require_tool("objdump", "binutils")
    obj = next((tmp_path / "bundle").glob("*.o"))
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(obj)],
                         capture_output=True, text=True, check=True).stdout
    bodies = re.findall(rf"<k\d+_{kernel}[^>]*>:\n(.*?)(?:\n\n|\Z)", asm, re.S)
    assert bodies, asm[:2000]
    body = "\n".join(bodies)
    assert "vinsertf128" in body and "vshufps" in body, body[:3000]  # the paired loads
    assert not re.search(r"\bvperm(pd|ps|2f128)\b", body), body[:3000]

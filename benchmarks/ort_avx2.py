"""onnxruntime without its AVX-512 and AVX-VNNI kernels, for AVX2 figures on a newer machine.

`--mcpu znver3` compiles the bundles to AVX2 code, but onnxruntime keeps picking its AVX-512
kernels on an AVX-512 host, so that comparison sets AVX2 bundles against AVX-512 kernels. On
an AVX2-only machine (the issue's Zen 3) onnxruntime runs its AVX2/FMA3 kernels. onnxruntime
has no switch for this: MLAS, its kernel library, chooses once, when the library loads, from
CPUID leaf 7 and XCR0, and neither can be changed from user space. `--ort-avx2` therefore
loads a copy of the installed wheel in which two tests never take their branch:

- the XCR0 test (the operating system saves the ZMM state: bits 5-7) that selects the
  AVX-512 kernels: MLAS then keeps the choices it makes for an AVX2 machine (FMA3 SGEMM
  kernels, 8-float NCHWc blocks, AVX2 pooling and activations);
- the CPUID leaf 7 sub-leaf 1 test for AVX-VNNI (EAX bit 4), which a Zen 5 or an Alder Lake
  has and a Zen 3 has not: without it the integer GEMMs and QLinearConv run on AVX2's
  `vpmaddubsw` + `vpmaddwd`, as on the issue's machine. The twenty-second session measured
  what it cost to leave it: on a Zen 5, the copy with only the first patch ran ResNet-18 and
  MobileNetV2 int8 on `vpdpbusd` and made our AVX2 code look 1.5-1.8x behind where the Zen 3
  had measured 1.03-1.06.

The copy lives in build/ort-avx2/<version>-<patches>/ and is made once per onnxruntime
version. Each byte pattern must occur exactly once in the extension module, or nothing is
patched and the benchmark stops with an error.

What loaded is checked, not assumed:
- `nchwc_block()`: MLAS's NCHWc block is 16 floats with its AVX-512 kernels and 8 with its AVX2
  ones, and onnxruntime writes it into the weights of the convolutions it reorders (a
  [8, 8, 3, 3] weight becomes [16, 8, 3, 3] or stays [8, 8, 3, 3]);
- `u8s8_saturates()`: AVX2's `vpmaddubsw` adds two u8 x s8 products into a saturated int16, so
  MatMulInteger of 255s by 127s gives 32767 per pair where VNNI's `vpdpbusd` gives the exact
  64770 (MLAS documents this as the reason for its U8S8 range advice on AVX2).

Measured on the Zen 4 the first patch was written on (onnxruntime 1.32, one thread, 512x512
MatMul, best of 200): 103-111 GFLOP/s as installed, 97-99 with the copy, the figures of its
FMA3 kernel.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (what it selects, the bytes before the branch, the branch, what replaces the branch)
PATCHES = (
    # not rax; test al, 0xe0 | je rel32 -> nop word [rax+rax+0] (the je's six bytes)
    ("AVX-512", bytes.fromhex("48f7d0a8e0"), bytes.fromhex("0f84"), bytes.fromhex("660f1f440000")),
    # mov eax, 7; mov ecx, 1; cpuid; test al, 0x10 | je rel8 -> jmp rel8 (same target)
    ("AVX-VNNI", bytes.fromhex("b807000000b9010000000fa2a810"), bytes.fromhex("74"),
     bytes.fromhex("eb")),
)


def patched_copy(dest_root: str = os.path.join(ROOT, "build", "ort-avx2")) -> str:
    """The directory to put first on sys.path: it holds the patched `onnxruntime` package."""
    import importlib.util
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: --ort-avx2 needs onnxruntime installed (pip install onnxruntime)")
    src = list(spec.submodule_search_locations)[0]
    from importlib.metadata import version
    dest = os.path.join(dest_root, version("onnxruntime") + "-" + "-".join(p[0] for p in PATCHES))
    if os.path.isdir(dest):
        return dest
    os.makedirs(dest_root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=dest_root)  # patched here, renamed when whole
    try:
        exts = glob.glob(os.path.join(src, "capi", "onnxruntime_pybind11_state*.so"))
        if len(exts) != 1:
            sys.exit(f"error: --ort-avx2 found {len(exts)} onnxruntime extension modules in "
                     f"{src}; it patches the x86-64 Linux wheel's one")
        with open(exts[0], "rb") as f:
            code = bytearray(f.read())
        for what, before, branch, instead in PATCHES:
            at = code.find(before + branch)
            if at < 0 or code.find(before + branch, at + 1) >= 0:
                sys.exit(f"error: --ort-avx2 did not find MLAS's {what} test exactly once in "
                         f"{exts[0]}; this onnxruntime build is not one it knows (pin "
                         "onnxruntime as constraints/test.txt does)")
            at += len(before)
            code[at:at + len(instead)] = instead
        pkg = os.path.join(tmp, "onnxruntime")
        shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(pkg, "capi", os.path.basename(exts[0])), "wb") as f:
            f.write(code)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process made it first
            if not os.path.isdir(dest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def nchwc_block() -> int:
    """The NCHWc block (floats) of the onnxruntime this process imported, read from the weight
    of an 8 -> 8 3x3 convolution in the graph onnxruntime optimizes for this machine."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    w = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], "nchwc",
                          [helper.make_tensor_value_info("x", 1, [1, 8, 8, 8])],
                          [helper.make_tensor_value_info("y", 1, [1, 8, 8, 8])], [w])
    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.log_severity_level = 1, 3
        so.optimized_model_filepath = os.path.join(d, "optimized.onnx")
        ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                             .SerializeToString(), so, providers=["CPUExecutionProvider"])
        weights = onnx.load(so.optimized_model_filepath).graph.initializer
    return max(t.dims[0] for t in weights)


def u8s8_saturates() -> bool:
    """Whether this process's onnxruntime multiplies u8 by s8 on AVX2's saturating
    `vpmaddubsw` (True) rather than on VNNI (False): MatMulInteger of 255s by 127s."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    b = numpy_helper.from_array(np.full((64, 16), 127, np.int8), "b")
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "u8s8",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 16])], [b])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.log_severity_level = 1, 3
    s = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                             .SerializeToString(), so, providers=["CPUExecutionProvider"])
    y = s.run(None, {"a": np.full((4, 64), 255, np.uint8)})[0]
    return bool((y == 32767 * 32).all())


def use() -> str:
    """Makes `import onnxruntime` load the patched copy and checks that its AVX2 kernels
    loaded; returns what it loaded. Must run before anything imports onnxruntime."""
    if "onnxruntime" in sys.modules:
        raise RuntimeError("ort_avx2.use() after onnxruntime was imported")
    sys.path.insert(0, patched_copy())
    import onnxruntime
    block = nchwc_block()
    if block != 8:
        sys.exit(f"error: the patched onnxruntime still uses {block}-float NCHWc blocks, "
                 "not AVX2's 8")
    if not u8s8_saturates():
        sys.exit("error: the patched onnxruntime still multiplies u8 by s8 exactly (VNNI), "
                 "not on AVX2's saturating vpmaddubsw")
    return (f"{os.path.dirname(onnxruntime.__file__)} (NCHWc blocks of {block} floats, "
            "u8 x s8 pairs saturating as on AVX2)")

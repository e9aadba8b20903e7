"""onnxruntime without its AVX-512 kernels, for AVX2 figures on an AVX-512 machine.

`--mcpu znver3` compiles the bundles to AVX2 code, but onnxruntime keeps picking its AVX-512
kernels on an AVX-512 host, so that comparison sets AVX2 bundles against AVX-512 kernels. On
an AVX2-only machine (the issue's Zen 3) onnxruntime runs its AVX2/FMA3 kernels. onnxruntime
has no switch for this: MLAS, its kernel library, chooses once, when the library loads, from
CPUID leaf 7 (AVX512F) and XCR0 (the operating system saves the ZMM state: bits 5-7), and
neither can be changed from user space. `--ort-avx2` therefore loads a copy of the installed
wheel in which that one XCR0 test never takes its AVX-512 branch: MLAS then keeps the choices
it makes for an AVX2 machine (FMA3 SGEMM kernels, 8-float NCHWc blocks, AVX2 pooling and
activations), and nothing else changes.

The copy lives in build/ort-avx2/<version>/ and is made once per onnxruntime version. The
byte pattern of the test (`not rax; test al, 0xe0; je rel32`) must occur exactly once in the
extension module, or nothing is patched and the benchmark stops with an error.

`nchwc_block()` shows which kernels loaded: MLAS's NCHWc block is 16 floats with its AVX-512
kernels and 8 with its AVX2 ones, and onnxruntime writes it into the weights of the convolutions
it reorders (a [8, 8, 3, 3] weight becomes [16, 8, 3, 3] or stays [8, 8, 3, 3]).

Measured on the Zen 4 this was written on (onnxruntime 1.32, one thread, 512x512 MatMul, best
of 200): 103-111 GFLOP/s as installed, 97-99 with the copy, the figures of its FMA3 kernel.
"""
from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATTERN = bytes.fromhex("48f7d0a8e00f84")  # not rax; test al, 0xe0; je rel32
NOP6 = bytes.fromhex("660f1f440000")        # nop word [rax+rax+0]: the je's six bytes


def patched_copy(dest_root: str = os.path.join(ROOT, "build", "ort-avx2")) -> str:
    """The directory to put first on sys.path: it holds the patched `onnxruntime` package."""
    import importlib.util
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: --ort-avx2 needs onnxruntime installed (pip install onnxruntime)")
    src = list(spec.submodule_search_locations)[0]
    from importlib.metadata import version
    dest = os.path.join(dest_root, version("onnxruntime"))
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
        at = code.find(PATTERN)
        if at < 0 or code.find(PATTERN, at + 1) >= 0:
            sys.exit(f"error: --ort-avx2 did not find MLAS's AVX-512 test exactly once in "
                     f"{exts[0]}; this onnxruntime build is not one it knows (pin onnxruntime "
                     "as constraints/test.txt does)")
        je = at + len(PATTERN) - 2
        code[je:je + 6] = NOP6
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
    return f"{os.path.dirname(onnxruntime.__file__)} (NCHWc blocks of {block} floats)"

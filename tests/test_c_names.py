"""Generated identifiers against what a C or C++ program already has: the standard (and POSIX)
headers' macros and names, the compilers' predefined macros (`linux`, `unix` under GNU C++) and
the reserved form (a leading '_'; a '__' inside a name is Glow's legalization and is kept).
Placeholder macros that would collide are renamed (documented in the header comment and
docs/robustness.md); a network name or entry symbol that would
collide is refused with one usage line. Each bundle is used by a real program that includes
every standard header and the bundle header, built with -Wall -Werror as GNU C and as GNU C++17
(where `linux` and `unix` are predefined), linked with the bundle and run."""
import shutil
import subprocess

import pytest
from onnx import helper

import glowpy
from glowpy.codegen.c_names import LIBRARY, PREDEFINED
from glowpy.codegen.names import unique_legal_names
from hostile import model, one_error, save, vi

HEADERS = ("assert ctype errno float inttypes limits locale math setjmp signal stdarg stdbool "
           "stddef stdint stdio stdlib string time wchar unistd fcntl pthread").split()
X = [-1.5, 2.5]


def relu_fanout(outputs):
    nodes = [helper.make_node("Relu", ["x"], [o], name=f"r{i}") for i, o in enumerate(outputs)]
    return model(nodes, [vi("x", [2])], [vi(o, [2]) for o in outputs])


def run_program(tmp_path, bundle_dir, name, info):
    """Builds a C and a C++ program that include every header and NAME.h, sets the input
    through its macro, runs the entry and prints each output through its macro."""
    upper = name.upper()
    x = info.inputs[0]["symbol"]
    body = "".join(
        f'  {{ const float *y = (const float *)GLOW_GET_ADDR(mut, {upper}_{o["symbol"]});\n'
        f'    printf("%g %g\\n", y[0], y[1]); }}\n' for o in info.outputs)
    src = ("".join(f"#include <{h}.h>\n" for h in HEADERS) + f'#include "{name}.h"\n'
           f"static uint8_t cst[{upper}_CONSTANT_MEM_SIZE + 1] GLOW_MEM_ALIGN(64);\n"
           f"static uint8_t mut[{upper}_MUTABLE_MEM_SIZE] GLOW_MEM_ALIGN(64);\n"
           f"static uint8_t act[{upper}_ACTIVATIONS_MEM_SIZE + 1] GLOW_MEM_ALIGN(64);\n"
           "int main(void) {\n"
           f"  float *x = (float *)GLOW_GET_ADDR(mut, {upper}_{x});\n"
           f"  x[0] = {X[0]}f; x[1] = {X[1]}f;\n"
           f"  if ({info.entry}(cst, mut, act) != GLOW_SUCCESS) return 3;\n" + body +
           "  return 0;\n}\n")
    outs = []
    for cc, std, ext in (("gcc", "-std=gnu11", "c"), ("g++", "-std=gnu++17", "cpp")):
        path = tmp_path / f"use.{ext}"
        path.write_text(src)
        exe = tmp_path / f"use_{ext}"
        r = subprocess.run([shutil.which(cc), std, "-Wall", "-Werror", f"-I{bundle_dir}",
                            str(path), str(bundle_dir / f"{name}.o"), "-o", str(exe), "-lm",
                            "-lpthread"], capture_output=True, text=True)
        assert r.returncode == 0, f"{cc} {std}: {r.stderr}"
        r = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
        outs.append(r.stdout.splitlines())
    assert outs[0] == outs[1] == ["0 2.5"] * len(info.outputs)


def compile_fanout(tmp_path, outputs, network, **opts):
    path = save(relu_fanout(outputs), tmp_path / f"{network}.onnx")
    out = tmp_path / "out"
    return glowpy.compile(path, str(out), **opts), out


def test_library_and_predefined_lists_hold_what_the_issue_names():
    assert {"INT8_MAX", "INT8_WIDTH", "SIZE_MAX", "CHAR_BIT", "EOF", "errno", "EINTR", "M_PI",
            "write", "printf", "bool", "true", "NULL"} <= LIBRARY | {"bool", "true"}
    assert {"linux", "unix", "i386"} <= PREDEFINED


def test_standard_library_macro_collisions_are_renamed(tmp_path):
    # INT8.onnx with an output MAX gave '#define INT8_MAX 64': a redefinition in any program
    # that includes <stdint.h> (the header itself does)
    info, out = compile_fanout(tmp_path, ["MAX", "MIN", "C", "WIDTH", "y"], "INT8")
    assert [o["symbol"] for o in info.outputs] == ["MAX_1", "MIN_1", "C_1", "WIDTH_1", "y"]
    assert [o["name"] for o in info.outputs] == ["MAX", "MIN", "C", "WIDTH", "y"]
    run_program(tmp_path, out, "INT8", info)


def test_underscore_names_keep_glows_macros_and_compile(tmp_path):
    # network '_' with an output 'cplusplus' was '#define __cplusplus 64': a network name
    # whose macros would begin with '_' is refused (below); behind a legal NAME_ prefix, names
    # keep Glow's legalization ('onnx::Gemm_0' -> NET_onnx__Gemm_0, what Glow applications
    # use) and the header compiles as C and C++ beside every standard header
    names = ["_cplusplus", "onnx::Gemm_0", "__GNUC__", "a//b", "/", "_9", "cplusplus"]
    info, out = compile_fanout(tmp_path, names, "net")
    assert [o["symbol"] for o in info.outputs] == ["_cplusplus", "onnx__Gemm_0", "__GNUC__",
                                                   "a__b", "_", "_9", "cplusplus"]
    run_program(tmp_path, out, "net", info)


def test_predefined_macro_as_entry_is_refused_and_a_chosen_entry_works(capsys, tmp_path):
    path = save(relu_fanout(["y"]), tmp_path / "linux.onnx")
    out = tmp_path / "out"
    msg = one_error(capsys, f"-model={path}", f"-emit-bundle={out}", status=2)
    assert msg == ("network name 'linux' (from the model file name; set -network-name): the entry "
                   "function 'linux' is a macro compilers predefine (GNU C and C++ define 'linux' "
                   "and 'unix'); choose another with -main-entry-name")
    assert not out.exists()
    info = glowpy.compile(path, str(out), main_entry_name="infer")
    run_program(tmp_path, out, "linux", info)


@pytest.mark.parametrize("args, expect", [
    (["-network-name=_"], "-network-name=_: the header's macros would begin '__', which begins "
                          "with '_' (C reserves such names for the implementation); choose another "
                          "network name"),
    (["-network-name=_Net"], "-network-name=_Net: the header's macros would begin '_NET_', which "
                             "begins with '_' (C reserves such names for the implementation); "
                             "choose another network name"),
    (["-network-name=unix"], "-network-name=unix: the entry function 'unix' is a macro compilers "
                             "predefine (GNU C and C++ define 'linux' and 'unix'); choose another "
                             "with -main-entry-name"),
    (["-main-entry-name=write"], "-main-entry-name=write: the entry function 'write' is a macro or "
                                 "name of the C standard or POSIX headers; choose another with "
                                 "-main-entry-name"),
    (["-main-entry-name=INT8_MAX"], "-main-entry-name=INT8_MAX: the entry function 'INT8_MAX' is a "
                                    "macro or name of the C standard or POSIX headers; choose "
                                    "another with -main-entry-name"),
    (["-main-entry-name=errno"], "-main-entry-name=errno: the entry function 'errno' is a macro or "
                                 "name of the C standard or POSIX headers; choose another with "
                                 "-main-entry-name"),
    (["-main-entry-name=_start"], "-main-entry-name=_start: the entry function '_start' begins "
                                  "with '_' (C reserves such names for the implementation); "
                                  "choose another with -main-entry-name"),
])
def test_names_that_cannot_be_renamed_are_refused(capsys, tmp_path, args, expect):
    path = save(relu_fanout(["y"]), tmp_path / "m.onnx")
    out = tmp_path / "out"
    assert one_error(capsys, f"-model={path}", f"-emit-bundle={out}", *args, status=2) == expect
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_renaming_is_deterministic_and_keeps_ordinary_names():
    names = ["gpu_0/data", "input:0", "x", "MAX", "_x", "x", "a__b", "a_b"]
    first = unique_legal_names(names, prefix="INT8_")
    assert first == ["gpu_0_data", "input_0", "x", "MAX_1", "_x", "x_1", "a__b", "a_b"]
    assert unique_legal_names(names, prefix="INT8_") == first
    # without a macro prefix (no header macro is made of them) names legalize the same way
    assert unique_legal_names(["_x", "a__b"]) == ["_x", "a__b"]

"""Name safety: model strings (tensor, node and graph names, doc strings) reach generated C and
LLVM text only legalized (identifiers) or escaped (comments, string literals). A model whose
names carry comment terminators, newlines, quotes, preprocessor lines, backslashes, trigraphs
and non-ASCII compiles into a header that is valid C and C++, declares exactly the expected
macros, and a bundle that computes the right values."""
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import glowpy
from glowpy.codegen.names import comment_text, legalize, unique_legal_names
from hostile import model, save, vi

HOSTILE = ["in */ int evil; /*", "x\n#define HOSTILE_CONSTANT_MEM_SIZE 1", 'q"uote\\', "ünï©ødé\u202e",
           "a/b", "a_b", "CONSTANT_MEM_SIZE", "0lead", "trail\\", "tri??/", "a:b"]
SYMBOLS = ["in____int_evil____", "x__define_HOSTILE_CONSTANT_MEM_SIZE_1", "q_uote_", "_n___d__",
           "a_b", "a_b_1", "CONSTANT_MEM_SIZE_1", "A0lead", "trail_", "tri___", "a_b_2"]
OPS = ["Relu", "Neg", "Abs", "Sigmoid", "Neg", "Relu", "Neg", "Abs", "Neg", "Relu"]


def hostile_model():
    nodes = [helper.make_node(op, [HOSTILE[i]], [HOSTILE[i + 1]], name=f"node{i} */\n#error {i}")
             for i, op in enumerate(OPS)]
    return model(nodes, [vi(HOSTILE[0], [2, 3])], [vi(x, [2, 3]) for x in HOSTILE[1:]],
                 name='graph"\n@evil = global i32 7\n; */', doc_string="*/\n#error doc")


def reference(x):
    outs, v = [], x
    for op in OPS:
        v = {"Relu": lambda a: np.maximum(a, 0), "Neg": np.negative, "Abs": np.abs,
             "Sigmoid": lambda a: 1 / (1 + np.exp(-a))}[op](v)
        outs.append(v)
    return outs


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    path = save(hostile_model(), d / "hostile.onnx")
    out = {}
    for api in ("static", "dynamic"):
        info = glowpy.compile(path, str(d / api), bundle_api=api,
                              dump_llvm_ir=str(d / f"{api}.ll"))
        out[api] = (info, d / api, (d / f"{api}.ll").read_text())
    return out


@pytest.mark.parametrize("api", ["static", "dynamic"])
def test_header_is_valid_c_and_cpp(bundles, api, tmp_path):
    info, d, _ = bundles[api]
    h = d / "hostile.h"
    for cc, std in ((shutil.which("gcc"), "-std=c11"), (shutil.which("g++"), "-std=c++11")):
        if cc is None:
            continue
        src = tmp_path / ("use.c" if "++" not in cc else "use.cpp")
        src.write_text(f'#include "{h}"\nint touch(void) {{ return 0; }}\n')
        r = subprocess.run([cc, std, "-Wall", "-Wextra", "-Werror", "-trigraphs", "-fsyntax-only",
                            str(src)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("api", ["static", "dynamic"])
def test_no_model_string_reaches_the_header_raw(bundles, api):
    info, d, _ = bundles[api]
    text = (d / "hostile.h").read_text()
    assert text.isascii()
    for bad in ("*/ int evil", "#error", "@evil", "??/"):
        assert bad not in text
    for line in text.splitlines():  # no model string starts a line of its own
        assert not line.startswith(("#define HOSTILE_CONSTANT_MEM_SIZE 1", "#error", "@", "int evil"))
    assert [p["symbol"] for p in info.inputs + info.outputs] == SYMBOLS
    if api == "static":
        macros = re.findall(r"^#define (HOSTILE_\w+)\s+(\d+)$", text, re.M)
        names = [m for m, _ in macros]
        assert names == [f"HOSTILE_{s}" for s in SYMBOLS] + [
            "HOSTILE_CONSTANT_MEM_SIZE", "HOSTILE_MUTABLE_MEM_SIZE", "HOSTILE_ACTIVATIONS_MEM_SIZE",
            "HOSTILE_MEM_ALIGN"]
        assert len(set(names)) == len(names)
        assert "//   Name: \"x\\x0A#define HOSTILE_CONSTANT_MEM_SIZE 1\"" in text
        assert "//   Name: \"in *\\/ int evil; /\\*\"" in text


@pytest.mark.parametrize("api", ["static", "dynamic"])
def test_no_model_string_reaches_llvm_text_or_symbols(bundles, api):
    info, d, ir = bundles[api]
    assert ir.splitlines()[0] == '; ModuleID = "hostile"'
    assert "@evil" not in ir and "#error" not in ir
    nm = shutil.which("nm")
    if nm:
        r = subprocess.run([nm, "-g", "--defined-only", str(d / "hostile.o")], capture_output=True,
                           text=True, check=True)
        exported = sorted(line.split()[-1] for line in r.stdout.splitlines())
        assert exported == (["hostile"] if api == "static" else ["hostile", "hostile_config"])


@pytest.mark.parametrize("api", ["static", "dynamic"])
def test_bundle_with_hostile_names_computes_the_right_values(bundles, api):
    from glowpy.runtime import Bundle
    info, d, _ = bundles[api]
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    got = Bundle(str(d), "hostile").run({HOSTILE[0]: x})
    for name, ref in zip(HOSTILE[1:], reference(x)):
        np.testing.assert_allclose(got[name], ref, rtol=1e-6, atol=1e-6)


def test_legalized_names_are_unique_and_deterministic():
    names = ["a/b", "a_b", "a:b", "a_b_1", "CONSTANT_MEM_SIZE", "x" * 10]
    first = unique_legal_names(names, {"CONSTANT_MEM_SIZE"})
    assert first == ["a_b", "a_b_1", "a_b_2", "a_b_1_1", "CONSTANT_MEM_SIZE_1", "x" * 10]
    assert unique_legal_names(names, {"CONSTANT_MEM_SIZE"}) == first


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.text(min_size=0, max_size=40))
def test_comment_text_cannot_escape_a_comment_or_string(s):
    t = comment_text(s)
    assert t.isascii() and t.isprintable()
    for bad in ("*/", "/*", "??", "\n"):
        assert bad not in t
    assert not re.search(r'(?<!\\)(\\\\)*"', t.replace('\\"', ""))  # every quote is escaped
    assert not re.search(r"(?<!\\)(\\\\)*\\$", t)  # no trailing lone backslash


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.lists(st.text(max_size=12), max_size=12))
def test_legalize_gives_unique_c_identifiers(names):
    out = unique_legal_names(names)
    assert len(set(out)) == len(out)
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", x) for x in out)
    assert all(legalize(x) == x for x in out)

"""bundle-info: every shared model's bundle described (regions, placeholders, constants and their
stored layout, code size per kernel function, read from the ELF symbol table and checked against
binutils' readelf), and a missing, truncated or modified file reported in one line, exit 1."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

import glowpy
from bundle_cache import compiled
from glowpy.bundle_info import app
from glowpy.cli import run
from toolchains import require_tool
from util import REPO, model_path

import typer

SHARED = ["mnist8", "mnist_onnx2c_atmega14x14", "super_resolution_10", "mlperf_tiny_resnet8",
          "mlperf_tiny_kws_dscnn", "mlperf_tiny_vww_mobilenetv1_025", "mlperf_tiny_ad_autoencoder",
          "yunet_s_320", "ulfd_slim320", "mlperf_tiny_kws_dscnn_int8_qdq",
          "mlperf_tiny_resnet8_int8_qdq", "mlperf_tiny_vww_int8_qdq"]


def bundle_info(argv, capsys):
    """(exit status, stdout, stderr) of bundle-info run in this process."""
    rc = run(list(argv), "bundle-info", typer.main.get_command(app))
    out = capsys.readouterr()
    return rc, out.out, out.err


def readelf_functions(path: str) -> dict:
    """{function: st_size} as binutils' readelf reads the object."""
    r = subprocess.run([require_tool("readelf"), "-sW", path], capture_output=True, text=True,
                       check=True)
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 8 and f[3] == "FUNC" and f[6] != "UND":
            out[f[7]] = int(f[2], 0)
    return out


@pytest.mark.parametrize("name", SHARED)
def test_describes_every_shared_model(name, capsys):
    info, d, _ = compiled(name)
    rc, out, err = bundle_info([f"-bundle={d}", f"-network-name={info.name}", "-json"], capsys)
    assert rc == 0, err
    j = json.loads(out)
    m = info.manifest
    assert j["memory"] == m["memory"] and j["target"] == m["target"]
    assert [p["name"] for p in j["placeholders"]] == [p["name"] for p in m["inputs"] + m["outputs"]]
    assert j["integrity"] == {".o": "ok", ".weights.bin": "ok"}
    # constants: inside the constant region, not overlapping, each with a layout
    spans = sorted((c["offset"], c["offset"] + c["bytes"]) for c in j["constants"])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert not spans or spans[-1][1] <= m["memory"]["constant"]
    assert all(c["layout"] for c in j["constants"])
    # code: the entry and one function per kernel, sizes as readelf reads them
    funcs = {f["name"]: f["bytes"] for f in j["code"]["functions"]}
    assert funcs == readelf_functions(f"{d}/{info.name}.o")
    assert funcs[info.entry] > 0 and any(re.match(r"k0_", f) for f in funcs)
    assert sum(funcs.values()) <= j["code"]["text_bytes"]
    # the text form says the same
    rc, text, _ = bundle_info([d, f"-network-name={info.name}"], capsys)
    assert rc == 0
    assert f"constant {m['memory']['constant']:,} B" in text
    assert f"integrity: {info.name}.o ok  {info.name}.weights.bin ok" in text
    for f, n in funcs.items():
        assert re.search(rf"^  {re.escape(f)}\s+{n}$", text, re.M), f


def test_stored_layouts(tmp_path, capsys):
    """ResNet-8 for AVX2: Winograd-transformed weights, packed weights and Gemm panels, each
    named with the kernel function that reads it; with -winograd=false none is Winograd."""
    d = str(tmp_path / "avx2")
    glowpy.compile(model_path("mlperf_tiny_resnet8"), d, mcpu="x86-64-v3")
    rc, out, err = bundle_info([d, "-json"], capsys)
    assert rc == 0, err
    j = json.loads(out)
    funcs = {f["name"] for f in j["code"]["functions"]}
    lay = [c for c in j["constants"] if c["layout"] != "plain"]
    # its 16-channel 32x32 layers: F(4x4, 3x3) by the cost model (winograd_plan.py), U [K/MR][36][C][MR]
    wino = [c for c in lay if c["layout"].startswith("winograd F(4x4,3x3) [K/8][36][C][8]")]
    assert wino and all(c["kernel"].endswith("_ConvWinograd") and c["variant"] == "winograd"
                        for c in wino)
    assert any(c["layout"] == "packed_w" for c in lay) and any(c["layout"] == "packed_b" for c in lay)
    assert all(c["kernel"] in funcs for c in lay)
    d2 = str(tmp_path / "direct")
    glowpy.compile(model_path("mlperf_tiny_resnet8"), d2, mcpu="x86-64-v3", winograd=False)
    rc, out, _ = bundle_info([d2, "-json"], capsys)
    assert not [c for c in json.loads(out)["constants"] if c["layout"].startswith("winograd")]


def test_cortex_m7_object(tmp_path, capsys):
    """A 32-bit Arm object: the target and every Thumb function size as readelf reads them."""
    d = str(tmp_path / "m7")
    info = glowpy.compile(model_path("mnist8"), d, target="arm", mcpu="cortex-m7")
    rc, out, err = bundle_info([d, "-json"], capsys)
    assert rc == 0, err
    j = json.loads(out)
    assert j["target"]["triple"].startswith("thumbv7em") and j["target"]["cpu"] == "cortex-m7"
    funcs = {f["name"]: f["bytes"] for f in j["code"]["functions"]}
    assert funcs == readelf_functions(f"{d}/{info.name}.o") and funcs[info.entry] > 0


def _broken(tmp_path, name="mnist8"):
    info, d, _ = compiled(name)
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    return info, bad


def test_truncated_weights_reported(tmp_path, capsys):
    info, bad = _broken(tmp_path)
    w = bad / "mnist8.weights.bin"
    size = w.stat().st_size
    w.write_bytes(w.read_bytes()[:size // 2])
    rc, out, err = bundle_info([str(bad)], capsys)
    assert rc == 1 and out == ""
    assert err == (f"bundle-info: error: mnist8.weights.bin has {size // 2} bytes, the manifest "
                   f"records {size} (truncated); compile the bundle again\n")


def test_modified_object_reported(tmp_path, capsys):
    info, bad = _broken(tmp_path)
    o = bad / "mnist8.o"
    data = bytearray(o.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit different
    o.write_bytes(bytes(data))
    rc, out, err = bundle_info([str(bad), "-json"], capsys)
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("bundle-info: error: mnist8.o: SHA-256 ") and "modified" in err


def test_missing_object_and_manifest_reported(tmp_path, capsys):
    info, bad = _broken(tmp_path)
    (bad / "mnist8.o").unlink()
    rc, _, err = bundle_info([str(bad)], capsys)
    assert (rc, err) == (1, "bundle-info: error: mnist8.o is missing: the bundle is partial; "
                            "compile it again\n")
    rc, _, err = bundle_info([str(bad), "-network-name=other"], capsys)
    assert rc == 1 and err.startswith("bundle-info: error: other.json: cannot read it")
    rc, _, err = bundle_info([str(tmp_path / "nowhere")], capsys)
    assert rc == 2 and "not a directory" in err


def test_command_line_entry(tmp_path):
    """The module runs as the console script does (python -m glowpy.bundle_info)."""
    info, d, _ = compiled("mnist8")
    r = subprocess.run([sys.executable, "-m", "glowpy.bundle_info", f"-bundle={d}",
                        "-network-name=mnist8"], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("bundle mnist8 in ") and "Input3" in r.stdout


def test_bundle_without_hashes_is_described(tmp_path, capsys):
    """A manifest from before the integrity hashes: described, integrity "not recorded"."""
    info, bad = _broken(tmp_path)
    man = json.loads((bad / "mnist8.json").read_text())
    del man["integrity"]
    (bad / "mnist8.json").write_text(json.dumps(man))
    rc, out, err = bundle_info([str(bad), "-json"], capsys)
    assert rc == 0, err
    assert set(json.loads(out)["integrity"].values()) == {
        "not recorded (a bundle from a glowpy before integrity hashes)"}

"""Every command in the README runs as written from a fresh clone: the README's ```sh blocks (and
its C program and Python snippet, written where the text says) run in order as one terminal
session in a copy of the repository's tracked files beside ../shared, and what they print is
checked (the digits classified, the cross runners' outputs against the reference).

One edit: `bash scripts/test.sh` (the test suite, of which this test is part) gets a test file
to run, tests/test_oplist.py, instead of the whole suite; everything else in the command (the
tool check, installing glowpy[test] into .venv, running pytest) runs as written. The cross
blocks need arm-none-eabi-gcc, qemu-system-arm, aarch64-linux-gnu-gcc and qemu-aarch64: the
project's required tools (scripts/test.sh installs them)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np

from toolchains import require_tools
from util import REPO, SHARED, reference_data

sys.path.insert(0, os.path.join(REPO, "examples", "bundles"))
from gen_io_header import parse_run_output  # noqa: E402

BLOCK = re.compile(r"^```(sh|c|python)\n(.*?)^```\n", re.S | re.M)
SUITE = "bash scripts/test.sh"


def readme_blocks() -> list[tuple[str, str]]:
    with open(os.path.join(REPO, "README.md")) as f:
        return BLOCK.findall(f.read())


def session_script(blocks) -> str:
    """One bash script: each block after a marker line `=== block I`."""
    out = ["set -eo pipefail"]
    for i, (lang, text) in enumerate(blocks):
        out.append(f"echo '=== block {i}'")
        if lang == "sh":
            # the one edit (module docstring): the suite runs one file of itself
            out.append(re.sub(rf"^{re.escape(SUITE)}(?=\s|$)", f"{SUITE} tests/test_oplist.py",
                              text, flags=re.M))
        elif lang == "c":
            name = re.match(r"/\* (\S+\.c) \*/", text)
            assert name, "a C block starts with /* FILE.c */ naming the file the text builds"
            out.append(f"cat > {name.group(1)} <<'GLOWPY_README_EOF'\n{text}GLOWPY_README_EOF")
        else:
            out.append(f"python - <<'GLOWPY_README_EOF'\n{text}GLOWPY_README_EOF")
    return "\n".join(out) + "\n"


def fresh_copy(root) -> str:
    """The repository's tracked files (as in a clone) in root/glowpy, with root/shared."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    dst = os.path.join(root, "glowpy")
    for f in filter(None, files):
        os.makedirs(os.path.join(dst, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, f), os.path.join(dst, f))
    os.symlink(SHARED, os.path.join(root, "shared"))
    return dst


def test_readme_blocks_are_what_the_test_runs():
    blocks = readme_blocks()
    langs = [lang for lang, _ in blocks]
    assert langs.count("c") == 1 and langs.count("python") == 1 and langs.count("sh") >= 6
    assert blocks[0] == ("sh", blocks[0][1]) and "bash scripts/quickstart.sh" in blocks[0][1]
    assert re.search(rf"^{re.escape(SUITE)}\s", blocks[0][1], re.M)  # the two main commands


def test_readme_commands_run_as_written(tmp_path):
    require_tools("cc", "make", "arm-none-eabi-gcc", "qemu-system-arm", "aarch64-linux-gnu-gcc",
                  "qemu-aarch64")
    repo = fresh_copy(tmp_path)
    script = tmp_path / "session.sh"
    script.write_text(session_script(readme_blocks()))
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CI")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not p.startswith(os.path.dirname(sys.executable)))
    r = subprocess.run(["bash", str(script)], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    parts = re.split(r"^=== block (\d+)\n", r.stdout, flags=re.M)
    out = {int(i): text for i, text in zip(parts[1::2], parts[2::2])}
    blocks = readme_blocks()

    def block_with(needle):
        return out[next(i for i, (_, t) in enumerate(blocks) if needle in t)]
    # quickstart classifies the three sample digits; the suite's file passed
    assert re.findall(r"^class (\d)", out[0], re.M) == ["0", "2", "9"]
    assert re.search(r"\d+ passed", out[0]) and " failed" not in out[0]
    # bundle-info found the bundle whole
    assert "integrity: mnist.o ok  mnist.weights.bin ok" in block_with("bundle-info out/")
    # the C program and the Python snippet both read digit2.pgm
    assert block_with("cc -Iout app.c").split() == ["digit", "2"]
    assert block_with("from glowpy.runtime import Bundle").split() == ["digit", "2"]
    # the Cortex-M7 and AArch64 runners print mnist8's outputs for its reference input
    ref = reference_data("mnist8")[1][0].ravel()
    cross = block_with("examples/bundles/cortex_m7")
    m7, a64 = cross.split("qemu-aarch64", 1) if "qemu-aarch64" in cross else (cross, "")
    for text in (m7, a64):
        got = parse_run_output(text)["outputs"][0]
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    # the report of the keyword-spotting bundle, with its Cortex-M7 profile
    with open(os.path.join(repo, "kws.html")) as f:
        page = f.read()
    assert "Profile: instructions per inference" in page and "thumbv7em" in page
    # the Caffe2 LeNet and the quantized ResNet-8 were written
    for d, name in (("lenet", "lenet_dir"), ("r8int8", "mlperf_tiny_resnet8")):
        assert os.path.getsize(os.path.join(repo, d, name + ".o")) > 0

"""The op list: `model-compiler -list-ops` prints every op of the registry with its opset range,
and docs/ops.md is exactly what tools/gen_ops_md.py generates from the registry."""
import os
import subprocess
import sys

from util import REPO
from glowpy.cli import run
from glowpy.oplist import render_markdown, supported_ops
import typer


def test_docs_ops_md_is_current():
    with open(os.path.join(REPO, "docs", "ops.md")) as f:
        current = f.read()
    assert current == render_markdown(), "docs/ops.md is out of date: run python tools/gen_ops_md.py"


def test_list_ops_cli(capsys):
    from glowpy.cli import app
    rc = run(["-list-ops"], "model-compiler", typer.main.get_command(app))
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    ops = supported_ops()
    assert out[0].startswith(f"{len(ops)} supported ONNX ops")
    blank = out.index("")
    rows = {line.split()[0]: line.split()[2] for line in out[1:blank]}
    assert len(rows) == len(ops)
    # then the com.microsoft ops, with their domain
    contrib = {line.split()[0]: line.split()[2] for line in out[blank + 2:]}
    assert out[blank + 1].startswith(f"{len(contrib)} com.microsoft ops")
    assert contrib["com.microsoft.FusedConv"] == "1" and "com.microsoft.QLinearAdd" in contrib
    assert "DynamicQuantizeLinear" in rows
    # ranges: first ONNX version glowpy implements .. newest loaded opset, or before deprecation
    assert rows["Conv"] == "1-28" and rows["Gelu"] == "20-28" and rows["Tile"] == "6-28"
    assert rows["Upsample"].endswith("-9")  # deprecated by ONNX in opset 10
    for op in ("Einsum", "TopK", "Where", "ArgMax", "CumSum", "DepthToSpace", "Range"):
        assert op in rows


def test_gen_ops_md_check_mode():
    r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "gen_ops_md.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

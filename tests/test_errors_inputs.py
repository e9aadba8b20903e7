"""Everything else the tools read, bounded and checked: option values that reach LLVM's IR text
(-target, -mcpu, -march), -load-profile files (kind, size), model-profiler datasets (size, values
an integer input cannot take) and -dump-profile, which writes through links and FIFOs like the
compiler's -dump-* outputs. Each refusal is one line with its exit status and leaves nothing."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

from glowpy.errors import show
from hostile import MNIST, model, one_error, refused, save, vi
from util import REPO

TARGET_TEXT = "expected an LLVM name (letters, digits, '_', '.', '-'; at most 200 characters)"
CPU_TEXT = "expected an LLVM name (letters, digits, '_', '.', '-', '+'; at most 100 characters)"

MODEL_INPUT_USAGE = ("expected name,type,[d0,d1,...] (types: bfloat16, bool, float, float16, "
                     "float32, int32, int64, int8, uint8, or name,int8q,scale,offset,[...])")


@pytest.mark.parametrize("arg, expect", [
    # these reached `target triple = "..."` and made LLVM's parser fail (an internal error)
    ('-target=x86_64-unknown-linux-gnu"', f'-target=x86_64-unknown-linux-gnu": {TARGET_TEXT}'),
    ('-target=riscv32-"-none-elf', f'-target=riscv32-"-none-elf: {TARGET_TEXT}'),
    ("-target=x86_64\n!0 = x", f"-target=x86_64\\n!0 = x: {TARGET_TEXT}"),
    ("-target=x86_64\0", f"-target=x86_64\\x00: {TARGET_TEXT}"),
    ("-target=" + "x" * 201, f"-target={show('x' * 201)}: {TARGET_TEXT}"),
    ('-mcpu=cortex-m7"', f'-mcpu=cortex-m7": {CPU_TEXT}'),
    ("-mcpu=a\nb", f"-mcpu=a\\nb: {CPU_TEXT}"),
    ('-march=armv8"-a', f'-march=armv8"-a: {CPU_TEXT}'),
    ('-mattr=+avx2,+"x', "-mattr: malformed feature '+\"x' (expected +name or -name, comma "
                        "separated)"),
    ("-mattr=+a\x1bb", "-mattr: malformed feature '+a\\x1bb' (expected +name or -name, comma "
                       "separated)"),
    # int(), \d and str.isdigit take Arabic-Indic and superscript digits: ASCII only
    ("-model-input=Input3,float,[1,1,28,\u0662\u0668]",
     f"-model-input=Input3,float,[1,1,28,\u0662\u0668]: {MODEL_INPUT_USAGE}"),
    ("-model-input=Input3,int8q,0.5,\u0661,[1,1,28,28]",
     f"-model-input=Input3,int8q,0.5,\u0661,[1,1,28,28]: {MODEL_INPUT_USAGE}"),
    ("-max-region-size=\u0663K", "-max-region-size=\u0663K: expected a positive byte count such "
                                "as 65536, 512K, 64M or 2G"),
    ("-onnx-define-symbol=N,\u0663", "-onnx-define-symbol=N,\u0663: expected name,value with a "
                                    "positive integer value"),
])
def test_option_value_is_one_usage_line(capsys, tmp_path, arg, expect):
    out = tmp_path / "out"
    assert one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", arg, status=2) == expect
    assert not out.exists()


def relu(shape=(1, 4), et=TensorProto.FLOAT):
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", list(shape), et)],
                 [vi("y", list(shape), et)])


def test_load_profile_fifo_device_and_size(capsys, tmp_path):
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)  # reading it would block for ever: refused without opening it
    assert refused(capsys, tmp_path, relu(), f"-load-profile={fifo}", status=2) == (
        f"-load-profile={fifo}: not a regular file; give the profile model-profiler wrote")
    assert refused(capsys, tmp_path, relu(), "-load-profile=/dev/zero", status=2) == (
        "-load-profile=/dev/zero: not a regular file; give the profile model-profiler wrote")
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:
        f.truncate((64 << 20) + 1)  # sparse
    assert refused(capsys, tmp_path, relu(), f"-load-profile={big}", status=2) == (
        f"-load-profile={big}: 67108865 bytes, more than a profile can be (67108864 bytes)")


def profiler(tmp_path, *args):
    code = "import sys; from glowpy.profiler import main; sys.argv[0] = 'model-profiler'; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=REPO), timeout=120)


@pytest.mark.parametrize("fmt, make, expect", [
    ("rawbin", lambda p: open(p, "wb").truncate(1 << 34),  # 16 GiB, sparse: never read
     "'{p}' is 17179869184 bytes; a rawbin sample of input 'x' float32[1, 4] is at most 16"),
    ("npy", lambda p: np.save(p, np.zeros((1 << 16,), np.float32)),
     "'{p}' is 262272 bytes; a npy sample of input 'x' float32[1, 4] is at most 65552"),
    ("rawtxt", lambda p: open(p, "w").write("1 " * 4000),
     "'{p}' is 8000 bytes; a rawtxt sample of input 'x' float32[1, 4] is at most 4224"),
])
def test_profiler_dataset_larger_than_its_input(tmp_path, fmt, make, expect):
    p = tmp_path / f"s.{fmt}"
    make(p)
    res = profiler(tmp_path, f"-model={save(relu(), tmp_path / 'm.onnx')}",
                   f"-input-dataset=x,{fmt},{p}", f"-dump-profile={tmp_path / 'p.yaml'}")
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"model-profiler: error: -input-dataset=x,{fmt},{p}: " + expect.format(p=p)]
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("values", [[1.5, 0, 0, 0], [1e10, 0, 0, 0], [np.nan, 0, 0, 0]])
def test_profiler_dataset_values_an_integer_input_cannot_take(tmp_path, values):
    m = model([helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.FLOAT)],
              [vi("x", [1, 4], TensorProto.INT32)], [vi("y", [1, 4])])
    np.save(tmp_path / "s.npy", np.array(values, np.float64).reshape(1, 4))
    res = profiler(tmp_path, f"-model={save(m, tmp_path / 'm.onnx')}",
                   f"-input-dataset=x,npy,{tmp_path / 's.npy'}", f"-dump-profile={tmp_path / 'p.yaml'}")
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [
        f"model-profiler: error: -input-dataset=x,npy,{tmp_path / 's.npy'}: '{tmp_path / 's.npy'}' "
        "holds values that are not integers from -2147483648 to 2147483647; input 'x' is int32"]


def test_dump_profile_writes_through_links_and_fifos_and_refuses_directories(tmp_path):
    m = save(relu(), tmp_path / "m.onnx")
    np.save(tmp_path / "s.npy", np.arange(4, dtype=np.float32).reshape(1, 4))
    ds = f"-input-dataset=x,npy,{tmp_path / 's.npy'}"
    real = tmp_path / "real.yaml"
    real.write_text("old")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    res = profiler(tmp_path, f"-model={m}", ds, f"-dump-profile={link}")
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and real.read_text().startswith("# glowpy quantization profile")
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    res = profiler(tmp_path, f"-model={m}", ds, f"-dump-profile={fifo}")
    reader.join(60)
    assert res.returncode == 0, res.stderr
    assert got == [real.read_text()] and fifo.exists() and not fifo.is_file()
    d = tmp_path / "dir"
    d.mkdir()
    res = profiler(tmp_path, f"-model={m}", ds, f"-dump-profile={d}")
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f"model-profiler: error: -dump-profile={d}: is a directory; give a file, a link to a "
        "file, a FIFO or a new path"]
    assert list(d.iterdir()) == []

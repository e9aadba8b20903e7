"""External tensor data: only regular files inside the model's directory are read; absolute
paths, '..' escapes and symbolic links that leave the directory are refused, and the declared
offset and length are checked against the file and the tensor before anything is read."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import cli, const, model, one_error, save, snapshot, vi

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def external_model(d, location, offset=None, length=None, write_data=True):
    """y = x + w, with w stored as external data at `location` (relative to directory d)."""
    if write_data:
        with open(os.path.join(d, "w.bin"), "wb") as f:
            f.write(b"\0" * 16 + W.tobytes())  # the tensor at offset 16
    t = const("w", W)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            t.external_data.add(key=k, value=str(v))
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
              [t])
    return save(m, os.path.join(d, "m.onnx"))


def refused(capsys, tmp_path, path):
    out = tmp_path / "out"
    msg = one_error(capsys, f"-model={path}", f"-emit-bundle={out}", status=1)
    assert not out.exists()
    return msg


def test_valid_external_data_is_read(capsys, tmp_path):
    from glowpy.runtime import Bundle
    path = external_model(tmp_path, "w.bin", offset=16, length=24)
    rc, lines, _ = cli(capsys, f"-model={path}", f"-emit-bundle={tmp_path}/out")
    assert rc == 0 and lines == []
    x = np.ones((2, 3), np.float32)
    y = Bundle(str(tmp_path / "out"), "m").run({"x": x})["y"]
    np.testing.assert_array_equal(y, x + W)


def test_absolute_path_refused(capsys, tmp_path):
    path = external_model(tmp_path, str(tmp_path / "w.bin"), 16, 24)
    assert refused(capsys, tmp_path, path) == (
        f"tensor 'w': external data '{tmp_path}/w.bin' must be a relative path inside the "
        "model's directory (absolute paths and '..' are refused)")


@pytest.mark.parametrize("loc", ["../w.bin", "sub/../../w.bin", "..\\w.bin", "/etc/passwd"])
def test_parent_escape_refused(capsys, tmp_path, loc):
    d = tmp_path / "model"
    d.mkdir()
    path = external_model(d, loc, 16, 24)
    assert "must be a relative path inside the model's directory" in refused(capsys, tmp_path, path)


def test_symlink_leaving_the_directory_refused(capsys, tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\1" * 40)
    d = tmp_path / "model"
    d.mkdir()
    os.symlink(secret, d / "w.bin")
    path = external_model(d, "w.bin", 16, 24, write_data=False)
    assert refused(capsys, tmp_path, path) == ("tensor 'w': external data 'w.bin' leaves the "
                                               "model's directory through a symbolic link; refused")


def test_symlink_inside_the_directory_is_fine(capsys, tmp_path):
    external_model(tmp_path, "w.bin")
    os.symlink("w.bin", tmp_path / "alias.bin")
    path = external_model(tmp_path, "alias.bin", 16, 24, write_data=False)
    rc, lines, _ = cli(capsys, f"-model={path}", f"-emit-bundle={tmp_path}/out")
    assert rc == 0 and lines == []


def test_offset_and_length_beyond_the_file(capsys, tmp_path):
    path = external_model(tmp_path, "w.bin", offset=32, length=24)
    assert refused(capsys, tmp_path, path) == ("tensor 'w': external data 'w.bin': offset 32 + "
                                               "length 24 exceeds the file's 40 bytes")
    path = external_model(tmp_path, "w.bin", offset=4096)
    assert refused(capsys, tmp_path, path) == ("tensor 'w': external data 'w.bin': offset 4096 is "
                                               "past the end of the file (40 bytes)")


def test_length_disagreeing_with_the_tensor(capsys, tmp_path):
    path = external_model(tmp_path, "w.bin", offset=16, length=20)
    assert refused(capsys, tmp_path, path) == (
        "tensor 'w': external data 'w.bin': length 20 does not match the tensor's declared type "
        "and shape [2, 3] (24 bytes)")


@pytest.mark.parametrize("field, value", [("offset", "-8"), ("length", "0x18"), ("offset", "1e3")])
def test_malformed_offset_or_length(capsys, tmp_path, field, value):
    kw = {"offset": 16, "length": 24, field: value}
    path = external_model(tmp_path, "w.bin", **kw)
    assert refused(capsys, tmp_path, path) == (f"tensor 'w': external data 'w.bin': {field} "
                                               f"'{value}' is not a non-negative integer")


def test_missing_file_and_not_a_file(capsys, tmp_path):
    path = external_model(tmp_path, "nope.bin")
    assert refused(capsys, tmp_path, path) == "tensor 'w': external data 'nope.bin' not found beside the model"
    (tmp_path / "adir").mkdir()
    path = external_model(tmp_path, "adir")
    assert refused(capsys, tmp_path, path) == "tensor 'w': external data 'adir' is not a regular file"


def test_device_file_inside_directory_is_not_read(capsys, tmp_path):
    """A symlink to /dev/zero is outside the directory; a FIFO inside it is not a regular file."""
    os.mkfifo(tmp_path / "fifo.bin")
    path = external_model(tmp_path, "fifo.bin", 0, 24)
    before = snapshot(tmp_path)
    assert refused(capsys, tmp_path, path) == "tensor 'w': external data 'fifo.bin' is not a regular file"
    assert snapshot(tmp_path) == before

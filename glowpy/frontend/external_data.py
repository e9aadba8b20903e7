"""External tensor data: only files inside the model's directory are read, and each declared
offset/length is checked against the file before anything is read."""
from __future__ import annotations

import os

from glowpy.errors import ModelError


def _tensors(model):
    from onnx.external_data_helper import _get_all_tensors
    return _get_all_tensors(model)


def load_external_data(model, base_dir: str):
    from onnx import TensorProto
    base = os.path.realpath(base_dir)
    for t in _tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        where = f"tensor '{t.name}': external data '{loc}'"
        if not loc or os.path.isabs(loc) or ".." in loc.replace("\\", "/").split("/"):
            raise ModelError(f"{where} must be a relative path inside the model's directory")
        path = os.path.realpath(os.path.join(base, loc))
        if os.path.commonpath([base, path]) != base:
            raise ModelError(f"{where} leaves the model's directory (symbolic link); refused")
        if not os.path.isfile(path):
            raise ModelError(f"{where} not found beside the model")
        size = os.path.getsize(path)
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            raise ModelError(f"{where}: offset/length are not integers") from None
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelError(f"{where}: offset {offset} + length {length} exceeds the file's "
                             f"{size} bytes")
        with open(path, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT

"""External tensor data: only regular files inside the model's directory are read.

A location must be a relative path without '..'; after resolving symbolic links it must still
lie inside the model's directory. The declared offset and length are checked against the file
(and the length against the tensor's declared type and shape) before anything is read."""
from __future__ import annotations

import math
import os
import stat

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir import dtypes
from glowpy.ir.validate import check_size


def _tensors(model):
    """(TensorProto, used) for every tensor of the model: initializers (used when a node or
    a graph output names them) and tensor attributes (always used), in subgraphs too."""
    from onnx import AttributeProto

    def graph_tensors(g, top):
        used = {x for n in g.node for x in n.input} | {vi.name for vi in g.output}
        for t in g.initializer:
            yield t, t.name in used or not top  # subgraphs' initializers: kept, as before
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.TENSOR:
                    yield a.t, True
                elif a.type == AttributeProto.TENSORS:
                    yield from ((t, True) for t in a.tensors)
                elif a.type == AttributeProto.GRAPH:
                    yield from graph_tensors(a.g, False)
                elif a.type == AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        yield from graph_tensors(sub, False)
    yield from graph_tensors(model.graph, True)


def _int(info: dict, key: str, where: str, default=None):
    if key not in info:
        return default
    v = info[key].strip()
    # str.isdigit() also accepts '\u0663' and '\u00b2', which int() then rejects or reads:
    # only ASCII decimal digits are a number here
    if not (v.isascii() and v.isdigit()):
        raise ModelError(f"{where}: {key} '{show(info[key], 40)}' is not a non-negative integer")
    return int(v)


def _entry(t, base: str) -> tuple[str, str, int, int]:
    """(description, path, offset, length) of an external tensor, checked without reading."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    where = f"tensor '{show(t.name)}': external data '{show(loc)}'"
    parts = loc.replace("\\", "/").split("/")
    if not loc or "\0" in loc or os.path.isabs(loc) or loc.startswith(("/", "\\")) \
            or ".." in parts or (len(loc) > 1 and loc[1] == ":"):
        raise ModelError(f"{where} must be a relative path inside the model's directory "
                         "(absolute paths and '..' are refused)")
    path = os.path.realpath(os.path.join(base, loc))
    if os.path.commonpath([base, path]) != base:
        raise ModelError(f"{where} leaves the model's directory through a symbolic link; "
                         "refused")
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        raise ModelError(f"{where} not found beside the model") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{where} is not a regular file")
    size = st.st_size
    offset = _int(info, "offset", where, 0)
    length = _int(info, "length", where, None)
    if offset > size:
        raise ModelError(f"{where}: offset {offset} is past the end of the file ({size} "
                         "bytes)")
    if length is None:
        length = size - offset
    if offset + length > size:
        raise ModelError(f"{where}: offset {offset} + length {length} exceeds the file's "
                         f"{size} bytes")
    if t.data_type in dtypes.ONNX_TO_NUMPY:
        need = math.prod(t.dims) * np.dtype(dtypes.ONNX_TO_NUMPY[t.data_type]).itemsize
        if any(d < 0 for d in t.dims) or length != need:
            raise ModelError(f"{where}: length {length} does not match the tensor's declared "
                             f"type and shape {list(t.dims)} ({need} bytes)")
    return where, path, offset, length


def load_external_data(model, base_dir: str, limit: int | None = None):
    """Checks every external entry, then reads only the tensors the graph uses: an unused
    initializer naming gigabytes of data costs nothing. Their sizes, one by one and in total,
    are checked against the limit before the first byte is read."""
    from onnx import TensorProto
    base = os.path.realpath(base_dir)
    todo = []
    for t, used in _tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        where, path, offset, length = _entry(t, base)
        if used:  # an unused entry's size is nobody's concern
            check_size(length, where, limit)
            todo.append((t, where, path, offset, length))
    total = sum(e[4] for e in todo)
    if len(todo) > 1:
        check_size(total, f"the external data of the {len(todo)} tensors the graph uses", limit)
    for t, where, path, offset, length in todo:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError as e:
            raise ModelError(f"{where} cannot be read: {e.strerror}") from None
        if len(data) != length:
            raise ModelError(f"{where}: the file changed while it was read")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT

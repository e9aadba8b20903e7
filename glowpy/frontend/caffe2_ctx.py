"""What a Caffe2 operator translator works with: `Args` reads the operator's arguments with
Caffe2's defaults, `Ctx` adds the IR nodes of one operator (named after it and its output
blobs), and layout helpers (NCHW <-> NHWC transposes, axis checks)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show


class Args:
    """An operator's arguments by name, read with Caffe2's defaults."""

    def __init__(self, op, where: str):
        self.d = {a.name: a for a in op.arg}
        self.where = where

    def has(self, k) -> bool:
        return k in self.d

    def _err(self, k, what):
        return ModelError(f"{self.where}: argument '{show(k)}' {what}")

    def i(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if a.HasField("i"):
            return int(a.i)
        if a.HasField("f") and float(a.f).is_integer():
            return int(a.f)
        raise self._err(k, "must be an integer (field i)")

    def f(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if a.HasField("f"):
            return float(a.f)
        if a.HasField("i"):
            return float(a.i)
        raise self._err(k, "must be a number (field f)")

    def s(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if not a.HasField("s"):
            raise self._err(k, "must be a string (field s)")
        return a.s.decode("utf-8", "replace")

    def ints(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if not a.ints and (a.HasField("i") or a.floats):
            return [self.i(k)] if a.HasField("i") else [int(v) for v in a.floats]
        return [int(v) for v in a.ints]

    def floats(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        return [float(v) for v in a.floats] if a.floats else [float(v) for v in a.ints]


class Ctx:
    """One Caffe2 operator being translated: adds its IR nodes, named after it."""

    def __init__(self, graph, op, label: str, where: str, blobs=None):
        self.g, self.op, self.label, self.where = graph, op, label, where
        self.blobs = blobs if blobs is not None else {}  # every blob so far, by name
        self.args = Args(op, where)
        self._n = 0

    def err(self, msg) -> ModelError:
        return ModelError(f"{self.where}: {msg}")

    def add(self, op_type, inputs, attrs=None, final=False, n=1):
        """Adds an IR node; the operator's last node (`final`) names its outputs after the
        Caffe2 blobs."""
        self._n += 1
        name = self.label if final else f"{self.label}/{op_type.lower()}{self._n}"
        outs = [o for o in self.op.output[:n]] if final else None
        return self.g.add(op_type, inputs, attrs or {}, name=name, out_names=outs, num_outputs=n)

    def one(self, op_type, inputs, attrs=None, final=False):
        return self.add(op_type, inputs, attrs, final)[0]

    def const(self, array, what="c"):
        return self.g.constant(np.asarray(array), f"{self.label}/{what}")

    def output_const(self, array, j):
        """A constant Caffe2 output j (shapes and sizes known at compile time)."""
        return self.g.constant(np.asarray(array), self.op.output[j] if j < len(self.op.output)
                               else f"{self.label}/out{j}")

    def i64(self, values, what):
        return self.const(np.asarray(values, np.int64), what)

    def reshape(self, x, shape, final=False):
        if tuple(shape) == x.shape and not final:
            return x
        return self.one("Reshape", [x, self.i64(list(shape), "shape")], final=final)

    def transpose(self, x, perm, final=False):
        return self.one("Transpose", [x], {"perm": list(perm)}, final)

    def order(self) -> str:
        o = self.args.s("order", "NCHW").upper()
        if o not in ("NCHW", "NHWC"):
            raise self.err(f"order '{show(o)}' is not supported (NCHW or NHWC)")
        return o


def to_nchw(c, x):
    r = len(x.shape)
    return c.transpose(x, [0, r - 1] + list(range(1, r - 1)))


def to_nhwc(c, y, final=True):
    r = len(y.shape)
    return c.transpose(y, [0] + list(range(2, r)) + [1], final)


def rank_at_least(c, x, r):
    if len(x.shape) < r:
        raise c.err(f"input '{show(x.name)}' has shape {list(x.shape)}; rank >= {r} expected")


def axis_of(c, a, rank):
    v = a + rank if a < 0 else a
    if not 0 <= v < max(rank, 1):
        raise c.err(f"axis {a} is out of range for rank {rank}")
    return v


C2_DTYPES = {1: np.float32, 2: np.int32, 3: np.uint8, 5: np.bool_, 6: np.uint8, 7: np.int8,
             8: np.uint16, 9: np.int16, 10: np.int64, 12: np.float16, 13: np.float64}
C2_DTYPE_NAMES = {0: "UNDEFINED", 4: "STRING", 14: "ZERO_COLLISION_HASH", 15: "REBATCHING_BUFFER"}

def dtype_of(code: int, where: str) -> np.dtype:
    if code not in C2_DTYPES:
        raise ModelError(f"{where}: data type {C2_DTYPE_NAMES.get(code, code)} is not supported")
    return np.dtype(C2_DTYPES[code])

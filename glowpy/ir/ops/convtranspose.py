"""ConvTranspose (ONNX semantics, 1-D to 3-D spatial).

y[n, g*Mg + m, o] = B[m] + sum_{c in group g, k} x[n, c, i] * W[c, m, k]  where
o = i*stride + k*dilation - pad_begin, for every spatial dim. `TWindow` resolves kernel,
strides, dilations, pads, output_padding, output_shape and auto_pad once, the way onnxruntime
does: with output_shape (or SAME_* auto_pad, whose output is input*stride) the total padding is
max(0, (in-1)*s + output_padding + (k-1)*d + 1 - out); SAME_UPPER puts the odd unit at
the end, SAME_LOWER and NOTSET at the beginning (the ONNX spec; onnxruntime 1.31 agrees)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, register


@dataclass(frozen=True)
class TWindow:
    in_size: tuple  # spatial input dims
    out_size: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple

    def in_range(self, d: int, k: int) -> tuple[int, int]:
        """Input positions [lo, hi) whose tap k along dim d lands inside the output."""
        s, off = self.strides[d], k * self.dilations[d] - self.pads_begin[d]  # o = i*s + off
        lo = max(0, -(off // s)) if off < 0 else 0
        hi = min(self.in_size[d], (self.out_size[d] - 1 - off) // s + 1) \
            if self.out_size[d] - 1 - off >= 0 else 0
        return lo, max(lo, hi)

    def scatters(self):
        """(tap, input slices, output slices) for every tap that reaches the output: the
        input positions of the tap and the output positions they land on (numpy references)."""
        for kidx in np.ndindex(*self.kernel):
            ranges = [self.in_range(d, kidx[d]) for d in range(len(self.in_size))]
            if any(lo >= hi for lo, hi in ranges):
                continue
            yield kidx, tuple(slice(lo, hi) for lo, hi in ranges), tuple(
                slice(lo * s + k * dl - p, (hi - 1) * s + k * dl - p + 1, s)
                for (lo, hi), s, k, dl, p in
                zip(ranges, self.strides, kidx, self.dilations, self.pads_begin))

    def tiles_exactly(self) -> bool:
        """Every output position receives exactly one (input position, tap) pair: kernel =
        stride, no dilation, no padding, output = input x stride along every dim."""
        return all(k == s and d == 1 and p == 0 and o == i * s for k, s, d, p, o, i in
                   zip(self.kernel, self.strides, self.dilations, self.pads_begin,
                       self.out_size, self.in_size))


def _err(node, msg):
    return ModelError(f"node '{node.name}' ({node.op}): {msg}")


@register
class ConvTranspose(Op):
    inputs = ("X", "W", "B?")
    attrs = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
             "output_padding": None, "output_shape": None, "pads": None, "strides": None}

    def window(self, node) -> TWindow:
        x, w = node.inputs[0], node.inputs[1]
        a = node.attrs
        spatial = x.shape[2:]
        n = len(spatial)
        kernel = tuple(ints(a["kernel_shape"])) if a["kernel_shape"] is not None else w.shape[2:]
        strides = tuple(ints(a["strides"])) if a["strides"] is not None else (1,) * n
        dil = tuple(ints(a["dilations"])) if a["dilations"] is not None else (1,) * n
        adj = tuple(ints(a["output_padding"])) if a["output_padding"] is not None else (0,) * n
        for what, v in (("kernel_shape", kernel), ("strides", strides), ("dilations", dil),
                        ("output_padding", adj)):
            if len(v) != n:
                raise _err(node, f"{what} must have {n} values for a {n}-D input, got {list(v)}")
        if kernel != w.shape[2:]:
            raise _err(node, f"kernel_shape {list(kernel)} does not match weight shape "
                             f"{list(w.shape)}")
        if min(strides + dil) < 1 or min(adj, default=0) < 0:
            raise _err(node, "strides and dilations must be >= 1 and output_padding >= 0")
        for p, s, d in zip(adj, strides, dil):
            if p >= max(s, d):
                raise _err(node, f"output_padding {list(adj)} must be smaller than the stride or "
                                 "the dilation")
        auto = a["auto_pad"]
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            raise _err(node, f"unknown auto_pad '{auto}'")
        natural = [(i - 1) * s + p + (k - 1) * d + 1 for i, s, p, k, d in
                   zip(spatial, strides, adj, kernel, dil)]
        out = None
        if a["output_shape"] is not None:
            out = ints(a["output_shape"])
            if len(out) == n + 2:
                out = out[2:]
            if len(out) != n or min(out) < 1:
                raise _err(node, f"output_shape {ints(a['output_shape'])} must give {n} positive "
                                 "spatial dims")
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            out = [i * s for i, s in zip(spatial, strides)]
        if out is not None:
            total = [max(0, nat - o) for nat, o in zip(natural, out)]
            pb = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        else:
            pads = ints(a["pads"]) if a["pads"] is not None and auto == "NOTSET" else [0] * (2 * n)
            if len(pads) != 2 * n or min(pads) < 0:
                raise _err(node, f"pads must have {2 * n} non-negative values, got {pads}")
            pb = pads[:n]
            out = [nat - p0 - p1 for nat, p0, p1 in zip(natural, pads[:n], pads[n:])]
            if min(out) < 1:
                raise _err(node, f"pads {pads} leave no output for input {list(x.shape)}")
        return TWindow(tuple(spatial), tuple(out), kernel, strides, dil, tuple(pb))

    def infer(self, node):
        x, w, b = node.inputs[0], node.inputs[1], node.input(2)
        if not 3 <= len(x.shape) <= 5:
            raise _err(node, f"input '{x.name}' has rank {len(x.shape)}; 1-D to 3-D spatial "
                             "inputs (rank 3..5) are supported")
        g = node.attrs["group"]
        if g < 1 or len(w.shape) != len(x.shape) or w.shape[0] != x.shape[1] or x.shape[1] % g:
            raise _err(node, f"weight shape {list(w.shape)} does not match input shape "
                             f"{list(x.shape)} with group={g} (expected [C, M/group, k...])")
        m = w.shape[1] * g
        if b is not None and b.shape != (m,):
            raise _err(node, f"bias shape {list(b.shape)} must be [{m}]")
        if x.dtype != np.float32:
            raise _err(node, f"type {x.dtype.name} is not supported (float only)")
        return [(x.dtype, (x.shape[0], m) + self.window(node).out_size)]

    def reference(self, node, x, w, b=None):
        win = self.window(node)
        g = node.attrs["group"]
        n, c = x.shape[:2]
        mg = w.shape[1]
        nd = len(win.in_size)
        y = np.zeros((n, mg * g) + win.out_size, np.float64)
        for kidx, src, dst in win.scatters():
            for gi in range(g):
                xs = x[(slice(None), slice(gi * (c // g), (gi + 1) * (c // g))) + src]
                ws = w[(slice(gi * (c // g), (gi + 1) * (c // g)), slice(None)) + kidx]
                contrib = np.einsum("nc...,cm->nm...", xs.astype(np.float64), ws.astype(np.float64))
                y[(slice(None), slice(gi * mg, (gi + 1) * mg)) + dst] += contrib
        if b is not None:
            y += b.reshape((1, -1) + (1,) * nd)
        return [y.astype(x.dtype)]


@register
class Col2Im(Op):
    """ONNX Col2Im (opset 18): the adjoint of im2col. input [N, C*prod(block), L] holds, for
    every one of the L sliding blocks of a convolution over an image of `image_shape` (given
    pads, strides, dilations), C*prod(block) values that are summed into the image positions
    the block covers. Also the second half of a strided ConvTranspose on hosts (its 1x1 product
    first: glowpy/ir/passes/convtranspose.py)."""
    inputs = ("input", "image_shape", "block_shape")
    attrs = {"dilations": None, "pads": None, "strides": None}
    const_inputs = (1, 2)
    since = 18

    def window(self, node) -> TWindow:
        """The blocks as the TWindow of a ConvTranspose from the block grid to the image."""
        x = node.inputs[0]
        image = ints(node.const_input(1, "image_shape"))
        block = ints(node.const_input(2, "block_shape"))
        n = len(image)
        a = node.attrs
        strides = ints(a["strides"]) if a["strides"] is not None else [1] * n
        dil = ints(a["dilations"]) if a["dilations"] is not None else [1] * n
        pads = ints(a["pads"]) if a["pads"] is not None else [0] * (2 * n)
        if n < 1 or len(block) != n or len(strides) != n or len(dil) != n or len(pads) != 2 * n:
            raise _err(node, f"image_shape {image}, block_shape {block}, strides {strides}, "
                             f"dilations {dil} and pads {pads} must give the same {n} dims")
        if min(image + block + strides + dil) < 1 or min(pads) < 0:
            raise _err(node, "image_shape, block_shape, strides and dilations must be >= 1 "
                             "and pads >= 0")
        grid = [(i + p0 + p1 - d * (k - 1) - 1) // s + 1
                for i, k, s, d, p0, p1 in zip(image, block, strides, dil, pads[:n], pads[n:])]
        if len(x.shape) != 3 or min(grid) < 1 or x.shape[2] != math.prod(grid) or \
                x.shape[1] % math.prod(block):
            raise _err(node, f"input shape {list(x.shape)} must be [N, C*{math.prod(block)}, "
                             f"{max(0, math.prod(grid))}] for image_shape {image}, block_shape "
                             f"{block} and these pads/strides/dilations")
        return TWindow(tuple(grid), tuple(image), tuple(block), tuple(strides), tuple(dil),
                       tuple(pads[:n]))

    def infer(self, node):
        x = node.inputs[0]
        if x.dtype != np.float32:
            raise _err(node, f"type {x.dtype.name} is not supported (float only)")
        win = self.window(node)
        return [(x.dtype, (x.shape[0], x.shape[1] // math.prod(win.kernel)) + win.out_size)]

    def reference(self, node, x, image_shape=None, block_shape=None):
        win = self.window(node)
        n = x.shape[0]
        c = x.shape[1] // math.prod(win.kernel)
        cols = x.reshape((n, c) + win.kernel + win.in_size).astype(np.float64)
        y = np.zeros((n, c) + win.out_size, np.float64)
        for kidx, src, dst in win.scatters():
            y[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + kidx + src]
        return [y.astype(x.dtype)]

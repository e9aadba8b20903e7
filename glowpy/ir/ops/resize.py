"""Resampling and padding: Resize, Upsample and Pad.

Each is described by one tap table per output dim (glowpy/ir/ops/taps.py), computed here at
compile time from the static shapes and the op's attributes; the numpy reference and the
kernel (kernels/resize.py) both read the tables."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, ints, norm_axis, register
from glowpy.ir.ops.taps import (COORD_MODES, F32, NEAREST_MODES, Taps, antialias_taps, apply_taps,
                                coords, cubic_filter, cubic_taps, identity, linear_filter,
                                linear_taps, nearest_taps, round_half_away, table)


class Resample(Op):
    def infer(self, node):
        x = node.inputs[0]
        return [(x.dtype, self.out_shape(node))]

    def reference(self, node, x, *_):
        taps, fill = self.taps(node)
        if node.op in ("Resize", "Upsample") and node.attrs["mode"] != "nearest" and \
                x.dtype.kind in "iu":
            # integers interpolated in float32, truncated toward zero (onnxruntime's
            # arithmetic; passes/integer_resize.py)
            return [apply_taps(x.astype(np.float32), taps, fill).astype(x.dtype)]
        return [apply_taps(x, taps, fill)]


# -- Pad --------------------------------------------------------------------------------------

@register
class Pad(Resample):
    inputs = ("data", "pads", "constant_value?", "axes?")
    attrs = {"mode": "constant"}
    const_inputs = (1, 2, 3)
    MODES = ("constant", "reflect", "edge", "wrap")

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 11:  # Pad-2: pads and value are attributes
            if attrs.get("pads") is None:
                raise ModelError(f"Pad (opset {opset}): missing required attribute 'pads'")
            pads, value = attrs.pop("pads"), attrs.pop("value", 0.0)
            inputs = [inputs[0], graph.constant(np.asarray(pads, np.int64), "pads"),
                      graph.constant(np.asarray(value, inputs[0].dtype), "pad_value")]
        return attrs, inputs

    def widths(self, node) -> list[tuple[int, int]]:
        x = node.inputs[0]
        r = len(x.shape)
        if node.attrs["mode"] not in self.MODES:
            raise ModelError(f"node '{node.name}' (Pad): mode '{node.attrs['mode']}' is not one of "
                             f"{', '.join(self.MODES)}")
        pads = ints(node.const_input(1, "pads"))
        axes = node.const_input(3, "axes")
        axes = list(range(r)) if axes is None else [norm_axis(a, r, node) for a in ints(axes)]
        if len(pads) != 2 * len(axes):
            raise ModelError(f"node '{node.name}' (Pad): pads has {len(pads)} values; "
                             f"{2 * len(axes)} expected (begin and end for {len(axes)} axes)")
        out = [(0, 0)] * r
        for i, a in enumerate(axes):
            out[a] = (pads[i], pads[len(axes) + i])
        return out

    def out_shape(self, node):
        return tuple(n + b + e for n, (b, e) in zip(node.inputs[0].shape, self.widths(node)))

    def taps(self, node):
        x = node.inputs[0]
        mode = node.attrs["mode"]
        taps = []
        for n, (b, e) in zip(x.shape, self.widths(node)):
            # negative pads crop first; the mode then pads the cropped extent [c0, c0 + m)
            c0 = max(-b, 0)
            m, pb = n - c0 - max(-e, 0), max(b, 0)
            size = n + b + e
            if mode == "constant":
                taps.append(Taps(size, shift=c0 - pb, lo=pb, hi=pb + max(m, 0)))
                continue
            if m <= 0 and size > 0:
                raise ModelError(f"node '{node.name}' (Pad): mode '{mode}' cannot pad an empty "
                                 f"extent (input shape {list(x.shape)})")
            j = np.arange(size) - pb
            if mode == "edge":
                j = np.clip(j, 0, m - 1)
            elif mode == "wrap":
                j = np.mod(j, m)
            elif m == 1:  # reflect
                j = np.zeros_like(j)
            else:
                j = np.mod(j, 2 * (m - 1))
                j = np.where(j >= m, 2 * (m - 1) - j, j)
            taps.append(table(j + c0))
        fill = node.const_input(2, "constant_value")
        fill = 0 if fill is None or fill.size == 0 or mode != "constant" else fill.reshape(-1)[0]
        return taps, np.asarray(fill).astype(x.dtype).item()


# -- Resize / Upsample ------------------------------------------------------------------------

@register
class Resize(Resample):
    inputs = ("X", "roi?", "scales?", "sizes?")
    attrs = {"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
             "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
             "keep_aspect_ratio_policy": "stretch", "mode": "nearest",
             "nearest_mode": "round_prefer_floor"}
    const_inputs = (1, 2, 3)

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 11:  # Resize-10 (X, scales): asymmetric coordinates, legacy nearest rounding
            attrs["coordinate_transformation_mode"] = "asymmetric"
            attrs["_legacy"] = True
            inputs = [inputs[0], None] + list(inputs[1:2])
        return attrs, inputs

    def _bad(self, node, what):
        return ModelError(f"node '{node.name}' ({node.op}): {what}")

    def plan(self, node):
        """(output shape, float32 scale per dim, roi [starts..., ends...])."""
        x, a = node.inputs[0], node.attrs
        r = len(x.shape)

        def given(i, what):
            v = node.const_input(i, what)
            return None if v is None or v.size == 0 else v.reshape(-1)
        roi, scales, sizes = given(1, "roi"), given(2, "scales"), given(3, "sizes")
        axes = list(range(r)) if a["axes"] is None else [norm_axis(v, r, node) for v in a["axes"]]
        if a["mode"] not in ("nearest", "linear", "cubic"):
            raise self._bad(node, f"mode '{a['mode']}' is not nearest, linear or cubic")
        if a["coordinate_transformation_mode"] not in COORD_MODES:
            raise self._bad(node, f"coordinate_transformation_mode "
                                  f"'{a['coordinate_transformation_mode']}' is not supported")
        if a["mode"] == "nearest" and a["nearest_mode"] not in NEAREST_MODES:
            raise self._bad(node, f"nearest_mode '{a['nearest_mode']}' is not supported")
        if (scales is None) == (sizes is None):
            raise self._bad(node, "exactly one of the scales and sizes inputs must be given")
        given_vals = scales if scales is not None else sizes
        if len(given_vals) != len(axes):
            raise self._bad(node, f"{'scales' if scales is not None else 'sizes'} has "
                                  f"{len(given_vals)} values for {len(axes)} axes")
        sc = [F32(1)] * r
        if scales is not None:
            for i, d in enumerate(axes):
                sc[d] = F32(scales[i])
            if not all(np.isfinite(s) and s > 0 for s in sc):  # NaN compares false: test both
                raise self._bad(node, f"scales {scales.tolist()} must be positive finite numbers")
            with np.errstate(over="ignore"):
                prods = [s * F32(n) for s, n in zip(sc, x.shape)]  # float32 product, truncated
            if not all(np.isfinite(p) for p in prods):
                raise self._bad(node, f"scales {scales.tolist()} times the input's dims "
                                      f"{list(x.shape)} overflow float32")
            out = [int(p) for p in prods]
        else:
            out = list(x.shape)
            for i, d in enumerate(axes):
                out[d] = int(sizes[i])
            sc = [F32(o) / F32(n) if n else F32(1) for o, n in zip(out, x.shape)]
            policy = a["keep_aspect_ratio_policy"]
            if policy not in ("stretch", "not_larger", "not_smaller"):
                raise self._bad(node, f"keep_aspect_ratio_policy '{policy}' is not supported")
            if policy != "stretch":
                pick = (min if policy == "not_larger" else max)(sc[d] for d in axes)
                sc = [pick if d in axes else F32(1) for d in range(r)]
                out = [int(round_half_away(pick * F32(n))) if d in axes else n
                       for d, n in enumerate(x.shape)]
        full = [0.0] * r + [1.0] * r
        if roi is not None and a["coordinate_transformation_mode"] == "tf_crop_and_resize":
            if len(roi) != 2 * len(axes):
                raise self._bad(node, f"roi has {len(roi)} values; {2 * len(axes)} expected")
            if not np.all(np.isfinite(np.asarray(roi, np.float64))):
                raise self._bad(node, f"roi {np.asarray(roi).tolist()} must be finite")
            for i, d in enumerate(axes):
                full[d], full[r + d] = float(roi[i]), float(roi[len(axes) + i])
        for n, o in zip(x.shape, out):
            if n == 0 and o != 0:
                raise self._bad(node, f"cannot resize an empty dim of {list(x.shape)} to {out}")
        return out, sc, full

    def out_shape(self, node):
        x = node.inputs[0]
        if node.attrs["mode"] == "cubic" and x.dtype.kind != "f":
            raise self._bad(node, f"cubic mode needs a float input, got {x.dtype.name} (its "
                                  "overshoot has no defined integer result)")
        if node.attrs["mode"] == "linear" and x.dtype.kind != "f" and x.dtype.itemsize != 1:
            raise self._bad(node, f"linear mode needs a float input (or int8/uint8, "
                                  f"interpolated in float), got {x.dtype.name}")
        if node.attrs["antialias"] and node.attrs["mode"] == "nearest":
            raise self._bad(node, "antialias is only defined for the linear and cubic modes")
        out, sc, _ = self.plan(node)
        if node.attrs["antialias"]:
            self._check_antialias(node, out, sc)
        return tuple(out)

    # An antialiased downscale by s stretches the filter 1/s wide: its tap table (built in
    # Python, taps.antialias_taps, ~5 us a tap; then a constant of 12 bytes a tap) grows with the
    # input, not the output. 2^20 -> 1 is 2^21 taps, 11 s; more than MAX_AA_TAPS is refused.
    MAX_AA_TAPS = 1 << 22

    def _check_antialias(self, node, out, sc):
        for d, (n_in, n_out, s) in enumerate(zip(node.inputs[0].shape, out, sc)):
            if s < 1:
                support = (1.0 if node.attrs["mode"] == "linear" else 2.0) / float(s)
                taps = n_out * (2 * int(np.ceil(support)) + 1)
                if taps > self.MAX_AA_TAPS:
                    raise self._bad(node, f"the antialiased downscale of dim {d} from {n_in} to "
                                          f"{n_out} needs {taps} filter taps, more than "
                                          f"{self.MAX_AA_TAPS}; downscale in steps")

    def taps(self, node):
        x, a = node.inputs[0], node.attrs
        out, sc, roi = self.plan(node)
        r = len(x.shape)
        fill = float(a["extrapolation_value"])
        if list(out) == list(x.shape):  # onnxruntime copies the input when no dim changes
            return [identity(n) for n in out], fill
        cmode, mode = a["coordinate_transformation_mode"], a["mode"]
        taps = []
        for d, (n_in, n_out, s) in enumerate(zip(x.shape, out, sc)):
            if s == 1 and n_in == n_out:
                taps.append(identity(n_out))
                continue
            xo = coords(cmode, n_out, n_in, s, (roi[d], roi[r + d]))
            valid = None
            if cmode == "tf_crop_and_resize":
                valid = ~((xo < 0) | (xo > F32(n_in - 1)))
            if mode == "nearest":
                taps.append(nearest_taps(xo, n_in, a["nearest_mode"], a.get("_legacy"), s < 1, valid))
            elif a["antialias"]:
                filt = linear_filter if mode == "linear" else cubic_filter(a["cubic_coeff_a"])
                taps.append(antialias_taps(n_out, n_in, s, xo, 2 if mode == "linear" else 4, filt,
                                            a["exclude_outside"], valid))
            elif mode == "linear":
                taps.append(linear_taps(xo, n_in, valid))
            else:
                taps.append(cubic_taps(xo, n_in, a["cubic_coeff_a"], a["exclude_outside"], valid))
        return taps, fill


@register
class Upsample(Resize):
    """Upsample-7 (scales attribute) and -9 (scales input): Resize with asymmetric coordinates
    and the legacy nearest rounding."""
    names = ("Upsample",)
    inputs = ("X", "roi?", "scales?", "sizes?")
    attrs = {**Resize.attrs, "scales": None}

    def upgrade(self, op, attrs, inputs, opset, graph):
        scales = attrs.pop("scales", None)
        if opset < 9:
            if scales is None:
                raise ModelError(f"Upsample (opset {opset}): missing required attribute 'scales'")
            inputs = [inputs[0], graph.constant(np.asarray(scales, np.float32), "scales")]
        if attrs.get("mode") == "bilinear":
            attrs["mode"] = "linear"
        attrs["coordinate_transformation_mode"] = "asymmetric"
        attrs["_legacy"] = True
        return attrs, [inputs[0], None] + list(inputs[1:2])

"""The QDQ patterns (patterns.Folder) of ops that only move, select or repeat values: the op
runs on the integer values on its input's grid, then a rescale onto its QuantizeLinear's grid
where that differs (rules.MOVES, MaxPool and the reductions to a maximum or minimum, Concat of
operands rescaled onto the output's grid, Split output by output as Slices, nearest Resize,
Pad)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.passes.quant.operands import Operand, dq_operand


class MoveFolds:
    """Mixed into patterns.Folder (whose node, const, req_attrs and rescale these use)."""

    def same_grid(self, x: Operand, yq, act) -> bool:
        """Is requantizing x to the output's grid (and the activation's clamp) a no-op?"""
        ys, yz, dt = yq
        attrs = self.req_attrs(ys, yz, dt, act)
        info = np.iinfo(dt)
        return x.s == ys and x.z == yz and x.value.dtype == dt and \
            (attrs["lo"], attrs["hi"]) == (info.min, info.max)

    def order_preserving(self, host, x: Operand, inputs, act, yq, out, q, op=None, name=None):
        """MaxPool, Concat, rules.MOVES: the host op (or `op`, attributes-free) itself on the
        integer values (it only moves or selects them), then the rescale to the output's grid if
        that is not a no-op."""
        op, attrs, name = (host.op, dict(host.attrs), host.name) if op is None else (op, {}, name)
        if self.same_grid(x, yq, act):
            self.node(op, inputs, attrs, out, name, q)
            return True
        y = self.node(op, inputs, attrs, None, name, q)
        ys, yz, dt = yq
        self.rescale(Operand(y, x.scale, x.zp, None), ys, yz, dt, act, q, name, out)
        return True

    def fold_MaxPool(self, host, act, yq, out, q):
        """MaxPool, GlobalMaxPool, ReduceMax, ReduceMin: a positive scale keeps the order, so
        the integer maximum (minimum) is the float one's value on the same grid (the other
        inputs are the axes)."""
        x = dq_operand(host.inputs[0])
        if x is None or len(host.outputs) != 1:
            return False
        return self.order_preserving(host, x, [x.value] + host.inputs[1:], act, yq, out, q)

    fold_GlobalMaxPool = fold_ReduceMax = fold_ReduceMin = fold_MaxPool

    def fold_Concat(self, host, act, yq, out, q):
        ops = [dq_operand(x) for x in host.inputs if x is not None]
        ys, yz, dt = yq
        if not ops or any(o is None or o.value.dtype != dt for o in ops):
            return False
        parts = [self.rescale(o, ys, yz, dt, None, q, f"{host.name}_in{i}")
                 for i, o in enumerate(ops)]
        grid = Operand(parts[0], np.float32(ys), np.asarray(yz), None)
        return self.order_preserving(host, grid, parts, act, yq, out, q)

    def fold_move(self, host, act, yq, out, q):
        """rules.MOVES: the op on the integer values (its other inputs are shape operands)."""
        x = dq_operand(host.inputs[0])
        if x is None:
            return False
        return self.order_preserving(host, x, [x.value] + host.inputs[1:], act, yq, out, q)

    def fold_Resize(self, host, act, yq, out, q):
        """Resize in nearest mode: every output is one of the input's values (YOLO's and the
        FPNs' x2 upsampling); linear and cubic modes mix values and stay float."""
        x = dq_operand(host.inputs[0])
        if x is None or host.attrs.get("mode") != "nearest":
            return False
        return self.order_preserving(host, x, [x.value] + host.inputs[1:], act, yq, out, q)

    def fold_Pad(self, host, act, yq, out, q):
        """Pad: edge, reflect and wrap modes move values; constant mode pads with the value's
        point of the input's grid (the zero point for 0), where the grid holds it exactly."""
        x = dq_operand(host.inputs[0])
        if x is None:
            return False
        ins = [x.value] + host.inputs[1:]
        if host.attrs.get("mode", "constant") == "constant":
            c = host.input(2)
            if c is not None and not c.is_const:
                return False
            value = np.float32(0 if c is None or c.size == 0 else c.const.reshape(-1)[0])
            steps = value / np.float32(x.s)  # QuantizeLinear's float32 division
            point, info = int(steps) + x.z, np.iinfo(x.value.dtype)
            if steps != int(steps) or not info.min <= point <= info.max:
                return False
            ins = ins[:2] + [self.const(np.asarray(point, x.value.dtype), f"{host.name}_value")] + \
                ins[3:]
        return self.order_preserving(host, x, ins, act, yq, out, q)

    def fold_Split(self, host, act, yq, out, q):
        """One output of a Split (each has its own QuantizeLinear) as a Slice of the integer
        values, which lowering makes a part of its input where it is contiguous (no copy), and
        the rescale to that output's grid. Gated convolutions split a convolution's channels
        in two (WaveNet's tanh x sigmoid, GLU, YOLOv8's C2f): left in float, the
        DequantizeLinear and the two QuantizeLinear around each Split took 22% of the time of
        the convolution before them (WaveNet int8, AVX2 code, Zen 5)."""
        x = dq_operand(host.inputs[0])
        if x is None:
            return False
        i = host.outputs.index(q.inputs[0])
        ax, sizes = host.opdef.sizes(host)
        start = sum(sizes[:i])
        bounds = [self.const(np.asarray(v, np.int64), f"{host.name}_{i}_{k}") for k, v in
                  (("starts", [start]), ("ends", [start + sizes[i]]), ("axes", [ax]))]
        return self.order_preserving(host, x, [x.value] + bounds, act, yq, out, q, op="Slice",
                                     name=f"{host.name}_{i}")

"""Conv: the generic kernel (any rank, group, dtype), behind the register-blocked ones."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.epilogue import epilogue_block, init_plane
from glowpy.codegen.kernels.window import CONTRACT, flatten_pointwise, for_each_tap, in_col
from glowpy.codegen.registry import variant


@variant("Conv", "direct", rank=0)
def emit_conv(k, params=None):
    """Any Conv: one output plane at a time, a run of output positions per tap."""
    b = k.b
    node = k.node
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    win = flatten_pointwise(node.opdef.window(node))
    g = node.attrs["group"]
    n_, c = x.shape[:2]
    m = w.shape[0]
    cg_, mg = c // g, m // g
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    ktaps = int(np.prod(win.kernel))
    f32 = cg.llvm_type(y.dtype)
    bias = k.inp(2)
    with k.for_range(n_, name="n") as n:
        with k.for_range(m, name="oc") as oc:
            gi = b.sdiv(oc, k.c(mg))
            o_plane = b.mul(b.add(b.mul(n, k.c(m)), oc), k.c(plane_out))
            init = k.load(bias, oc, y.dtype) if bias is not None else cg.const(f32, 0)
            init_plane(k, init, o_plane, plane_out)  # bias (+ residual when accumulating)
            with k.for_range(cg_, name="ic") as ic:
                cin = b.add(b.mul(gi, k.c(cg_)), ic)
                i_plane = b.mul(b.add(b.mul(n, k.c(c)), cin), k.c(plane_in))
                w_base = b.mul(b.add(b.mul(oc, k.c(cg_)), ic), k.c(ktaps))

                def body(o_off, i_off, taps, lo, hi, base):
                    widx = cg.linear(b, [t if not isinstance(t, int) else k.c(t) for t in taps],
                                     cg.contiguous_strides(win.kernel), w_base, k.intp)
                    wv = k.load(k.inp(1), widx, w.dtype)
                    o_row = b.add(o_plane, o_off)
                    i_row = b.add(i_plane, i_off)
                    with k.for_range(hi, start=lo, name="ow") as ow:
                        xv = k.load(k.inp(0), b.add(i_row, in_col(k, ow, win, base)), x.dtype)
                        oi = b.add(o_row, ow)
                        acc = k.load(k.out(), oi, y.dtype)
                        k.store(b.fadd(acc, b.fmul(wv, xv, flags=CONTRACT), flags=CONTRACT), k.out(), oi)

                for_each_tap(k, win, body)
            # the fused epilogue (activation, residual add...) while the plane is in cache; the
            # planner relies on each output plane being written only inside this oc iteration
            epilogue_block(k, [n, oc])

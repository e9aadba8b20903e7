"""Which convolutions Winograd takes (conv/winograd.py), as the backend's post-lowering step:
the shapes it computes exactly, the lanes, channels and plane that repay its transforms, the
plan (winograd_plan.py) under the scratch budget the activation region allows, and U packed
in the plan's read order."""
from __future__ import annotations

import math
import weakref

import numpy as np

from glowpy.codegen import registry
from glowpy.codegen.kernels.conv import winograd_transforms as tf
from glowpy.codegen.kernels.conv.winograd_plan import plan, scratch_max, u_fits
from glowpy.codegen.kernels.vectors import Simd
from glowpy.errors import UsageError, show
from glowpy.ir import planner
from glowpy.ir.program import ACTIVATION, CONSTANT, Buffer

SCRATCH = "_winograd_scratch"  # name suffix of the scratch buffers (the manifest counts them)
MIN_LANES = 8  # float lanes a target needs for the transforms to pay
MIN_CHANNELS = 16  # below this the transforms cost more than the multiplies they save
MIN_PLANE = 144  # output pixels at least (smaller planes: too few tiles per weight)


def kernel_size(win) -> int | None:
    """r when Winograd has transforms for the window (an r x r kernel, stride 1, no dilation:
    3x3 and 5x5, winograd_transforms.SIZES), else None."""
    r = win.kernel[0] if len(win.kernel) == 2 and win.kernel[0] == win.kernel[1] else None
    if r not in tf.SIZES or tuple(win.strides) != (1, 1) or tuple(win.dilations) != (1, 1):
        return None
    return r


def _shape(ins):
    """(N, C, H, W, K, pads t/l/b/r, r) of a Conv instruction Winograd F(m x m, r x r) computes
    exactly, or None."""
    n = ins.node
    if ins.op != "Conv" or n is None or len(ins.inputs) < 2:
        return None
    x, w, y = ins.inputs[0], ins.inputs[1], ins.outputs[0]
    if len(x.shape) != 4 or x.dtype != np.float32 or y.dtype != np.float32 or \
            w.region != CONSTANT or w.value is None or w.value.const is None:
        return None
    win = n.opdef.window(n)
    r = kernel_size(win)
    if r is None or n.attrs.get("group", 1) != 1:
        return None
    pt, pl = win.pads_begin
    pb, pr = win.pads_end
    return (*x.shape, w.shape[0], (pt, pl, pb, pr), r)


def may_take(lanes: int, c: int, kk: int, outputs: int, r: int = 3) -> bool:
    """Whether Winograd may take a 3x3 or 5x5 stride-1 convolution of C -> K channels and `outputs`
    output positions on a target of `lanes` float lanes, before its scratch budget is known:
    what `select` asks first, and what catalog.late_rewrites asks before it leaves a deep layer
    unsplit for Winograd's own blocks."""
    return lanes >= MIN_LANES and min(c, kk) >= MIN_CHANNELS and outputs >= MIN_PLANE and \
        u_fits(c, kk, r)


def live_bytes(prog) -> list[int]:
    """Activation bytes live at each instruction: the planner's own profile, before placement."""
    groups, _, _, pairs = planner.members(prog)
    return planner.live_profile(groups, pairs, len(prog.instrs))


# id(weights array) -> {key: transformed weights}, while the array lives (the schedule search
# re-lowers)
_PACKED: dict = {}


def packed(const: np.ndarray, key, make):
    """make(), the weights `const` transformed as `key` says, computed once per array."""
    if id(const) not in _PACKED:
        _PACKED[id(const)] = {}
        weakref.finalize(const, _PACKED.pop, id(const), None)
    cache = _PACKED[id(const)]
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _weights(const: np.ndarray, m: int, mr: int, outer: bool) -> np.ndarray:
    """U packed for F(m x m), register tiles of MR channels and the GEMM's loop order
    (winograd_transforms.weights)."""
    return packed(const, (m, mr, outer),
                  lambda: tf.weights(np.asarray(const, np.float32), m, mr, outer))


def transformed_weights(prog, ins, u: np.ndarray, layout: str) -> None:
    """Instruction `ins` reads its weights as `u` (transformed, `layout` for the manifest): a
    constant of their own, in place of the original where nothing else reads that."""
    wbuf = ins.inputs[1]
    ubuf = Buffer(f"{ins.name}_winograd_weights", u.dtype, u.shape, CONSTANT, data=u,
                  layout={"layout": layout, "for": ins.name})
    readers = sum(1 for i in prog.instrs for x in i.inputs if x is wbuf)
    if readers == 1 and wbuf in prog.constants and \
            not any(b.base is wbuf for b in prog.constants):
        prog.constants[prog.constants.index(wbuf)] = ubuf
    else:
        prog.constants.append(ubuf)
    ins.inputs[1] = ubuf


def select(prog, caps):
    """The backend's post-lowering step: Conv instructions Winograd serves better become
    ConvWinograd, with the transformed weights as a constant of their own (replacing the
    original when nothing else reads it) and the scratch buffer as a second output."""
    simd = Simd.of(caps)
    if simd.width < MIN_LANES:
        return prog
    # scratch up to what another instruction needs anyway costs no memory; beyond that, the
    # region may grow by the share planner.build accepts (-winograd=false: not at all)
    live = live_bytes(prog)
    bound = max(live, default=0)
    # integer sums in float (passes/quant/float_exact.py) must stay exact: the transforms round
    exact = {v.name for i in prog.instrs if i.op == "QFinish"
             for v in i.node.inputs[:1] + i.node.inputs[4:]}
    for idx, ins in enumerate(prog.instrs):
        s = _shape(ins)
        if s is None or ins.node.outputs[0].name in exact:
            continue
        n, c, h, w, kk, pads, r = s
        ho, wo = h + pads[0] + pads[2] - r + 1, w + pads[1] + pads[3] - r + 1
        if not may_take(simd.width, c, kk, ho * wo, r):
            continue
        budget = min(scratch_max(caps), int(bound * (1 + planner.TRANSFORM_GROWTH)) - live[idx])
        forced = registry.forced_params("ConvWinograd")
        if forced and "m" in forced and not any(forced["m"] in ms for ms in tf.SIZES.values()):
            raise UsageError(f"instruction '{show(ins.name)}' (Conv): the forced Winograd params "
                             f"ask for F({forced['m']}x{forced['m']}); force m = 2 or 4 (3x3 "
                             "kernels; 5x5 ones take 2)")
        chosen = plan(simd, s, budget, forced, caps.l2_bytes)
        if chosen is None:
            continue
        m, (rows, tp, mr, nv, nbytes, outer, cols) = chosen
        a2 = tf.alpha(m, r) ** 2
        order = f"[{a2}][K/{mr}]" if outer else f"[K/{mr}][{a2}]"
        transformed_weights(prog, ins, _weights(ins.inputs[1].value.const, m, mr, outer),
                            f"winograd F({m}x{m},{r}x{r}) {order}[C][{mr}]")
        ins.op = "ConvWinograd"
        prog.transformed = True
        # executed multiply-adds: alpha^2 per tile and channel pair (the transforms' adds not
        # counted), for the report's "executed_macs"
        macs = n * math.ceil(ho / m) * math.ceil(wo / m) * a2 * c * kk
        ins.attrs["winograd"] = dict(m=m, r=r, rows=rows, tpad=tp, mr=mr, nv=nv, macs=macs,
                                     points_outer=outer, **({"cols": cols} if cols else {}))
        ins.outputs = [ins.outputs[0], Buffer(ins.name + SCRATCH, np.dtype(np.float32),
                                              (nbytes // 4,), ACTIVATION)]
    return prog

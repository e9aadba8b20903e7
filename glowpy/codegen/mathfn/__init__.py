"""Branch-free float32 elementary functions emitted as LLVM IR (the package's modules: core,
rounding, exp_log, special, trig, inverse; this module re-exports their public functions).

Every function takes an ``ir.IRBuilder`` and ``float`` values (``<N x float>``
vectors work too) and emits straight-line code: arithmetic, fcmp/select,
bitcasts to i32 with integer ops, fptosi/sitofp and intrinsics that always
expand inline (``llvm.fabs``, ``llvm.copysign``, ``llvm.sqrt`` on FPU targets).
No calls, no branches, so a loop calling these vectorizes, and the objects link
into bare-metal firmware without libm: on soft-float targets the only external
symbols are the ``__aeabi_*`` helpers of libgcc/compiler-rt.

Deliberately avoided: ``llvm.floor/ceil/trunc/rint/round/fma/exp/log/pow/
sin/cos`` and ``llvm.minnum/maxnum`` (the latter become fminf/fmaxf calls
on soft-float ARM); ``llvm.sqrt`` is only used by :func:`sqrt` and has an
integer-only alternative for soft-float targets.

No fast-math flags are ever set: the range reductions and the double-float
tricks rely on exact IEEE rounding of every operation (no reassociation and no
FMA contraction).  Only the steps of the polynomials (core.horner) are
``llvm.fmuladd``: fused where the target has a fast FMA, a multiply and an add
elsewhere (never an fmaf call), one rounding fewer either way; so results may
differ by an ulp between FMA and non-FMA targets, within the bounds below.
Rounding mode is assumed to be round-to-nearest-even.

Accuracy: max error vs. the correctly rounded float32 result, measured over
dense sweeps and ~4e7 random inputs per function (tests/test_mathfn.py checks a
subset).  Denormal results may be flushed on targets running flush-to-zero.

    exp, log, log1p, tanh, erf, pow: 1 ulp      expm1, sigmoid, softplus: 2 ulp
    sin, cos: 2 ulp (|result| > 1e-3), 1.1e-7 abs, for |x| <= 8192*pi/2
    atan, asinh: 3 ulp             asin, acosh: 2 ulp             acos, atanh: 1 ulp
    floor, ceil, trunc, round_half_even, fmin, fmax, sqrt: exact
"""
from glowpy.codegen.mathfn.core import call_unary, copysign, fabs  # noqa: F401
from glowpy.codegen.mathfn.rounding import ceil, floor, fmax, fmin, round_half_even, sqrt, trunc  # noqa: F401,E501
from glowpy.codegen.mathfn.exp_log import exp, exp_nonpositive, expm1, log, log1p, sigmoid, softplus, tanh  # noqa: F401,E501
from glowpy.codegen.mathfn.special import erf, pow  # noqa: F401
from glowpy.codegen.mathfn.trig import cos, sin  # noqa: F401
from glowpy.codegen.mathfn.inverse import acos, acosh, asin, asinh, atan, atanh  # noqa: F401

"""tanh as one rational function: a clamp, two polynomials in x^2 (fused multiply-adds) and
one division, where mathfn.tanh evaluates a polynomial and an exp and selects. For callers
that need absolute accuracy, not ulps of tiny results: the Tanh op (onnxruntime's Tanh uses the
same approximation, MLAS's and Eigen's generic_fast_tanh_float coefficients). The recurrent
cells keep mathfn's accurate gates (kernels/recurrent/cell.py says why).

Accuracy (float32, measured against float64 over a dense sweep of [-20, 20] and 4e6 random
inputs, tests/test_mathfn_rational.py checks it): tanh 4.6 ulp, 2.7e-7 absolute (it saturates at
+-0.99999976, 2 ulp below 1: the value at the clamp point)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import clamp, horner

# tanh(x) = x * P(x^2) / Q(x^2) on |x| <= 7.905 (where it reaches 1 in float32)
_TANH_P = [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03]
_TANH_Q = [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03]
_TANH_CLAMP = 7.90531110763549805


def tanh_rational(b, x):
    """tanh(x): NaN passes through the clamp."""
    x = clamp(b, x, -_TANH_CLAMP, _TANH_CLAMP)
    z = b.fmul(x, x)
    return b.fdiv(b.fmul(x, horner(b, z, _TANH_P)), horner(b, z, _TANH_Q))

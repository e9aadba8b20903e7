"""tanh and erf as one rational function each: a clamp, two polynomials in x^2 (fused multiply-adds) and
one division, where mathfn.tanh evaluates a polynomial and an exp and selects; and the
logistic sigmoid through it. For callers that need absolute accuracy, not ulps of tiny
results: the Tanh and Sigmoid ops (onnxruntime's Tanh uses the same approximation, MLAS's and
Eigen's generic_fast_tanh_float coefficients; its logistic is a rational form too). The
recurrent cells keep mathfn's accurate gates (kernels/recurrent/cell.py says why).

Accuracy (float32, measured against float64 over a dense sweep of [-20, 20] and 4e6 random
inputs, tests/test_mathfn_rational.py checks it): tanh 4.6 ulp, 2.7e-7 absolute (it saturates at
+-0.99999976, 2 ulp below 1: the value at the clamp point); sigmoid 1.4e-7 absolute; erf 3.4e-7
absolute, 5.6 ulp (exactly +-1 from the clamp point on)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import clamp, fconst, horner, lt, select

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


# below this, tanh_rational's saturation (sigmoid 1.19e-7) is more than twice the true value
# (sigmoid(-16.6) = 6.2e-8): the result is 0 there, so x * sigmoid(x) (SiLU) tends to -0 as it
# should instead of growing like -1.19e-7 x
_SIGMOID_ZERO = -16.6


def sigmoid_rational(b, x):
    """1 / (1 + e^-x) as 0.5 + 0.5 tanh(x / 2) through tanh_rational, and 0 below
    _SIGMOID_ZERO: 1.4e-7 absolute (not ulps of tiny results), 1 - 1.2e-7 at the top.
    What the Sigmoid op runs (onnxruntime's logistic is a rational form of the same kind):
    17 vector operations where mathfn.sigmoid's accurate form takes 31. On the znver1 EPYC
    EfficientNet-B0's 49 SiLU loops (Sigmoid and Mul) are bound by those operations, not by
    memory: the model 28.9 -> 26.4 ms (onnxruntime 29.5), the YOLO-style detector 60.7 -> 59.4."""
    half = b.fmul(x, fconst(x, 0.5))
    y = b.fadd(b.fmul(tanh_rational(b, half), fconst(x, 0.5)), fconst(x, 0.5))
    return select(b, lt(b, x, _SIGMOID_ZERO), fconst(x, 0.0), y)


# erf(x) = x * P(x^2) / Q(x^2) on |x| <= 3.9 (erf(3.9) is 1 - 3.5e-8: 1 in float32). Fitted
# here (relative minimax over [0, 3.9] by Loeb's iteration with Lawson weights, float64); the
# fit's own error is 1.9e-9, the rest is float32 rounding. Q(0) = 1, P(0) = 2/sqrt(pi).
_ERF_P = [-1.2670940209326624e-08, 4.5852957324876734e-06, 3.7585701458115454e-04,
          3.8349461966067995e-03, 5.4220268639112126e-02, 1.8510813724112457e-01,
          1.1283791690607476]
_ERF_Q = [6.217447059505826e-05, 1.299575315790861e-03, 1.5419488499538917e-02,
          1.1384473612408536e-01, 4.9738121917788897e-01, 1.0]
_ERF_CLAMP = 3.9


def erf_rational(b, x):
    """erf(x) for Gelu (approximate="none"): 3.4e-7 absolute, exactly +-1 past the clamp (so
    Gelu(x) is x and -0 in the tails), odd; NaN passes the clamp. 15 vector operations where
    mathfn.erf, 1 ulp, evaluates two polynomials, an exp and two selects (about 40): the erf
    GELU chain on (1,128,1024) on the znver1 EPYC (benchmarks/op_probe.py gelu_erf) 354 -> 166
    us, onnxruntime 303-339; ViT-tiny 0.994 -> 0.956 of onnxruntime's time. The Erf op keeps
    mathfn.erf."""
    x = clamp(b, x, -_ERF_CLAMP, _ERF_CLAMP)
    z = b.fmul(x, x)
    return b.fdiv(b.fmul(x, horner(b, z, _ERF_P)), horner(b, z, _ERF_Q))

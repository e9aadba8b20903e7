"""sin and cos (Cody-Waite reduction by pi/2 in three parts, minimax polynomials)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import (bits, clamp, eq, fconst, from_bits, horner, iconst,
                                        round_magic, select)


# --------------------------------------------------------------------------
# sin / cos
# --------------------------------------------------------------------------

# Cody-Waite reduction by pi/2 in four parts; the first three have <= 11
# significant bits so j*part is exact for |j| < 2^13, i.e. |x| <= 8192*pi/2
# ~ 12867: there the error is <= 2 ulp (|result| > 1e-3) and <= 1.1e-7
# absolute.  Beyond, accuracy degrades gradually (abs error ~1e-6 at 1e5,
# ~3e-2 at 1e6); past ~2^22 the result is meaningless but stays in [-1, 1].
_PIO2 = [1.5703125, 4.837512969970703e-4, 7.549533620476723e-8,
         2.5633440682570896e-12]
_SIN_P = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]   # Cephes sinf
_COS_P = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]


def _sincos(b, x, quadrant_offset):
    j, ji = round_magic(b, b.fmul(x, fconst(x, 0.6366197723675814)))
    r = x
    for part in _PIO2:
        r = b.fsub(r, b.fmul(j, fconst(x, part)))
    # |r| <= pi/4 (+ulps) wherever the reduction is valid; for huge |x| this
    # only keeps the (meaningless) result within [-1, 1].
    r = clamp(b, r, -0.8, 0.8)
    z = b.fmul(r, r)
    ps = b.fadd(r, b.fmul(b.fmul(z, r), horner(b, z, _SIN_P)))
    pc = b.fadd(b.fsub(fconst(x, 1.0), b.fmul(z, fconst(x, 0.5))),
                b.fmul(b.fmul(z, z), horner(b, z, _COS_P)))
    q = b.add(ji, iconst(ji, quadrant_offset))
    res = select(b, b.icmp_signed("!=", b.and_(q, iconst(q, 1)), iconst(q, 0)), pc, ps)
    sign = b.shl(b.and_(q, iconst(q, 2)), iconst(q, 30))
    return from_bits(b, b.xor(bits(b, res), sign), x)


def sin(b, x):
    """See _PIO2 for the accurate range; sin(+-inf) = nan."""
    r = _sincos(b, x, 0)
    return select(b, eq(b, x, 0.0), x, r)      # sin(-0) = -0


def cos(b, x):
    """See _PIO2 for the accurate range; cos(+-inf) = nan."""
    return _sincos(b, x, 1)

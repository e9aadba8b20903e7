"""Accuracy, special values, vectorization and libm-freedom of glowpy.codegen.mathfn."""
import ctypes
import math
import re
import struct

import numpy as np
import pytest
from llvmlite import ir
import llvmlite.binding as llvm

from glowpy.codegen import mathfn as M

F32 = ir.FloatType()
PF = ir.PointerType()
I64 = ir.IntType(64)
f32 = np.float32

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()

UNARY = {
    "exp": M.exp, "exp_nonpositive": M.exp_nonpositive, "expm1": M.expm1, "log": M.log, "log1p": M.log1p,
    "tanh": M.tanh, "sigmoid": M.sigmoid, "softplus": M.softplus, "erf": M.erf,
    "sin": M.sin, "cos": M.cos, "floor": M.floor, "ceil": M.ceil,
    "trunc": M.trunc, "rne": M.round_half_even, "sqrt": lambda b, x: M.sqrt(b, x, fpu=True),
    "sqrt_soft": lambda b, x: M.sqrt(b, x, fpu=False),
    "atan": M.atan, "asin": M.asin, "acos": M.acos, "asinh": M.asinh, "acosh": M.acosh,
    "atanh": M.atanh, "asin_soft": lambda b, x: M.asin(b, x, fpu=False),
    "acosh_soft": lambda b, x: M.acosh(b, x, fpu=False),
}
FPU_SQRT = ("sqrt", "asin", "acos", "asinh", "acosh")  # llvm.sqrt: a libm call on soft float
BINARY = {"pow": M.pow, "fmin": M.fmin, "fmax": M.fmax}


def add_loop(mod, name, fn, nin):
    """void name(float* in0, [float* in1,] float* out, i64 n): out[i] = fn(in[i]...)."""
    f = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PF] * (nin + 1) + [I64]), name)
    for a in f.args[:-1]:
        a.add_attribute("noalias")
    *ins, out, n = f.args
    entry, body, done = (f.append_basic_block(s) for s in ("entry", "body", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, I64(0)), body, done)
    b.position_at_end(body)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    args = [b.load(b.gep(p, [i], inbounds=True, source_etype=F32), typ=F32) for p in ins]
    b.store(fn(b, *args), b.gep(out, [i], inbounds=True, source_etype=F32))
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, body)
    b.cbranch(b.icmp_signed("<", nxt, n), body, done)
    b.position_at_end(done)
    b.ret_void()


def build_module(kernels):
    mod = ir.Module("mathfn_test")
    for name, (fn, nin) in kernels.items():
        add_loop(mod, name, fn, nin)
    return mod


def optimize(mod, tm):
    m = llvm.parse_assembly(str(mod))
    m.triple = tm.triple
    m.data_layout = str(tm.target_data)
    m.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(m, pb)
    return m


def host_tm():
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)


def make_jit():
    kernels = {k: (v, 1) for k, v in UNARY.items()}
    kernels.update({k: (v, 2) for k, v in BINARY.items()})
    tm = host_tm()
    m = optimize(build_module(kernels), tm)
    ee = llvm.create_mcjit_compiler(m, tm)
    ee.finalize_object()
    P = ctypes.c_void_p
    fns = {}
    for name, (_, nin) in kernels.items():
        proto = ctypes.CFUNCTYPE(None, *([P] * (nin + 1)), ctypes.c_int64)
        fns[name] = proto(ee.get_function_address(name))

    def run(name, *xs):
        xs = [np.ascontiguousarray(np.broadcast_to(x, np.broadcast(*xs).shape), dtype=f32)
              for x in xs]
        out = np.empty_like(xs[0])
        fns[name](*[a.ctypes.data for a in xs], out.ctypes.data, out.size)
        return out

    run._keep = (ee, m, fns)
    return run


@pytest.fixture(scope="module")
def jit():
    return make_jit()


# ---------------------------------------------------------------- helpers

def ordered(a):
    i = np.asarray(a, f32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_err(got, ref64):
    """Max ulp distance of got from ref64 rounded to float32; specials must match."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.asarray(ref64, np.float64).astype(f32)
    got = np.asarray(got, f32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), "nan mismatch"
    inf = np.isinf(ref) | np.isinf(got)
    assert np.array_equal(got[inf], ref[inf]), "inf mismatch"
    fin = ~nan & ~inf
    d = np.abs(ordered(got[fin]) - ordered(ref[fin]))
    return int(d.max()) if d.size else 0


def bitsweep(lo, hi, n):
    """n floats from lo to hi (same sign), uniformly spaced in bit pattern."""
    a, c = np.array([lo, hi], f32).view(np.int32)
    return np.unique(np.linspace(a, c, n).astype(np.int32)).view(f32)


def signed_sweep(lo, hi, n):
    p = bitsweep(lo, hi, n // 2)
    return np.concatenate([p, -p])


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40,
                    1.1754944e-38, -1.1754944e-38, 3.4028235e38, -3.4028235e38,
                    1.0, -1.0, 0.5, -0.5], f32)

ERRS = {}


def check(name, got, ref, tol):
    e = ulp_err(got, ref)
    ERRS[name] = max(e, ERRS.get(name, 0))
    assert e <= tol, f"{name}: {e} ulp"


def same(got, exp):
    """Bitwise-ish equality: nan==nan, and signed zeros must agree."""
    got, exp = np.asarray(got, f32), np.asarray(exp, f32)
    ok = (got == exp) & (np.signbit(got) == np.signbit(exp)) | (np.isnan(got) & np.isnan(exp))
    assert ok.all(), list(zip(got[~ok], exp[~ok]))


def np_err():
    return np.errstate(all="ignore")


# ---------------------------------------------------------------- accuracy

def test_exp(jit):
    x = np.concatenate([np.linspace(-104, 89, 400001, dtype=f32),
                        signed_sweep(1e-30, 104.0, 400000), SPECIAL,
                        np.array([88.72283, 88.72284, -87.33654, -103.27892, -103.972, -103.9721],
                                 f32)])
    with np_err():
        check("exp", jit("exp", x), np.exp(x.astype(np.float64)), 1)
    same(jit("exp", [np.inf, -np.inf, np.nan, 0.0, -0.0, 89.0, -105.0, 3e38, -3e38]),
         [np.inf, 0, np.nan, 1, 1, np.inf, 0, np.inf, 0])


def test_exp_nonpositive(jit):
    """Softmax's exp (of x - max <= 0): exp's accuracy, denormal results rounded once, 0 from
    the clamp at -104 down, NaN kept."""
    x = -np.abs(np.concatenate([np.linspace(-110, 0, 400001, dtype=f32),
                                bitsweep(1e-30, 110.0, 400000),
                                f32([87.33654, 103.27892, 103.972, 103.9721])]))
    with np_err():
        check("exp_nonpositive", jit("exp_nonpositive", x), np.exp(x.astype(np.float64)), 1)
    same(jit("exp_nonpositive", [-np.inf, np.nan, 0.0, -0.0, -104.0, -105.0, -3e38]),
         [0, np.nan, 1, 1, 0, 0, 0])


def test_expm1(jit):
    x = np.concatenate([np.linspace(-20, 89, 300001, dtype=f32),
                        signed_sweep(1e-45, 100.0, 400000), SPECIAL])
    with np_err():
        check("expm1", jit("expm1", x), np.expm1(x.astype(np.float64)), 2)
    same(jit("expm1", [0.0, -0.0, -1e-40, np.inf, -np.inf, np.nan, 89.0, -30.0]),
         [0.0, -0.0, -1e-40, np.inf, -1, np.nan, np.inf, -1])


def test_log(jit):
    x = np.concatenate([bitsweep(1e-45, 3.4028235e38, 600000),
                        np.linspace(0.5, 2.0, 200001, dtype=f32), SPECIAL])
    with np_err():
        check("log", jit("log", x), np.log(x.astype(np.float64)), 1)
    same(jit("log", [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0, 1e-45]),
         [-np.inf, -np.inf, np.nan, np.nan, np.inf, np.nan, 0.0, np.log(2.0 ** -149)])


def test_log1p(jit):
    x = np.concatenate([np.linspace(-1, 10, 300001, dtype=f32), signed_sweep(1e-45, 1.0, 300000),
                        bitsweep(1.0, 3.4e38, 100000), SPECIAL])
    with np_err():
        check("log1p", jit("log1p", x), np.log1p(x.astype(np.float64)), 2)
    same(jit("log1p", [-1.0, -2.0, 0.0, -0.0, np.inf, np.nan, 1e-30]),
         [-np.inf, np.nan, 0.0, -0.0, np.inf, np.nan, 1e-30])


def test_tanh(jit):
    x = np.concatenate([np.linspace(-10, 10, 400001, dtype=f32),
                        signed_sweep(1e-45, 100.0, 400000), SPECIAL])
    check("tanh", jit("tanh", x), np.tanh(x.astype(np.float64)), 2)
    same(jit("tanh", [0.0, -0.0, 1e-6, -1e-6, np.inf, -np.inf, np.nan, 20.0, -1e30]),
         [0.0, -0.0, 1e-6, -1e-6, 1, -1, np.nan, 1, -1])


def test_sigmoid(jit):
    x = np.concatenate([np.linspace(-110, 30, 400001, dtype=f32),
                        signed_sweep(1e-45, 3e38, 400000), SPECIAL])
    x64 = x.astype(np.float64)
    with np_err():
        check("sigmoid", jit("sigmoid", x), 1 / (1 + np.exp(-x64)), 2)
    g = jit("sigmoid", [-100.0, 100.0, np.inf, -np.inf, np.nan, 0.0])
    assert 0 <= g[0] < 1e-40 and g[1] == 1 and g[2] == 1 and g[3] == 0
    assert np.isnan(g[4]) and g[5] == 0.5


def test_softplus(jit):
    x = np.concatenate([np.linspace(-110, 30, 400001, dtype=f32),
                        signed_sweep(1e-45, 3e38, 200000), SPECIAL])
    with np_err():
        check("softplus", jit("softplus", x), np.logaddexp(0, x.astype(np.float64)), 2)


def test_erf(jit):
    x = np.concatenate([np.linspace(-4.5, 4.5, 300001, dtype=f32),
                        signed_sweep(1e-45, 10.0, 200000), SPECIAL])
    ref = np.array([math.erf(v) if np.isfinite(v) else (np.sign(v) if np.isinf(v) else v)
                    for v in x.astype(np.float64).tolist()])
    check("erf", jit("erf", x), ref, 2)
    same(jit("erf", [0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -5.0]),
         [0.0, -0.0, 1, -1, np.nan, 1, -1])


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_sincos(jit, fn):
    lim = 8192 * np.pi / 2
    x = np.concatenate([np.linspace(-lim, lim, 400001, dtype=f32),
                        np.linspace(-7, 7, 200001, dtype=f32),
                        signed_sweep(1e-45, lim, 200000), SPECIAL[np.abs(SPECIAL) < lim]])
    got = jit(fn, x)
    ref = getattr(np, fn)(x.astype(np.float64))
    # relative accuracy except right at the zeros, where abs error matters
    big = np.abs(ref) > 1e-3
    check(fn, got[big], ref[big], 2)
    assert np.abs(got - ref).max() < 1.5e-7
    same(jit(fn, [np.inf, -np.inf, np.nan]), [np.nan] * 3)
    huge = signed_sweep(1e4, 3.4e38, 10000)
    assert np.all(np.abs(jit(fn, huge)) <= 1)
    if fn == "sin":
        same(jit("sin", [0.0, -0.0, 1e-40, -1e-30]), [0.0, -0.0, 1e-40, -1e-30])
    else:
        same(jit("cos", [0.0, -0.0]), [1.0, 1.0])


INVERSE = {  # name: (numpy, domain sweeps, ulp bound)
    "atan": (np.arctan, [signed_sweep(1e-45, 3.4e38, 400000), np.linspace(-5, 5, 200001, dtype=f32)], 3),
    "asin": (np.arcsin, [signed_sweep(1e-45, 1.0, 400000), np.linspace(-1, 1, 200001, dtype=f32)], 2),
    "acos": (np.arccos, [signed_sweep(1e-45, 1.0, 400000), np.linspace(-1, 1, 200001, dtype=f32)], 2),
    "asinh": (np.arcsinh, [signed_sweep(1e-45, 3.4e38, 400000), np.linspace(-5, 5, 200001, dtype=f32)], 3),
    "acosh": (np.arccosh, [bitsweep(1.0, 3.4e38, 400000), np.linspace(1, 5, 200001, dtype=f32)], 3),
    "atanh": (np.arctanh, [signed_sweep(1e-45, 1.0, 400000), np.linspace(-1, 1, 200001, dtype=f32)], 2),
}


@pytest.mark.parametrize("fn", sorted(INVERSE))
def test_inverse_trig(jit, fn):
    """Over the whole domain (bit-pattern sweeps and a dense stretch), the special values and
    past the domain (NaN); the soft-float sqrt gives the same bits."""
    ref, sweeps, tol = INVERSE[fn]
    x = np.concatenate(sweeps + [SPECIAL, np.array([1.0000001, -1.0000001, 0.99999994, 2.0,
                                                     -2.0, 0.5, 1500.0, 1500.0001], f32)])
    with np_err():
        check(fn, jit(fn, x), ref(x.astype(np.float64)), tol)
    for soft in ("asin", "acosh"):
        if fn == soft:
            same(jit(fn + "_soft", x), jit(fn, x))
    if fn in ("atan", "asin", "asinh", "atanh"):  # odd: the sign of zero kept
        same(jit(fn, [0.0, -0.0]), [0.0, -0.0])


def test_pow(jit):
    rng = np.random.default_rng(0)
    n = 300000
    x = np.concatenate([rng.uniform(0, 4, n), np.exp(rng.uniform(-80, 80, n)),
                        1 + rng.uniform(-1e-3, 1e-3, n)]).astype(f32)
    y = np.concatenate([rng.uniform(-30, 30, n), rng.uniform(-2, 2, n),
                        rng.uniform(-1e5, 1e5, n)]).astype(f32)
    # keep |x^y| comfortably normal so float64 rounding of the reference is exact
    with np_err():
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
    keep = (ref > 1e-37) & (ref < 1e38)
    check("pow", jit("pow", x[keep], y[keep]), ref[keep], 2)
    # integer exponents on negative bases
    xi = -x[:20000]
    yi = np.round(y[:20000])
    with np_err():
        ref = np.power(xi.astype(np.float64), yi.astype(np.float64))
    keep = (np.abs(ref) > 1e-37) & (np.abs(ref) < 1e38)
    check("pow", jit("pow", xi[keep], yi[keep]), ref[keep], 2)


def test_pow_special(jit):
    vals = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5,
                     np.inf, -np.inf, np.nan, 1e-45, 3.4e38, -3.4e38, 1 - 2 ** -24,
                     1 + 2 ** -23, 16777216.0, -16777215.0, 2 ** 31, -2 ** 31, 1e10], f32)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    with np_err():
        exp = np.power(x, y)          # numpy float32 power is C powf
    got = jit("pow", x, y)
    bad = ~((got == exp) & (np.signbit(got) == np.signbit(exp)) |
            (np.isnan(got) & np.isnan(exp)))
    # finite non-special results may differ in the last bits
    fin = np.isfinite(exp) & (exp != 0) & np.isfinite(got)
    assert np.abs(ordered(got[fin]) - ordered(exp[fin])).max() <= 2
    bad &= ~fin
    assert not bad.any(), list(zip(x[bad], y[bad], got[bad], exp[bad]))
    # 2^127 * 2 overflows, 2^-149 is the smallest denormal
    same(jit("pow", [2.0, 2.0, 2.0, 2.0, -2.0], [128.0, 127.0, -149.0, -150.0, 127.0]),
         [np.inf, 2.0 ** 127, 2.0 ** -149, 0.0, -2.0 ** 127])


def test_rounding(jit):
    x = np.concatenate([np.linspace(-20, 20, 200001, dtype=f32),
                        signed_sweep(1e-45, 3.4e38, 200000), SPECIAL,
                        np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 8388607.5, -8388607.5,
                                  8388608.0, 4194303.5, 0.49999997, -0.49999997], f32)])
    for name, ref in [("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
                      ("rne", np.rint)]:
        same(jit(name, x), ref(x))


def test_sqrt(jit):
    x = np.concatenate([bitsweep(1e-45, 3.4028235e38, 500000), SPECIAL])
    with np_err():
        ref = np.sqrt(x)
    same(jit("sqrt", x), ref)
    same(jit("sqrt_soft", x), ref)
    mod = ir.Module()
    f = ir.Function(mod, ir.FunctionType(F32, [F32]), "s")
    b = ir.IRBuilder(f.append_basic_block())
    b.ret(M.sqrt(b, f.args[0], fpu=False))
    assert "llvm.sqrt" not in str(mod)


def test_minmax(jit):
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45], f32)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    same(jit("fmin", x, y), np.minimum(x, y))
    same(jit("fmax", x, y), np.maximum(x, y))


# ---------------------------------------------------------------- codegen

def test_vectorizes_on_host():
    kernels = {k: (v, 1) for k, v in UNARY.items()}
    kernels.update({k: (v, 2) for k, v in BINARY.items()})
    m = optimize(build_module(kernels), host_tm())
    for f in m.functions:
        if f.is_declaration:
            continue
        text = str(f)
        # the loop vectorizer must have widened the body (8 lanes with AVX2)
        assert re.search(r"<(4|8|16) x float>", text), f.name
        callees = set(re.findall(r"call [^\n]*?@([\w.]+)\(", text))
        # (llvm.fmuladd: the polynomial steps, an FMA instruction or a multiply and an add)
        assert all(c.startswith(("llvm.fabs", "llvm.copysign", "llvm.sqrt", "llvm.fmuladd"))
                   for c in callees), \
            (f.name, callees)
    if "+avx2" in llvm.get_host_cpu_features().flatten():
        assert re.search(r"<(8|16) x float>", str(m))


def elf_undefined(obj):
    """Undefined symbol names of an ELF (32/64-bit LE) object, via llvm.ObjectFileRef."""
    secs = {}
    for s in llvm.ObjectFileRef.from_data(obj).sections():
        name = s.name() or b""
        secs[name.decode() if isinstance(name, bytes) else name] = s.data()
    symtab, strtab = secs[".symtab"], secs[".strtab"]
    elf64 = obj[4] == 2
    size, fmt = (24, "<IBBH") if elf64 else (16, "<I8xBBH")
    names = set()
    for off in range(size, len(symtab), size):          # entry 0 is the null symbol
        st_name, _, _, shndx = struct.unpack_from(fmt, symtab, off)
        if shndx == 0 and st_name:
            names.add(strtab[st_name:strtab.index(b"\0", st_name)].decode())
    return names


@pytest.mark.parametrize("triple,cpu,features", [
    ("thumbv7em-unknown-none-eabihf", "cortex-m7", ""),
    ("thumbv7em-unknown-none-eabi", "cortex-m7", "+soft-float"),
    ("thumbv7m-unknown-none-eabi", "cortex-m3", ""),
    ("x86_64-unknown-linux-gnu", "x86-64", ""),
    ("aarch64-unknown-linux-gnu", "generic", ""),
])
def test_no_libm(triple, cpu, features):
    soft = features == "+soft-float" or cpu == "cortex-m3"
    kernels = {k: (v, 1) for k, v in UNARY.items() if not (soft and k in FPU_SQRT)}
    kernels.update({k: (v, 2) for k, v in BINARY.items()})
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="static")
    obj = tm.emit_object(optimize(build_module(kernels), tm))
    und = elf_undefined(obj)
    # soft-float: only the libgcc/compiler-rt AEABI helpers (and they are used)
    assert all(s.startswith("__aeabi_") for s in und), und
    assert soft == any(s.startswith("__aeabi_f") for s in und), und


def test_vector_types(jit):
    """The emitters also accept <4 x float> and agree with the scalar code."""
    V = ir.VectorType(F32, 4)
    mod = ir.Module("vec")
    fns = {**{k: (v, 1) for k, v in UNARY.items()}, **{k: (v, 2) for k, v in BINARY.items()}}
    for name, (fn, nin) in fns.items():
        f = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PF] * (nin + 1)), name)
        b = ir.IRBuilder(f.append_basic_block())
        b.store(fn(b, *[b.load(p, typ=V) for p in f.args[:-1]]), f.args[-1])
        b.ret_void()
    tm = host_tm()
    ee = llvm.create_mcjit_compiler(optimize(mod, tm), tm)
    ee.finalize_object()
    rng = np.random.default_rng(3)
    for name, (_, nin) in fns.items():
        xs = [rng.uniform(-5, 5, 4).astype(f32) for _ in range(nin)]
        xs[0][0] = np.nan
        out = np.empty(4, f32)
        cf = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (nin + 1))(ee.get_function_address(name))
        cf(*[a.ctypes.data for a in xs], out.ctypes.data)
        same(out, jit(name, *xs))


def test_report_errors():
    # summary line for `pytest -s`
    print("max ulp:", ERRS)

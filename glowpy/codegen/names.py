"""C identifiers and comment text from model strings (bundle contract: DESIGN.md, Names).

Model strings are untrusted. They reach generated text only through this module: as C/LLVM
identifiers via `legalize`/`unique_legal_names` (only [A-Za-z0-9_], never a reserved word),
inside comments and string literals via `comment_text` (printable ASCII, escaped), and as file
names via `check_file_stem` (one plain path component).

Identifiers the header declares must not collide with what a C or C++ program that includes it
may already have: keywords, the macros and names of the standard (and common POSIX) headers, the
compilers' predefined macros (`linux` and `unix` under GNU C/C++) and the form C reserves for
file-scope names (a leading '_', which covers `__cplusplus` and `_Bool`). A placeholder macro
that collides is renamed (`unique_legal_names` with a prefix: the next free suffix); the network
name and the entry symbol are refused, since renaming them would break the contract (the NAME_
prefix, the entry's name). A '__' inside a name is kept: it is Glow's legalization
(`onnx::Gemm_0` gives `NAME_onnx__Gemm_0`, which Glow applications use), and no C or C++
implementation declares such names (C++ reserves them on paper only)."""
from __future__ import annotations

import re

from glowpy.codegen.c_names import LIBRARY, PREDEFINED

_BAD = re.compile(r"[^A-Za-z0-9_]")

# Words an exported bundle symbol (the entry function, NAME_config) must not be: C and C++
# keywords, the types and macros the header itself uses or includes, and the C library
# functions that compiled code may call (LLVM turns loops into memcpy/memset calls).
C_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline
int long register restrict return short signed sizeof static struct switch typedef union unsigned
void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn
_Static_assert _Thread_local alignas alignof bool constexpr false nullptr static_assert
thread_local true typeof typeof_unqual and and_eq asm bitand bitor catch char8_t char16_t
char32_t class compl concept consteval constinit co_await co_return co_yield decltype delete
dynamic_cast explicit export friend mutable namespace new noexcept not not_eq operator or or_eq
private protected public reinterpret_cast requires static_cast template this throw try typeid
typename using virtual wchar_t xor xor_eq""".split())
RESERVED_SYMBOLS = C_KEYWORDS | frozenset("""
main memcpy memmove memset memcmp bzero abort exit malloc free calloc realloc
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t
uintmax_t size_t ptrdiff_t NULL GLOW_SUCCESS GLOW_MEM_ALIGN GLOW_GET_ADDR SymbolTableEntry
BundleConfig _GLOW_BUNDLE_COMMON_DEFS""".split())
# names the LLVM module uses for its internal functions (module.py: k<index>_<op>)
_INTERNAL = re.compile(r"^k\d+_")


def legalize(name: str) -> str:
    """Every character outside [A-Za-z0-9_] becomes '_'; a leading digit gets an 'A' prefix."""
    s = _BAD.sub("_", name) or "_"
    return "A" + s if s[0].isdigit() else s


def unique_legal_names(names: list[str], taken: set[str] | None = None,
                       prefix: str = "") -> list[str]:
    """Legalized names, made unique in list order by suffixes _1, _2, ... (deterministic).
    With a macro `prefix` (the header's 'NAME_'), a name whose macro a C or C++ program may
    already have ('INT8_' + 'MAX') takes the next suffix ('MAX_1'); every other name is
    Glow's."""
    if prefix and reserved_form(prefix + "X"):  # no candidate could pass: refused before
        raise ValueError(f"macro prefix {prefix!r} is itself reserved")
    taken = set(taken or ())
    out = []
    for n in names:
        base = legalize(n)
        sep = "" if base.endswith("_") else "_"
        cand, i = base, 1
        while cand in taken or (prefix and c_name_problem(prefix + cand)):
            cand, i = f"{base}{sep}{i}", i + 1
        taken.add(cand)
        out.append(cand)
    return out


def reserved_form(ident: str) -> str | None:
    """Why C or C++ reserves `ident` for the implementation, or None."""
    if ident.startswith("_"):
        return "begins with '_' (C reserves such names for the implementation)"
    return None


def c_name_problem(ident: str) -> str | None:
    """Why `ident` cannot be declared by a bundle header (a program including it and any
    standard header must compile as C and C++), or None if it can."""
    if ident in C_KEYWORDS:
        return "is a C/C++ keyword"
    if ident in PREDEFINED:
        return "is a macro compilers predefine (GNU C and C++ define 'linux' and 'unix')"
    if ident in LIBRARY:
        return "is a macro or name of the C standard or POSIX headers"
    return reserved_form(ident)


def symbol_problem(symbol: str) -> str | None:
    """Why a legal identifier cannot be an exported bundle symbol, or None if it can."""
    if symbol in RESERVED_SYMBOLS - C_KEYWORDS:
        return "is a name the bundle's header or object already uses"
    problem = c_name_problem(symbol)
    if problem:
        return problem
    if _INTERNAL.match(symbol):
        return "has the form glowpy uses for its internal kernel functions (k<number>_...)"
    return None


def file_stem_problem(stem: str) -> str | None:
    """Why `stem` cannot name the bundle's files (NAME.o, NAME.h...), or None if it can."""
    if not stem:
        return "is empty"
    if stem in (".", "..") or "/" in stem or "\\" in stem:
        return "must be a plain file name, not a path"
    if any(not (32 <= ord(c) < 127) for c in stem):
        return "must be printable ASCII (no control or non-ASCII characters)"
    if stem.startswith("-"):
        return "must not start with '-'"
    if len(stem) > 200:
        return "is longer than 200 characters"
    return None


def comment_text(s: str) -> str:
    """A model string made safe inside a C comment or string literal: printable ASCII only,
    quotes, backslashes, comment delimiters and trigraph starts escaped. The result never
    contains a newline, '*/', '/*', a double quote or a trailing backslash."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch in "\\\"":
            out.append("\\" + ch)
        elif 32 <= o < 127:
            out.append(ch)
        else:
            out.extend(f"\\x{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    s = "".join(out).replace("*/", "*\\/").replace("/*", "/\\*")
    return re.sub(r"\?(?=\?)", r"?\\", s)

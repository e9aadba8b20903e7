"""The target options' vocabulary: the error every target module raises, the accepted choices
and the parsing of -mattr (no LLVM involved)."""
from __future__ import annotations

import difflib
import re


class TargetError(Exception):
    """A target option is wrong.

    The message is one line and user-facing: it says which option is wrong and
    what is available.
    """


FLOAT_ABIS = ("default", "soft", "softfp", "hard")
RELOCATION_MODELS = ("static", "pic")
CODE_MODELS = ("small", "kernel", "medium", "large", "default")


def check_choice(value, choices, option):
    if value is None:
        return None
    v = str(value).strip().lower()
    if v not in choices:
        raise TargetError(f"{option}={value} is not valid; available: "
                          f"{', '.join(choices)}")
    return v


def suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def split_features(features: str):
    return [f for f in (x.strip() for x in features.split(",")) if f]


# What LLVM's triples, CPU and architecture names are made of (`llc -mattr=help`, `-mcpu=help`,
# Triple.cpp); the values reach the module's IR text (`target triple = "..."`), so anything
# else (a quote, a newline, a NUL) is refused here rather than escaped there.
_NAME_CHARS = {"-target": ("[A-Za-z0-9_.-]", "letters, digits, '_', '.', '-'", 200),
               "-mcpu": ("[A-Za-z0-9_.+-]", "letters, digits, '_', '.', '-', '+'", 100),
               "-march": ("[A-Za-z0-9_.+-]", "letters, digits, '_', '.', '-', '+'", 100)}


def check_name(value, option: str):
    """`value` of `option` (-target/-mcpu/-march) made only of the characters LLVM's names use."""
    chars, what, most = _NAME_CHARS[option]
    if isinstance(value, str) and value.strip() and \
            not re.fullmatch(f"{chars}{{1,{most}}}", value.strip()):
        from glowpy.errors import show
        raise TargetError(f"{option}={show(value)}: expected an LLVM name ({what}; at most "
                          f"{most} characters)")


def parse_mattr(mattr) -> list:
    if mattr is None:
        return []
    if isinstance(mattr, str):
        items = mattr.split(",")
    else:
        items = [x for item in mattr for x in str(item).split(",")]
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item[0] not in "+-":
            item = "+" + item
        if len(item) == 1 or not re.fullmatch(r"[+-][A-Za-z0-9_.\-]+", item):
            from glowpy.errors import show
            raise TargetError(f"-mattr: malformed feature '{show(item)}' (expected "
                              f"+name or -name, comma separated)")
        out.append(item)
    return out


def join_features(*groups) -> str:
    return ",".join(f for g in groups for f in g)

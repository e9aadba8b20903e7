"""C identifiers and comment text from model strings (bundle contract: DESIGN.md, Names)."""
from __future__ import annotations

import re

_BAD = re.compile(r"[^A-Za-z0-9_]")


def legalize(name: str) -> str:
    """Every character outside [A-Za-z0-9_] becomes '_'; a leading digit gets an 'A' prefix."""
    s = _BAD.sub("_", name) or "_"
    return "A" + s if s[0].isdigit() else s


def unique_legal_names(names: list[str], taken: set[str] | None = None) -> list[str]:
    """Legalized names, made unique in list order by suffixes _1, _2, ... (deterministic)."""
    taken = set(taken or ())
    out = []
    for n in names:
        base = legalize(n)
        cand, i = base, 1
        while cand in taken:
            cand, i = f"{base}_{i}", i + 1
        taken.add(cand)
        out.append(cand)
    return out


def comment_text(s: str) -> str:
    """A model string made safe inside a C comment or string literal: printable ASCII only,
    quotes, backslashes and comment delimiters escaped."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch in "\\\"":
            out.append("\\" + ch)
        elif 32 <= o < 127:
            out.append(ch)
        else:
            out.extend(f"\\x{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out).replace("*/", "*\\/").replace("/*", "/\\*")

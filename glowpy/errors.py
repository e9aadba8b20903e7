"""User-facing errors. Each carries one line of text; the CLI prints it as
`model-compiler: error: <text>` and exits 1 (model problem) or 2 (usage problem).

Model strings (tensor, node and graph names) are untrusted: `show()` makes one safe to embed in a
message (control and invisible characters escaped, length capped), and `one_line()` is applied
to every message before it is printed, so no model string can break the one-line contract or
forge extra output lines."""
from __future__ import annotations

import unicodedata


class GlowpyError(Exception):
    exit_code = 1


class ModelError(GlowpyError):
    """The model cannot be compiled as given (bad file, unsupported op, bad shape...)."""


class UsageError(GlowpyError):
    """The command line or API call is malformed."""
    exit_code = 2


# characters escaped in messages: controls, format (bidi overrides, zero-width), separators,
# surrogates, private use and unassigned code points
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
MAX_NAME = 120  # characters of one model string shown in a message
MAX_LINE = 4000  # characters of a whole message


def _escape_char(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if ch == " " or (ch.isprintable() and unicodedata.category(ch) not in _UNSAFE_CATEGORIES):
        return ch
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """`text` as a single printable line (control characters escaped, capped at `limit`)."""
    s = "".join(_escape_char(c) for c in str(text))
    if len(s) > limit:
        s = s[:limit] + f"... ({len(s) - limit} more characters)"
    return s


def show(name, limit: int = MAX_NAME) -> str:
    """A model string for an error message: escaped and shortened (quote it yourself)."""
    s = "".join(_escape_char(c) for c in str(name))
    return s if len(s) <= limit else s[:limit] + "..."

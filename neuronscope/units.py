"""Readable units and safe text: the formatting every stage shares (results' reprs, tables,
charts, HTML pages, the command line).

:func:`safe_text` is the one sanitising step for a string from a user or a file (an op name
from a trace, a region name, a label, a note) on its way into any renderer: lone surrogates,
control and format characters (terminal escapes, bidi overrides) become visible escapes, and
a huge name is cut. Markup is left to each renderer's own escaping (``html.escape`` on the
page, ``$`` for matplotlib's mathtext), which knows its syntax.
"""

from __future__ import annotations

import math
import unicodedata

__all__ = ["MAX_NAME_CHARS", "fmt_us", "printable", "safe_text", "shorten"]

#: Longest name shown in a table or a report (the whole name stays in result.json): a 50,000-
#: character op or region name would otherwise make every table, chart and page that wide.
MAX_NAME_CHARS = 200

#: Unicode categories never printed as they are: controls (escape sequences that retitle, clear
#: or write the clipboard of a terminal), format characters (bidi overrides that reorder a line),
#: lone surrogates (which no UTF-8 writer, font or JSON parser accepts), private-use and
#: unassigned code points, and line/paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: object, keep: str = "") -> str:
    """``text`` with every character a terminal would act on written as an escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``), so that names from a trace or a run directory print as text and
    nothing else. Characters in ``keep`` (``"\\n"`` for a whole table) stay as they are."""
    value = str(text)
    # Checked at C speed, the kept characters taken out first (a table's line breaks are no
    # printable characters): the loop below is for text that has something to escape.
    if value.isprintable() or (keep and value.translate({ord(c): None for c in keep}).isprintable()):
        return value
    out = []
    for ch in value:
        if ch in keep or unicodedata.category(ch) not in _UNPRINTABLE:
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"))
    return "".join(out)


def shorten(text: object, limit: int = MAX_NAME_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with '…' and the length left out."""
    value = str(text)
    if len(value) <= limit:
        return value
    return f"{value[: limit - 1]}… (+{len(value) - limit + 1} chars)"


def safe_text(text: object, limit: int = MAX_NAME_CHARS, keep: str = "") -> str:
    """The one sanitising step at the edge of every renderer: ``text`` cut to ``limit``
    characters (:func:`shorten`), then made printable (:func:`printable`). Never raises: an
    object whose ``str`` fails shows as its type."""
    try:
        value = str(text)
    except Exception:
        value = f"<{type(text).__name__}>"
    return printable(shorten(value, limit), keep)


def fmt_us(us: float | None) -> str:
    """A duration in readable units: '812.0 us', '3.41 ms', '2.05 s'; 'n/a' for None, and the
    value as it is for NaN or infinity (a corrupt file must not raise here)."""
    if us is None:
        return "n/a"
    if not isinstance(us, (int, float)) or isinstance(us, bool):
        return str(us)[:40]
    if not math.isfinite(us):
        return f"{us} us"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} us"

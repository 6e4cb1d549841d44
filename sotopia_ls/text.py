"""What a rationale may hold, and when it is blank: one rule for the study gateway, the
importer's stored evaluations, an LLM judge's answers and the exporter.

``cleaned`` removes invisible characters no database can store, ``is_blank`` says whether
anything visible is left, ``visible_length`` how long the text reads, ``usable`` applies both.
README.md ("What a rationale may hold") gives the rule; docs/internals.md says why it is one.
"""

from __future__ import annotations

import re
import unicodedata

# Cc except tab, line feed and carriage return; then every surrogate (only lone ones can be
# in a str: Python decodes a valid pair into one character).
_REMOVED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0")  # Hangul fillers: Lo, yet drawn as nothing


def cleaned(text: str) -> str:
    """``text`` without the characters Label Studio's database would refuse or that are
    invisible controls (see the module docstring)."""
    return text if _REMOVED.search(text) is None else _REMOVED.sub("", text)


def _invisible(char: str) -> bool:
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or char in _FILLERS


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace, controls, format characters,
    combining marks and fillers."""
    return all(_invisible(char) for char in text)


def visible_length(text: str) -> int:
    """The characters of ``text`` a reader sees, a run of whitespace between words as one."""
    shown = "".join(char for char in text if char.isspace() or not _invisible(char))
    return len(" ".join(shown.split()))


def usable(text: str) -> str | None:
    """``text`` as kept (``cleaned``), or None when it is blank."""
    if text.isprintable() and "!" <= text[:1] <= "~":
        return text  # nothing to remove (no Cc, no Cs) and a visible first character
    text = cleaned(text)
    return None if is_blank(text) else text


def counted(count: int, what: str) -> str:
    """``1 annotation``, ``2 annotations``: ``what`` takes an s unless there is one."""
    return f"{count} {what}" + ("" if count == 1 else "s")

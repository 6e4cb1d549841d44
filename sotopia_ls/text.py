"""What a rationale may hold, and when it is blank: one rule for the study gateway, the
importer's stored evaluations, an LLM judge's answers and the exporter (``scores.AgentScores``
applies it to every reasoning it holds).

Why one rule: a participant told "saved" must have given a text that Label Studio can store
and that the exporter keeps. Were the three to judge texts differently, an acknowledged
rating could be refused by Label Studio's database for ever, or dropped from the data.

- ``cleaned`` removes control characters (Unicode category Cc) other than tab, line feed
  and carriage return, and lone surrogates (Cs). PostgreSQL refuses NUL in ``text`` and
  ``jsonb``, and lone surrogates are no valid UTF-8 (JSON and PostgreSQL refuse them), so a
  Label Studio on PostgreSQL would refuse every save of such a text. They are removed rather
  than refused: none of them shows on screen or means anything in a rationale (they come in
  with pasted text), so a participant asked to take them out could not find them, and removing
  them changes nothing anyone can read.
- ``is_blank``: nothing is left once every whitespace (Zs, Zl, Zp), control (Cc), format
  character (Cf: zero-width space U+200B, word joiner U+2060, byte order mark U+FEFF,
  direction marks, ...), combining mark (Mn, Me: with no letter to sit on, they carry no
  text) and Hangul filler (letters by category, drawn as nothing) is set aside. Inside a text
  with anything else they are kept: an emoji's zero-width joiner, an accent, a direction mark
  in Arabic. A blank rationale is refused by the gateway and reported by the exporter, and
  an importer's stored evaluation holds it as no rationale ("").
- ``visible_length``: how long a text reads: the characters ``is_blank`` sets aside do not
  count, except that a run of whitespace between words counts as one space. Prolific's
  100-character minimum for a rejection message is checked with it, so a message of
  zero-width spaces, or of a few words padded with spaces, is refused before it is sent.

``usable`` applies both: the text as kept, or None when blank. Its first test is one C-level
pass that settles the usual rationale (printable, starting with a visible ASCII character);
only other texts take the per-character rule, since the exporter reads millions of them.
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

"""One agent action, written the way Sotopia renders it, as a ``Turn``.

Every format spells actions the same way after the speaker's name — ``said: "…"``,
``[non-verbal communication] …``, ``[action] …``, ``left the conversation``, ``did nothing`` —
with a ``:`` after the name in the released dumps and trailing ``,``/``.`` artifacts in oTree.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..episode import Turn

_SPEECH = re.compile(r"said[ \t]*:[ \t]*", re.I)
_TAGGED = (
    (
        re.compile(r"\[[ \t]*non[- ]?verbal[ \t]+communication[ \t]*\][ \t]*", re.I),
        "non-verbal communication",
    ),
    (re.compile(r"\[[ \t]*action[ \t]*\][ \t]*", re.I), "action"),
)
_LEAVE = re.compile(r"left the conversation\W*", re.I)
_NOTHING = re.compile(r"did nothing\W*", re.I)


def parse_action(speaker: str, text: str) -> Turn | None:
    """``speaker``'s action as a turn, or ``None`` when they did nothing.

    "did nothing" is dropped as Sotopia's ``EpisodeLog.render_for_humans`` drops it; so is an
    action with no text. Text in none of the known forms is what the agent said.
    """
    body = text.strip().rstrip(",").strip().lstrip(":").strip()
    if _NOTHING.fullmatch(body):
        return None
    if _LEAVE.fullmatch(body):
        return Turn(speaker=speaker, kind="leave")
    for pattern, kind in _TAGGED:
        if found := pattern.match(body):
            return _turn(speaker, kind, body[found.end() :].strip())
    if found := _SPEECH.match(body):
        body = body[found.end() :]
    return _turn(speaker, "speak", unquote(body))


def _turn(speaker: str, kind: str, text: str) -> Turn | None:
    return Turn(speaker=speaker, kind=kind, text=text) if text else None


def unquote(text: str) -> str:
    """Speech without the quotes Sotopia wraps it in; an unclosed quote (cut-off text) too."""
    text = text.strip()
    if text.startswith('"'):
        text = text[1:]
        if text.endswith('"'):
            text = text[:-1]
    return text.strip()


def split_speaker(text: str, names: Sequence[str]) -> tuple[str, str] | None:
    """``(name, rest)`` when ``text`` starts with one of ``names`` as a whole word."""
    stripped = text.lstrip()
    for name in sorted(names, key=len, reverse=True):
        if stripped.startswith(name):
            rest = stripped[len(name) :]
            if not rest or not (rest[0].isalnum() or rest[0] in "'’"):
                return name, rest
    return None

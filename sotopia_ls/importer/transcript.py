"""Rendered conversations as text: the evaluator's ``Turn #N`` history and the dumps'
``social_interactions``.

The history has one header per turn, ``Turn #3`` on its own line or ``Turn #3: `` before the
action; a turn where every agent did nothing is an empty header (``Turn #7: ``, ``Turn #5``
followed by ``Turn #6``); the evaluator template appends ``,`` and its instructions after the
last turn. Speech is model output, so a ``Turn #`` line can also occur *inside* a turn (a model
that recited the whole conversation); ``_turn_headers`` tells the real headers apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..episode import Turn
from .actions import parse_action, split_speaker
from .context import normalize_newlines
from .records import RecordError

_HEADER = re.compile(
    r"^[ \t]*Turn[ \t]*#[ \t]*(?P<number>\d+)[ \t]*(?P<colon>:?)[ \t]*,?[ \t]*", re.M
)
_INSTRUCTIONS = re.compile(r"^[ \t]*Based on previous interactions\b", re.I | re.M)


@dataclass(frozen=True)
class _Header:
    number: int
    colon: bool
    start: int
    end: int


def parse_history(text: str, names: Sequence[str]) -> list[Turn]:
    """The turns of a ``Turn #N`` history (text before the first header is ignored)."""
    text = _without_instructions(normalize_newlines(text))
    turns: list[Turn] = []
    for number, body in _turn_bodies(text, names):
        body = body.strip().rstrip(",").strip()
        if not body:
            continue
        found = split_speaker(body, names)
        if found is None:
            raise RecordError(
                f"turn #{number} does not start with a participant's name "
                f"({' or '.join(names)}): {body[:60]!r}"
            )
        speaker, action = found
        if turn := parse_action(speaker, action):
            turns.append(turn)
    return turns


def _without_instructions(text: str) -> str:
    found = _INSTRUCTIONS.search(text)
    return text[: found.start()] if found else text


def _turn_bodies(text: str, names: Sequence[str]) -> list[tuple[int, str]]:
    headers = _turn_headers(text, names)
    ends = [header.start for header in headers[1:]] + [len(text)]
    return [(header.number, text[header.end : end]) for header, end in zip(headers, ends)]


def _turn_headers(text: str, names: Sequence[str]) -> tuple[_Header, ...]:
    """The most plausible sequence of real turn headers among every ``Turn #N`` line.

    A reading starts at the first header (what precedes it is the context) and its numbers
    increase; the longest wins, then the one with consecutive numbers, turns that start with a
    participant's name, and one header style throughout — so a turn reciting "Turn #0: …" to
    "Turn #6: …" inside its speech does not split the conversation.
    """
    found = [
        _Header(int(m["number"]), bool(m["colon"]), m.start(), m.end())
        for m in _HEADER.finditer(text)
    ]
    if all(after.number == before.number + 1 for before, after in zip(found, found[1:])):
        return tuple(found)  # the longest reading is all of them: nothing to choose
    starts = [header.start for header in found[1:]] + [len(text)]
    plausible = [int(_opens_turn(text[h.end : end], names)) for h, end in zip(found, starts)]
    # score[i]: best (headers, consecutive, speakers, same style) of a reading ending at found[i]
    score: list[tuple[int, int, int, int] | None] = [(1, 0, plausible[0], 0)]
    previous: list[int | None] = [None]
    for index, header in enumerate(found[1:], start=1):
        score.append(None)
        previous.append(None)
        for before in range(index):
            last, reached = found[before], score[before]
            if reached is None or last.number >= header.number:
                continue
            length, consecutive, speakers, style = reached
            candidate = (
                length + 1,
                consecutive + (header.number == last.number + 1),
                speakers + plausible[index],
                style + (header.colon == last.colon),
            )
            if score[index] is None or candidate > score[index]:
                score[index], previous[index] = candidate, before
    chain: list[_Header] = []
    reachable = [index for index, reached in enumerate(score) if reached is not None]
    at: int | None = max(reachable, key=score.__getitem__)
    while at is not None:
        chain.append(found[at])
        at = previous[at]
    return tuple(reversed(chain))


def _opens_turn(body: str, names: Sequence[str]) -> bool:
    body = body.strip().rstrip(",").strip()
    return not body or split_speaker(body, names) is not None


def parse_interactions(text: str, names: Sequence[str]) -> list[Turn]:
    """The turns of a dump's ``social_interactions``: one ``Name said: "…"`` or
    ``Name: [action] …`` per message; lines that start no message continue the previous one."""
    messages: list[tuple[str, list[str]]] = []
    for line in normalize_newlines(text).split("\n"):
        found = split_speaker(line, names)
        if found and _starts_message(found[1]):
            messages.append((found[0], [found[1]]))
        elif messages:
            messages[-1][1].append(line)
    turns = (parse_action(speaker, "\n".join(lines)) for speaker, lines in messages)
    return [turn for turn in turns if turn]


_MESSAGE_START = re.compile(
    r"^[ \t]*(?:said[ \t]*:|:[ \t]*(?:\[|left the conversation|did nothing))", re.I
)


def _starts_message(rest: str) -> bool:
    return bool(_MESSAGE_START.match(rest))

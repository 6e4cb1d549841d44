"""The "Here is the context of this interaction" text Sotopia shows its agents and evaluator,
parsed into scenario, participants, backgrounds, secrets and goals.

oTree episodes carry it in ``rewards_prompt``, EpisodeLogs in each agent's first observation;
sections may span lines, spacing varies, and a background may lack any part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from ..episode import PROFILE_FIELDS, Agent, Profile
from .records import RecordError, readable

UNKNOWN_GOAL = "unknown"
_POSSESSIVE = r"(?:'s|’s|')"
_END_OF_CONTEXT = re.compile(
    r"^[ \t]*(?:Conversation Starts[ \t]*:|Turn[ \t]*#[ \t]*\d)", re.I | re.M
)
_PARTICIPANTS = re.compile(r"^[ \t]*Participants[ \t]*:[ \t]*(?P<value>.*)$", re.I | re.M)
_NAME_LIST = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*")
_BACKGROUND_NAME = re.compile(rf"^[ \t]*(?P<name>.+?){_POSSESSIVE} background[ \t]*:", re.I | re.M)

# "<name> is a 42-year-old female chef." — only at the start, so a later "is a 5-year-old"
# in the free text is never mistaken for the agent's age.
_LEAD = re.compile(
    r"^[^.]*?\bis an?\s+(?P<age>\d+)[- ]years?[- ]old\b\s*(?P<occupation>.*?)\s*(?:\.(?=\s|$)|$)",
    re.I | re.S,
)
_PRONOUNS = re.compile(r"(?P<pronouns>[A-Za-z]+(?:\s*/\s*[A-Za-z]+)*)\s+pronouns\b\.?", re.I)
_PERSONALITY = re.compile(r"Personality and values description\s*:", re.I)
_SECRETS = re.compile(rf"{_POSSESSIVE}\s+secrets?\s*:", re.I)


def merged(profile: Profile, other: Profile) -> Profile:
    """``profile`` with its empty fields filled from ``other`` (another agent's view)."""
    return Profile(**{name: getattr(profile, name) or getattr(other, name)
                      for name in PROFILE_FIELDS})


def agent_of(profile: Profile, name: str, goal: str) -> Agent:
    """The agent with this profile; a closing period is dropped, as the oTree app did, so
    every format yields the same text."""
    fields = {
        field: getattr(profile, field).strip().removesuffix(".").rstrip()
        for field in PROFILE_FIELDS
    }
    try:
        return Agent(name=name, goal=goal, **fields)
    except ValidationError as error:
        raise readable(error) from error


@dataclass(frozen=True)
class Context:
    scenario: str
    participants: tuple[str, ...]
    profiles: dict[str, Profile]
    goals: dict[str, str]


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_context(text: str) -> tuple[str, str]:
    """``text`` cut where the conversation begins: (context, conversation)."""
    text = normalize_newlines(text)
    end = _END_OF_CONTEXT.search(text)
    return (text, "") if end is None else (text[: end.start()], text[end.start() :])


def parse_participants(value: str, context: str) -> tuple[str, ...]:
    """The names in ``Participants: A and B``; the background headers settle names with "and"."""
    names = tuple(name.strip(" .") for name in _NAME_LIST.split(value.strip()) if name.strip(" ."))
    if len(names) > 2:
        headed = tuple(dict.fromkeys(m["name"].strip() for m in _BACKGROUND_NAME.finditer(context)))
        if len(headed) == 2 and all(name in value for name in headed):
            return headed
    return names


def parse_context(text: str) -> Context:
    """Scenario, participants, backgrounds and goals from a context text (conversation ignored)."""
    context, _ = split_context(text)
    found = _PARTICIPANTS.search(context)
    if found is None:
        raise RecordError("missing participants: no 'Participants:' line in the context")
    participants = parse_participants(found["value"], context)
    if len(participants) < 2:
        raise RecordError(
            f"only one participant ({', '.join(participants) or 'none'}); an episode needs two"
        )
    if len(participants) > 2:
        raise RecordError(
            f"{len(participants)} participants ({', '.join(participants)}); an episode has two"
        )

    sections = _sections(context, participants)
    scenario = sections.get(("scenario", ""), "")
    if not scenario:
        raise RecordError("no 'Scenario:' in the context")
    return Context(
        scenario=scenario,
        participants=participants,
        profiles={
            name: parse_background(sections[("background", name)], name)
            for name in participants
            if ("background", name) in sections
        },
        goals={
            name: sections[("goal", name)] for name in participants if ("goal", name) in sections
        },
    )


def _sections(context: str, participants: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """Labelled sections keyed ``(label, name)``; each runs until the next label."""
    names = "|".join(re.escape(name) for name in sorted(participants, key=len, reverse=True))
    header = re.compile(
        rf"^[ \t]*(?:(?P<plain>Scenario|Participants)|(?P<name>{names}){_POSSESSIVE}[ \t]*"
        rf"(?P<label>background|goal))[ \t]*:[ \t]*",
        re.I | re.M,
    )
    found = list(header.finditer(context))
    sections: dict[tuple[str, str], str] = {}
    for here, after in zip(found, [*found[1:], None]):
        body = context[here.end() : after.start() if after else len(context)].strip()
        if here["plain"]:
            key = (here["plain"].lower(), "")
        else:
            key = (here["label"].lower(), _canonical(here["name"], participants))
        sections.setdefault(key, body)
    return sections


def _canonical(name: str, participants: tuple[str, ...]) -> str:
    return next(p for p in participants if p.lower() == name.lower())


def parse_background(text: str, name: str = "") -> Profile:
    """Sotopia's background sentence split into age, occupation, pronouns, interests, personality
    and secret. Text that follows none of the known patterns is kept whole as ``interests``."""
    text = " ".join(normalize_newlines(text).split())
    text, secret = _split_secret(text, name)
    personality = ""
    if found := _PERSONALITY.search(text):
        text, personality = text[: found.start()].strip(), text[found.end() :].strip()

    age = occupation = pronouns = ""
    rest = text
    if found := _LEAD.match(text):
        age, occupation = found["age"], found["occupation"].strip()
        rest = text[found.end() :].strip()
    if found := _PRONOUNS.match(rest):
        pronouns = re.sub(r"\s*/\s*", "/", found["pronouns"])
        rest = rest[found.end() :].strip()
    return Profile(
        age=age,
        occupation=occupation,
        pronouns=pronouns,
        interests=rest,
        personality=personality,
        secret=secret,
    )


def _split_secret(text: str, name: str) -> tuple[str, str]:
    """``(text before "Mia's secrets:", the secret)``. Sotopia writes the first name; the full
    name is tried first so that no part of it is left at the end of the personality text."""
    found = _SECRETS.search(text)
    if found is None:
        return text, ""
    before = text[: found.start()]
    owner = next(
        (owner for owner in (name, name.split(" ")[0]) if owner and before.endswith(owner)), None
    )
    before = before[: -len(owner)] if owner else before.rpartition(" ")[0]
    return before.strip(), text[found.end() :].strip()


def is_unknown_goal(goal: str) -> bool:
    return goal.strip().strip(".").lower() in ("", UNKNOWN_GOAL)

"""``otree-csv``: the ``data`` column of the oTree human-evaluation CSVs.

One row per annotator: ``pk`` (episode id), ``model``, ``data`` (the JSON the app showed:
``scenario, names, personal_info {name: {name, age, profession, pronouns, interests,
personality, secrets}}, social_goal {name: goal}, parsed_conversation [{speaker,
dialogue}]``), then the ratings. Rows of one ``pk`` show the same episode, so the first complete
row makes it. When the app failed to parse an episode its ``data`` holds only ``scenario``;
such rows are refused only if no row of the same ``pk`` is complete, which is known at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Set
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..episode import Episode, Profile, Source, Turn
from .actions import parse_action, split_speaker
from .context import agent_of, is_unknown_goal
from .records import Parser, RecordError, build_episode, readable, unreadable_json, validate

FORMAT = "otree-csv"
SHOWN_FIELDS = ("names", "personal_info", "social_goal", "parsed_conversation")


def detects(keys: Set[str]) -> bool:
    """The episode id and the shown episode's JSON, whatever rating columns follow."""
    return {"pk", "data"} <= keys


class Utterance(BaseModel):
    speaker: str = Field(min_length=1)
    dialogue: str


class ShownEpisode(BaseModel):
    """The ``data`` JSON of a complete row."""

    model_config = ConfigDict(extra="ignore")

    scenario: str = Field(min_length=1)
    names: list[str]
    # oTree's field names (profession, secrets) are the aliases of ``Profile``'s.
    personal_info: dict[str, Profile]
    social_goal: dict[str, str]
    parsed_conversation: list[Utterance]


class OTreeCsvRow(BaseModel):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    pk: str = Field(min_length=1)
    model: str = ""
    data: dict[str, Any]

    @field_validator("data", mode="before")
    @classmethod
    def _decode(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
            ) from None
        except (RecursionError, ValueError) as error:
            raise ValueError(f"not valid JSON ({unreadable_json(error)})") from None


def parse_otree_csv_row(record: Mapping[str, Any], file: str = "", label: str = "") -> Episode:
    row = validate(OTreeCsvRow, record)
    missing = [name for name in SHOWN_FIELDS if name not in row.data]
    if missing:
        raise RecordError(
            f"holds no {', '.join(missing)} (the oTree app could not parse this episode) and no "
            f"other row of episode {row.pk} is complete",
            "data",
        )
    try:
        shown = ShownEpisode.model_validate(row.data)
    except ValidationError as error:
        problem = readable(error)
        raise RecordError(
            problem.reason, f"data.{problem.field}" if problem.field else "data"
        ) from error
    if len(shown.names) != 2:
        raise RecordError(
            f"{len(shown.names)} name(s) ({', '.join(shown.names)}); an episode needs two",
            "data.names",
        )
    agents = []
    for name in shown.names:
        goal = shown.social_goal.get(name, "")
        if is_unknown_goal(goal):
            raise RecordError(f"no goal stated for {name}", "data.social_goal")
        agents.append(agent_of(shown.personal_info.get(name, Profile()), name, goal))
    return build_episode(
        id=row.pk,
        scenario=shown.scenario,
        agents=agents,
        turns=[turn for utterance in shown.parsed_conversation if (turn := _turn(utterance))],
        source=Source(format=FORMAT, file=file, record=label, tag=row.model),
    )


def _turn(utterance: Utterance) -> Turn | None:
    """A dialogue line; the app left the speaker's name in front of non-speech actions."""
    found = split_speaker(utterance.dialogue, [utterance.speaker])
    return parse_action(utterance.speaker, found[1] if found else utterance.dialogue)


class RowsByEpisode:
    """Folds the annotator rows of a CSV into one episode per ``pk``."""

    def __init__(self, parse: Parser, file: str) -> None:
        self.parse = parse
        self.file = file
        self._done: set[str] = set()
        self._failed: dict[str, list[tuple[str, RecordError]]] = {}

    def add(self, record: Mapping[str, Any], label: str) -> Iterator[Episode | RecordError]:
        """The episode of the first complete row of a ``pk``; a row without ``pk`` fails at once."""
        pk = record.get("pk")
        key = str(pk) if pk not in (None, "") else None
        if key is not None and key in self._done:
            return
        try:
            episode = self.parse(record, self.file, label)
        except RecordError as error:
            if key is None:
                yield error
            else:
                self._failed.setdefault(key, []).append((label, error))
            return
        self._done.add(episode.id)
        self._failed.pop(episode.id, None)
        yield episode

    def unresolved(self) -> Iterator[tuple[str, str, RecordError]]:
        """``(label, pk, error)`` of every failed row whose episode no other row completed."""
        for pk, failures in self._failed.items():
            for label, error in failures:
                yield label, pk, error

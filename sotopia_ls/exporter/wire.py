"""The parts of a Label Studio export task the exporter reads, decoded by msgspec.

Decoding into these structs skips every other field without building it (the episode's
rendered turn text, Label Studio's bookkeeping), which makes reading an export several times
faster than building dicts. Leaves are ``Any`` so odd values reach validation, which names
them; only containers are typed. A task whose containers have another shape is repaired
field by field (``_repaired``), so one odd result costs its annotation, not the export.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from msgspec import Struct

from ..errors import InvalidInput, Problem
from ..labelstudio.results import Result, results_of
from ..labelstudio.tasks import (
    ADDED_SLOTS, AGENT_MODELS, AGENTS_KEY, DIALOGUE, EPISODE_ID, EVALUATION, GOLD, JUDGES, REVIEW,
    SOURCE_ENVIRONMENT, agent_field,
)


class Annotation(Struct, gc=False):
    id: Any = None
    completed_by: Any = None
    updated_by: Any = None
    result: list[Result] = []
    was_cancelled: Any = False
    ground_truth: Any = False
    lead_time: Any = None
    created_at: Any = None
    updated_at: Any = None
    # The prediction shown to the annotator ({} when none was pre-filled).
    prediction: Any = None


class Turn(Struct, gc=False):
    speaker: Any = ""
    kind: Any = None
    utterance: Any = ""


# Task data, keyed by the names tasks.py writes.
Data = msgspec.defstruct(
    "Data",
    [
        (EPISODE_ID, Any, None),
        ("scenario", Any, ""),
        (DIALOGUE, list[Turn], []),
        ("source_tag", Any, ""),
        (SOURCE_ENVIRONMENT, Any, ""),
        ("models", Any, None),
        (AGENT_MODELS, Any, None),
        (AGENTS_KEY, Any, None),
        (agent_field(1, "name"), Any, ""),
        (agent_field(2, "name"), Any, ""),
    ],
    gc=False,
)
# Task meta: the model evaluations kept out of the annotators' sight (``tasks.stored_judges``)
# the study review's decisions on its annotations and the study gateway's marks of those
# rated on an added slot and of its gold episodes.
Meta = msgspec.defstruct(
    "Meta", [(EVALUATION, Any, None), (JUDGES, Any, None), (REVIEW, Any, None),
             (ADDED_SLOTS, Any, None), (GOLD, Any, None)], gc=False)


class Task(Struct, gc=False):
    id: Any = None
    data: Data = msgspec.field(default_factory=Data)  # type: ignore[valid-type]
    meta: Meta = msgspec.field(default_factory=Meta)  # type: ignore[valid-type]
    annotations: list[Annotation] = []
    drafts: list[Any] = []
    predictions: list[Any] = []


_TASKS = msgspec.json.Decoder(list[Task])
_RAW_TASKS = msgspec.json.Decoder(list[msgspec.Raw])
_TASK = msgspec.json.Decoder(Task)


def decode_tasks(chunk: bytes | bytearray, origin: str) -> list[Task]:
    """The tasks of one chunk (a JSON array of tasks)."""
    try:
        return _typed_or_one_by_one(chunk, origin)
    except msgspec.DecodeError as exc:
        reason = f"not a Label Studio JSON export: invalid JSON ({exc})"
        raise InvalidInput([Problem(origin, "", reason)]) from exc
    except RecursionError:
        reason = "not a Label Studio JSON export: nested too deeply to read"
        raise InvalidInput([Problem(origin, "", reason)]) from None


def _typed_or_one_by_one(chunk: bytes | bytearray, origin: str) -> list[Task]:
    try:
        return _TASKS.decode(chunk)
    except msgspec.ValidationError:
        return [_task(raw, origin) for raw in _RAW_TASKS.decode(chunk)]


def _task(raw: msgspec.Raw, origin: str) -> Task:
    try:
        return _TASK.decode(raw)
    except msgspec.ValidationError:
        # The standard library reads what msgspec will not (1e400, a number of thousands of
        # digits); such a value then fails validation with a reason, not the whole export.
        return _repaired(json.loads(bytes(raw), parse_int=_integer), origin)


def _integer(text: str) -> int | str:
    """An integer, or its digits as text when Python refuses to make so long a number."""
    return int(text) if len(text) <= _INTEGER_DIGITS else text


_INTEGER_DIGITS = 4000


def _converted(raw: Any, kind: type) -> Any:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError:
        return None


def _repaired(raw: Any, origin: str) -> Task:
    if not isinstance(raw, dict):
        raise InvalidInput([Problem(origin, "", f"not a task object: {str(raw)[:80]!r}")])
    where = f"task {raw.get('id')}"

    def listed(name: str) -> list[Any]:
        value = raw.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise InvalidInput([Problem(origin, where, f"{name} is not a list")])
        return value

    data = raw.get("data", {})
    if not isinstance(data, dict):
        raise InvalidInput([Problem(origin, where, "data is not an object")])
    turns = data.get(DIALOGUE)
    turns = [turn for turn in turns if isinstance(turn, dict)] if isinstance(turns, list) else []
    annotations = []
    for number, annotation in enumerate(listed("annotations")):
        if not isinstance(annotation, dict):
            raise InvalidInput([Problem(origin, f"{where}, annotation {number}",
                                        "not an annotation object")])
        fields = {name: annotation[name] for name in Annotation.__struct_fields__
                  if name in annotation and name != "result"}
        annotations.append(Annotation(**fields, result=results_of(annotation.get("result"))))
    meta = raw.get("meta")
    return Task(
        id=raw.get("id"),
        data=msgspec.convert(data | {DIALOGUE: turns}, Data),
        meta=_converted(meta, Meta) or Meta(),
        annotations=annotations,
        drafts=listed("drafts"),
        predictions=listed("predictions"),
    )

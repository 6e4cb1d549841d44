"""One validation pass: each Label Studio annotation becomes a score row or error rows.

A score row is a flat dict: identifiers, timing, and the 28 oTree-named fields
(``believability_1`` … ``goal_reasoning_2``) with integer scores and rationale text. Label
Studio checks none of this, so every rule lives here: all 14 ratings and 14 rationales
present, each rating a whole number inside its dimension's range, each rationale non-empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from msgspec import UNSET

from ..dimensions import AGENTS, DIMENSIONS, Dimension, rating_name, reasoning_name
from .wire import Result, Value, results_of

SCORE_FIELDS: tuple[str, ...] = tuple(
    name
    for agent in AGENTS
    for d in DIMENSIONS
    for name in (rating_name(d.key, agent), reasoning_name(d.key, agent))
)

RATING_FIELDS: tuple[str, ...] = tuple(
    rating_name(d.key, agent) for agent in AGENTS for d in DIMENSIONS
)
PREDICTED_FIELDS: tuple[str, ...] = tuple(f"predicted_{name}" for name in RATING_FIELDS)

_INTEGER = re.compile(r"^[+-]?\d+$")
_NO_RATING = "no rating value (expected choices, number or rating)"


@dataclass(frozen=True)
class ErrorRow:
    """One reason an annotation was refused; a line of ``errors.jsonl``."""

    task_id: int | None
    annotation_id: int | None
    annotator: str
    field: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def annotator_of(completed_by: Any, emails: Mapping[int, str]) -> str:
    """The annotator's email: exports name the user by id, or by a dict carrying the email."""
    if isinstance(completed_by, dict):
        return str(completed_by.get("email") or completed_by.get("id") or "")
    if completed_by is None:
        return ""
    return emails.get(int(completed_by), f"user-{completed_by}")


def _controls(results: list[Result]) -> dict[Any, list[Value | None]]:
    by_name: dict[Any, list[Value | None]] = {}
    for result in results:
        by_name.setdefault(result.from_name, []).append(result.value)
    return by_name


def _rating(value: Value | None) -> tuple[int | None, str]:
    """The integer a rating result holds, or why it holds none."""
    if value is None:
        return None, _NO_RATING
    if value.choices is not UNSET:
        choices = value.choices
        if not isinstance(choices, list) or len(choices) != 1:
            return None, f"expected exactly one choice, got {choices!r}"
        raw = choices[0]
    elif value.number is not UNSET:
        raw = value.number
    elif value.rating is not UNSET:
        raw = value.rating
    else:
        return None, _NO_RATING
    if isinstance(raw, bool):
        return None, f"not an integer: {raw!r}"
    if isinstance(raw, int):
        return raw, ""
    if isinstance(raw, float) and raw.is_integer():
        return int(raw), ""
    if isinstance(raw, str) and _INTEGER.match(raw.strip()):
        return int(raw.strip()), ""
    return None, f"not an integer: {raw!r}"


def _rationale(value: Value | None) -> tuple[str | None, str]:
    text = UNSET if value is None else value.text
    if isinstance(text, list) and len(text) == 1 and isinstance(text[0], str) and text[0].strip():
        return text[0], ""  # the usual shape, one non-blank text, without the general checks
    if isinstance(text, str):
        text = [text]
    if not isinstance(text, list) or not all(isinstance(item, str) for item in text):
        return None, "no rationale text (expected text)"
    joined = "\n".join(text)
    if not joined.strip():
        return None, "empty rationale"
    return joined, ""


def _score(value: Value | None, dimension: Dimension,
           choices: Mapping[str, int]) -> tuple[int | None, str]:
    """The rating's score inside ``dimension``'s range, or why there is none.

    ``choices`` maps each in-range score as the config writes it ("-3") to the integer: the
    usual single choice is looked up directly, anything else takes the general path.
    """
    chosen = UNSET if value is None else value.choices
    if isinstance(chosen, list) and len(chosen) == 1 and isinstance(chosen[0], str):
        score = choices.get(chosen[0])
        if score is not None:
            return score, ""
    score, reason = _rating(value)
    if score is not None and not dimension.contains(score):
        return None, f"{score} is outside {dimension.key}'s range {dimension.range_text}"
    return score, reason


# (rating control, rationale control, dimension, its choices) in output order, computed once.
_CONTROLS = tuple(
    (rating_name(d.key, agent), reasoning_name(d.key, agent), d,
     {str(score): score for score in d.values})
    for agent in AGENTS
    for d in DIMENSIONS
)




def _not_one(count: int, what: str) -> str:
    return f"missing {what}" if not count else f"{count} {what}s"


def _usual(results: list[Result]) -> dict[str, Any] | None:
    """The 28 fields when every control has one result of the usual shape (one choice of its
    range, one non-blank text), else None. Most annotations are; checking them in one tight
    loop halves the export's validation time. Any exception means "not usual"."""
    by_name = {result.from_name: result.value for result in results}
    if len(by_name) != len(results):
        return None
    fields: dict[str, Any] = {}
    try:
        for rating, rationale, _, choices in _CONTROLS:
            chosen = by_name[rating].choices
            if type(chosen) is not list or len(chosen) != 1:
                return None
            fields[rating] = choices[chosen[0]]
            (text,) = by_name[rationale].text
            if type(text) is not str or not text.strip():
                return None
            fields[rationale] = text
    except (KeyError, AttributeError, TypeError, ValueError):
        return None
    return fields


def scores_of(results: list[Result]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The 28 fields of one result list, and ``(field, reason)`` for each one that is invalid.

    Results for controls outside the rubric are ignored: a project may add its own controls.
    """
    usual = _usual(results)
    if usual is not None:
        return usual, []
    controls = _controls(results)
    fields: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for rating, rationale, dimension, choices in _CONTROLS:
        values = controls.get(rating, ())
        if len(values) == 1:
            score, reason = _score(values[0], dimension, choices)
            if score is not None:
                fields[rating] = score
        else:
            reason = _not_one(len(values), "rating")
        if reason:
            problems.append((rating, reason))
        values = controls.get(rationale, ())
        if len(values) == 1:
            text, reason = _rationale(values[0])
            if text is not None:
                fields[rationale] = text
        else:
            reason = _not_one(len(values), "rationale")
        if reason:
            problems.append((rationale, reason))
    return fields, problems


def read_scores(results: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``scores_of`` for a result list as plain JSON (from the SDK, or a test)."""
    return scores_of(results_of(results))


def predicted_ratings(prediction: Any) -> dict[str, int]:
    """The valid ratings of the prediction an annotator was shown, by control name.

    Label Studio keeps that prediction with the annotation (``prediction``; ``{}`` when none
    was pre-filled). Its rationales and any invalid rating are ignored: only the scores are
    compared with what the annotator submitted.
    """
    if not isinstance(prediction, dict) or not prediction.get("result"):
        return {}
    fields, _ = read_scores(prediction["result"])
    return {name: fields[name] for name in RATING_FIELDS if name in fields}

"""The score model ↔ Label Studio ``result`` lists, in both directions.

Label Studio checks none of the contents, so every rule lives here: each rating a ``Choices``
whose values are the range's integers as text (``Rating`` cannot hold zero or negatives), each
rationale a non-blank ``TextArea``. Results are decoded into msgspec structs: an export holds
millions of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, Struct

from ..dimensions import AGENTS, DIMENSIONS, Dimension, rating_name, reasoning_name
from ..scores import RATING_FIELDS, Evaluation
from ..text import usable
from .tasks import DIALOGUE, UNNAMED_EVALUATOR

RATING_TYPE = "choices"
REASONING_TYPE = "textarea"

Problem = tuple[str, str]  # (control name, reason)


class Value(Struct, gc=False):
    """A result's ``value``: a rating (``choices``, ``number`` or ``rating``) or ``text``."""

    choices: Any = UNSET
    text: Any = UNSET
    number: Any = UNSET
    rating: Any = UNSET


class Result(Struct, gc=False):
    from_name: Any = None
    value: Value | None = None


# --- writing ---------------------------------------------------------------------------------


def rating_result(key: str, agent: int, score: int, to_name: str = DIALOGUE) -> dict[str, Any]:
    return {
        "from_name": rating_name(key, agent),
        "to_name": to_name,
        "type": RATING_TYPE,
        "value": {"choices": [str(score)]},
    }


def reasoning_result(key: str, agent: int, text: str, to_name: str = DIALOGUE) -> dict[str, Any]:
    return {
        "from_name": reasoning_name(key, agent),
        "to_name": to_name,
        "type": REASONING_TYPE,
        "value": {"text": [text]},
    }


def evaluation_results(
    evaluation: Evaluation, to_names: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The results of every score the evaluation holds, rating then rationale, in rubric order.

    ``to_names`` maps a control to the object it labels, when read from a live config.
    """
    to_names = to_names or {}
    results: list[dict[str, Any]] = []
    for agent in AGENTS:
        for dimension in DIMENSIONS:
            pair = evaluation.pair(agent, dimension.key)
            if pair is None:
                continue
            reasoning, score = pair
            rating, rationale = rating_name(dimension.key, agent), reasoning_name(dimension.key, agent)
            results.append(rating_result(dimension.key, agent, score, to_names.get(rating, DIALOGUE)))
            results.append(
                reasoning_result(dimension.key, agent, reasoning, to_names.get(rationale, DIALOGUE))
            )
    return results


def evaluation_prediction(evaluation: Evaluation) -> dict[str, Any]:
    """One Label Studio prediction holding every result of a stored evaluation. No ``score``:
    Label Studio shows a prediction's score as a confidence in percent, which no Sotopia
    score is."""
    return {
        "model_version": evaluation.evaluator or UNNAMED_EVALUATOR,
        "result": evaluation_results(evaluation),
    }


# --- reading ---------------------------------------------------------------------------------

_INTEGER = re.compile(r"^[+-]?\d+$")
_NO_RATING = "no rating value (expected choices, number or rating)"
# (rating control, rationale control, dimension, its choices) in the flat form's order.
_CONTROLS = tuple(
    (rating_name(d.key, agent), reasoning_name(d.key, agent), d, d.choices)
    for agent in AGENTS
    for d in DIMENSIONS
)


def results_of(raw: Any) -> list[Result]:
    """A result list as plain JSON → ``Result``s; items that are no result object are left
    out, and a result whose value is no object keeps its name with no value (so that
    validation names it)."""
    if not isinstance(raw, list):
        return []
    try:
        return msgspec.convert(raw, list[Result])
    except msgspec.ValidationError:
        return [
            Result(from_name=item.get("from_name"), value=_value(item.get("value")))
            for item in raw
            if isinstance(item, dict)
        ]


def shape_problems(raw: list[Any]) -> list[Problem]:
    """``("result N", reason)`` for each item of a result list that ``results_of`` passes over
    or cannot name: no object, a ``from_name`` that is no text, a ``value`` that is no object.
    A reader of Label Studio's own data ignores such items; the study gateway refuses them,
    since only a tampered browser sends them."""
    problems: list[Problem] = []
    for number, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            reason = f"not a result object: {shown(item)}"
        elif not isinstance(item.get("from_name"), str):
            reason = f"from_name is not a control's name: {shown(item.get('from_name'))}"
        elif not isinstance(item.get("value"), dict):
            reason = (f"value of {shown(item['from_name'])} is not an object: "
                      f"{shown(item.get('value'))}")
        else:
            continue
        problems.append((f"result {number}", reason))
    return problems


def _value(raw: Any) -> Value | None:
    try:
        return msgspec.convert(raw, Value)
    except msgspec.ValidationError:
        return None


def _rating(value: Value | None) -> tuple[int | None, str]:
    """The integer a rating result holds, or why it holds none."""
    if value is None:
        return None, _NO_RATING
    if value.choices is not UNSET:
        choices = value.choices
        if not isinstance(choices, list) or len(choices) != 1:
            return None, f"expected exactly one choice, got {shown(choices)}"
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
    if isinstance(raw, str) and len(raw) < 20 and _INTEGER.match(raw.strip()):
        return int(raw.strip()), ""
    return None, f"not an integer: {shown(raw)}"


def shown(value: Any) -> str:
    """A value as shown in a problem: at most a line's worth."""
    try:
        shown = repr(value)
    except ValueError:  # an integer too long for Python to print
        return "a number of more than 4300 digits"
    return shown if len(shown) <= 60 else shown[:57] + "..."


def rationale_text(value: Value | None) -> tuple[str | None, str]:
    """The rationale's text as kept (``sotopia_ls.text.usable``), or why there is none."""
    text = UNSET if value is None else value.text
    if isinstance(text, str):
        text = [text]
    if not isinstance(text, list) or not all(isinstance(item, str) for item in text):
        return None, "no rationale text (expected text)"
    kept = usable("\n".join(text))
    if kept is None:
        return None, "empty rationale"
    return kept, ""


def rating_score(value: Value | None, dimension: Dimension,
           choices: Mapping[str, int]) -> tuple[int | None, str]:
    """The rating's score inside ``dimension``'s range, or why there is none. The usual single
    choice is looked up in ``choices`` (the range as the config writes it); anything else
    takes the general path."""
    chosen = UNSET if value is None else value.choices
    if isinstance(chosen, list) and len(chosen) == 1 and isinstance(chosen[0], str):
        score = choices.get(chosen[0])
        if score is not None:
            return score, ""
    score, reason = _rating(value)
    if score is None:
        return None, reason
    try:
        return dimension.check(score), ""
    except ValueError as error:
        return None, str(error)


def _not_one(count: int, what: str) -> str:
    return f"missing {what}" if not count else f"{count} {what}s"


def _usual(results: list[Result]) -> dict[str, Any] | None:
    """The flat form when every control has one result of the usual shape (one choice of its
    range, one usable text), else None. Most annotations are; checking them in one tight
    loop saves much of the export's validation time. Any exception means "not usual": the
    whole body is inside the ``try``, as a browser may send any JSON (an unhashable name)."""
    fields: dict[str, Any] = {}
    try:
        by_name = {result.from_name: result.value for result in results}
        if len(by_name) != len(results):
            return None
        for rating, rationale, _, choices in _CONTROLS:
            chosen = by_name[rating].choices
            if type(chosen) is not list or len(chosen) != 1:
                return None
            fields[rating] = choices[chosen[0]]
            texts = by_name[rationale].text
            if type(texts) is not list or len(texts) != 1 or type(texts[0]) is not str:
                return None  # (a dict of one key would unpack as that key)
            text = usable(texts[0])
            if text is None:
                return None
            fields[rationale] = text
    except (KeyError, AttributeError, TypeError, ValueError):
        return None
    return fields


def read_results(results: list[Result]) -> tuple[dict[str, Any], list[Problem]]:
    """The flat form of one result list, and ``(control, reason)`` for each invalid one."""
    usual = _usual(results)
    if usual is not None:
        return usual, []
    by_name: dict[str, list[Value | None]] = {}
    for result in results:
        if isinstance(result.from_name, str):  # any other name is no control of the rubric
            by_name.setdefault(result.from_name, []).append(result.value)
    fields: dict[str, Any] = {}
    problems: list[Problem] = []
    for rating, rationale, dimension, choices in _CONTROLS:
        values = by_name.get(rating, ())
        if len(values) == 1:
            score, reason = rating_score(values[0], dimension, choices)
            if score is not None:
                fields[rating] = score
        else:
            reason = _not_one(len(values), "rating")
        if reason:
            problems.append((rating, reason))
        values = by_name.get(rationale, ())
        if len(values) == 1:
            text, reason = rationale_text(values[0])
            if text is not None:
                fields[rationale] = text
        else:
            reason = _not_one(len(values), "rationale")
        if reason:
            problems.append((rationale, reason))
    return fields, problems


def read_json_results(raw: Any) -> tuple[dict[str, Any], list[Problem]]:
    """``read_results`` for a result list as plain JSON (from the SDK, a request, a test)."""
    return read_results(results_of(raw))


def evaluation_of(raw_results: Any, evaluator: str = "") -> Evaluation | None:
    """The evaluation a complete, valid result list holds (a prediction's), else None."""
    fields, problems = read_json_results(raw_results)
    return None if problems else Evaluation.from_flat(fields, evaluator)


def predicted_ratings(prediction: Any) -> dict[str, int]:
    """The valid ratings of the prediction an annotator was shown, by control name.

    Label Studio keeps that prediction with the annotation (``prediction``; ``{}`` when none
    was pre-filled). Its rationales and any invalid rating are ignored: only the scores are
    compared with what the annotator submitted.
    """
    if not isinstance(prediction, dict) or not prediction.get("result"):
        return {}
    fields, _ = read_json_results(prediction["result"])
    return {name: fields[name] for name in RATING_FIELDS if name in fields}

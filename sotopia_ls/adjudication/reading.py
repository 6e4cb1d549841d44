"""The adjudication project's annotations → ``adjudicated_scores.csv``, validated.

Each row is one adjudicated rating with the raw scores it settled, which are never changed.
An annotation with a fault is refused whole, each fault one ``Problem``; ``with_adjudicated``
puts the adjudicated scores into a ``scores_long`` frame for a report.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
import pandas as pd
from pydantic import ValidationError

from ..dimensions import AGENTS, DIMENSION_KEYS, RUBRIC
from ..errors import InvalidInput, LabelStudioError, Problem
from ..labelstudio.client import Client, find_project
from ..labelstudio.results import Value, rating_score, rationale_text, results_of
from ..labelstudio.snapshot import project_reads
from ..labelstudio.tasks import EPISODE_ID, agent_field
from .disputes import DISPUTES_KEY, Disputes
from .screen import missing_control, note_name, rating_name

ADJUDICATED_FILE = "adjudicated_scores.csv"
ADJUDICATION_ERRORS_FILE = "adjudication_errors.jsonl"
ADJUDICATION_FILES = (ADJUDICATED_FILE, ADJUDICATION_ERRORS_FILE)
# What a report's scores may be: the raters' own, or adjudicated where adjudicated (here,
# not in the report module, so the command line offers them without loading the statistics).
SCORE_CHOICES = ("raw", "adjudicated")
ADJUDICATED_COLUMNS: tuple[str, ...] = (
    "episode_id",
    "agent",
    "agent_name",
    "dimension",
    "adjudicated_score",
    "note",
    "raw_scores",          # {"A": 2, "B": 8}
    "raw_annotation_ids",  # {"A": 101, "B": 102}: the study project's annotations
    "adjudication_task_id",
    "adjudication_annotation_id",
    "adjudicator_id",      # annotator-<user id>, as the export names annotators
)


@dataclass
class Adjudicated:
    """The adjudicated ratings (``ADJUDICATED_COLUMNS``), why annotations were refused, and
    how many tasks came from other study projects (left out)."""

    scores: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    other_studies: int = 0


def adjudicated_scores(client: Client, project: str | int, study_project: int) -> Adjudicated:
    """Every adjudicated rating of the adjudication project ``project`` (id or title) on an
    episode of the study project ``study_project``; a project without the adjudication
    screen's controls (the study project itself, say) is refused."""
    target = find_project(client, project)
    missing = missing_control(target.label_config)
    if missing:
        raise LabelStudioError(f"project {target.title!r} is not an adjudication project (its "
                               f"labeling config has no {missing})", project=target.id)
    origin = f"project {target.id}"
    try:
        tasks = orjson.loads(b"".join(project_reads(client, target.id)))
    except orjson.JSONDecodeError as error:
        raise InvalidInput([Problem(origin, "", f"not a Label Studio JSON export: {error}")]) from None
    rows: list[dict[str, Any]] = []
    problems: list[Problem] = []
    other_studies = 0
    for task in tasks:
        try:
            disputes = read_disputes(task.get("meta"), origin, f"task {task.get('id')}")
        except InvalidInput as error:
            problems += error.problems
            continue
        if disputes.study_project != study_project:
            other_studies += 1
            continue
        task_rows, task_problems = _task_rows(task, disputes, origin)
        rows += task_rows
        problems += task_problems
    return Adjudicated(pd.DataFrame(rows, columns=list(ADJUDICATED_COLUMNS)), problems,
                       other_studies)


def read_disputes(meta: Any, origin: str, where: str) -> Disputes:
    """An adjudication task's disputes record (``DISPUTES_KEY`` of its ``meta``); one
    ``Problem`` naming the field when it is not one."""
    try:
        return Disputes.model_validate((meta or {}).get(DISPUTES_KEY))
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        place = ".".join(map(str, (DISPUTES_KEY, *first["loc"])))
        reason = first["msg"].removeprefix("Value error, ")
        raise InvalidInput([Problem(origin, where, reason, f"meta {place}")]) from None


def _task_rows(task: dict[str, Any], disputes: Disputes,
               origin: str) -> tuple[list[dict[str, Any]], list[Problem]]:
    where = f"task {task.get('id')}"
    rows: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for annotation in task.get("annotations") or []:
        if annotation.get("was_cancelled"):
            continue
        record = f"{where}, annotation {annotation.get('id')}"
        found, faults = _adjudications(annotation.get("result"), disputes)
        if faults:
            problems += [Problem(origin, record, reason, name) for name, reason in faults]
            continue
        data = task.get("data") or {}
        rows += [{
            "episode_id": str(data.get(EPISODE_ID)),
            "agent": dispute.agent,
            "agent_name": str(data.get(agent_field(dispute.agent, "name"), "")),
            "dimension": dispute.dimension,
            "adjudicated_score": score,
            "note": note,
            "raw_scores": json.dumps(dispute.scores),
            "raw_annotation_ids": json.dumps({rater: disputes.raters[rater]
                                              for rater in dispute.scores}),
            "adjudication_task_id": task.get("id"),
            "adjudication_annotation_id": annotation.get("id"),
            "adjudicator_id": f"annotator-{_user_id(annotation.get('completed_by'))}",
        } for dispute, score, note in found]
    return rows, problems


def _user_id(completed_by: Any) -> Any:
    """A JSON export names the user by id, or by an object holding it."""
    return completed_by.get("id") if isinstance(completed_by, dict) else completed_by


def _adjudications(raw: Any, disputes: Disputes) -> tuple[list[Any], list[tuple[str, str]]]:
    """``(dispute, score, note)`` for each disputed rating of one annotation, and
    ``(control, reason)`` for each fault."""
    by_name: dict[str, list[Value | None]] = {}
    for result in results_of(raw):
        if isinstance(result.from_name, str):
            by_name.setdefault(result.from_name, []).append(result.value)
    found: list[Any] = []
    faults: list[tuple[str, str]] = []
    asked = {(d.agent, d.dimension) for d in disputes.disputed}
    for dispute in disputes.disputed:
        dimension = RUBRIC[dispute.dimension]
        rating, note = (rating_name(dispute.dimension, dispute.agent),
                        note_name(dispute.dimension, dispute.agent))
        score, score_fault = _one(by_name.get(rating, []), "adjudicated rating",
                                  partial(rating_score, dimension=dimension,
                                          choices=dimension.choices))
        text, note_fault = _one(by_name.get(note, []), "note", rationale_text)
        faults += [(name, fault) for name, fault in ((rating, score_fault), (note, note_fault))
                   if fault]
        if score is not None and text is not None:
            found.append((dispute, score, text))
    faults += [(rating_name(key, agent), "rated although the raters agreed (nothing was asked)")
               for agent in AGENTS for key in DIMENSION_KEYS
               if (agent, key) not in asked and by_name.get(rating_name(key, agent))]
    return found, faults


def _one(values: list[Value | None], what: str,
         read: Callable[[Value | None], tuple[Any, str]]) -> tuple[Any, str]:
    """The one value of a control read by ``read``, or why there is none."""
    if len(values) != 1:
        return None, f"missing {what}" if not values else f"{len(values)} {what}s"
    return read(values[0])


def adjudicated_problems(table: pd.DataFrame, origin: str) -> list[Problem]:
    """Each problem of an ``adjudicated_scores`` table read back from ``origin``, naming its
    row (from 1) and field: a missing column, an unknown dimension or agent, a score that is
    no integer or lies outside the dimension's range, raw annotation ids that are not an
    object of rater → annotation id."""
    missing = [name for name in ("episode_id", "agent", "dimension", "adjudicated_score",
                                 "raw_annotation_ids") if name not in table.columns]
    if missing:
        return [Problem(origin, "", f"not an {ADJUDICATED_FILE} (no {', '.join(missing)} "
                        "column)")]
    problems = []
    for number, row in enumerate(table.itertuples(index=False), start=1):
        fault = _row_fault(row)
        if fault:
            problems.append(Problem(origin, f"row {number}", fault[1], fault[0]))
    return problems


def _row_fault(row: Any) -> tuple[str, str] | None:
    """``(field, reason)`` of the first fault of one row, None for none."""
    try:
        dimension = RUBRIC[str(row.dimension)]
    except KeyError as error:
        return "dimension", str(error.args[0])
    if str(row.agent) not in {str(agent) for agent in AGENTS}:
        return "agent", f"{row.agent!r} is not one of {list(AGENTS)}"
    score, reason = rating_score(Value(choices=[str(row.adjudicated_score)]), dimension,
                                 dimension.choices)
    if score is None:
        return "adjudicated_score", reason
    if _annotation_ids(row.raw_annotation_ids) is None:
        return "raw_annotation_ids", (f"{row.raw_annotation_ids!r} is not an object of rater "
                                      "→ annotation id")
    return None


def _annotation_ids(cell: Any) -> list[int] | None:
    """The study annotations a ``raw_annotation_ids`` cell names, None when it is not an
    object of rater → annotation id."""
    try:
        ids = json.loads(cell)
    except (TypeError, ValueError):
        return None
    if not isinstance(ids, dict) or not all(type(each) is int for each in ids.values()):
        return None
    return list(ids.values())


def with_adjudicated(long: pd.DataFrame, adjudicated: pd.DataFrame) -> pd.DataFrame:
    """``long`` (``scores_long``) with the adjudicated score in place of each score it
    settled: on its agent and dimension, those of the annotations its task was sent with
    (``raw_annotation_ids``). A rating made since (an extra rater an adaptive study added
    later) keeps its own score, as do reference ratings; where a rating was adjudicated more
    than once, the latest adjudication counts."""
    latest = (adjudicated.sort_values("adjudication_annotation_id")
              .drop_duplicates(["episode_id", "agent", "dimension"], keep="last"))
    settled = pd.DataFrame(
        [(annotation, int(row.agent), str(row.dimension), int(row.adjudicated_score))
         for row in latest.itertuples(index=False)
         for annotation in _annotation_ids(row.raw_annotation_ids) or []],
        columns=["annotation_id", "agent", "dimension", "score"],
    ).drop_duplicates(["annotation_id", "agent", "dimension"], keep="last")
    keys = pd.MultiIndex.from_arrays([long["annotation_id"].astype("int64"),
                                      long["agent"].astype("int64"), long["dimension"]])
    found = settled.set_index(["annotation_id", "agent", "dimension"])["score"].reindex(keys)
    replaced = long.copy()
    mask = found.notna().to_numpy()
    replaced.loc[mask, "score"] = found.to_numpy()[mask].astype("int64")
    return replaced

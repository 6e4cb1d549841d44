"""The adjudication project's annotations → ``adjudicated_scores.csv``, validated.

One row per adjudicated rating (``ADJUDICATED_COLUMNS``): the episode, agent and dimension,
the adjudicated score and the adjudicator's note, and the raw scores it settled (each rater's
score and annotation id, as JSON, so the row joins back to ``scores_long``). The raw scores
themselves are never changed: this is a file of its own.

Each annotation is checked as every rating is (``labelstudio.results``): for each disputed
rating of its task, one adjudicated score inside the dimension's range and a note that is not
blank; nothing for a rating the raters agreed on. An annotation that fails is refused whole,
each of its faults one ``Problem`` naming the task, the annotation and the control. Skipped
(cancelled) annotations are not adjudications and are passed over.

``with_adjudicated`` puts the adjudicated scores into a ``scores_long`` frame, for a report
that reads them instead of the raw ones.
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
from ..errors import InvalidInput, Problem
from ..labelstudio.client import Client, find_project
from ..labelstudio.results import Value, rating_score, rationale_text, results_of
from ..labelstudio.snapshot import project_reads
from ..labelstudio.tasks import EPISODE_ID, agent_field
from .disputes import DISPUTES_KEY, Disputes
from .screen import note_name, rating_name

ADJUDICATED_FILE = "adjudicated_scores.csv"
ADJUDICATION_ERRORS_FILE = "adjudication_errors.jsonl"
ADJUDICATION_FILES = (ADJUDICATED_FILE, ADJUDICATION_ERRORS_FILE)
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
    """The adjudicated ratings (``ADJUDICATED_COLUMNS``) and why annotations were refused."""

    scores: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)


def adjudicated_scores(client: Client, project: str | int) -> Adjudicated:
    """Every adjudicated rating of the adjudication project ``project`` (id or title)."""
    target = find_project(client, project)
    origin = f"project {target.id}"
    try:
        tasks = orjson.loads(b"".join(project_reads(client, target.id)))
    except orjson.JSONDecodeError as error:
        raise InvalidInput([Problem(origin, "", f"not a Label Studio JSON export: {error}")]) from None
    rows: list[dict[str, Any]] = []
    problems: list[Problem] = []
    for task in tasks:
        task_rows, task_problems = _task_rows(task, origin)
        rows += task_rows
        problems += task_problems
    return Adjudicated(pd.DataFrame(rows, columns=list(ADJUDICATED_COLUMNS)), problems)


def _task_rows(task: dict[str, Any], origin: str) -> tuple[list[dict[str, Any]], list[Problem]]:
    where = f"task {task.get('id')}"
    try:
        disputes = Disputes.model_validate((task.get("meta") or {}).get(DISPUTES_KEY))
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        place = ".".join(map(str, (DISPUTES_KEY, *first["loc"])))
        reason = first["msg"].removeprefix("Value error, ")
        return [], [Problem(origin, where, reason, f"meta {place}")]
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


def adjudicated_problems(table: pd.DataFrame) -> list[tuple[int, str]]:
    """``(row number from 1, reason)`` for each row of an ``adjudicated_scores`` table read
    back whose rating the rubric refuses: an unknown dimension or agent, a score that is no
    integer or lies outside the dimension's range."""
    missing = [name for name in ("episode_id", "agent", "dimension", "adjudicated_score")
               if name not in table.columns]
    if missing:
        return [(0, f"not an {ADJUDICATED_FILE} (no {', '.join(missing)})")]
    problems = []
    for number, row in enumerate(table.itertuples(index=False), start=1):
        try:
            dimension = RUBRIC[str(row.dimension)]
        except KeyError as error:
            problems.append((number, str(error.args[0])))
            continue
        if str(row.agent) not in {str(agent) for agent in AGENTS}:
            problems.append((number, f"agent {row.agent!r} is not one of {list(AGENTS)}"))
            continue
        score, reason = rating_score(Value(choices=[str(row.adjudicated_score)]), dimension,
                                     dimension.choices)
        if score is None:
            problems.append((number, reason))
    return problems


def with_adjudicated(long: pd.DataFrame, adjudicated: pd.DataFrame) -> pd.DataFrame:
    """``long`` (``scores_long``) with the adjudicated score in place of every rater's score
    of each rating adjudicated (reference ratings kept); where one was adjudicated more than once, the latest
    adjudication counts."""
    latest = (adjudicated.sort_values("adjudication_annotation_id")
              .drop_duplicates(["episode_id", "agent", "dimension"], keep="last"))
    settled = latest.set_index(["episode_id", "agent", "dimension"])["adjudicated_score"]
    keys = pd.MultiIndex.from_arrays([long["episode_id"].astype(str),
                                      long["agent"].astype(int), long["dimension"]])
    found = settled.reindex(keys).to_numpy()
    replaced = long.copy()
    # Reference (ground-truth) ratings are no rater's: they stay as given.
    mask = pd.notna(found) & ~long["ground_truth"].astype(bool).to_numpy()
    replaced.loc[mask, "score"] = found[mask].astype("int64")
    return replaced

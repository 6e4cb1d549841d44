"""The reference ratings of a study's gold episodes, read at start and at ``study sync`` from the
oTree-layout CSV or the project's ground-truth annotations, checked by the score model and
recorded in the gateway's database. Every problem is one line naming the file or project, the
row or task, and the field (README.md, "Gold episodes and hidden gold").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...dimensions import rating_name
from ...errors import Problem, StudyError
from ...labelstudio.client import Client, ground_truth_results
from ...labelstudio.results import read_json_results
from ...labelstudio.tasks import EPISODE_ID
from ...scores import RATING_FIELDS, SCORE_FIELDS, Evaluation
from ..settings import StudyFile

Reference = dict[str, int]
_INTEGER = re.compile(r"^[+-]?[0-9]{1,6}$")


def _problem(where: str, record: str, field: str, reason: str) -> StudyError:
    return StudyError(str(Problem(where, record, reason, field)))


def checked_reference(fields: Mapping[str, Any], where: str, record: str) -> Reference:
    """Every rating of the rubric from ``fields`` (integers or their text), each in range."""
    reference: Reference = {}
    for name in RATING_FIELDS:
        value = fields.get(name)
        text = str(value).strip() if value is not None else ""
        if not text:
            raise _problem(where, record, name, "missing rating")
        if not _INTEGER.match(text):
            raise _problem(where, record, name, f"not an integer: {text!r}")
        reference[name] = int(text)
    try:
        Evaluation.from_flat(reference)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        _, agent, key, _ = first["loc"]
        raise _problem(where, record, rating_name(str(key), int(agent) + 1),
                       first["msg"].removeprefix("Value error, ")) from None
    return reference


def _agreeing(found: dict[int, tuple[str, Reference]], task: int, row: str,
              reference: Reference, where: str) -> None:
    """Record ``reference`` for ``task``, unless an earlier row gave it different ratings."""
    if task not in found:
        found[task] = (row, reference)
        return
    first, earlier = found[task]
    for name in RATING_FIELDS:
        if reference[name] != earlier[name]:
            raise _problem(where, row, name, f"{reference[name]} where {first} has "
                           f"{earlier[name]} for the same episode; keep one reference per episode")


def episode_task_ids(data: Mapping[int, Mapping[str, Any]]) -> dict[str, int]:
    """``episode id → task id`` (the lowest, when an episode was imported more than once)."""
    found: dict[str, int] = {}
    for task in sorted(data):
        episode = data[task].get(EPISODE_ID)
        if episode is not None:
            found.setdefault(str(episode), task)
    return found


def csv_references(path: Path, tasks: Mapping[str, int], project: int, *,
                   rationales: bool = False) -> dict[int, Reference]:
    """``task id → reference`` from an oTree-layout CSV; ``tasks`` maps the project's episode
    ids to their task ids; with ``rationales``, each reference holds each rating's rationale
    too (a practice episode's). pandas is imported here, at the gateway's start and only for
    a CSV, so that the gateway's serving path imports no table library."""
    import pandas as pd

    where = str(path)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except OSError as error:
        raise StudyError(f"cannot read the gold references {where}: {error.strerror}") from None
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError) as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else "unreadable"
        raise StudyError(f"{where}: not a CSV file: {reason}") from None
    for name in ("pk", *(SCORE_FIELDS if rationales else RATING_FIELDS)):
        if name not in table.columns:
            raise _problem(where, "row 1", name, "no such column: the oTree layout has pk "
                           "(the episode id) and one column per rating, e.g. believability_1")
    found: dict[int, tuple[str, Reference]] = {}
    # Counted like a spreadsheet: the header is row 1.
    for row, record in enumerate(table.to_dict("records"), start=2):
        label = f"row {row}"
        episode = record["pk"].strip()
        if episode not in tasks:
            raise _problem(where, label, "pk", f"episode {episode!r} is no task of project "
                           f"{project}: import it first, or drop its row")
        reference = checked_reference(record, where, label)
        if rationales:
            texts = {name: record[name].strip() for name in SCORE_FIELDS if name not in reference}
            missing = next((name for name, text in texts.items() if not text), None)
            if missing:
                raise _problem(where, label, missing, "missing rationale")
            reference |= texts
        _agreeing(found, tasks[episode], label, reference, where)
    return {task: reference for task, (_, reference) in found.items()}


def ground_truth_references(client: Client, project: int,
                            tasks: Mapping[str, int]) -> dict[int, Reference]:
    """``task id → reference`` from the project's ground-truth annotations (on the tasks in
    ``tasks``, the episodes' lowest)."""
    where = f"project {project}"
    served = set(tasks.values())
    found: dict[int, Reference] = {}
    for task, (annotation, result) in sorted(ground_truth_results(client, project).items()):
        if task not in served:
            continue
        label = f"task {task} annotation {annotation}"
        fields, problems = read_json_results(result)
        for field, reason in problems:
            if field in RATING_FIELDS:  # a rationale is no part of a reference
                raise _problem(where, label, field, reason)
        found[task] = checked_reference(fields, where, label)
    return found


def gold_references(study: StudyFile, client: Client,
                    data: Mapping[int, Mapping[str, Any]]) -> dict[int, Reference]:
    """The references of the study's gold episodes (``data``: the project's task data by task
    id); a study that uses gold and has none is refused, with the fix."""
    tasks = episode_task_ids(data)
    if study.gold_references is not None:
        found = csv_references(Path(study.gold_references), tasks, study.project)
        source = f"{study.gold_references} holds no row"
    else:
        found = ground_truth_references(client, study.project, tasks)
        source = f"project {study.project} has no ground-truth annotation"
    if not found:
        raise StudyError(
            f"study {study.name} serves gold episodes but {source}: give the reference "
            "ratings in a CSV in the oTree layout (pk, believability_1, …) as the study's "
            "gold_references, or mark an annotation of each gold episode as ground truth in "
            "Label Studio")
    return found


"""The evaluations each model judge stored for a task (its meta, ``tasks.stored_judges``),
copied into the study's database when the gateway starts or syncs: the live worker's judge
figures read them, and so does the quality flag that finds a participant's rationale echoing a
judge's (``flags``). Never sent to a browser."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from ...labelstudio.tasks import stored_judges
from ...scores import Evaluation
from ..store import judge_evaluations
from .flags import RATIONALE_FIELDS


def _judge_texts(judges: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each judge's rationales in its stored evaluation: judge name → field → text."""
    found = {}
    for judge, stored in judges.items():
        try:
            flat = Evaluation.model_validate(stored).flat()
        except ValidationError:  # not an evaluation: nothing of it to compare
            continue
        if texts := {name: flat[name] for name in RATIONALE_FIELDS if flat.get(name)}:
            found[judge] = texts
    return found


def keep_judges(engine: Engine, study: str, meta: dict[int, dict[str, Any]]) -> None:
    """Record the judges' evaluations each task's meta holds (``meta``: task id → meta), as
    stored: their readers validate them. A task's row is replaced, so a sync brings the judges
    evaluated since."""
    rows = [{"study": study, "task_id": task, "judges": judges}
            for task, fields in meta.items() if (judges := stored_judges(fields))]
    if not rows:
        return
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    upsert = dialect.insert(judge_evaluations)
    with engine.begin() as conn:
        conn.execute(upsert.on_conflict_do_update(
            index_elements=["study", "task_id"], set_={"judges": upsert.excluded.judges}), rows)


def judges_rationales(engine: Engine, study: str) -> dict[int, dict[str, dict[str, str]]]:
    """Task id → judge name → rationale field → text, from the evaluations ``keep_judges``
    copied."""
    with engine.connect() as conn:
        stored = conn.execute(
            select(judge_evaluations.c.task_id, judge_evaluations.c.judges)
            .where(judge_evaluations.c.study == study)).all()
    return {task: texts for task, judges in stored
            if (texts := _judge_texts(judges))}

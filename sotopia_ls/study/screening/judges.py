"""The rationales each model judge stored for a task (its meta, ``tasks.stored_judges``),
copied into the study's database when the gateway starts, for the quality flag that finds a
participant's rationale echoing a judge's (``flags``). Never sent to a browser."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, select

from ...labelstudio.tasks import stored_judges
from ...scores import Evaluation
from ..store import insert_of, judge_rationales
from .flags import RATIONALE_FIELDS


def _judge_texts(meta: Any) -> dict[str, dict[str, str]]:
    """Each stored judge's rationales in a task's ``meta``: judge name → field → text."""
    found = {}
    for judge, stored in stored_judges(meta).items():
        try:
            flat = Evaluation.model_validate(stored).flat()
        except ValidationError:  # not an evaluation: nothing of it to compare
            continue
        if texts := {name: flat[name] for name in RATIONALE_FIELDS if flat.get(name)}:
            found[judge] = texts
    return found


def keep_judge_rationales(engine: Engine, study: str, meta: dict[int, Any]) -> None:
    """Copy each task's stored judges' rationales (``meta``: task id → its meta) into the
    study's database, replacing an earlier copy: ``evaluate`` may have run since."""
    rows = [{"study": study, "task_id": task, "rationales": texts}
            for task, value in meta.items() if (texts := _judge_texts(value))]
    if not rows:
        return
    with engine.begin() as conn:
        insert = insert_of(conn, judge_rationales)
        conn.execute(insert.on_conflict_do_update(
            index_elements=["study", "task_id"], set_={"rationales": insert.excluded.rationales}),
            rows)


def judges_rationales(engine: Engine, study: str) -> dict[int, dict[str, dict[str, str]]]:
    """Task id → judge name → rationale field → text, as ``keep_judge_rationales`` copied."""
    with engine.connect() as conn:
        return dict(conn.execute(
            select(judge_rationales.c.task_id, judge_rationales.c.rationales)
            .where(judge_rationales.c.study == study)).all())

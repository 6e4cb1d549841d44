"""A submitted rating: checked with the project's own rules, then saved to Label Studio once.

The editor refuses an incomplete form, but accepts a rationale of spaces and is the
participant's to tamper with; the gateway checks every submission with
``read_json_results``, the rules the exporter applies (every rating present and in range,
every rationale non-empty), and saves only the validated scores, rebuilt as Label Studio
results: nothing else a browser sends reaches the project.

Saving is two steps with the gateway's database in between: ``leases.settle`` records the
submission (``saving``), then the annotation is created in Label Studio under the
participant's user with the assignment key as its ``unique_id``, and the assignment becomes
``saved``. A gateway killed between the two, or a Label Studio that was down, leaves
``saving`` rows that ``resume_saves`` sends again; Label Studio's unique id turns a resend of
an annotation it already holds into a lookup.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from label_studio_sdk import LabelStudio
from sqlalchemy import Engine, select

from ..config import controls
from ..dimensions import AGENTS, DIMENSIONS, rating_name, reasoning_name
from ..errors import LabelStudioError
from ..labelstudio.client import save_annotation
from ..labelstudio.results import evaluation_results, read_json_results
from ..scores import Evaluation
from .leases import Assignment, mark_saved, pending_saves
from .store import participants

log = logging.getLogger("sotopia_ls.study")

# What a participant reads for each control: "Believability rationale for agent 1".
_LABELS = {
    name: f"{dimension.label} {what} for agent {agent}"
    for dimension in DIMENSIONS
    for agent in AGENTS
    for name, what in ((rating_name(dimension.key, agent), "rating"),
                       (reasoning_name(dimension.key, agent), "rationale"))
}


def checked_results(raw: Any, config: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The results to save for a submission, or (``[]``, what a participant must fix)."""
    fields, problems = read_json_results(raw)
    if problems:
        return [], [f"{_LABELS.get(control, control)}: {reason}" for control, reason in problems]
    to_names = {name: control.to_name for name, control in controls(config).items()}
    return evaluation_results(Evaluation.from_flat(fields), to_names), []


def save(engine: Engine, client: LabelStudio, assignment: Assignment, user_id: int) -> int:
    """Create the assignment's annotation in Label Studio (once) and record its id."""
    started = assignment.first_shown_at or assignment.assigned_at
    annotation_id = save_annotation(
        client, assignment.task_id, user_id=user_id, results=assignment.results or [],
        lead_time=assignment.lead_time or 0.0, started_at=started,
        unique_id=str(uuid.UUID(hex=assignment.key)),
    )
    mark_saved(engine, assignment.id, annotation_id)
    return annotation_id


def resume_saves(engine: Engine, client: LabelStudio, study: str) -> int:
    """Send every submission not yet confirmed saved; how many were saved now."""
    pending = pending_saves(engine, study)
    if not pending:
        return 0
    with engine.connect() as conn:
        users = dict(conn.execute(select(participants.c.id, participants.c.ls_user_id).where(
            participants.c.id.in_({a.participant_id for a in pending}))).all())
    saved = 0
    for assignment in pending:
        try:
            save(engine, client, assignment, users[assignment.participant_id])
            saved += 1
        except LabelStudioError as error:
            log.warning("submission %d not saved yet, will retry: %s", assignment.id, error)
    return saved

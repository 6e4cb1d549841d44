"""A participant arriving from Prolific: their URL parameters, their record, their visit.

The ids are kept in lower case, a visit is read only as one of its own study's, and an arrival
makes nothing in Label Studio: the participant's user comes with their first saved rating.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Engine, exists, func, select, update

from ..states import SUBMITTED, Outcome
from ..store import (
    assignments,
    insert_once,
    now,
    page_answers,
    participants,
    practice_attempts,
    visits,
)

_PROLIFIC_ID = r"^[0-9a-fA-F]{24}$"


class ProlificParameters(BaseModel):
    """Prolific's URL parameters, as Prolific documents them."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    PROLIFIC_PID: str = Field(pattern=_PROLIFIC_ID)
    STUDY_ID: str = Field(pattern=_PROLIFIC_ID)
    SESSION_ID: str = Field(pattern=_PROLIFIC_ID)

    @property
    def participant(self) -> str:
        return self.PROLIFIC_PID.lower()


def read_parameters(query: Mapping[str, str]) -> ProlificParameters | list[str]:
    """The parameters of an arrival, or the names of those missing or malformed."""
    try:
        return ProlificParameters.model_validate(dict(query))
    except ValidationError as error:
        return sorted({str(problem["loc"][0]) for problem in error.errors()})


@dataclass(frozen=True)
class Visit:
    """What the gateway knows of one participant's Prolific session."""

    id: int
    participant_id: int
    instructions_read: bool
    rated: int
    outcome: Outcome | None
    answered: frozenset[str]  # the pages whose answers are recorded (``record_answers``)
    feedback_due: bool = False  # a practice attempt of the visit awaits its feedback


def arrive(engine: Engine, study: str, parameters: ProlificParameters) -> Visit:
    """Record the arrival (idempotent: the same participant and session is the same visit)."""
    moment = now()
    external = parameters.participant
    insert_once(engine, participants, {
        "study": study, "external_id": external, "arrived_at": moment})
    with engine.connect() as conn:
        participant = conn.execute(select(participants).where(
            participants.c.study == study, participants.c.external_id == external)).one()
    insert_once(engine, visits, {
        "participant_id": participant.id, "prolific_study_id": parameters.STUDY_ID.lower(),
        "prolific_session_id": parameters.SESSION_ID.lower(), "arrived_at": moment})
    with engine.connect() as conn:
        visit_id = conn.execute(select(visits.c.id).where(
            visits.c.participant_id == participant.id,
            visits.c.prolific_session_id == parameters.SESSION_ID.lower())).scalar_one()
    return load_visit(engine, study, visit_id)


def load_visit(engine: Engine, study: str, visit_id: int) -> Visit | None:
    """The visit of ``study`` as stored now, or None if ``study`` has no such visit (another
    study's visit is none of its own): one query (every request makes it), a row per page
    answered."""
    rated = (select(func.count()).select_from(assignments)
             .where(assignments.c.visit_id == visits.c.id, assignments.c.state.in_(SUBMITTED))
             .scalar_subquery())
    due = exists().where(practice_attempts.c.visit_id == visits.c.id,
                         practice_attempts.c.seen_at.is_(None))
    with engine.connect() as conn:
        rows = conn.execute(
            select(visits, rated.label("rated"), due.label("due"), page_answers.c.page)
            .join(participants, participants.c.id == visits.c.participant_id)
            .outerjoin(page_answers, page_answers.c.visit_id == visits.c.id)
            .where(visits.c.id == visit_id, participants.c.study == study)
        ).all()
    if not rows:
        return None
    row = rows[0]
    return Visit(id=row.id, participant_id=row.participant_id,
                 instructions_read=row.instructions_read_at is not None, rated=row.rated,
                 outcome=None if row.outcome is None else Outcome(row.outcome),
                 answered=frozenset(r.page for r in rows if r.page is not None),
                 feedback_due=bool(row.due))


def mark_instructions_read(engine: Engine, visit_id: int) -> None:
    with engine.begin() as conn:
        conn.execute(update(visits).where(visits.c.id == visit_id,
                                          visits.c.instructions_read_at.is_(None))
                     .values(instructions_read_at=now()))


def record_answers(engine: Engine, visit_id: int, page: str, answers: dict[str, Any]) -> None:
    """Keep what the visit answered on ``page``; the first answers stay (a second click
    changes nothing)."""
    insert_once(engine, page_answers, {"visit_id": visit_id, "page": page, "answers": answers,
                                       "answered_at": now()})


def finish(engine: Engine, visit_id: int, outcome: Outcome) -> None:
    """End the visit with ``outcome``; the first outcome stays."""
    moment: datetime = now()
    with engine.begin() as conn:
        conn.execute(update(visits).where(visits.c.id == visit_id, visits.c.outcome.is_(None))
                     .values(outcome=outcome, finished_at=moment))

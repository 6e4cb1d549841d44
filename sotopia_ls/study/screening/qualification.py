"""A qualification round's verdicts: one per participant, scored against the gold references,
the allow-list of those who passed, and admission to a main study that requires the round.

The verdict is the participant's, not a session's: given once, in one transaction holding
their row, so other sessions, reloads and other gateway processes read it back (README.md,
"Qualification round").
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, Engine, and_, select

from ..states import SUBMITTED, Outcome
from ..store import (
    add_once,
    allow_list,
    assignments,
    gold,
    now,
    participants,
    qualification_results,
    visits,
)
from .flags import largest_distance


@dataclass(frozen=True)
class Verdict:
    """A participant's verdict: passed, and their largest distance to a reference (None: they
    rated no gold episode)."""

    passed: bool
    largest_distance: int | None


def _participant_distance(conn: Connection, study: str, participant_id: int) -> int | None:
    """The largest distance of any rating the participant submitted on a gold episode of the
    round to its reference, whatever the session; None when they submitted none."""
    rows = conn.execute(
        select(assignments.c.results, gold.c.reference)
        .join(gold, and_(gold.c.study == assignments.c.study,
                         gold.c.task_id == assignments.c.task_id))
        .where(assignments.c.study == study, assignments.c.participant_id == participant_id,
               assignments.c.state.in_(SUBMITTED))
    ).all()
    distances = []
    for scores, reference in rows:
        farthest = largest_distance(scores, reference)
        if farthest is not None:
            _, score, truth = farthest
            distances.append(abs(score - truth))
    return max(distances, default=None)


def _recorded(conn: Connection, which: ColumnElement[bool]) -> dict[int, Verdict]:
    """The verdict of each participant ``which`` selects who holds one, by participant id:
    the first recorded (a database made before one verdict a participant may hold more)."""
    rows = conn.execute(
        select(visits.c.participant_id, qualification_results.c.passed,
               qualification_results.c.largest_distance)
        .join(visits, visits.c.id == qualification_results.c.visit_id)
        .join(participants, participants.c.id == visits.c.participant_id)
        .where(which)
        .order_by(qualification_results.c.scored_at, qualification_results.c.visit_id)).all()
    recorded: dict[int, Verdict] = {}
    for row in rows:
        recorded.setdefault(row.participant_id, Verdict(row.passed, row.largest_distance))
    return recorded


def verdict_of(engine: Engine, participant_id: int) -> Verdict | None:
    """The verdict of the round's participant ``participant_id``; None before it is given."""
    with engine.connect() as conn:
        return _recorded(conn, participants.c.id == participant_id).get(participant_id)


def score_visit(engine: Engine, study: str, visit_id: int, max_distance: int) -> Verdict:
    """The verdict of the participant of the completed visit ``visit_id`` of the round
    ``study``: the one they hold, else given now over their gold ratings and recorded with
    this visit (a passer joins the allow-list with it). A participant who rated no gold
    episode has nothing to qualify them: they fail, and nothing is recorded."""
    with engine.begin() as conn:
        # One verdict per participant: their row is held until this one is recorded (a
        # PostgreSQL row lock; SQLite's BEGIN IMMEDIATE already serializes writers).
        participant = conn.execute(
            select(participants.c.id, participants.c.external_id)
            .where(participants.c.id == select(visits.c.participant_id)
                   .where(visits.c.id == visit_id).scalar_subquery())
            .with_for_update()).one()
        held = _recorded(conn, participants.c.id == participant.id).get(participant.id)
        if held is not None:
            return held
        distance = _participant_distance(conn, study, participant.id)
        if distance is None:
            return Verdict(passed=False, largest_distance=None)
        verdict = Verdict(passed=distance <= max_distance, largest_distance=distance)
        add_once(conn, qualification_results, {
            "visit_id": visit_id, "passed": verdict.passed,
            "largest_distance": distance, "scored_at": now()})
        if verdict.passed:
            add_once(conn, allow_list, {"qualification": study,
                                        "external_id": participant.external_id,
                                        "added_at": now()})
    return verdict


def _external_id(conn: Connection, visit_id: int) -> str:
    """The Prolific id of the visit's participant."""
    return conn.execute(
        select(participants.c.external_id)
        .join(visits, visits.c.participant_id == participants.c.id)
        .where(visits.c.id == visit_id)).scalar_one()


def admitted(engine: Engine, qualification: str, external_id: str) -> bool:
    """Whether the participant (``PROLIFIC_PID``) is on the allow-list of ``qualification``."""
    with engine.connect() as conn:
        return conn.execute(select(allow_list.c.external_id).where(
            allow_list.c.qualification == qualification,
            allow_list.c.external_id == external_id.lower())).first() is not None


def visit_admitted(engine: Engine, qualification: str, visit_id: int) -> bool:
    """Whether the visit's participant is on the allow-list of ``qualification``."""
    with engine.connect() as conn:
        external = _external_id(conn, visit_id)
    return admitted(engine, qualification, external)


def allow_list_of(engine: Engine, qualification: str) -> list[str]:
    """The Prolific ids on the allow-list of ``qualification``, in the order they passed."""
    with engine.connect() as conn:
        return list(conn.execute(
            select(allow_list.c.external_id)
            .where(allow_list.c.qualification == qualification)
            .order_by(allow_list.c.added_at, allow_list.c.external_id)).scalars())


def participant_verdicts(engine: Engine, study: str) -> list[Verdict]:
    """The verdict of each participant of the qualification round ``study`` who holds one (a
    pass rate is the share passed: each participant counted once)."""
    with engine.connect() as conn:
        return list(_recorded(conn, participants.c.study == study).values())


def verdicts(engine: Engine, study: str) -> dict[int, Verdict]:
    """The verdict each visit of the qualification round ``study`` ended by, by visit id: its
    participant's, on each visit that completed or was screened out (the code it got was that
    verdict's)."""
    with engine.connect() as conn:
        judged = _recorded(conn, participants.c.study == study)
        ended = conn.execute(
            select(visits.c.id, visits.c.participant_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study,
                   visits.c.outcome.in_([Outcome.COMPLETED, Outcome.SCREENED_OUT]))
            .order_by(visits.c.id)).all()
    return {visit: judged[participant] for visit, participant in ended if participant in judged}

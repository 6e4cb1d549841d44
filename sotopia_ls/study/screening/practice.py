"""The practice step: a participant's attempts at a practice episode, each scored against its
reference, the feedback on one (from the rubric: guidance and the seed example of the
mistake), and the figures the review and the protocol give.

Attempts are the participant's, numbered whatever their session, and recorded in one
transaction holding their row, so a new session or a replayed submit brings no new attempt
(README.md, "Practice with feedback").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select, update

from ...dimensions import AGENTS, RUBRIC, Example, rating_name, reasoning_name
from ..settings import Practice
from ..states import PracticeStanding
from ..store import (
    insert_of,
    now,
    participants,
    practice_attempts,
    practice_episodes,
    replace_references,
    visits,
)
from .flags import largest_distance


def record_practice_episodes(engine: Engine, study: str,
                             references: dict[int, dict[str, Any]]) -> None:
    """Keep the practice episodes' references (replacing any recorded before)."""
    with engine.begin() as conn:
        replace_references(conn, practice_episodes, study, references)


def _standing(passed: list[bool], practice: Practice) -> PracticeStanding:
    if any(passed):
        return PracticeStanding.PASSED
    return PracticeStanding.FAILED if len(passed) >= practice.attempts \
        else PracticeStanding.PRACTISING


def _attempts(conn: Any, participant_id: int) -> list[bool]:
    return list(conn.execute(select(practice_attempts.c.passed)
                             .where(practice_attempts.c.participant_id == participant_id)
                             .order_by(practice_attempts.c.number)).scalars())


def _task(conn: Any, study: str, attempt: int) -> int:
    """The practice episode of the participant's ``attempt`` (from 1), in turn."""
    tasks = list(conn.execute(select(practice_episodes.c.task_id)
                              .where(practice_episodes.c.study == study)
                              .order_by(practice_episodes.c.task_id)).scalars())
    return tasks[(attempt - 1) % len(tasks)]


def standing(engine: Engine, practice: Practice, participant_id: int) -> PracticeStanding:
    """Where the participant stands, over every attempt of theirs."""
    with engine.connect() as conn:
        return _standing(_attempts(conn, participant_id), practice)


def next_task(engine: Engine, study: str, participant_id: int) -> int:
    """The practice episode the participant's next attempt is on."""
    with engine.connect() as conn:
        return _task(conn, study, len(_attempts(conn, participant_id)) + 1)


def record_attempt(engine: Engine, study: str, practice: Practice, visit_id: int,
                   participant_id: int, scores: dict[str, Any]) -> bool:
    """Score ``scores`` as the participant's next attempt, on the episode it was shown; False
    (nothing recorded) once they passed, used every attempt, or have one awaiting its
    feedback in this visit (a submit sent twice)."""
    with engine.begin() as conn:
        conn.execute(select(participants.c.id).where(participants.c.id == participant_id)
                     .with_for_update())
        done = _attempts(conn, participant_id)
        waiting = conn.execute(select(practice_attempts.c.number).where(
            practice_attempts.c.visit_id == visit_id,
            practice_attempts.c.seen_at.is_(None))).first()
        if waiting or _standing(done, practice) != PracticeStanding.PRACTISING:
            return False
        task = _task(conn, study, len(done) + 1)
        reference = conn.execute(select(practice_episodes.c.reference).where(
            practice_episodes.c.study == study, practice_episodes.c.task_id == task)).scalar_one()
        _, score, truth = largest_distance(scores, reference)
        distance = abs(score - truth)
        conn.execute(insert_of(conn, practice_attempts).values(
            participant_id=participant_id, number=len(done) + 1, visit_id=visit_id,
            task_id=task, scores=scores, largest_distance=distance,
            passed=distance <= practice.max_distance, submitted_at=now()))
    return True


@dataclass(frozen=True)
class Line:
    """One rating of an attempt beside its reference; ``off``: farther than the tolerance,
    with the rubric's guidance and the seed example of the mistake (if the rubric has one)."""

    dimension: str
    agent: int
    score: int
    reference: int
    rationale: str
    off: bool
    guidance: str
    example: Example | None


@dataclass(frozen=True)
class Feedback:
    """The visit's attempt awaiting its feedback, its lines, and where the participant
    stands after it."""

    number: int
    task_id: int
    lines: tuple[Line, ...]
    standing: PracticeStanding
    attempts_left: int


def feedback(engine: Engine, study: str, practice: Practice, visit_id: int) -> Feedback | None:
    """The feedback on the visit's attempt not yet seen; None when there is none."""
    with engine.connect() as conn:
        attempt = conn.execute(
            select(practice_attempts, practice_episodes.c.reference)
            .join(practice_episodes, (practice_episodes.c.study == study)
                  & (practice_episodes.c.task_id == practice_attempts.c.task_id))
            .where(practice_attempts.c.visit_id == visit_id,
                   practice_attempts.c.seen_at.is_(None))).first()
        if attempt is None:
            return None
        passed = _attempts(conn, attempt.participant_id)
    lines = []
    for agent in AGENTS:
        for dimension in RUBRIC.dimensions:
            name = rating_name(dimension.key, agent)
            score, truth = attempt.scores[name], attempt.reference[name]
            off = abs(score - truth) > practice.max_distance
            lines.append(Line(dimension.label, agent, score, truth,
                              attempt.reference[reasoning_name(dimension.key, agent)], off,
                              dimension.guidance,
                              dimension.example_for(score, truth) if off else None))
    return Feedback(attempt.number, attempt.task_id, tuple(lines),
                    _standing(passed, practice), max(0, practice.attempts - len(passed)))


def mark_seen(engine: Engine, visit_id: int) -> None:
    """The participant went on from the feedback on the visit's attempt."""
    with engine.begin() as conn:
        conn.execute(update(practice_attempts).where(practice_attempts.c.visit_id == visit_id,
                                                     practice_attempts.c.seen_at.is_(None))
                     .values(seen_at=now()))


def _study_attempts(engine: Engine, study: str,
                    practice: Practice) -> tuple[list[Any], dict[int, PracticeStanding]]:
    """Every practice attempt of ``study`` (participant, visit, passed), and where each
    participant who made one stands."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(practice_attempts.c.participant_id, practice_attempts.c.visit_id,
                   practice_attempts.c.passed)
            .join(participants, participants.c.id == practice_attempts.c.participant_id)
            .where(participants.c.study == study)
            .order_by(practice_attempts.c.number)).all()
    by_participant: dict[int, list[bool]] = {}
    for row in rows:
        by_participant.setdefault(row.participant_id, []).append(row.passed)
    return rows, {person: _standing(passed, practice)
                  for person, passed in by_participant.items()}


def visit_practice(engine: Engine, study: str,
                   practice: Practice) -> dict[int, tuple[PracticeStanding, int]]:
    """For each visit of ``study`` whose participant made a practice attempt (in any
    session): where the participant stands, and the attempts made in that visit."""
    rows, standings = _study_attempts(engine, study, practice)
    made = Counter(row.visit_id for row in rows)
    with engine.connect() as conn:
        theirs = conn.execute(select(visits.c.id, visits.c.participant_id).where(
            visits.c.participant_id.in_(sorted(standings)))).all()
    return {visit: (standings[person], made[visit]) for visit, person in theirs}


def training_figures(engine: Engine, study: str, practice: Practice) -> dict[str, Any]:
    """The practice step's settings and outcome, counted per participant: who tried, passed,
    failed every attempt; the pass rate among those done; the attempts made."""
    rows, standings = _study_attempts(engine, study, practice)
    passed = sum(s == PracticeStanding.PASSED for s in standings.values())
    failed = sum(s == PracticeStanding.FAILED for s in standings.values())
    return {"attempts_allowed": practice.attempts, "max_distance": practice.max_distance,
            "participants": len(standings), "passed": passed, "failed": failed,
            "pass_rate": round(passed / (passed + failed), 4) if passed + failed else None,
            "attempts": len(rows),
            "attempts_per_participant": round(len(rows) / len(standings), 2)
            if standings else None}

"""A qualification round's verdicts: a completed visit scored against the gold references, the
allow-list of those who passed, and admission to a main study that requires the round.

A visit of a qualification round (``StudyFile.qualification``) is scored as it completes
(``score_visit``, called by ``flow`` with the visit's last rating, so a participant who closes
the tab right after it is scored all the same): each rating of each gold episode it submitted
is compared with that episode's reference (``store.gold``), and it passes when the largest
distance is at most ``max_distance`` (Sotopia-π's rule: every rating within 2 points). The
verdict is recorded once (``qualification_results``) and a passer's Prolific id joins the
round's allow-list (``allow_list``, under the round's study name), both as inserts that keep
the first row: the done page asking again, a reload, or two gateway processes at once score
nothing twice. No page ever shows the verdict's distance or a reference; the done page only
reads the verdict to pick which code to give.

A main study that requires the round (``StudyFile.requires_qualification``, on the same
database) admits only its allow-list (``admitted``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, and_, select

from ...labelstudio.results import read_json_results
from ..slots.leases import COUNTED
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
    """A scored qualification visit: passed, and its largest distance to a reference (None:
    it rated no gold episode)."""

    passed: bool
    largest_distance: int | None


def _visit_distance(conn: Connection, study: str, visit_id: int) -> int | None:
    """The largest distance of any rating the visit submitted on a gold episode to its
    reference; None when it submitted no rating of a gold episode."""
    rows = conn.execute(
        select(assignments.c.results, gold.c.reference)
        .join(gold, and_(gold.c.study == assignments.c.study,
                         gold.c.task_id == assignments.c.task_id))
        .where(assignments.c.study == study, assignments.c.visit_id == visit_id,
               assignments.c.state.in_(COUNTED))
    ).all()
    distances = []
    for results, reference in rows:
        fields, _ = read_json_results(results)
        farthest = largest_distance(fields, reference)
        if farthest is not None:
            _, score, truth = farthest
            distances.append(abs(score - truth))
    return max(distances, default=None)


def score_visit(engine: Engine, study: str, visit_id: int, max_distance: int) -> Verdict:
    """The verdict on a completed visit of the qualification round ``study``: recorded the
    first time (a passer joins the allow-list with it), read back every time after. A visit
    that rated no gold episode has nothing to qualify it: it fails, and nothing is recorded."""
    with engine.begin() as conn:
        distance = _visit_distance(conn, study, visit_id)
        if distance is None:
            return Verdict(passed=False, largest_distance=None)
        add_once(conn, qualification_results, {
            "visit_id": visit_id, "passed": distance <= max_distance,
            "largest_distance": distance, "scored_at": now()})
        recorded = conn.execute(select(qualification_results).where(
            qualification_results.c.visit_id == visit_id)).one()
        if recorded.passed:
            add_once(conn, allow_list, {"qualification": study,
                                        "external_id": _external_id(conn, visit_id),
                                        "added_at": now()})
    return Verdict(passed=recorded.passed, largest_distance=recorded.largest_distance)


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


def verdicts(engine: Engine, study: str) -> dict[int, Verdict]:
    """Every recorded verdict of the qualification round ``study``, by visit id (a pass rate
    is the share passed)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(qualification_results)
            .join(visits, visits.c.id == qualification_results.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study)
            .order_by(qualification_results.c.visit_id)).all()
    return {row.visit_id: Verdict(passed=row.passed, largest_distance=row.largest_distance)
            for row in rows}

"""The study's side of the protocol record: the design and what happened, for a paper's methods
section, read from the study file and the gateway's database. Counts and settings only: no
id, code, address or database URL; ``sotopia-ls export --study`` merges it into
``protocol.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, func, select

from ..exporter.protocol import QUALIFICATION_ROUND, median_minutes
from ..labelstudio.tasks import REVIEW_DECISIONS
from .payment.bonus import bonus_totals
from .screening.practice import training_figures
from .screening.qualification import participant_verdicts
from .screening.review import DECISIONS, thresholds
from .settings import StudyFile, read_study
from .slots.leases import added_slots
from .states import SUBMITTED, Outcome
from .store import (
    assignments,
    decisions,
    gold,
    open_store,
    participants,
    visits,
)


def _rule(max_distance: int) -> str:
    return f"every rating was within ±{max_distance} of the reference rating"


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _pass_rate(engine: Engine, round_name: str) -> dict[str, Any]:
    """How many participants of the qualification round ``round_name`` were scored, and
    passed."""
    scored = participant_verdicts(engine, round_name)
    passed = sum(verdict.passed for verdict in scored)
    return {"scored": len(scored), "passed": passed, "pass_rate": _share(passed, len(scored))}


def _qualification(engine: Engine, study: StudyFile) -> dict[str, Any] | None:
    """The qualification round this study is, or the one it requires (same database)."""
    if study.qualification is not None:
        return {"role": "this study is the qualification round",
                "rule": _rule(study.qualification.max_distance),
                "max_distance": study.qualification.max_distance,
                **_pass_rate(engine, study.name)}
    if study.requires_qualification is not None:
        return {"role": "participants had to pass a qualification round",
                "round": study.requires_qualification,
                **_pass_rate(engine, study.requires_qualification)}
    return None


def _adaptive(engine: Engine, study: StudyFile) -> dict[str, Any] | None:
    """Adaptive extra raters: the settings and how many slots were added and rated; None
    when the study does not add any."""
    if study.adaptive is None:
        return None
    added = added_slots(engine, study.name, study.raters_per_episode)
    return {**study.adaptive.model_dump(), "slots_added": added.opened,
            "added_slots_rated": added.rated}


def study_protocol(engine: Engine, study: StudyFile) -> dict[str, Any]:
    """The study's design and what its gateway recorded, as counts and settings (no ids)."""
    name = study.name
    counted = and_(assignments.c.study == name, assignments.c.state.in_(SUBMITTED))
    with engine.connect() as conn:
        times = list(conn.execute(select(assignments.c.lead_time).where(counted)).scalars())
        gold_ratings = conn.execute(
            select(func.count()).select_from(assignments)
            .join(gold, and_(gold.c.study == assignments.c.study,
                             gold.c.task_id == assignments.c.task_id))
            .where(counted)).scalar_one()
        people = conn.execute(select(func.count()).where(participants.c.study == name)
                              ).scalar_one()
        outcomes = dict(conn.execute(
            select(visits.c.outcome, func.count())
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == name).group_by(visits.c.outcome)).all())
        decided = dict(conn.execute(
            select(decisions.c.decision, func.count())
            .join(visits, visits.c.id == decisions.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == name).group_by(decisions.c.decision)).all())
    return {
        "study": name,
        "kind": QUALIFICATION_ROUND if study.qualification is not None else "main study",
        "raters_per_episode": study.raters_per_episode,
        "episodes_per_participant": study.episodes_per_participant,
        "lease_minutes": study.lease_minutes,
        "gold_share": 1.0 if study.qualification is not None else study.gold_share,
        "qualification": _qualification(engine, study),
        "flag_thresholds": thresholds(study).model_dump(),
        "participants": people,
        "sessions": {"total": sum(outcomes.values()),
                     **{outcome.value: outcomes.get(outcome, 0) for outcome in Outcome},
                     "unfinished": outcomes.get(None, 0)},
        "ratings": len(times),
        "gold_ratings": gold_ratings,
        "median_minutes_per_episode": median_minutes([t for t in times if t is not None]),
        "adaptive": _adaptive(engine, study),
        "training": training_figures(engine, name, study.practice) if study.practice else None,
        # Only a qualification round and a practice step screen out.
        "decisions": {kind: decided.get(kind, 0) for kind in (
            DECISIONS if study.qualification is not None or study.practice is not None
            else REVIEW_DECISIONS)},
        "bonuses": {**bonus_totals(engine, name),
                    "currency": study.reward.currency if study.reward else None},
    }


def studies_protocol(paths: Sequence[Path], database: str | None = None) -> list[dict[str, Any]]:
    """``study_protocol`` of each study file, in order, each read from its own database or
    from ``database`` when given (a qualification and its main study share one)."""
    records = []
    for path in paths:
        study = read_study(path)
        engine = open_store(database or study.database)
        try:
            records.append(study_protocol(engine, study))
        finally:
            engine.dispose()
    return records

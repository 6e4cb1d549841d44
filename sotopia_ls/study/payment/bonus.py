"""Bonuses, paid once: by rule for approved submissions (per rating on a slot the adaptive rule
added, per gold rating within the tolerance), recorded, set up on Prolific as a bulk bonus,
then paid. Each step is recorded, the pay call before it is sent, so a rerun never pays twice
though Prolific's pay call is not idempotent (README.md, "Bonuses").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, func, select, update

from ..screening.review import read_visits
from ..settings import QUALIFYING_DISTANCE, StudyFile
from ..states import BonusState
from ..store import (
    add_once,
    added_ratings,
    assignments,
    bonus_payments,
    bonuses,
    decisions,
    now,
    participants,
    visits,
)
from .hourly import money
from .prolific import Prolific, ProlificRefused


@dataclass(frozen=True)
class BonusRule:
    """What a submission earns, in hundredths of the currency: per rating on an added slot,
    per gold rating within ``tolerance`` of its reference."""

    per_extra: int = 0
    per_gold: int = 0

    def __bool__(self) -> bool:
        return bool(self.per_extra or self.per_gold)


@dataclass(frozen=True)
class Bonus:
    """One submission's bonus and why."""

    visit_id: int
    submission_id: str
    participant_id: str
    prolific_study: str
    cents: int
    reason: str


@dataclass(frozen=True)
class BonusPlan:
    """What is left to do of a study's bonuses."""

    currency: str | None
    new: tuple[Bonus, ...]  # earned by the rule, not recorded yet
    waiting: tuple[Bonus, ...]  # recorded, not set up (a set-up that failed)
    to_pay: tuple[str, ...]  # bulk bonuses set up, not paid
    unanswered: tuple[str, ...]  # pay sent, no answer: never sent again

    def amount(self, cents: int) -> str:
        return money(cents, self.currency) if self.currency else f"{cents / 100:.2f}"

    def lines(self) -> list[str]:
        out = [f"bonus    submission {b.submission_id} (participant {b.participant_id}): "
               f"{self.amount(b.cents)} for {b.reason}" for b in (*self.new, *self.waiting)]
        out += [f"pay      bulk bonus {bulk} (set up before)" for bulk in self.to_pay]
        out += [f"unknown  bulk bonus {bulk}: its pay call was sent and no answer came; check "
                "it on Prolific (it is never sent again)" for bulk in self.unanswered]
        return out


def _tolerance(study: StudyFile) -> int:
    return study.qualification.max_distance if study.qualification else QUALIFYING_DISTANCE


def _earned(engine: Engine, study: StudyFile, rule: BonusRule) -> list[Bonus]:
    """The rule's bonus for each approved submission without one recorded."""
    with engine.connect() as conn:
        owed = {row.visit_id: row for row in conn.execute(
            select(visits.c.id.label("visit_id"), visits.c.prolific_session_id,
                   visits.c.prolific_study_id, participants.c.external_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .join(decisions, decisions.c.visit_id == visits.c.id)
            .where(participants.c.study == study.name, decisions.c.decision == "approve",
                   visits.c.id.not_in(select(bonuses.c.visit_id))))}
        extras = dict(conn.execute(
            select(assignments.c.visit_id, func.count())
            .join(added_ratings, added_ratings.c.assignment_id == assignments.c.id)
            .where(assignments.c.visit_id.in_(owed)).group_by(assignments.c.visit_id)).all())
    golds: Counter[int] = Counter()
    if rule.per_gold and owed:
        for visit in read_visits(engine, study):
            golds[visit.id] = sum(r.gold and r.distance is not None
                                  and r.distance <= _tolerance(study) for r in visit.rated)
    earned = []
    for visit_id, row in owed.items():
        extra, gold = extras.get(visit_id, 0), golds[visit_id]
        cents = extra * rule.per_extra + gold * rule.per_gold
        if cents:
            reasons = [f"{extra} rating(s) on added slots" if extra * rule.per_extra else "",
                       f"{gold} gold rating(s) within {_tolerance(study)}"
                       if gold * rule.per_gold else ""]
            earned.append(Bonus(visit_id, row.prolific_session_id, row.external_id,
                                row.prolific_study_id, cents,
                                " and ".join(filter(None, reasons))))
    return earned


def plan_bonuses(engine: Engine, study: StudyFile, rule: BonusRule | None) -> BonusPlan:
    """The bonuses ``rule`` adds (none without it) and those recorded but not yet paid."""
    with engine.connect() as conn:
        waiting = [Bonus(row.visit_id, row.prolific_session_id, row.external_id,
                         row.prolific_study_id, row.cents, row.reason) for row in conn.execute(
            select(bonuses, visits.c.prolific_session_id, visits.c.prolific_study_id,
                   participants.c.external_id)
            .join(visits, visits.c.id == bonuses.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study.name, bonuses.c.payment_id.is_(None))
            .order_by(bonuses.c.visit_id))]
    return BonusPlan(
        currency=study.reward.currency if study.reward else None,
        new=tuple(_earned(engine, study, rule)) if rule else (), waiting=tuple(waiting),
        to_pay=tuple(bulk_bonuses(engine, study.name, BonusState.SET_UP)),
        unanswered=tuple(bulk_bonuses(engine, study.name, BonusState.PAYING)))


def bulk_bonuses(engine: Engine, study: str, state: BonusState) -> list[str]:
    """The ids of the study's bulk bonuses in ``state``, first set up first."""
    with engine.connect() as conn:
        return list(conn.execute(select(bonus_payments.c.id).where(
            bonus_payments.c.study == study, bonus_payments.c.state == state)
            .order_by(bonus_payments.c.set_up_at)).scalars())


def record_bonuses(engine: Engine, earned: tuple[Bonus, ...]) -> None:
    """Keep the bonuses the rule gave, once: what is set up is what was recorded."""
    with engine.begin() as conn:
        for bonus in earned:
            add_once(conn, bonuses, {"visit_id": bonus.visit_id, "cents": bonus.cents,
                                     "reason": bonus.reason, "recorded_at": now()})


def set_up(engine: Engine, prolific: Prolific, study: str, prolific_study: str,
           owed: list[Bonus]) -> str:
    """Set up ``owed`` (one Prolific study's) as one bulk bonus, recorded with its id."""
    bulk = prolific.set_up_bonuses(prolific_study, [(b.submission_id, b.cents) for b in owed])
    with engine.begin() as conn:
        conn.execute(bonus_payments.insert().values(
            id=bulk.id, study=study, prolific_study_id=prolific_study,
            state=BonusState.SET_UP, set_up_at=now()))
        conn.execute(update(bonuses).where(bonuses.c.visit_id.in_([b.visit_id for b in owed]))
                     .values(payment_id=bulk.id))
    return bulk.id


def pay(engine: Engine, prolific: Prolific, bulk_id: str) -> bool:
    """Pay a bulk bonus set up before, marked ``paying`` before the call is sent; False when
    another run took it. Refused, it is set up again (nothing was paid); unanswered, it stays
    ``paying`` and is never sent again."""
    with engine.begin() as conn:
        taken = conn.execute(update(bonus_payments).where(
            bonus_payments.c.id == bulk_id, bonus_payments.c.state == BonusState.SET_UP)
            .values(state=BonusState.PAYING, paid_at=now())).rowcount
    if not taken:
        return False
    try:
        prolific.pay_bonuses(bulk_id)
    except ProlificRefused:
        _mark(engine, bulk_id, BonusState.SET_UP)
        raise
    _mark(engine, bulk_id, BonusState.PAID)
    return True


def _mark(engine: Engine, bulk_id: str, state: BonusState) -> None:
    with engine.begin() as conn:
        conn.execute(update(bonus_payments).where(bonus_payments.c.id == bulk_id)
                     .values(state=state))


def bonus_totals(engine: Engine, study: str) -> dict[str, Any]:
    """The study's bonuses for its protocol record: submissions and the total, all recorded
    and those paid (the currency's units)."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(bonuses.c.cents, bonus_payments.c.state)
            .outerjoin(bonus_payments, bonus_payments.c.id == bonuses.c.payment_id)
            .join(visits, visits.c.id == bonuses.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study)).all()
    paid = [row.cents for row in rows if row.state == BonusState.PAID]
    return {"submissions": len(rows), "total": sum(row.cents for row in rows) / 100,
            "paid_submissions": len(paid), "paid_total": sum(paid) / 100}

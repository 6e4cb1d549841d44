"""The pay per hour a study's reward comes to, from the minutes its participants spent on the
rating pages, as Prolific works it out from the median; ``pay_lines`` says it for ``study
status`` and ``study review``, warning under Prolific's minimum (README.md, "Pay per hour").
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine, select

from ..screening.timing import rating_times
from ..settings import Reward, StudyFile
from ..states import Outcome
from ..store import visits

# Per hour, in hundredths of the currency, as Prolific's researcher help states them ("Prolific's
# payment principles", researcher-help.prolific.com/hc/en-gb/articles/4407695146002): the least
# a study may pay, and the least Prolific recommends. Its Reward Recommendations API
# (docs.prolific.com/api-reference/reward-recommendations) gives the current ones.
PROLIFIC_MINIMUM = {"GBP": 600, "USD": 800}
PROLIFIC_RECOMMENDED = {"GBP": 900, "USD": 1200}
_SYMBOLS = {"GBP": "£", "USD": "$"}


def money(cents: float, currency: str) -> str:
    """``£2.50``: ``cents`` hundredths of ``currency``."""
    return f"{_SYMBOLS[currency]}{cents / 100:.2f}"


@dataclass(frozen=True)
class HourlyPay:
    """The reward over the median minutes of the ``visits`` completed; their ratings' time
    on task was the visible time for ``visible`` of them, the lead time for ``lead``."""

    reward: Reward
    visits: int
    median_minutes: float
    visible: int
    lead: int

    @property
    def cents_per_hour(self) -> float:
        return self.reward.cents * 60 / self.median_minutes

    @property
    def under_minimum(self) -> bool:
        return self.cents_per_hour < PROLIFIC_MINIMUM[self.reward.currency]

    def reward_for(self, per_hour: int) -> int:
        """The least reward per visit, in cents, that pays ``per_hour`` at the median."""
        return math.ceil(per_hour * self.median_minutes / 60)

    def lines(self) -> list[str]:
        currency = self.reward.currency
        minimum, recommended = PROLIFIC_MINIMUM[currency], PROLIFIC_RECOMMENDED[currency]
        measured = f"the visible time of {self.visible} rating(s)" if self.visible else ""
        fallback = (f"Label Studio's lead time of {self.lead} rating(s) the page did not "
                    "measure" if self.lead else "")
        lines = [
            f"pay per hour: {money(self.cents_per_hour, currency)} "
            f"({money(self.reward.cents, currency)} per visit over a median "
            f"{self.median_minutes:.1f} min per visit, {self.visits} visit(s) completed; "
            f"time on task: {' and '.join(filter(None, (measured, fallback)))})"]
        if self.under_minimum:
            lines.append(
                f"⚠ under Prolific's minimum of {money(minimum, currency)} an hour: raise the "
                f"reward to at least {money(self.reward_for(minimum), currency)} per visit, or "
                "pay the difference as a bonus")
        elif self.cents_per_hour < recommended:
            lines.append(f"(Prolific recommends at least {money(recommended, currency)} an "
                         f"hour: {money(self.reward_for(recommended), currency)} per visit)")
        return lines


def hourly_pay(engine: Engine, study: StudyFile) -> HourlyPay | None:
    """The pay per hour ``study.reward`` comes to over the median minutes on task of the
    completed visits; None without a reward or before a completed visit with a timed
    rating."""
    if study.reward is None:
        return None
    timed = [rating for rating in rating_times(engine, study.name) if rating.seconds]
    with engine.connect() as conn:
        completed = set(conn.execute(select(visits.c.id).where(
            visits.c.id.in_({rating.visit_id for rating in timed}),
            visits.c.outcome == Outcome.COMPLETED)).scalars())
    paid = [rating for rating in timed if rating.visit_id in completed]
    if not paid:
        return None
    seconds: dict[int, float] = defaultdict(float)
    for rating in paid:
        seconds[rating.visit_id] += rating.seconds or 0
    visible = sum(rating.visible_seconds is not None for rating in paid)
    return HourlyPay(study.reward, len(seconds), statistics.median(seconds.values()) / 60,
                     visible, len(paid) - visible)


def pay_lines(study: StudyFile, pay: HourlyPay | None) -> list[str]:
    """What ``study status`` and ``study review`` say of the pay per hour."""
    if study.reward is None:
        return ["pay per hour: no reward in the study file (`study init --reward`)"]
    if pay is None:
        return [f"pay per hour: no completed visit yet "
                f"({money(study.reward.cents, study.reward.currency)} per visit)"]
    return pay.lines()

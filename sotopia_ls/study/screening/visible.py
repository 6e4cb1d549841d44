"""Time on task: the seconds a rating page was visible and focused, not merely open, as the page
counted them; kept once per submission, never above the lead time the gateway's own clock saw
(the page's figure then kept in ``clipped_times``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field
from sqlalchemy import Column, Connection, Engine, func, insert, select

from ..store import assignments, clipped_times, visible_time

# The page stops counting here: a session lasts two days, but nobody rates one episode for a
# whole day, so the bound only has to stop absurd numbers.
MOST_SECONDS = 24 * 3600

VisibleSeconds = Annotated[float, Field(ge=0, le=MOST_SECONDS, allow_inf_nan=False,
                                         strict=True)]


@dataclass(frozen=True)
class Quartiles:
    """Minutes per episode or per participant: the lower quartile, the median and the upper
    quartile, of ``count`` ratings or participants."""

    low: float
    median: float
    high: float
    count: int


def quartiles(seconds: Sequence[float]) -> Quartiles | None:
    """The quartiles of ``seconds``, in minutes; None for none."""
    if not seconds:
        return None
    import numpy as np  # here, not at the gateway's start: only the dashboard asks

    low, median, high = np.percentile(np.array(seconds) / 60, [25, 50, 75])
    return Quartiles(float(low), float(median), float(high), len(seconds))


def page_measuring() -> dict[str, object]:
    """What the rating page needs to measure: where a measure stops."""
    return {"most": MOST_SECONDS}


def add_visible(conn: Connection, assignment_id: int, seconds: float, observed: float) -> None:
    """Keep the visible time of an assignment the transaction settles, at most the
    ``observed`` seconds from its page first shown to its submission; a page claiming more is
    kept in ``clipped_times`` too."""
    conn.execute(insert(visible_time).values(assignment_id=assignment_id,
                                             seconds=min(seconds, observed)))
    if seconds > observed:
        conn.execute(insert(clipped_times).values(assignment_id=assignment_id, claimed=seconds))


def recorded_visible(engine: Engine, assignment_ids: Iterable[int]) -> dict[int, float]:
    """The visible seconds kept for each of ``assignment_ids`` that has them."""
    return _by_assignment(engine, visible_time.c.seconds, assignment_ids)


def clipped(engine: Engine, assignment_ids: Iterable[int]) -> dict[int, float]:
    """The page's visible seconds for each of ``assignment_ids`` whose page claimed more time
    than the gateway saw pass (its ``visible_time`` is the time that passed)."""
    return _by_assignment(engine, clipped_times.c.claimed, assignment_ids)


def _by_assignment(engine: Engine, column: Column[float],
                   assignment_ids: Iterable[int]) -> dict[int, float]:
    table = column.table
    with engine.connect() as conn:
        return dict(conn.execute(select(table.c.assignment_id, column).where(
            table.c.assignment_id.in_(list(assignment_ids)))).all())


def clipped_count(engine: Engine, study: str) -> int:
    """How many of the study's ratings had their visible time clipped."""
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(clipped_times).join(assignments)
                            .where(assignments.c.study == study)).scalar_one()


def visible_quartiles(engine: Engine, study: str) -> Quartiles | None:
    """The quartiles of the study's visible minutes per episode; None before any is kept."""
    with engine.connect() as conn:
        return quartiles(conn.execute(select(visible_time.c.seconds).join(assignments).where(
            assignments.c.study == study)).scalars().all())


def participant_quartiles(engine: Engine, study: str) -> Quartiles | None:
    """The quartiles of the study's visible minutes per participant (summed over their
    measured ratings); None before any is kept."""
    with engine.connect() as conn:
        return quartiles(conn.execute(
            select(func.sum(visible_time.c.seconds)).join(assignments)
            .where(assignments.c.study == study)
            .group_by(assignments.c.participant_id)).scalars().all())

"""Time on task: the seconds a rating page was visible and focused, not merely open.

The rating page (``static/gateway.js``) counts them while the tab is shown and its window has
the focus (``document.visibilityState`` and window focus; nothing typed is read), carries them
over a reload of the same episode, and sends them with the rating as ``visible_seconds``. The
gateway keeps them in the ``visible_time`` table with the settled assignment, once: the quality
flags' time on task and ``study status``'s minutes per episode. Label Studio's ``lead_time``
(kept too) counts from the page first shown, time in another tab included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import Field
from sqlalchemy import Engine, func, select

from ..store import assignments, insert_once, visible_time

# The page stops counting here: a session lasts two days, but nobody rates one episode for a
# whole day, so the bound only has to stop absurd numbers.
MOST_SECONDS = 24 * 3600

VisibleSeconds = Annotated[float, Field(ge=0, le=MOST_SECONDS, allow_inf_nan=False)]


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
    low, median, high = np.percentile(np.array(seconds) / 60, [25, 50, 75])
    return Quartiles(float(low), float(median), float(high), len(seconds))


def page_measuring() -> dict[str, object]:
    """What the rating page needs to measure: where a measure stops."""
    return {"most": MOST_SECONDS}


def record_visible(engine: Engine, assignment_id: int, seconds: float) -> None:
    """Keep the visible time of a settled assignment; a second submission of it keeps the
    first."""
    insert_once(engine, visible_time, {"assignment_id": assignment_id, "seconds": seconds})


def recorded_visible(engine: Engine, assignment_ids: Iterable[int]) -> dict[int, float]:
    """The visible seconds kept for each of ``assignment_ids`` that has them."""
    with engine.connect() as conn:
        return dict(conn.execute(select(visible_time.c.assignment_id, visible_time.c.seconds)
                                 .where(visible_time.c.assignment_id.in_(list(assignment_ids))))
                    .all())


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

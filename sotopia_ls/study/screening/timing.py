"""Time on task per rating, as the gateway recorded it: when the episode was given (assigned),
first shown and submitted, and the seconds its rating page was visible and focused
(``visible``), else Label Studio's lead time.

``rating_times`` reads them for one study; the export's time-on-task columns
(``annotation_times``, by Label Studio annotation id) and the pay estimate (``hourly``) are
made from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from ..settings import read_study
from ..states import SUBMITTED
from ..store import assignments, aware, open_store
from .visible import recorded_visible


@dataclass(frozen=True)
class RatingTimes:
    """One submitted rating's times (``visible_seconds`` None where the page measured none)."""

    assignment_id: int
    visit_id: int
    annotation_id: int | None  # Label Studio's, once the rating is saved there
    assigned_at: datetime
    first_shown_at: datetime | None
    submitted_at: datetime | None
    lead_time: float | None
    visible_seconds: float | None

    @property
    def seconds(self) -> float | None:
        """Time on task: the visible time where the page measured it (Label Studio's lead
        time runs on while the participant is in another tab), else the lead time."""
        return self.visible_seconds if self.visible_seconds is not None else self.lead_time

    def columns(self) -> dict[str, Any]:
        """The export's time-on-task columns (``tables.TIME_COLUMNS``): times in UTC as Label
        Studio writes its own (``created_at``), the visible time in minutes. The exporter is
        imported here, by ``export --study``: ``study status`` reads the times without it."""
        from ...exporter.tables import TIME_COLUMNS

        return dict(zip(TIME_COLUMNS, (
            _utc(self.assigned_at), _utc(self.first_shown_at), _utc(self.submitted_at),
            None if self.visible_seconds is None else self.visible_seconds / 60)))


def _utc(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return aware(moment).astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def rating_times(engine: Engine, study: str) -> list[RatingTimes]:
    """The times of every submitted rating of ``study``, in the order they were given."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(assignments.c.id, assignments.c.visit_id, assignments.c.ls_annotation_id,
                   assignments.c.assigned_at, assignments.c.first_shown_at,
                   assignments.c.submitted_at, assignments.c.lead_time)
            .where(assignments.c.study == study, assignments.c.state.in_(SUBMITTED))
            .order_by(assignments.c.id)).all()
    visible = recorded_visible(engine, [row.id for row in rows])
    return [RatingTimes(row.id, row.visit_id, row.ls_annotation_id, row.assigned_at,
                        row.first_shown_at, row.submitted_at, row.lead_time,
                        visible.get(row.id)) for row in rows]


def annotation_times(paths: Sequence[Path], database: str | None = None
                     ) -> dict[int, dict[str, Any]]:
    """Label Studio annotation id → its time-on-task columns, for every rating saved through
    the gateways of the study files ``paths`` (each read from its own database, or from
    ``database`` when given, as ``protocol.studies_protocol`` reads them)."""
    times: dict[int, dict[str, Any]] = {}
    for path in paths:
        study = read_study(path)
        engine = open_store(database or study.database)
        try:
            times |= {rating.annotation_id: rating.columns()
                      for rating in rating_times(engine, study.name)
                      if rating.annotation_id is not None}
        finally:
            engine.dispose()
    return times

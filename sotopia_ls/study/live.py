"""The running agreement: the report's own figures on the ratings the gateway holds so far.

``live_figures`` reads the study's submitted ratings from the gateway's database alone (those
saved in Label Studio or waiting to be: what an export will read; gold episodes left out),
builds the exporter's ``scores_long`` from them (``tables.annotation_table``, the rows read as
the exporter reads them) and calls the report's ``agreement_table`` and ``gwet_table`` with
the report's bootstrap settings: once every rating is saved, its α and intervals are the
report's on the same project. Each task's episode id is copied from Label Studio with its
shown part (``keep_episode_ids``), since the bootstrap resamples episodes in their ids' order.

The figures of a dimension (``store.agreement_snapshots``) are ``alpha`` (Krippendorff's
interval α, the report's ``alpha``) and ``ac`` (Gwet's AC2 with ordinal weights, the report's
``ac2``: on a graded scale scores a few ranks apart agree in part, as with α), each with its
95% interval (``_low``, ``_high``), and ``pairs``, the rater pairs on the units they rest on;
null where the ratings cannot give a figure yet.

``LiveFigures.run`` (started by the gateway's lifespan, in each gateway process) looks every
``CHECK_SECONDS`` whether ratings arrived and, when they did, computes the figures in a thread,
never on a participant's request, and replaces the study's snapshot row whole; it waits at least
``BUSY_FACTOR`` times the last computation's length between two, so that however large the
study grows the computation takes a small share of a core.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, select
from sqlalchemy.dialects import postgresql, sqlite

from ..dimensions import RUBRIC
from ..exporter.agreement import agreement_table
from ..exporter.bootstrap import DEFAULT_BOOTSTRAP, Bootstrap
from ..exporter.gwet import gwet_table
from ..exporter.reliability import UNIT, rated_units
from ..exporter.tables import annotation_table, scores_long
from ..labelstudio.results import read_json_results
from ..labelstudio.tasks import EPISODE_ID
from .settings import StudyFile
from .store import agreement_snapshots, assignments, aware, episode_ids, gold, now

log = logging.getLogger("sotopia_ls.study")

# Ratings saved in Label Studio or waiting to be: those an export will hold.
RATED = ("saving", "saved")
CHECK_SECONDS = 3.0
BUSY_FACTOR = 4.0
# figure name → (the report's column, its table): "agreement" or "gwet".
FIGURES = {
    "alpha": ("alpha", "agreement"), "alpha_low": ("alpha_ci_low", "agreement"),
    "alpha_high": ("alpha_ci_high", "agreement"),
    "ac": ("ac2", "gwet"), "ac_low": ("ac2_ci_low", "gwet"), "ac_high": ("ac2_ci_high", "gwet"),
}


@dataclass(frozen=True)
class Snapshot:
    """The figures per dimension key, when they were computed and on how many ratings."""

    computed_at: datetime
    ratings: int
    figures: dict[str, dict[str, float | int | None]]


def keep_episode_ids(engine: Engine, study: str, data: dict[int, dict[str, Any]]) -> None:
    """Record each task's episode id (``data``: task id → task data) unless recorded; a task
    without one is left out, as the exporter refuses its annotations."""
    rows = [{"study": study, "task_id": task, "episode_id": str(fields[EPISODE_ID])}
            for task, fields in data.items() if fields.get(EPISODE_ID)]
    if not rows:
        return
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    with engine.begin() as conn:
        conn.execute(dialect.insert(episode_ids).on_conflict_do_nothing(), rows)


def _rated_rows(engine: Engine, study: str) -> list[Any]:
    """The study's ratings on ordinary episodes with a known episode id, in the order an export
    lists them: by task, then by annotation (ratings still waiting last)."""
    golden = select(gold.c.task_id).where(gold.c.study == study)
    with engine.connect() as conn:
        return list(conn.execute(
            select(assignments.c.id, assignments.c.task_id, assignments.c.participant_id,
                   assignments.c.ls_annotation_id, assignments.c.results,
                   assignments.c.lead_time, episode_ids.c.episode_id)
            .join(episode_ids, (episode_ids.c.study == study)
                  & (episode_ids.c.task_id == assignments.c.task_id))
            .where(assignments.c.study == study, assignments.c.state.in_(RATED),
                   assignments.c.task_id.not_in(golden))
            .order_by(assignments.c.task_id, assignments.c.ls_annotation_id.is_(None),
                      assignments.c.ls_annotation_id, assignments.c.id)).all())


def ratings_long(engine: Engine, study: str) -> pd.DataFrame:
    """``scores_long`` of the study's ratings so far, as an export of the project would give
    it (annotators named by their participant number, which no figure uses)."""
    rows = []
    # A rating not saved yet has no annotation id: its assignment's, negated, cannot meet one.
    for row in _rated_rows(engine, study):
        fields, _ = read_json_results(row.results)  # checked when submitted
        rows.append(fields | {
            "task_id": row.task_id, "annotation_id": row.ls_annotation_id or -row.id,
            "episode_id": row.episode_id, "annotator_id": f"participant-{row.participant_id}",
            "ground_truth": False, "lead_time": row.lead_time, "created_at": None,
            "source_tag": "", "models": "", "agent_1_name": "", "agent_2_name": "",
            "prediction_model_version": "", "review_decision": "", "added_slot": False,
        })
    return scores_long(annotation_table(rows))


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _pairs(long: pd.DataFrame) -> dict[str, int]:
    """Per dimension, the rater pairs on units rated twice or more."""
    sizes = rated_units(long).groupby([*UNIT, "dimension"]).size()
    pairs = (sizes * (sizes - 1) // 2).groupby(level="dimension").sum()
    return {key: int(pairs.get(key, 0)) for key in RUBRIC.keys}


def figures_of(long: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
               ) -> dict[str, dict[str, float | int | None]]:
    """Per dimension key, the report's α and AC2 with their intervals, and the rater pairs."""
    tables = {"agreement": agreement_table(long, bootstrap).set_index("dimension"),
              "gwet": gwet_table(long, bootstrap).set_index("dimension")}
    pairs = _pairs(long)
    return {key: {name: _number(tables[table].at[key, column])
                  for name, (column, table) in FIGURES.items()} | {"pairs": pairs[key]}
            for key in RUBRIC.keys}


def live_figures(engine: Engine, study: StudyFile,
                 bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> Snapshot:
    """The running agreement of ``study`` on its ratings so far (see the module's note)."""
    long = ratings_long(engine, study.name)
    return Snapshot(now(), int(long["annotation_id"].nunique()), figures_of(long, bootstrap))


def save_snapshot(engine: Engine, study: str, snapshot: Snapshot) -> None:
    """Replace the study's snapshot row whole (two gateways may both write it)."""
    values = {"computed_at": snapshot.computed_at, "ratings": snapshot.ratings,
              "figures": snapshot.figures}
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    with engine.begin() as conn:
        conn.execute(dialect.insert(agreement_snapshots).values(study=study, **values)
                     .on_conflict_do_update(index_elements=["study"], set_=values))


def latest_snapshot(engine: Engine, study: str) -> Snapshot | None:
    """The study's last snapshot, if any gateway computed one."""
    with engine.connect() as conn:
        row = conn.execute(select(agreement_snapshots)
                           .where(agreement_snapshots.c.study == study)).one_or_none()
    return None if row is None else Snapshot(aware(row.computed_at), row.ratings, row.figures)


def arrivals(engine: Engine, study: str) -> tuple[int, int | None]:
    """What changes when a rating arrives (not when it is saved, which changes no figure):
    how many there are and the last one's assignment."""
    with engine.connect() as conn:
        return tuple(conn.execute(
            select(func.count(), func.max(assignments.c.id))
            .where(assignments.c.study == study, assignments.c.state.in_(RATED))).one())


def _interval(low: float | None, high: float | None) -> str:
    return "no interval yet" if low is None or high is None else f"95% CI {low:.2f} to {high:.2f}"


def agreement_lines(snapshot: Snapshot) -> list[str]:
    """The snapshot as ``study status`` prints it: one line per dimension."""
    def figure(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    # PostgreSQL answers in the session's time zone, whatever the server's.
    computed = snapshot.computed_at.astimezone(timezone.utc)
    lines = [(f"  running agreement on {snapshot.ratings} ratings (computed "
              f"{computed:%Y-%m-%d %H:%M:%S} UTC), gold episodes left out:")]
    for key, values in snapshot.figures.items():
        lines.append(
            f"    {key:<18} α {figure(values['alpha'])} "
            f"({_interval(values['alpha_low'], values['alpha_high'])}), Gwet's AC2 "
            f"{figure(values['ac'])} ({_interval(values['ac_low'], values['ac_high'])}), "
            f"{values['pairs']} rater pairs")
    return lines


class LiveFigures:
    """Keeps the study's snapshot current while the gateway runs, off the request path;
    ``also`` (the dashboard's) runs in the same thread after every check."""

    def __init__(self, engine: Engine, study: StudyFile,
                 also: Callable[[bool], None] | None = None) -> None:
        self.engine, self.study, self.also = engine, study, also
        self._seen: tuple[int, int | None] | None = None
        self._next = 0.0

    def check(self) -> bool:
        """Compute and save the figures if ratings arrived and the last computation is far
        enough behind; whether it did."""
        seen = arrivals(self.engine, self.study.name)
        due = seen != self._seen and time.monotonic() >= self._next
        started = time.monotonic()
        if due:
            save_snapshot(self.engine, self.study.name, live_figures(self.engine, self.study))
            self._seen = seen
        if self.also is not None:
            self.also(due)
        if due:
            self._next = time.monotonic() + BUSY_FACTOR * (time.monotonic() - started)
        return due

    async def run(self) -> None:
        """Until cancelled (the app's lifespan starts and ends it)."""
        while True:
            try:
                await asyncio.to_thread(self.check)
            except Exception:  # the figures outlive any one failure; it is logged
                log.exception("computing the running agreement failed; tried again shortly")
            await asyncio.sleep(CHECK_SECONDS)

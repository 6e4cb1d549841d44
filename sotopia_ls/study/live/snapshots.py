"""The running agreement: the report's own figures on the ratings the gateway holds so far,
recomputed in a worker process and kept as one snapshot row per study.

This module imports no statistics library, so a gateway serves participants where one is
missing (``figures_unavailable`` names its install). docs/gateway.md, "The running agreement",
says why and how often.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import timezone
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.dialects import postgresql, sqlite

from ...dimensions import RUBRIC
from ...extras import install_commands, missing_modules
from ...labelstudio.tasks import AGENT_MODELS, EPISODE_ID
from ..settings import StudyFile
from ..store import (
    Snapshot,
    agent_models,
    agreement_snapshots,
    assignments,
    episode_ids,
    open_store,
    participants,
    rated,
    snapshot_in,
    visits,
)

log = logging.getLogger("sotopia_ls.study")

CHECK_SECONDS = 3.0
BUSY_FACTOR = 4.0
# After a computation failed: long enough that a failure that repeats logs a line now and
# then, not every check.
FAILED_WAIT_SECONDS = 60.0
# The snapshot's key for each agent model's scores (``figures.model_table``), beside the
# dimensions'.
MODEL_TABLE = "agent_model_scores"
# What the worker computes besides the figures, from the gateway's database: a module-level
# function (a worker process receives it by name).
Extra = Callable[[Engine, StudyFile], Any]


def keep_episode_ids(engine: Engine, study: str, data: dict[int, dict[str, Any]]) -> None:
    """Record each task's episode id and agent models (``data``: task id → task data) unless
    recorded; a task without an id is left out, as the exporter refuses its annotations, and
    one without models has none (the worker reads them as an export does)."""
    rows = {
        episode_ids: [{"study": study, "task_id": task, "episode_id": str(fields[EPISODE_ID])}
                      for task, fields in data.items() if fields.get(EPISODE_ID)],
        agent_models: [{"study": study, "task_id": task, "models": fields[AGENT_MODELS]}
                       for task, fields in data.items() if fields.get(AGENT_MODELS)],
    }
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    with engine.begin() as conn:
        for table, values in rows.items():
            if values:
                conn.execute(dialect.insert(table).on_conflict_do_nothing(), values)


def figures_unavailable() -> str | None:
    """Why this install cannot compute the running agreement: one line naming the statistics
    libraries missing and the install that brings them (irrCAC's is its own, without
    dependencies); None when none is missing. The gateway serves participants either way."""
    missing = missing_modules("export")
    if not missing:
        return None
    return (f"running agreement not computed: {', '.join(missing)} not installed here: "
            + " && ".join(install_commands("export", missing)))


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
        return snapshot_in(conn, study)



def arrivals(engine: Engine, study: str) -> tuple[int, int | None]:
    """What changes when a rating of an ordinary episode arrives (not when it is saved, nor a
    gold episode's: neither changes a figure): how many there are and the last one's
    assignment."""
    with engine.connect() as conn:
        return tuple(conn.execute(
            select(func.count(), func.max(assignments.c.id)).where(rated(study))).one())


def visits_moved(engine: Engine, study: str) -> tuple[int, int]:
    """What changes the participants ``extra`` shows besides a rating: the study's visits
    begun, and those ended (completed, no slot, not admitted)."""
    with engine.connect() as conn:
        return tuple(conn.execute(
            select(func.count(), func.count(visits.c.outcome))
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study)).one())


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
    for key in [key for key in RUBRIC.keys if key in snapshot.figures]:
        values = snapshot.figures[key]
        lines.append(
            f"    {key:<18} α {figure(values['alpha'])} "
            f"({_interval(values['alpha_low'], values['alpha_high'])}), Gwet's AC2 "
            f"{figure(values['ac'])} ({_interval(values['ac_low'], values['ac_high'])}), "
            f"{values['pairs']} rater pairs")
    return lines


def _store(url: str) -> Engine:
    """The worker process's engine on the gateway's database, made once."""
    if url not in _ENGINES:
        _ENGINES[url] = open_store(url)
    return _ENGINES[url]


_ENGINES: dict[str, Engine] = {}


def compute(url: str, study: StudyFile, extra: Extra | None,
            figures: bool = True) -> tuple[Any, float]:
    """In the worker process: the running agreement computed and saved (unless ``figures`` is
    false), then ``extra`` (the dashboard's participants) computed on the same database; its
    result, and the seconds that took (the worker's start and imports left out: once only)."""
    engine = _store(url)
    if figures:
        from .figures import live_figures  # the statistics libraries: in the worker only
    started = time.monotonic()
    if figures:
        save_snapshot(engine, study.name, live_figures(engine, study))
    return (extra(engine, study) if extra is not None else None), time.monotonic() - started


def _follow(gateway: int) -> None:
    """In the worker process: end as soon as the gateway that started it is gone, killed
    included (a worker would otherwise wait for work forever). The gateway is looked for by its
    id: a worker forked by the fork server is not its child."""

    def watch() -> None:
        while _running(gateway):
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal sent: whether the process is there
    except ProcessLookupError:
        return False
    except PermissionError:  # there, under another user
        pass
    return True


# What the fork server imports once, before it forks any worker: the statistics libraries,
# which take seconds to import. Where one is missing, the worker computes ``extra`` alone.
PRELOADED = ("sotopia_ls.study.live.figures", "sotopia_ls.statistics.agent_models")


def _worker(figures: bool) -> ProcessPoolExecutor:
    """One worker process, started afresh: nothing of the gateway's threads or open
    connections is copied into it. On Linux it is forked by a fork server of the gateway that
    imported ``PRELOADED`` (if ``figures``) once, so a worker started after one died, or by
    another gateway in the same process, imports them no more; elsewhere, where forking a
    process holding the system's frameworks is unsafe, it is spawned."""
    if sys.platform != "linux":
        context = multiprocessing.get_context("spawn")
    else:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOADED) if figures else [])
    return ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_follow,
                               initargs=(os.getpid(),))


class LiveFigures:
    """Keeps the study's snapshot current while the gateway runs, off the request path.

    A thread of the gateway checks for new ratings; the figures are computed in a worker
    process of their own, so that a computation (pandas, much of it holding Python's lock)
    never slows the threads answering participants. ``extra`` is computed there with each
    snapshot, and alone when only visits began or ended (``visits_moved``); its result is
    handed to ``also``, which the thread calls after every check (with None when nothing was
    computed): the dashboard's. Where a statistics library is missing (``unavailable`` says
    which), only ``extra`` is computed.
    """

    def __init__(self, engine: Engine, study: StudyFile, *, extra: Extra | None = None,
                 also: Callable[[Any], None] | None = None) -> None:
        self.engine, self.study, self.extra, self.also = engine, study, extra, also
        self._url = engine.url.render_as_string(hide_password=False)
        self._seen: tuple[int, int | None] | None = None
        self._moved: tuple[int, int] | None = None
        self._next = 0.0
        self.unavailable = figures_unavailable()

    def computed(self, pool: Executor, figures: bool = True) -> tuple[Any, float]:
        """The snapshot made and saved by the worker (unless ``figures`` is false);
        ``extra``'s result and the computation's seconds."""
        return pool.submit(compute, self._url, self.study, self.extra, figures).result()

    def check(self, pool: Executor) -> bool:
        """Compute and save the figures if ratings arrived (``extra`` alone if only visits
        moved) and the last computation is far enough behind; whether it computed."""
        seen = arrivals(self.engine, self.study.name)
        moved = visits_moved(self.engine, self.study.name) if self.extra is not None else None
        changed = (seen, moved) != (self._seen, self._moved)
        figures = seen != self._seen and self.unavailable is None
        # Without a rating there is nothing to compute: an idle gateway starts no worker.
        due = (seen[0] > 0 and (figures or (changed and self.extra is not None))
               and time.monotonic() >= self._next)
        result = None
        try:
            if due:
                # Tried again only after a wait, should it fail (the caller logs why).
                self._next = time.monotonic() + FAILED_WAIT_SECONDS
                result, took = self.computed(pool, figures=figures)
                self._seen, self._moved = seen, moved
                self._next = time.monotonic() + BUSY_FACTOR * took
        finally:
            # The dashboard's progress stays current whatever became of the figures.
            if self.also is not None:
                self.also(result)
        return due

    async def run(self) -> None:
        """Until cancelled (the app's lifespan starts and ends it)."""
        if self.unavailable is not None:
            log.warning("%s", self.unavailable)
        pool = _worker(self.unavailable is None)
        try:
            while True:
                try:
                    await asyncio.to_thread(self.check, pool)
                except BrokenProcessPool:  # the worker died (killed, out of memory): a new one
                    log.warning("the running agreement's worker process ended; starting another")
                    pool.shutdown(wait=False)
                    pool = _worker(self.unavailable is None)
                    self._next = 0.0
                except Exception:  # the figures outlive any one failure; it is logged
                    log.exception("computing the running agreement failed; tried again in "
                                  "%.0f s", FAILED_WAIT_SECONDS)
                await asyncio.sleep(CHECK_SECONDS)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

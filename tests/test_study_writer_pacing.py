"""The gateway's writer yields to participants: while their requests are being served it holds
ratings back and saves them a small batch a pause apart, never holding one longer than the
stated maximum delay; once they are quiet it catches up at full speed; `study status` shows
what waits. The writer runs as the app's lifespan runs it, on its own event loop; the
participants' load is the gateway process's ``Load``, as the overload guard counts it; Label
Studio is the real server of the test session.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from conftest import invoke
from study_support import wait_until_saved
from test_study_gateway import Study
from sotopia_ls.cli import main
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.study.outbox.saving import MAX_DELAY_SECONDS, PACED_BATCH, PACED_PAUSE, save_waiting
from sotopia_ls.study.serving.load import Load
from sotopia_ls.study.store import aware, assignments

pytestmark = pytest.mark.server


@pytest.fixture
def study(ls_client: Client, project_title: str, tmp_path: Path) -> Study:
    return Study(ls_client, project_title, tmp_path, raters_per_episode=3)  # room for three


def recorded(study: Study, participants: int) -> None:
    """The participants rate an episode each, then their second each: ratings recorded in the
    gateway's database, waiting for its writer (each participant's first rating before any
    second one)."""
    people = [study.participant() for _ in range(participants)]
    for someone in people:
        someone.arrive()
        someone.read_instructions()
    for seed in range(2 * participants):
        someone = people[seed % participants]
        someone.open_episode()
        assert someone.rate(seed).status_code == 200


@contextlib.contextmanager
def writer_running(study: Study) -> Iterator[None]:
    """The gateway's writer at work on an event loop of its own, as the app's lifespan runs
    it, until the block ends."""
    loop = asyncio.new_event_loop()
    writing = loop.create_task(study.gateway.writer.run())

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(writing)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        loop.call_soon_threadsafe(writing.cancel)
        thread.join(60)
        loop.close()


def busy(load: Load) -> None:
    """A participant's request begins in the gateway process, as the overload guard counts it."""
    load.in_flight += 1
    load.last_began = time.monotonic()


def saved_at(engine: Engine) -> dict[int, datetime | None]:
    """When each rating was saved in Label Studio (None: still waiting), by assignment id."""
    with engine.connect() as conn:
        return {row.id: aware(row.saved_at)
                for row in conn.execute(select(assignments.c.id, assignments.c.saved_at))}


def test_while_participants_are_busy_the_writer_holds_back_and_saves_all_once_they_are_quiet(
    study
):
    recorded(study, participants=2)
    load = study.gateway.load
    busy(load)

    with writer_running(study):
        time.sleep(PACED_PAUSE / 2)  # a busy moment, shorter than the writer's pause
        held = saved_at(study.engine)
        load.in_flight -= 1  # the participants are quiet
        wait_until_saved(study.engine, 4, timeout=30)

    assert list(held.values()) == [None] * 4
    assert len(study.annotations()) == 4


def test_participants_who_never_pause_get_ratings_saved_a_few_at_a_time_and_none_past_the_delay(
    study
):
    recorded(study, participants=3)
    long_ago = datetime.now(timezone.utc) - timedelta(seconds=MAX_DELAY_SECONDS + 1)
    with study.engine.begin() as conn:  # the first three have waited the longest allowed
        first = conn.execute(select(assignments.c.id).order_by(assignments.c.id).limit(3)
                             ).scalars().all()
        conn.execute(update(assignments).where(assignments.c.id.in_(first))
                     .values(submitted_at=long_ago))
    busy(study.gateway.load)  # and never ends

    began = datetime.now(timezone.utc)
    with writer_running(study):
        wait_until_saved(study.engine, 6, timeout=MAX_DELAY_SECONDS)
    saved = saved_at(study.engine)

    overdue = sorted(saved[assignment] for assignment in first)
    fresh = sorted(moment for assignment, moment in saved.items() if assignment not in first)
    # The overdue ones at once, before the others; the others after a pause, a batch at a time.
    # (Ordered, not timed: on a loaded machine three saves may take longer than a pause.)
    assert overdue[-1] < fresh[0]
    assert fresh[0] - began >= timedelta(seconds=PACED_PAUSE)
    assert fresh[PACED_BATCH] - fresh[0] >= timedelta(seconds=PACED_PAUSE / 2)
    assert overdue[0] - began < timedelta(seconds=PACED_PAUSE)  # the first one unpaced
    assert len(study.annotations()) == 6


def test_study_status_shows_what_waits_for_label_studio_its_oldest_and_that_it_shrinks(
    study, tmp_path
):
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())
    recorded(study, participants=2)
    with study.engine.begin() as conn:  # as if recorded five minutes ago
        conn.execute(update(assignments).values(
            submitted_at=datetime.now(timezone.utc) - timedelta(minutes=5)))
    # The writer has just saved the first participant's first (their Label Studio user with it).
    assert save_waiting(study.engine, study.client, "pilot", limit=1) == 1

    shown = invoke(main, "study", "status", "--study", str(tmp_path / "study.json"))

    assert shown.exit_code == 0, shown.output
    assert "  ratings:              1 saved in Label Studio, 0 refused" in shown.output
    waiting = next(line for line in shown.output.splitlines() if "waiting to be saved:" in line)
    assert re.fullmatch(r"  waiting to be saved:  3 ratings \(the oldest for 30\d s\), and 1 new "
                        r"Label Studio user; in the last 60 s 0 recorded, 1 saved: shrinking",
                        waiting), waiting

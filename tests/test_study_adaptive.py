"""Adaptive extra raters: an episode whose ratings disagree gets one more rater while the study
runs, the next participant to arrive receives that slot, and the export says which rating
came from it.

The first tests run on the gateway's database alone (SQLite in a temporary folder, then
PostgreSQL shared by two engines standing for two gateway processes); the last ones on the
session's real Label Studio, with the gateway app in this process.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import Engine, func, insert, select
from starlette.testclient import TestClient

from conftest import flat_of, invoke, results_of, with_meta
from study_support import (
    EDITOR,
    Participant,
    PausingProxy,
    gateway_env,
    make_study,
    study_project,
)
from test_postgres import study_database
from test_study_leases import lease, setup, visitor
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.labelstudio.tasks import ADDED_SLOTS
from sotopia_ls.study.live.snapshots import MODEL_TABLE, Snapshot, save_snapshot
from sotopia_ls.study.outbox import marks
from sotopia_ls.study.outbox.saving import save_all_waiting
from sotopia_ls.study.process import start_gateway
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import (
    DATABASE_ENV,
    StudyFile,
    read_study,
    without_password,
    write_study,
)
from sotopia_ls.study.slots import leases
from sotopia_ls.study.status import study_status
from sotopia_ls.study.store import (
    assignments,
    meta_claims,
    now,
    open_store,
    slots,
)

ADAPTIVE = {"threshold": 2}  # k = 2, so at most 3 raters: one extra
SECRET = secrets.token_urlsafe(32)


def answers(goal: int) -> dict[int, dict[str, tuple[str, int]]]:
    """A complete rating: every score two above its range's low end, agent 1's goal ``goal``."""
    chosen = {agent: {d.key: (f"why {d.key}", d.range_low + 2) for d in DIMENSIONS}
              for agent in AGENTS}
    chosen[1]["goal"] = ("why goal", goal)
    return chosen


def rating(goal: int) -> list[dict[str, Any]]:
    """The rating as the page submits it."""
    return results_of(answers(goal))


def rate(engine: Engine, study: StudyFile, goal: int) -> leases.Assignment:
    """A new participant takes an episode and submits a rating with agent 1's goal ``goal``."""
    taken = lease(engine, study, visitor(engine, study))
    assert taken is not None, "no episode left"
    return leases.settle(engine, taken, flat_of(answers(goal)), study.raters_per_episode,
                         study.adaptive)


def slot_numbers(engine: Engine, task: int, study: str = "pilot") -> list[int]:
    with engine.connect() as conn:
        return sorted(conn.execute(select(slots.c.slot).where(
            slots.c.study == study, slots.c.task_id == task)).scalars())


@pytest.fixture
def adaptive(tmp_path: Path) -> tuple[Engine, StudyFile]:
    return setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path, adaptive=ADAPTIVE)


def test_two_ratings_4_apart_on_goal_open_a_third_slot_that_the_next_participant_receives(
        adaptive):
    engine, study = adaptive
    first, second = rate(engine, study, goal=8), rate(engine, study, goal=4)
    assert first.task_id == second.task_id == 11
    assert slot_numbers(engine, 11) == [1, 2, 3]

    third = rate(engine, study, goal=6)

    assert third.task_id == 11 and third.state == "saving"
    assert leases.added_slot(engine, third.id) == 3
    assert leases.added_slot(engine, first.id) is leases.added_slot(engine, second.id) is None
    # 8 and 4 still disagree, but the episode has its most raters (k + 1): no fourth slot.
    assert slot_numbers(engine, 11) == [1, 2, 3]
    assert rate(engine, study, goal=6).task_id == 12


def test_an_episode_with_its_added_slot_open_or_leased_is_in_progress_not_done(adaptive):
    engine, study = adaptive
    rate(engine, study, goal=8)
    rate(engine, study, goal=4)  # episode 11 gets a third slot

    def counts() -> tuple[int, int, int, int]:
        status = study_status(engine, study)
        return status.done, status.in_progress, status.open, status.active_leases

    assert counts() == (0, 1, 2, 0)
    third = lease(engine, study, visitor(engine, study))
    assert third.task_id == 11 and counts() == (0, 1, 2, 1)
    leases.settle(engine, third, flat_of(answers(6)), study.raters_per_episode, study.adaptive)
    assert counts() == (1, 0, 2, 0)


def test_two_ratings_within_the_threshold_open_no_slot(adaptive):
    engine, study = adaptive
    rate(engine, study, goal=8)
    rate(engine, study, goal=6)  # 2 apart: not more than the threshold

    assert slot_numbers(engine, 11) == [1, 2]
    assert rate(engine, study, goal=6).task_id == 12


def test_without_adaptive_ratings_far_apart_open_no_slot(tmp_path):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, goal=10)
    rate(engine, study, goal=0)

    assert slot_numbers(engine, 11) == [1, 2]


def test_a_restart_between_the_second_rating_and_the_next_arrival_loses_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"
    engine, study = setup(url, tmp_path, adaptive=ADAPTIVE)
    rate(engine, study, goal=9)
    rate(engine, study, goal=2)
    engine.dispose()  # the gateway stops; a new one starts on the same database

    restarted = open_store(url)
    third = rate(restarted, study, goal=5)

    assert (third.task_id, leases.added_slot(restarted, third.id)) == (11, 3)


def test_an_episode_may_get_several_extra_raters_up_to_max_raters(tmp_path):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path,
                          adaptive={"threshold": 2, "max_raters": 4})
    for goal in (10, 0, 5):  # the third rating still leaves 10 and 0 in the episode
        assert rate(engine, study, goal=goal).task_id == 11
    fourth = rate(engine, study, goal=5)

    assert (fourth.task_id, leases.added_slot(engine, fourth.id)) == (11, 4)
    assert slot_numbers(engine, 11) == [1, 2, 3, 4]


def snapshot(engine: Engine, study: str, width_of: dict[str, float | None]) -> None:
    """The dashboard's latest figures: each dimension's alpha interval this wide (None: no
    interval yet), beside the agent models' table the worker adds."""
    figures = {key: {"alpha": 0.5, "alpha_low": None if width is None else 0.5 - width / 2,
                     "alpha_high": None if width is None else 0.5 + width / 2,
                     "ac": None, "ac_low": None, "ac_high": None, "pairs": 10}
               for key, width in width_of.items()}
    models = [{"agent_model": "gpt-4o", "dimension": "goal", "mean": 7.5}]
    save_snapshot(engine, study, Snapshot(now(), 20, figures | {MODEL_TABLE: models}))


def test_target_width_stops_adding_slots_once_every_interval_is_narrower(tmp_path):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path,
                          adaptive={"threshold": 2, "target_width": 0.3})
    snapshot(engine, study.name, dict.fromkeys(DIMENSION_KEYS, 0.2))
    rate(engine, study, goal=10)
    rate(engine, study, goal=0)
    assert slot_numbers(engine, 11) == [1, 2]  # narrow enough: no extra rater

    # One dimension wider than the target (or without an interval) opens slots again.
    for wide in (0.5, None):
        snapshot(engine, study.name, dict.fromkeys(DIMENSION_KEYS, 0.2) | {"knowledge": wide})
        task = rate(engine, study, goal=10).task_id
        rate(engine, study, goal=0)
        assert slot_numbers(engine, task) == [1, 2, 3]
        assert rate(engine, study, goal=5).task_id == task


def test_without_a_snapshot_target_width_keeps_adding_slots(tmp_path):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path,
                          adaptive={"threshold": 2, "target_width": 0.3})
    rate(engine, study, goal=10)
    rate(engine, study, goal=0)

    assert slot_numbers(engine, 11) == [1, 2, 3]


def test_the_study_file_takes_adaptive_settings_and_refuses_too_few_raters(tmp_path):
    assert make_study(tmp_path, 1, adaptive={}).adaptive.max_raters == 3
    assert make_study(tmp_path, 1, raters_per_episode=3,
                      adaptive={"threshold": 1}).adaptive.max_raters == 4
    with pytest.raises(ValueError, match="max_raters must be more than raters_per_episode"):
        make_study(tmp_path, 1, adaptive={"max_raters": 2})


def test_an_export_file_marks_added_slot_ratings_and_its_protocol_counts_them(
        export_file, tmp_path):
    out = tmp_path / "out"
    marked = with_meta(export_file, ADDED_SLOTS, {2: {"22": 3}})
    result = invoke(export_command, "--from-file", str(marked), "-o", str(out))
    assert result.exit_code == 0, result.output

    long = pd.read_csv(out / "scores_long.csv")
    assert set(long.loc[long["added_slot"], "annotation_id"]) == {22}
    assert json.loads((out / "protocol.json").read_text())["added_slot_annotations"] == 1


@pytest.mark.parametrize(("mark", "reason"), [
    ([22], "not an object of annotation id → slot number: [22]"),
    ({"twenty-two": 3}, "'twenty-two' is not an annotation id"),
    ({"22": "3"}, "annotation 22: '3' is no added slot's number"),
    ({"22": 1}, "annotation 22: 1 is no added slot's number"),
])
def test_a_malformed_added_slot_mark_is_one_line_naming_the_task_and_field(
        export_file, tmp_path, mark, reason):
    marked = with_meta(export_file, ADDED_SLOTS, {2: mark})
    result = invoke(export_command, "--from-file", str(marked), "-o", str(tmp_path / "out"))
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"[task 2]: meta.sotopia_added_slots: {reason}" in result.output
    assert not (tmp_path / "out").exists()


# --- two gateways on PostgreSQL -------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with study_database() as url:
        yield url


@pytest.mark.postgres
def test_on_postgresql_two_gateways_settling_the_disagreeing_ratings_at_once_open_one_slot(
        postgres_url, tmp_path):
    engine, study = setup(postgres_url, tmp_path, adaptive=ADAPTIVE)
    other = open_store(postgres_url)  # a second gateway process: its own pool, one database
    held = [lease(engine, study, visitor(engine, study)) for _ in range(6)]
    assert [each.task_id for each in held] == [11, 11, 12, 12, 13, 13]
    for task in (11, 12, 13):
        pair = [each for each in held if each.task_id == task]
        start = threading.Barrier(2)

        def submit(gateway: Engine, mine: leases.Assignment, goal: int) -> None:
            start.wait()
            leases.settle(gateway, mine, flat_of(answers(goal)), study.raters_per_episode,
                          study.adaptive)

        both = [threading.Thread(target=submit, args=(gateway, mine, goal))
                for gateway, mine, goal in zip((engine, other), pair, (10, 0))]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join()

        assert slot_numbers(engine, task) == [1, 2, 3]
    with engine.connect() as conn:
        settled = conn.execute(select(func.count()).where(
            assignments.c.state == "saving")).scalar_one()
    assert settled == 6
    engine.dispose()
    other.dispose()


@pytest.mark.server
@pytest.mark.postgres
def test_two_served_gateways_on_one_postgresql_database_open_one_extra_slot(
        postgres_url, label_studio: LocalServer, ls_client: Client, project_title: str,
        tmp_path: Path):
    project = study_project(ls_client, project_title, episodes=2)
    # A study of its own on the module's database, which the test above used too.
    study = make_study(tmp_path, project, name="served", episodes_per_participant=1,
                       database=without_password(postgres_url), adaptive=ADAPTIVE)
    study_file = write_study(study, tmp_path / "study.json")
    env = gateway_env(label_studio.url, label_studio.credentials.api_key, SECRET) | {
        DATABASE_ENV: postgres_url}
    gateways = [start_gateway(study_file, env) for _ in range(2)]
    try:
        pair = [Participant.of(gateway.url, study="served") for gateway in gateways]
        for participant in pair:
            participant.begin()
        start = threading.Barrier(2)

        def submit(participant: Participant, goal: int) -> int:
            start.wait()
            return participant.submit(rating(goal)).status_code

        answered: list[int] = []
        both = [threading.Thread(target=lambda p=p, g=g: answered.append(submit(p, g)))
                for p, g in zip(pair, (10, 0))]
        for thread in both:
            thread.start()
        for thread in both:
            thread.join()
        assert answered == [200, 200]

        engine = open_store(postgres_url)
        with engine.connect() as conn:
            episode = conn.execute(select(assignments.c.task_id).where(
                assignments.c.key == pair[0].boot["assignment"])).scalar_one()
        assert slot_numbers(engine, episode, "served") == [1, 2, 3]
        third = Participant.of(gateways[1].url, study="served")
        third.begin()
        with engine.connect() as conn:
            assert conn.execute(select(slots.c.slot).where(
                slots.c.study == "served", slots.c.task_id == episode,
                slots.c.assignment_id == select(assignments.c.id)
                .where(assignments.c.key == third.boot["assignment"]).scalar_subquery())
            ).scalar_one() == 3
        engine.dispose()
    finally:
        for gateway in gateways:
            gateway.stop()


# --- the gateway and the export, on the real Label Studio -----------------------------------


class Gateway:
    """The study's gateway app in this process, on a database that outlives it."""

    def __init__(self, client: Client, study: StudyFile) -> None:
        self.client, self.study = client, study
        self.engine = open_store(study.database)
        self.app = create_app(prepare_gateway(study, client, self.engine), secret=SECRET,
                              editor=EDITOR, https_only=False)

    def rates(self, goal: int, *, saved: bool = True) -> Participant:
        """A new participant arrives, reads the instructions and rates their first episode
        (saved in Label Studio at once unless ``saved`` is false)."""
        participant = Participant(TestClient(self.app, base_url="http://127.0.0.1"))
        participant.arrive()
        participant.read_instructions()
        participant.open_episode()
        assert participant.submit(rating(goal)).status_code == 200
        if saved:
            save_all_waiting(self.engine, self.client, self.study.name)
        return participant

    def task_of(self, participant: Participant) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(assignments.c.task_id).where(
                assignments.c.key == participant.boot["assignment"])).scalar_one()

    def annotation_of(self, participant: Participant) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(assignments.c.ls_annotation_id).where(
                assignments.c.key == participant.boot["assignment"])).scalar_one()


@pytest.fixture
def two_episodes(ls_client: Client, project_title: str, tmp_path: Path) -> StudyFile:
    """An adaptive study of two episodes on the real Label Studio, one per participant."""
    project = study_project(ls_client, project_title, episodes=2)
    return make_study(tmp_path, project, episodes_per_participant=1, adaptive=ADAPTIVE)


@pytest.mark.server
def test_the_added_rater_is_served_after_a_restart_and_marked_in_the_export(
        label_studio: LocalServer, ls_client: Client, two_episodes: StudyFile, tmp_path: Path):
    study, project = two_episodes, two_episodes.project
    first = Gateway(ls_client, study)
    raters = [first.rates(8), first.rates(4)]
    episode = first.task_of(raters[0])
    assert first.task_of(raters[1]) == episode
    first.engine.dispose()  # the gateway stops between the second rating and the next arrival

    again = Gateway(ls_client, study)
    added = again.rates(6)
    other = again.rates(5)

    assert again.task_of(added) == episode and again.task_of(other) != episode
    marked = ls_client.tasks.get(id=str(episode)).meta[ADDED_SLOTS]
    assert marked == {str(again.annotation_of(added)): 3}
    status = study_status(again.engine, study).lines(study, "")
    assert any(line.split() == "extra slots opened: 1 (1 rated; an episode whose ratings differ "
               "by more than 2 gets one, up to 3 raters)".split() for line in status), status

    out = tmp_path / "out"
    study_file = write_study(study, tmp_path / "study.json")
    result = invoke(export_command, "--project", str(project), "--url", label_studio.url,
                    "--api-key", label_studio.credentials.api_key, "-o", str(out),
                    "--study", str(study_file))
    assert result.exit_code == 0, result.output
    long = pd.read_csv(out / "scores_long.csv")
    flagged = set(long.loc[long["added_slot"], "annotation_id"])
    assert flagged == {again.annotation_of(added)} and len(set(long["annotation_id"])) == 4
    assert "added_slot" not in pd.read_csv(out / "scores_wide.csv").columns
    record = json.loads((out / "protocol.json").read_text())
    assert record["added_slot_annotations"] == 1
    assert record["studies"][0]["adaptive"] == {"threshold": 2, "max_raters": 3,
                                                "target_width": None, "slots_added": 1,
                                                "added_slots_rated": 1}
    methods = " ".join((out / "protocol.md").read_text().split())
    assert "1 annotation came from slots added while the study ran" in methods
    assert ("An episode whose ratings differed by more than 2 points on a dimension got one "
            "more rater while the study ran, up to 3 raters per episode: 1 slot added, 1 of "
            "them rated.") in methods


@pytest.mark.server
def test_a_participant_rates_at_once_while_label_studio_holds_the_mark_of_an_added_slot(
        label_studio: LocalServer, ls_client: Client, two_episodes: StudyFile):
    study = two_episodes
    gateway = Gateway(ls_client, study)
    episode = gateway.task_of(gateway.rates(8))
    gateway.rates(4)
    added = gateway.rates(6, saved=False)
    # The writer reaches Label Studio through a proxy that holds its write of the task's meta.
    proxy = PausingProxy(label_studio.url, "PATCH", re.compile(rf"^/api/tasks/{episode}/?(\?|$)"))
    writer = threading.Thread(target=save_all_waiting, args=(
        gateway.engine, Client(base_url=proxy.url, api_key=label_studio.credentials.api_key),
        study.name))
    try:
        proxy.hold.set()
        writer.start()
        assert proxy.held.wait(30), "the mark never reached Label Studio"

        started = time.monotonic()
        newcomer = gateway.rates(5, saved=False)
        assert time.monotonic() - started < 5, "the newcomer waited on Label Studio"
    finally:
        proxy.release.set()
        writer.join(60)
        proxy.close()

    assert gateway.task_of(newcomer) != episode
    marked = ls_client.tasks.get(id=str(episode)).meta[ADDED_SLOTS]
    assert marked == {str(gateway.annotation_of(added)): 3}


def test_marks_of_one_task_wait_for_another_process_turn_unless_it_lapsed(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'gateway.sqlite3'}")
    other = open_store(f"sqlite:///{tmp_path / 'gateway.sqlite3'}")  # another gateway process
    inside, leave, order = threading.Event(), threading.Event(), []

    def hold() -> None:
        with marks.meta_turn(other, "pilot", 11):
            order.append("other")
            inside.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    inside.wait(10)
    threading.Timer(0.5, leave.set).start()
    with marks.meta_turn(engine, "pilot", 11):
        order.append("this")
    holder.join()
    assert order == ["other", "this"]

    # A process killed during its turn leaves its claim; it lapses.
    with engine.begin() as conn:
        conn.execute(insert(meta_claims).values(study="pilot", task_id=12, holder="killed",
                                                claimed_until=now()))
    started = time.monotonic()
    with marks.meta_turn(engine, "pilot", 12):
        assert time.monotonic() - started < 2


@pytest.mark.server
def test_study_init_writes_adaptive_settings_and_refuses_their_options_without_adaptive(
        label_studio: LocalServer, ls_client: Client, project_title: str, tmp_path: Path):
    project = study_project(ls_client, project_title, episodes=1)
    common = ["study", "init", "--name", "pilot", "--project", str(project),
              "--completion-code", "C1A2B3", "--url", label_studio.url,
              "--api-key", label_studio.credentials.api_key]
    path = tmp_path / "study.json"

    written = invoke(main, *common, "--adaptive", "--max-raters", "4", "--target-width", "0.3",
                     "-o", str(path))
    assert written.exit_code == 0, written.output
    assert "gets one more slot, up to 4 raters" in written.output
    assert read_study(path).adaptive.model_dump() == {"threshold": 2, "max_raters": 4,
                                                      "target_width": 0.3}

    refused = invoke(main, *common, "--disagreement-threshold", "3", "-o",
                     str(tmp_path / "other.json"))
    assert refused.exit_code != 0
    assert refused.output.strip().splitlines()[-1] == (
        "Error: --disagreement-threshold applies to adaptive extra raters only: add --adaptive")

"""A gateway killed mid-study loses nothing: leases survive, no slot is given twice, and a
rating whose save to Label Studio was in flight is in Label Studio exactly once afterwards, and
the processes computing its running figures (for its dashboard) end with it.

The gateway is a real process (`sotopia-ls study serve`) that reaches Label Studio through a
local proxy which can hold an annotation request. One participant's rating is recorded and its
save held at the proxy; the gateway is killed with SIGKILL; the held request then reaches Label
Studio (which saves a rating the gateway never heard back about); a second participant submits
while no gateway runs; the gateway starts again.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from study_support import (
    Participant,
    PausingProxy,
    check_invariants,
    gateway_env,
    make_study,
    study_project,
    wait_until_saved,
)
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer, free_port
from sotopia_ls.study.process import start_gateway
from sotopia_ls.study.settings import DASHBOARD_TOKEN_ENV
from sotopia_ls.study.store import assignments, open_store, participants

pytestmark = pytest.mark.server

SECRET = secrets.token_urlsafe(32)


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_gateway_killed_mid_study_restarts_with_every_lease_and_every_rating_once(
    ls_client: Client, label_studio: LocalServer, project_title: str, tmp_path: Path
):
    project = study_project(ls_client, project_title, episodes=3)
    study = make_study(tmp_path, project)
    study_file = tmp_path / "study.json"
    study_file.write_text(study.model_dump_json())
    proxy = PausingProxy(label_studio.url)
    port = free_port()
    # With the dashboard on, which reads the running figures the gateway computes.
    env = {**gateway_env(proxy.url, label_studio.credentials.api_key, SECRET),
           DASHBOARD_TOKEN_ENV: secrets.token_urlsafe(32)}
    first = start_gateway(study_file, env, port=port)
    people: list[Participant] = []
    try:
        holders = [Participant.of(first.url) for _ in range(2)]
        leases_held = [p.begin() for p in holders]
        rater = Participant.of(first.url)
        people += [*holders, rater]
        rater.begin()

        # The rater's rating is recorded at once; its save waits at the proxy; the gateway dies,
        # and with it the processes computing its running figures (a fork server, its worker and
        # resource tracker).
        proxy.hold.set()
        assert rater.rate(7).status_code == 200
        assert proxy.held.wait(30), "the save never reached Label Studio's door"
        wait_for(lambda: len(descendants(first.process.pid)) >= 3)
        figures_processes = descendants(first.process.pid)
        first.kill()
        wait_for(lambda: not any(map(running, figures_processes)), timeout=15)
        proxy.hold.clear()
        proxy.release.set()  # Label Studio now saves a rating whose gateway is gone
        task = _task_of(study.database, rater.boot["assignment"])
        wait_for(lambda: len(ls_client.annotations.list(id=task)) == 1)
        late = holders[0]
        with pytest.raises(httpx.TransportError):  # a submission while no gateway runs
            late.rate(1)

        second = start_gateway(study_file, env, port=port)
        try:
            # No lease lost: each holder finds their episode where they left it.
            for holder, key in zip(holders, leases_held):
                holder.open_episode()
                assert holder.boot["assignment"] == key
            # The rating in flight is recognised once its claim lapses, not saved again.
            wait_until_saved(open_store(study.database), 1)
            assert len(ls_client.annotations.list(id=task)) == 1
            assert _submit(rater, 7).status_code == 200  # a retry changes nothing

            for seed, holder in enumerate(holders):  # the refused one submits again
                assert holder.rate(seed).status_code == 200
            wait_until_saved(open_store(study.database), 3)
            newcomer = Participant.of(second.url)
            people.append(newcomer)
            newcomer.begin()
            assert newcomer.boot["assignment"] not in leases_held
        finally:
            second.stop()
    finally:
        first.stop()
        proxy.close()
        for person in people:
            person.close()

    engine = open_store(study.database)
    check_invariants(engine, study)
    with engine.connect() as conn:
        saved = conn.execute(select(assignments.c.task_id, participants.c.ls_user_id,
                                    assignments.c.ls_annotation_id)
                             .join(participants, participants.c.id == assignments.c.participant_id)
                             .where(assignments.c.state == "saved")).all()
    assert len(saved) == 3
    in_label_studio = {
        annotation.id: (task, annotation.completed_by)
        for task in {row.task_id for row in saved}
        for annotation in ls_client.annotations.list(id=task)
    }
    assert in_label_studio == {row.ls_annotation_id: (row.task_id, row.ls_user_id) for row in saved}


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, parent, ..."""
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """The processes below ``pid``."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat(int(entry.name))[1])
            except (OSError, IndexError, ValueError):  # ended while read
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def _submit(participant: Participant, seed: int) -> httpx.Response | httpx.HTTPError:
    try:
        return participant.rate(seed)
    except httpx.HTTPError as error:
        return error


def _row(database: str, key: str):
    with open_store(database).connect() as conn:
        return conn.execute(select(assignments).where(assignments.c.key == key)).one()


def _task_of(database: str, key: str) -> int:
    return _row(database, key).task_id


def _state_of(database: str, key: str) -> str:
    return _row(database, key).state

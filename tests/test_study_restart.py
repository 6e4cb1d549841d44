"""A gateway killed mid-study loses nothing: leases survive, no slot is given twice, and a
rating whose save was in flight is in Label Studio exactly once after the restart.

The gateway is a real process (`sotopia-ls study serve`) that reaches Label Studio through a
local proxy which can hold an annotation request: the test holds one, kills the gateway with
SIGKILL while it waits, lets the request reach Label Studio after the gateway is gone (so Label
Studio saved a rating the gateway never heard back about), and starts the gateway again.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from label_studio_sdk import LabelStudio
from sqlalchemy import select

from study_support import (
    Participant,
    PausingProxy,
    check_invariants,
    gateway_env,
    make_study,
    start_gateway,
    study_project,
)
from sotopia_ls.labelstudio.server import LocalServer, free_port
from sotopia_ls.study.store import assignments, open_store, participants

pytestmark = pytest.mark.server

SECRET = "restart-test-session-key-" + "r" * 32


def started(participant: Participant) -> str:
    """The participant arrives, reads the instructions and opens an episode: its lease key."""
    participant.arrive()
    participant.read_instructions()
    participant.open_episode()
    return participant.boot["assignment"]


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_gateway_killed_mid_study_restarts_with_every_lease_and_every_rating_once(
    ls_client: LabelStudio, label_studio: LocalServer, project_title: str, tmp_path: Path
):
    project = study_project(ls_client, project_title, episodes=3)
    study = make_study(tmp_path, project)
    study_file = tmp_path / "study.json"
    study_file.write_text(study.model_dump_json())
    proxy = PausingProxy(label_studio.url)
    port = free_port()
    env = gateway_env(proxy.url, label_studio.credentials.api_key, SECRET)
    first = start_gateway(study_file, env, port=port)
    people: list[Participant] = []
    try:
        holders = [Participant.of(first.url) for _ in range(2)]
        leases_held = [started(p) for p in holders]
        rater = Participant.of(first.url)
        people += [*holders, rater]
        started(rater)

        # The rater submits; the gateway's save waits in the proxy; the gateway dies.
        proxy.hold.set()
        outcome: list[object] = []
        sending = threading.Thread(target=lambda: outcome.append(_submit(rater, 7)))
        sending.start()
        assert proxy.held.wait(30), "the save never reached Label Studio's door"
        first.kill()
        proxy.hold.clear()
        proxy.release.set()  # Label Studio now saves a rating whose gateway is gone
        sending.join(30)
        assert isinstance(outcome[0], httpx.HTTPError)
        task = _task_of(study.database, rater.boot["assignment"])
        wait_for(lambda: len(ls_client.annotations.list(id=task)) == 1)

        second = start_gateway(study_file, env, port=port)
        try:
            # No lease lost: each holder finds their episode where they left it.
            for holder, key in zip(holders, leases_held):
                holder.open_episode()
                assert holder.boot["assignment"] == key
            # The rating in flight was recognised, not saved again; a retry changes nothing.
            assert _state_of(study.database, rater.boot["assignment"]) == "saved"
            assert _submit(rater, 7).status_code == 200
            assert len(ls_client.annotations.list(id=task)) == 1

            for seed, holder in enumerate(holders):
                assert holder.rate(seed).status_code == 200
            newcomer = Participant.of(second.url)
            people.append(newcomer)
            started(newcomer)
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

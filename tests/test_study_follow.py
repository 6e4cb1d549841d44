"""The gateway follows each submission on Prolific: a participant who returns the study (or
times out) gives back their episode at once, by Prolific's signed webhook call or by polling
the study's submissions, and the next participant gets it; an unsigned, forged, stale or
replayed call is refused and changes nothing; a late submission is kept as surplus.

The gateway runs in this process behind Starlette's TestClient on the session's real Label
Studio; Prolific is the stand-in of ``prolific_stand_in`` (real HTTP on 127.0.0.1).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from prolific_stand_in import TOKEN, signed_event, status_change
from sqlalchemy import Engine, select
from starlette.testclient import TestClient
from study_support import EDITOR, Participant, make_study, prolific_id, study_project

from sotopia_ls.cli import main
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.slots.leases import add_episodes, lease_for_visit
from sotopia_ls.study.store import assignments, open_store, prolific_statuses

HOOK_SECRET = secrets.token_urlsafe(32)
HOOK = "/prolific/hook"


def signed(event: dict[str, str], secret: str = HOOK_SECRET,
           timestamp: float | None = None) -> tuple[bytes, dict[str, str]]:
    return signed_event(event, secret, timestamp)


@dataclass
class Gateway:
    study: StudyFile
    engine: Engine
    app: object

    def participant(self) -> Participant:
        return Participant(TestClient(self.app, base_url="http://127.0.0.1"))

    def hook(self, body: bytes, headers: dict[str, str]):
        """A call from Prolific (as the participants' clients: without the app's lifespan)."""
        return TestClient(self.app, base_url="http://127.0.0.1").post(HOOK, content=body,
                                                                       headers=headers)

    def states(self) -> dict[int, str]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(assignments.c.id, assignments.c.state)).all())


@pytest.fixture
def gateway(ls_client: Client, tmp_path: Path) -> Gateway:
    """One episode with one slot (k = 1), one episode per participant."""
    project = study_project(ls_client, f"test_follow_{prolific_id()[:8]}", episodes=1)
    study = make_study(tmp_path, project, raters_per_episode=1, episodes_per_participant=1)
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False, hook_secret=HOOK_SECRET)
    return Gateway(study, engine, app)


@pytest.mark.server
def test_a_signed_returned_call_gives_the_episode_to_the_next_participant(gateway):
    leaving, next_one = gateway.participant(), gateway.participant()
    leaving.begin()
    task = leaving.boot["task"]["data"]

    started = time.monotonic()
    answer = gateway.hook(*signed(status_change(leaving.session, "RETURNED")))

    # Freed by the time Prolific has its answer: the lease is given back in the call.
    assert time.monotonic() - started < 1.0
    assert answer.status_code == 200 and answer.json() == {"taken": True}
    assert list(gateway.states().values()) == ["expired"]
    next_one.begin()
    assert next_one.boot["task"]["data"] == task
    # The one who left submits after all: kept apart, the slot stays the next participant's.
    assert leaving.rate(1).status_code == 200
    assert sorted(gateway.states().values()) == ["leased", "surplus"]
    with gateway.engine.connect() as conn:
        assert conn.execute(select(prolific_statuses.c.status)).scalars().all() == ["RETURNED"]


@pytest.mark.server
def test_unsigned_forged_stale_or_replayed_calls_are_refused_and_change_nothing(gateway):
    holder = gateway.participant()
    holder.begin()
    timed_out = status_change(holder.session, "TIMED-OUT")
    body, headers = signed(status_change(prolific_id(), "APPROVED"))  # a visit of no one here
    assert gateway.hook(body, headers).status_code == 200
    before = gateway.states()

    unsigned = gateway.hook(json.dumps(timed_out).encode(), {})
    forged = gateway.hook(*signed(timed_out, secret=secrets.token_urlsafe(32)))
    stale = gateway.hook(*signed(timed_out, timestamp=time.time() - 3600))
    replayed = gateway.hook(body, headers)
    altered = gateway.hook(json.dumps(timed_out).encode(), headers)  # another body, same signature
    huge = gateway.hook(*signed({**timed_out, "padding": "x" * 2**20}))

    assert [r.status_code for r in (unsigned, forged, stale, replayed, altered, huge)] == [
        401, 401, 401, 409, 401, 413]
    assert gateway.states() == before == {1: "leased"}
    with gateway.engine.connect() as conn:
        assert conn.execute(select(prolific_statuses)).all() == []


# --- polling, where Prolific cannot reach the gateway ---------------------------------------

PROLIFIC_STUDY = "cd" * 12


def test_polling_frees_the_leases_of_returned_and_timed_out_submissions(tmp_path, prolific):
    study = make_study(tmp_path, 1, raters_per_episode=1, episodes_per_participant=1)
    engine = open_store(study.database)
    add_episodes(engine, study.name, {1: {}, 2: {}, 3: {}}, 1)
    links = [ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY,
                                SESSION_ID=prolific_id()) for _ in range(3)]
    people = [arrival.arrive(engine, study.name, link) for link in links]
    held = [lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                            lease_seconds=1800) for visit in people]
    prolific.script[f"/api/v1/studies/{PROLIFIC_STUDY}/submissions/"] = [(200, {"results": [
        {"id": link.SESSION_ID, "participant_id": link.PROLIFIC_PID, "status": status}
        for link, status in zip(links, ("RETURNED", "TIMED-OUT", "ACTIVE"), strict=True)]},
        {})]
    path = write_study(study, tmp_path / "study.json")

    result = CliRunner().invoke(main, ["study", "follow", "--study", str(path),
                                       "--prolific-url", prolific.base_url],
                                env={"PROLIFIC_TOKEN": TOKEN})

    assert result.exit_code == 0, result.output
    assert result.output == "study pilot: on Prolific: ACTIVE 1, RETURNED 1, TIMED-OUT 1\n"
    assert TOKEN not in result.output
    with engine.connect() as conn:
        states = dict(conn.execute(select(assignments.c.id, assignments.c.state)).all())
    assert states == {held[0].id: "expired", held[1].id: "expired", held[2].id: "leased"}
    newcomer_link = ProlificParameters(PROLIFIC_PID=prolific_id(), STUDY_ID=PROLIFIC_STUDY,
                                       SESSION_ID=prolific_id())
    newcomer = arrival.arrive(engine, study.name, newcomer_link)
    again = lease_for_visit(engine, study.name, newcomer.id, newcomer.participant_id,
                            lease_seconds=1800)
    assert again.task_id in {held[0].task_id, held[1].task_id}

    # The researcher sees each submission's status: counted in the status, per row in the
    # review file.
    runner = CliRunner()
    status = runner.invoke(main, ["study", "status", "--study", str(path)])
    review = runner.invoke(main, ["study", "review", "--study", str(path), "-o",
                                  str(tmp_path / "review.csv")])

    assert "  on Prolific:          ACTIVE 1, RETURNED 1, TIMED-OUT 1\n" in status.output
    assert review.exit_code == 0, review.output
    rows = pd.read_csv(tmp_path / "review.csv", dtype=str, keep_default_na=False)
    assert dict(zip(rows["submission"], rows["prolific_status"], strict=True)) == {
        link.SESSION_ID: status for link, status in zip(
            links, ("RETURNED", "TIMED-OUT", "ACTIVE"), strict=True)} | {
        newcomer_link.SESSION_ID: ""}


# --- subscribing the gateway to Prolific's calls --------------------------------------------


def subscribe(path: Path, stand_in) -> object:
    return CliRunner().invoke(main, [
        "study", "follow", "--study", str(path), "--subscribe", "https://rate.example.org/",
        "--workspace", "ws-7", "--prolific-url", stand_in.base_url],
        env={"PROLIFIC_TOKEN": TOKEN})


def test_subscribing_makes_one_confirmed_subscription_and_a_rerun_keeps_it(tmp_path, prolific):
    path = write_study(make_study(tmp_path, 1), tmp_path / "study.json")

    first = subscribe(path, prolific)
    again = subscribe(path, prolific)

    assert first.exit_code == 0, first.output
    (made,) = prolific.subscriptions
    assert (made["event_type"], made["target_url"], made["workspace_id"], made["confirmed"]) \
        == ("submission.status.change", f"https://rate.example.org{HOOK}", "ws-7", True)
    assert first.output == again.output == (
        f"subscription {made['id']}: submission.status.change to "
        f"https://rate.example.org{HOOK}\n")
    assert made["secret"] not in first.output and TOKEN not in first.output
    assert [p for _, p, _ in prolific.sent("POST")] == [
        "/api/v1/hooks/subscriptions/", f"/api/v1/hooks/subscriptions/{made['id']}/"]


def test_a_subscription_answered_alone_as_prolific_s_guide_shows_it_is_confirmed_too(
        tmp_path, prolific):
    path = write_study(make_study(tmp_path, 1), tmp_path / "study.json")
    made = {"id": "hook-9", "event_type": "submission.status.change",
            "target_url": f"https://rate.example.org{HOOK}", "workspace_id": "ws-7"}
    prolific.script["POST /api/v1/hooks/subscriptions/"] = [(201, made, {"X-Hook-Secret": "k9"})]
    prolific.script["POST /api/v1/hooks/subscriptions/hook-9/"] = [(200, made, {})]

    result = subscribe(path, prolific)

    assert result.exit_code == 0, result.output
    assert prolific.sent("POST")[-1] == ("POST", "/api/v1/hooks/subscriptions/hook-9/",
                                         {"secret": "k9"})


def test_a_refused_confirmation_is_one_line_without_the_secret(tmp_path, prolific):
    path = write_study(make_study(tmp_path, 1), tmp_path / "study.json")
    prolific.script["POST /api/v1/hooks/subscriptions/hook-1/"] = [
        (400, {"error": {"detail": "Invalid subscription secret"}}, {})]

    refused = subscribe(path, prolific)

    assert refused.exit_code != 0
    assert refused.output.splitlines() == [
        "Error: confirm the subscription of https://rate.example.org/prolific/hook to "
        "submission.status.change: Prolific answered HTTP 400: Invalid subscription secret"]
    assert prolific.subscriptions[0]["secret"] not in refused.output


def test_polling_asks_only_for_the_published_study_not_ids_a_link_carried(tmp_path, prolific):
    study = make_study(tmp_path, 1, prolific={"study_id": PROLIFIC_STUDY,
                                              "project_id": "p" * 24})
    engine = open_store(study.database)
    arrival.arrive(engine, study.name, ProlificParameters(  # a link edited by hand
        PROLIFIC_PID=prolific_id(), STUDY_ID="ff" * 12, SESSION_ID=prolific_id()))
    path = write_study(study, tmp_path / "study.json")

    result = CliRunner().invoke(main, ["study", "follow", "--study", str(path),
                                       "--prolific-url", prolific.base_url],
                                env={"PROLIFIC_TOKEN": TOKEN})

    assert result.exit_code == 0, result.output
    assert {path.split("?")[0] for _, path, _ in prolific.sent()} == {
        f"/api/v1/studies/{PROLIFIC_STUDY}/submissions/"}

"""A researcher runs a study end to end with Prolific's API: `study init`, `study sync` and
`study publish --send` make one draft whose link, codes, places and reward are the study
file's; while the study runs, a participant who returns it on Prolific gives their episode
back within a second (Prolific's signed call), and the next participant gets it; an unsigned
or replayed call changes nothing. Afterwards, the extra rater an episode got for its
disagreeing ratings is paid a bonus, set up and paid once across two runs of `study pay`, and
the protocol record counts it.

Label Studio is the session's real server; the gateway runs in this process behind Starlette's
TestClient; Prolific is the stand-in of ``prolific_stand_in`` (real HTTP on 127.0.0.1).
"""

from __future__ import annotations

import json
import secrets
import time

import pandas as pd

import pytest
from starlette.testclient import TestClient
from study_support import EDITOR, Participant, make_study, prolific_id, study_project

from conftest import invoke
from prolific_stand_in import TOKEN, signed_event, status_change
from test_study_adaptive import ADAPTIVE, Gateway
from sotopia_ls.cli import main
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import read_study, write_study
from sotopia_ls.study.store import open_store

pytestmark = pytest.mark.server

HOOK_SECRET = secrets.token_urlsafe(32)
GATEWAY = "https://rate.example.org"
HOOK = "/prolific/hook"
PLACEHOLDERS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"


def test_a_study_made_on_prolific_from_its_file_gets_back_the_episodes_of_those_who_return(
        label_studio, ls_client, tmp_path, prolific):
    project = study_project(ls_client, f"test_story_{prolific_id()[:8]}", episodes=2)
    server = ["--url", label_studio.url, "--api-key", label_studio.credentials.api_key]
    path = tmp_path / "study.json"
    made = invoke(main, "study", "init", "--name", "pilot", "--project", str(project),
                  "--completion-code", "C1A2B3", "--no-slots-code", "NOSLOT1",
                  "--raters-per-episode", "1", "--episodes-per-participant", "1",
                  "--reward", "2.50", "--currency", "GBP", "--database",
                  f"sqlite:///{tmp_path / 'gateway.sqlite3'}", "-o", str(path), *server)
    assert made.exit_code == 0, made.output
    assert invoke(main, "study", "sync", "--study", str(path), *server).exit_code == 0

    published = invoke(main, "study", "publish", "--study", str(path), "--prolific-project",
                       "c0ffee" * 4, "--gateway", GATEWAY, "--minutes", "12", "--send",
                       "--prolific-url", prolific.base_url, "--prolific-token", TOKEN)

    assert published.exit_code == 0, published.output
    assert TOKEN not in published.output
    study = read_study(path)
    (draft,) = prolific.studies
    assert study.prolific.study_id == draft["id"]
    assert draft["external_study_url"] == f"{GATEWAY}/s/pilot?{PLACEHOLDERS}"
    assert [(code["code"], code["code_type"]) for code in draft["completion_codes"]] == [
        (study.completion_code, "COMPLETED"), (study.no_slots_code, "OTHER")]
    assert (draft["total_available_places"], draft["reward"], draft["filters"]) == (2, 250, [])

    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False, hook_secret=HOOK_SECRET)
    first, second = (Participant(TestClient(app, base_url="http://127.0.0.1")) for _ in range(2))
    first.begin()
    second.begin()  # every episode is held now
    left_behind = first.boot["task"]["data"]
    returned = signed_event(status_change(first.session, "RETURNED"), HOOK_SECRET)

    prolific_calls = TestClient(app, base_url="http://127.0.0.1")
    unsigned = prolific_calls.post(HOOK, content=returned[0])
    assert unsigned.status_code == 401
    started = time.monotonic()
    taken = prolific_calls.post(HOOK, content=returned[0], headers=returned[1])
    freed_after = time.monotonic() - started  # the lease is given back in the call
    replayed = prolific_calls.post(HOOK, content=returned[0], headers=returned[1])

    assert taken.json() == {"taken": True} and freed_after < 1.0
    next_one = Participant(TestClient(app, base_url="http://127.0.0.1"))
    next_one.begin()
    assert next_one.boot["task"]["data"] == left_behind
    assert replayed.status_code == 409


def test_the_extra_rater_of_a_disagreeing_episode_is_paid_a_bonus_once_across_two_runs(
        label_studio, ls_client, tmp_path, prolific):
    study = make_study(tmp_path, study_project(ls_client, f"test_bonus_{prolific_id()[:8]}",
                                               episodes=2),
                       episodes_per_participant=1, adaptive=ADAPTIVE,
                       reward={"cents": 250, "currency": "GBP"})
    path = write_study(study, tmp_path / "study.json")
    server = ["--url", label_studio.url, "--api-key", label_studio.credentials.api_key]
    gateway = Gateway(ls_client, study)
    first, second = gateway.rates(8), gateway.rates(4)  # 4 apart on goal: a third slot opens
    extra = gateway.rates(6)
    assert gateway.task_of(extra) == gateway.task_of(first) == gateway.task_of(second)
    review = tmp_path / "review.csv"
    assert invoke(main, "study", "review", "--study", str(path), "-o", str(review)).exit_code == 0
    edited = pd.read_csv(review, dtype=str, keep_default_na=False)
    edited["decision"], edited["message"], edited["category"] = "approve", "", ""
    edited.to_csv(review, index=False)
    decided = invoke(main, "study", "decide", str(review), "--study", str(path), *server)
    assert decided.exit_code == 0, decided.output

    def pay() -> str:
        paid = invoke(main, "study", "pay", "--study", str(path), "--bonus-per-extra", "0.30",
                      "--send", "--prolific-url", prolific.base_url, "--prolific-token", TOKEN)
        assert paid.exit_code == 0, paid.output
        return paid.output

    once, twice = pay(), pay()

    (bulk,) = prolific.bonuses
    assert (bulk["csv_bonuses"], bulk["paid"]) == (f"{extra.session},0.30\n", 1)
    assert "1 bulk bonus(es) paid" in once and "bulk bonus" not in twice
    out = tmp_path / "out"
    exported = invoke(export_command, "--project", str(study.project), *server, "-o", str(out),
                      "--study", str(path))
    assert exported.exit_code == 0, exported.output
    assert json.loads((out / "protocol.json").read_text())["studies"][0]["bonuses"] == {
        "submissions": 1, "total": 0.3, "paid_submissions": 1, "paid_total": 0.3,
        "currency": "GBP"}
    assert "1 session got a bonus, 0.30 GBP in all, paid through Prolific." in " ".join(
        (out / "protocol.md").read_text().split())

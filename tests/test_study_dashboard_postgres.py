"""The researcher's dashboard on PostgreSQL, where a lab's gateways keep a large study, and a
dashboard whose progress cannot be computed still showing what it can."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from study_support import EDITOR, Participant, make_study, study_project
from test_postgres import study_database
from test_study_dashboard import rate_all, wait_for
from test_study_leases import rate, setup, visitor
from sotopia_ls.dimensions import RUBRIC
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.study.live import dashboard, snapshots as live
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import without_password
from sotopia_ls.study.store import now, open_store


@pytest.mark.server
@pytest.mark.postgres
def test_on_postgresql_the_dashboard_shows_progress_and_agreement_after_ratings(
        ls_client: Client, tmp_path: Path):
    project = study_project(ls_client, f"test_dashboard_pg_{secrets.token_hex(4)}", episodes=2)
    token = secrets.token_urlsafe(32)
    with study_database() as url:
        study = make_study(tmp_path, project, database=without_password(url),
                           episodes_per_participant=1)
        engine = open_store(url)
        app = create_app(prepare_gateway(study, ls_client, engine),
                         secret=secrets.token_urlsafe(32), editor=EDITOR, https_only=False,
                         dashboard_token=token)
        # The researcher's client runs the app's lifespan (the running agreement's thread);
        # each participant has a client, and cookies, of their own.
        with TestClient(app, base_url="http://127.0.0.1") as http:
            # Two participants on the same episode: pairs complete first.
            for seed in (1, 2):
                rate_all(Participant(TestClient(app, base_url="http://127.0.0.1")), [seed])

            def figures() -> dict[str, Any] | None:
                shown = http.get("/researcher/pilot/figures",
                                 headers={"Authorization": f"Bearer {token}"}).json()
                agreement, progress = shown["agreement"], shown["progress"]
                return shown if (agreement and agreement["ratings"] == 2 and progress
                                 and progress["slots_saved"] == 2) else None

            shown = wait_for(figures, "progress and agreement of both ratings")
        engine.dispose()

    assert shown["progress"] | {"median_minutes": None} == {
        "episodes": 2, "episodes_done": 1, "episodes_in_progress": 0, "episodes_open": 1,
        "slots_open": 2, "slots_leased": 0, "slots_waiting": 0, "slots_saved": 2,
        "saves_waiting": 0, "saves_failed": 0, "median_minutes": None}
    assert [d["key"] for d in shown["agreement"]["dimensions"]] == list(RUBRIC.keys)
    # One pair of raters on each of the episode's two agents.
    assert {d["pairs"] for d in shown["agreement"]["dimensions"]} == {2}


def test_when_progress_fails_the_dashboard_still_shows_the_new_agreement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    engine, study = setup(f"sqlite:///{tmp_path / 'gateway.sqlite3'}", tmp_path)
    rate(engine, study, visitor(engine, study))
    shown = dashboard.Dashboard(engine, study)
    shown.refresh(None)
    before = shown.shown()["progress"]

    def failing(*_: object) -> dict[str, Any]:
        raise RuntimeError("progress failed")

    monkeypatch.setattr(dashboard, "progress", failing)
    figures = {key: {"alpha": None, "pairs": 0} for key in RUBRIC.keys}
    live.save_snapshot(engine, study.name, live.Snapshot(now(), 1, figures))
    with caplog.at_level(logging.ERROR, "sotopia_ls.study"):
        shown.refresh([{"participant": "someone"}])
        shown.refresh(None)

    assert shown.shown()["progress"] == before  # the last progress computed stays
    assert shown.shown()["agreement"]["ratings"] == 1
    assert shown.shown()["participants"] == [{"participant": "someone"}]
    assert [record.getMessage() for record in caplog.records] == [
        "the dashboard's progress could not be computed; the last shown stays"]

"""A researcher adds a page to the participant's journey: a consent page, as one class and one
template (``tests/pages/consent.html``), inserted into the sequence the gateway is made with.

The gateway is served by uvicorn on 127.0.0.1 in this process (the app ``study serve`` runs,
with the test's sequence) in front of the session's real Label Studio; the participant uses
headless Chromium, and a second one plain HTTP.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import uvicorn
from playwright.sync_api import Browser, expect
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine, select

from browser import CHROMIUM, VIEWPORT, submit
from study_support import (
    CODE,
    EDITOR,
    Participant,
    answers,
    make_study,
    prolific_id,
    study_project,
    wait_until_saved,
)
from test_study import fill, open_rating
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import free_port
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.flow import PAGE_SEQUENCE
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.serving.page import Form, Page
from sotopia_ls.study.serving.security import GatewayH11Protocol
from sotopia_ls.study.store import open_store, page_answers, participants, visits

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]


# --- the researcher's new page: one class, one template ----------------------------------------


class ConsentAnswers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agree: Literal["yes"]


class Consent(Page):
    """Before anything else, the participant agrees to take part."""

    name = "consent"
    template_folder = Path(__file__).with_name("pages")
    submit = Form(ConsentAnswers, what="a consent")


PAGES = (Consent(), *PAGE_SEQUENCE)


# --- the gateway with that sequence, served -----------------------------------------------------


@dataclass
class Served:
    url: str
    engine: Engine
    project: int


@contextmanager
def serving(app: object) -> Iterator[str]:
    """``app`` served by uvicorn (as ``study serve`` serves it) on a free port until the end."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=GatewayH11Protocol,
                                           ws="none", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def served(ls_client: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A study of three episodes, one per participant, its gateway made with ``PAGES``."""
    tmp = tmp_path_factory.mktemp("pages")
    project = study_project(ls_client, f"test_pages_{prolific_id()[:8]}", episodes=3)
    study = make_study(tmp, project, episodes_per_participant=1)
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False, pages=PAGES)
    with serving(app) as url:
        yield Served(url, engine, project)


def consent_of(engine: Engine, pid: str) -> list[dict]:
    """What the participant with Prolific id ``pid`` answered on the consent page."""
    with engine.connect() as conn:
        return list(conn.execute(
            select(page_answers.c.answers)
            .join(visits, visits.c.id == page_answers.c.visit_id)
            .join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.external_id == pid, page_answers.c.page == "consent")
        ).scalars())


def test_a_participant_gives_consent_before_the_instructions_and_then_rates(
    served, ls_client, browser: Browser  # noqa: F811  (the fixture from test_study)
):
    pid = prolific_id()
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(f"{served.url}/s/pilot?PROLIFIC_PID={pid}&STUDY_ID={prolific_id()}"
              f"&SESSION_ID={prolific_id()}")
    expect(page.get_by_role("heading", name="Consent to take part")).to_be_visible()
    assert page.url.endswith("/s/pilot/consent")
    page.goto(f"{served.url}/s/pilot/rate")  # skipping ahead
    assert page.url.endswith("/s/pilot/consent")

    page.get_by_label("I agree to take part").check()
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_role("heading", name="Social Evaluation Instruction")).to_be_visible()
    page.get_by_role("button", name=re.compile("start rating")).click()
    open_rating(page)
    fill(page, answers(31, "consenting participant"))
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    assert page.locator("#completion-code").inner_text() == CODE
    context.close()

    assert consent_of(served.engine, pid) == [{"agree": "yes"}]
    wait_until_saved(served.engine, 1)
    tasks = ls_client.tasks.list(project=served.project, include="id")
    texts = [r["value"]["text"][0] for task in tasks for a in ls_client.annotations.list(id=task.id)
             for r in a.result if r["type"] == "textarea"]
    assert texts and all(text.startswith("consenting participant 31") for text in texts)


def test_without_consent_nobody_reaches_the_instructions_or_an_episode(served):
    someone = Participant.of(served.url)
    try:
        assert someone.arrive().url.path == "/s/pilot/consent"
        token = re.search(r'name="csrf" value="([^"]+)"',
                          someone.http.get("/s/pilot/consent").text).group(1)

        forged = someone.http.post("/s/pilot/consent", data={"agree": "yes", "csrf": "forged"})
        unticked = someone.http.post("/s/pilot/consent", data={"csrf": token})
        read = someone.read_instructions()  # the instructions' form, out of turn
        rate = someone.http.get("/s/pilot/rate", follow_redirects=True)

        assert forged.status_code == 403
        assert unticked.status_code == 400 and "agree: Field required" in unticked.text
        assert read.url.path == "/s/pilot/consent"
        assert rate.url.path == "/s/pilot/consent"
        assert consent_of(served.engine, someone.pid) == []
    finally:
        someone.close()

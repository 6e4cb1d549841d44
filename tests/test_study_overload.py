"""Overload is answered, never dropped: a saturated gateway process tells a participant at once
to come back in a moment (503 with Retry-After), and the participant's page comes back by
itself, saving a rating once.

The gateway runs in this process under uvicorn (with ``study serve``'s settings) and tiny
limits, so that one participant's request held half-sent saturates it; then as `sotopia-ls
study serve` behind a local HTTP proxy that answers a Chromium participant's first submit 503,
as a saturated gateway would (or, harsher, once the gateway has recorded it, its answer lost).
"""

from __future__ import annotations

import re
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from browser import CHROMIUM, VIEWPORT, fresh_page, submit
from study_support import (
    EDITOR,
    Participant,
    PausingProxy,
    answers,
    make_study,
    prolific_id,
    study_project,
    wait_until_saved,
)
from test_study import fill, open_rating
from test_study_typing import served_one_each
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer, free_port
from sotopia_ls.study.serve import server_settings
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import Gateway, prepare_gateway
from sotopia_ls.study.serving.overload import Limits
from sotopia_ls.study.serving.security import SECURITY_HEADERS
from sotopia_ls.study.store import assignments, open_store

pytestmark = pytest.mark.server

ONE_AT_A_TIME = Limits(threads=4, most_in_flight=1, longest_wait=60.0, retry_after=2)
HALF_A_SECOND = Limits(threads=4, most_in_flight=100, longest_wait=0.5, retry_after=2)


@dataclass
class InProcess:
    url: str
    gateway: Gateway
    database: Path  # the study's SQLite file
    limits: Limits

    def link(self) -> dict[str, str]:
        """A new participant's study link parameters."""
        return {"PROLIFIC_PID": prolific_id(), "STUDY_ID": "a" * 24,
                "SESSION_ID": prolific_id()}

    def in_flight(self, count: int) -> None:
        """Until ``count`` participant requests are in progress."""
        deadline = time.monotonic() + 10
        while self.gateway.load.in_flight != count:
            assert time.monotonic() < deadline, f"never {count} requests in progress"
            time.sleep(0.02)


@contextmanager
def serving(client: Client, tmp, limits: Limits) -> Iterator[InProcess]:
    """A study's gateway with ``limits``, served by uvicorn in a thread of this process."""
    project = study_project(client, f"test_overload_{prolific_id()[:8]}", episodes=3)
    study = make_study(tmp, project)
    gateway = prepare_gateway(study, client, open_store(study.database))
    app = create_app(gateway, secret=secrets.token_urlsafe(32), editor=EDITOR,
                     https_only=False, limits=limits, dashboard_token=secrets.token_urlsafe(32))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           **server_settings()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the gateway did not start"
        time.sleep(0.05)
    try:
        yield InProcess(f"http://127.0.0.1:{server.config.port}", gateway,
                        tmp / "gateway.sqlite3", limits)
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def half_sent_submit(served: InProcess) -> Iterator[None]:
    """A participant's submit whose body is still on its way: in progress until it ends."""
    someone = Participant.of(served.url)
    someone.begin()
    cookies = "; ".join(f"{name}={value}" for name, value in someone.http.cookies.items())
    held = socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])))
    held.sendall((f"POST /s/pilot/submit HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookies}\r\n"
                  f"X-CSRF-Token: {someone.boot['csrf']}\r\nContent-Type: application/json\r\n"
                  "Content-Length: 1000\r\n\r\n{").encode())
    served.in_flight(1)
    try:
        yield
    finally:
        held.close()
        someone.close()


@contextmanager
def arrival_waiting_for_the_database(served: InProcess) -> Iterator[None]:
    """A participant's arrival read whole and waiting for the database (its write lock held
    by another program) longer than the gateway's ``longest_wait``."""
    lock = sqlite3.connect(served.database, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    answers: list[httpx.Response] = []
    arriving = threading.Thread(target=lambda: answers.append(
        httpx.get(f"{served.url}/s/pilot", params=served.link(), timeout=60)))
    arriving.start()
    served.in_flight(1)
    time.sleep(served.limits.longest_wait + 0.2)
    try:
        yield
    finally:
        lock.execute("ROLLBACK")
        lock.close()
        arriving.join(30)
    assert [answer.status_code for answer in answers] == [303]  # served once it could be


def retry_after(answer: httpx.Response) -> int:
    return int(answer.headers["retry-after"])


@pytest.mark.parametrize(("limits", "saturating"), [
    (ONE_AT_A_TIME, half_sent_submit), (HALF_A_SECOND, arrival_waiting_for_the_database),
], ids=["too many in progress", "one waiting too long"])
def test_a_saturated_gateway_answers_at_once_503_with_retry_after_and_serves_later(
        ls_client, tmp_path, limits, saturating):
    with serving(ls_client, tmp_path, limits) as served:
        newcomer_link = served.link()
        rater = Participant.of(served.url)
        rater.begin()
        script_path = re.search(r'src="(/static/\w+/gateway\.js)"',
                                rater.http.get("/s/pilot/rate").text)[1]
        with saturating(served):
            started = time.monotonic()
            arriving = httpx.get(f"{served.url}/s/pilot", params=newcomer_link)
            submitting = rater.submit([])
            answered_in = time.monotonic() - started
            health = httpx.get(f"{served.url}/health")
            script = httpx.get(f"{served.url}{script_path}")
            researcher = httpx.get(f"{served.url}/researcher/pilot/sign-in")

        # Turned away at once, told when to come back, with the headers of every answer.
        assert arriving.status_code == submitting.status_code == 503
        assert answered_in < 1.0
        for answer in (arriving, submitting):
            assert 2 <= retry_after(answer) <= 4
            assert {name: answer.headers.get(name) for name in SECURITY_HEADERS} \
                == SECURITY_HEADERS
        # The page reloads itself after that wait (no script: the CSP allows none inline);
        # the rating page's script reads the JSON and sends the rating again after it.
        assert (f'<meta http-equiv="refresh" content="{retry_after(arriving)}">'
                in arriving.text)
        assert "reloads by itself" in arriving.text and "<script" not in arriving.text
        assert submitting.json()["retry_after"] == retry_after(submitting)
        # What is not a participant's request is never turned away; the researcher's dashboard
        # waits until the participants are served.
        assert health.status_code == script.status_code == 200
        assert researcher.status_code == 503 and retry_after(researcher) == limits.retry_after

        served.in_flight(0)
        # Once the held request ended, the same requests are served.
        assert httpx.get(f"{served.url}/s/pilot", params=newcomer_link,
                         follow_redirects=True).url.path == "/s/pilot/instructions"
        rater.rate(seed=1)
        with served.gateway.engine.connect() as conn:
            assert conn.execute(select(assignments.c.state).where(
                assignments.c.key == rater.boot["assignment"])).scalar_one() in ("saving",
                                                                                 "saved")
        served.in_flight(0)  # the count goes down as each answer ends
        assert httpx.get(f"{served.url}/researcher/pilot/sign-in").status_code == 200
        rater.close()


def test_the_researchers_requests_have_a_bound_of_their_own(ls_client, tmp_path):
    limits = Limits(threads=4, most_in_flight=100, most_researcher_in_flight=1)
    with serving(ls_client, tmp_path, limits) as served, socket.create_connection(
            ("127.0.0.1", int(served.url.rsplit(":", 1)[1]))) as held:
        # A sign-in whose body is still on its way holds the one researcher request allowed.
        held.sendall(b"POST /researcher/pilot/sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100\r\n\r\ntoken=")
        time.sleep(0.5)
        refused = httpx.get(f"{served.url}/researcher/pilot/sign-in")
        arriving = httpx.get(f"{served.url}/s/pilot", params=served.link())

        assert refused.status_code == 503 and retry_after(refused) == limits.retry_after
        assert arriving.status_code == 303  # the participants' own count is untouched


def test_a_participant_slow_to_send_their_rating_turns_nobody_away(ls_client, tmp_path):
    with serving(ls_client, tmp_path, HALF_A_SECOND) as served, half_sent_submit(served):
        time.sleep(HALF_A_SECOND.longest_wait + 0.5)
        arriving = httpx.get(f"{served.url}/s/pilot", params=served.link())

        assert arriving.status_code == 303


def health_over(connection: socket.socket) -> bytes:
    """``/health`` asked over ``connection``: what came back, up to the server closing it."""
    connection.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    received = b""
    while b'"ok"' not in received:
        try:
            chunk = connection.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received


def test_a_connection_left_idle_longer_than_a_client_keeps_it_is_still_open(ls_client, tmp_path):
    with serving(ls_client, tmp_path, ONE_AT_A_TIME) as served, socket.create_connection(
            ("127.0.0.1", int(served.url.rsplit(":", 1)[1]))) as connection:
        assert b" 200 " in health_over(connection)
        # httpx keeps an idle connection 5 s and may send on it just then; uvicorn's own
        # default would close it at 5 s, resetting that request.
        time.sleep(6)

        assert b" 200 " in health_over(connection)


in_chromium = pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason=f"Chromium is not installed at {CHROMIUM}")


@pytest.mark.browser
@in_chromium
def test_a_participant_arriving_at_a_saturated_gateway_waits_on_a_page_that_reloads_itself(
        ls_client, browser, tmp_path):
    with serving(ls_client, tmp_path, ONE_AT_A_TIME) as served, fresh_page(browser) as page:
        with half_sent_submit(served):
            page.goto(f"{served.url}/s/pilot?PROLIFIC_PID={prolific_id()}"
                      f"&STUDY_ID={prolific_id()}&SESSION_ID={prolific_id()}")
            expect(page.get_by_role("heading", name="One moment")).to_be_visible()
        # Nothing done by the participant: the page comes back once the gateway is free.
        page.wait_for_url(re.compile(r"/s/pilot/instructions$"), timeout=15_000)
        expect(page.get_by_role("button", name=re.compile("start rating"))).to_be_visible()


@pytest.mark.browser
@in_chromium
@pytest.mark.parametrize("after_sending", [False, True],
                         ids=["the gateway did nothing", "the gateway's answer was lost"])
def test_a_participant_whose_submit_is_answered_busy_sees_it_saving_and_it_is_saved_once(
        ls_client: Client, label_studio: LocalServer, browser: Browser, tmp_path, after_sending):
    with served_one_each(ls_client, label_studio, tmp_path) as (url, engine):
        proxy = PausingProxy(url, "POST", re.compile(r"^/s/pilot/submit$"))
        # Retry-After long enough that a loaded machine still finds the button waiting.
        proxy.answer_busy_once(seconds=6, after_sending=after_sending)
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        notices: list[str] = []
        page.expose_function("noticeShown", lambda shown: notices.append(shown))
        page.add_init_script("""addEventListener("DOMContentLoaded", () => {
            const notice = document.getElementById("notice");
            if (notice) new MutationObserver(() => noticeShown(notice.hidden ? "" :
                notice.className + ": " + notice.textContent)).observe(notice,
                {attributes: true, childList: true, subtree: true});
        });""")
        page.goto(f"{proxy.url}/s/pilot?PROLIFIC_PID={prolific_id()}&STUDY_ID={prolific_id()}"
                  f"&SESSION_ID={prolific_id()}")
        page.get_by_role("button", name=re.compile("start rating")).click()
        open_rating(page)
        key = page.evaluate("JSON.parse(document.getElementById('boot').textContent)")[
            "assignment"]
        fill(page, answers(21, "patient participant"))
        submit(page)

        # The gateway was busy: the page says it is saving, the button waits, then it goes on.
        expect(page.locator("#notice")).to_have_text(re.compile("Saving your rating"))
        expect(page.get_by_role("button", name="Submit current annotation")).to_be_disabled()
        page.wait_for_url(re.compile(r"/s/pilot/done$"), timeout=30_000)
        context.close()
        proxy.close()

        assert proxy.matched == 2  # answered busy once, then sent again
        assert notices and all(shown == "" or shown.startswith("notice saving: Saving")
                               for shown in notices), notices
        wait_until_saved(engine, 1)
        with engine.connect() as conn:
            task = conn.execute(select(assignments.c.task_id)
                                .where(assignments.c.key == key)).scalar_one()
        # Received once or twice, the rating is recorded and saved once.
        assert len(ls_client.annotations.list(id=task)) == 1
        with engine.connect() as conn:
            assert conn.execute(select(assignments.c.state)).scalars().all().count("saved") == 1

"""What the rating page weighs: its static files come gzipped, cached for good at addresses that
hold their content's hash (an upgrade gets new addresses, so no cache serves an old script), and
the editor, once running, takes the next episode the gateway chose without loading or running
its chunks again.

The gateway is served by uvicorn on 127.0.0.1 in this process, in front of the session's real
Label Studio; the participant uses headless Chromium, a lying one plain HTTP.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import Connection, Engine, select
from starlette.testclient import TestClient

from browser import CHROMIUM, VIEWPORT, submit
from conftest import results_of
from study_support import EDITOR, Participant, answers, make_study, prolific_id, study_project
from test_study import fill, open_rating
from test_study_pages import serving
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.study.serving.app import IN_PLACE_HEADER, create_app
from sotopia_ls.study.serving.assets import CACHE_ENV
from sotopia_ls.study.serving.editor import read_loader
from sotopia_ls.study.serving.gateway import Gateway, prepare_gateway
from sotopia_ls.study.slots.leases import shown_episode
from sotopia_ls.study.states import AssignmentState
from sotopia_ls.study.store import assignments, open_store, participants

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

SECRET = secrets.token_urlsafe(32)
FILES = re.compile(r'(?:src|href)="(/static/[^"]+)"')
LOADER = re.compile(r'<script type="application/json" id="editor-loader">(.*?)</script>', re.S)
YEAR = 365 * 24 * 3600


@dataclass
class Served:
    url: str
    engine: Engine
    gateway: Gateway


@pytest.fixture(scope="module")
def served(ls_client: Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A study of three episodes, two per participant, four raters each; the compressed files
    in a fresh cache."""
    tmp = tmp_path_factory.mktemp("weight")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(tmp / "cache"))
        project = study_project(ls_client, f"test_weight_{prolific_id()[:8]}", episodes=3)
        study = make_study(tmp, project, episodes_per_participant=2, raters_per_episode=4)
        engine = open_store(study.database)
        gateway = prepare_gateway(study, ls_client, engine)
        app = create_app(gateway, secret=SECRET, editor=EDITOR, https_only=False)
        with serving(app) as url:
            yield Served(url, engine, gateway)


def leased_scenario(served: Served, pid: str) -> str:
    """The scenario of the episode the gateway holds leased for participant ``pid``."""
    with served.engine.connect() as conn:
        task = conn.execute(select(assignments.c.task_id).where(
            assignments.c.state == AssignmentState.LEASED,
            assignments.c.participant_id == _participant(conn, pid))).scalar_one()
    return shown_episode(served.engine, "pilot", task)["scenario"]


def _participant(conn: Connection, pid: str) -> int:
    return conn.execute(select(participants.c.id).where(
        participants.c.external_id == pid)).scalar_one()


def in_place(someone: Participant, results: list[dict]) -> httpx.Response:
    """A rating sent as the rating page sends it, asking for the next episode in the answer."""
    return someone.http.post(
        "/s/pilot/submit", headers={"X-CSRF-Token": someone.boot["csrf"], IN_PLACE_HEADER: "1"},
        json={"assignment": someone.boot["assignment"], "results": results})


def page_files(page_html: str) -> list[str]:
    return FILES.findall(page_html)


# --- the files: gzipped, cached for good, at addresses of their content -------------------------


def test_the_rating_page_s_files_come_gzipped_and_are_cached_for_good(served):
    someone = Participant.of(served.url)
    try:
        someone.begin()
        page = someone.open_episode()
        files = page_files(page.text)
        fetched = {path: httpx.get(f"{served.url}{path}", headers={"Accept-Encoding": "gzip"})
                    for path in files}
        font = httpx.get(f"{served.url}/static/fonts/Figtree-Regular.ttf",
                         headers={"Accept-Encoding": "gzip"})
    finally:
        someone.close()

    assert len(files) >= 6 and any(path.endswith("main.js") for path in files)
    assert all(re.match(r"^/static/(editor/)?[0-9a-f]{16}/", path) for path in files), files
    for path, answer in fetched.items():
        assert answer.status_code == 200, path
        assert answer.headers["content-encoding"] == "gzip", path
        assert answer.headers["vary"] == "Accept-Encoding", path
        cache = answer.headers["cache-control"]
        assert "immutable" in cache and int(re.search(r"max-age=(\d+)", cache)[1]) >= YEAR
    wire = sum(int(answer.headers["content-length"]) for answer in fetched.values())
    assert wire < 0.4 * sum(len(answer.content) for answer in fetched.values())
    # The editor's stylesheet asks for its fonts at a fixed address: a day, then asked again.
    assert font.headers["content-type"] == "font/ttf"
    assert font.headers["cache-control"] == "max-age=86400, public"
    assert page.headers["cache-control"] == "no-store"


def test_after_an_upgrade_no_cache_can_serve_the_old_script(served, tmp_path):
    # The next release of the editor: one byte of main.js differs.
    folder = tmp_path / "app"
    folder.mkdir()
    for path in EDITOR.folder.iterdir():
        if path.is_file() and not path.name.endswith(".map"):
            shutil.copy(path, folder / path.name)
    with (folder / "main.js").open("a") as main:
        main.write("\n// the next release\n")
    upgraded = replace(EDITOR, folder=folder, loader=read_loader(folder))
    someone = Participant.of(served.url)
    try:
        someone.begin()
        before = someone.open_episode().text
        # The same gateway restarted on the new release (its writer left to the first).
        someone.http = TestClient(create_app(served.gateway, secret=SECRET, editor=upgraded,
                                             https_only=False),
                                  base_url=served.url, cookies=someone.http.cookies)
        after = someone.open_episode().text
        old, new = ([path for path in page_files(text) if path.endswith("main.js")][0]
                    for text in (before, after))
        old_there, new_there = someone.http.get(old), someone.http.get(new)
        # The page opened before the upgrade is told the files changed: it loads the next
        # episode anew instead of into its old editor.
        answered = in_place(someone, results_of(answers(7)))
    finally:
        someone.close()

    assert old != new
    assert old_there.status_code == 404
    assert new_there.status_code == 200 and new_there.text.endswith("// the next release\n")
    release_before = json.loads(LOADER.search(before).group(1))["release"]
    assert answered.status_code == 200
    assert answered.json()["release"] != release_before


# --- the next episode in the running editor ----------------------------------------------------


def test_the_second_episode_comes_into_the_running_editor_as_the_gateway_chose_it(
    served, browser: Browser  # noqa: F811  (the fixture from test_study)
):
    pid = prolific_id()
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    asked: list[str] = []
    navigated: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.on("framenavigated", lambda frame: navigated.append(frame.url))
    page.goto(f"{served.url}/s/pilot?PROLIFIC_PID={pid}&STUDY_ID={prolific_id()}"
              f"&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    first = open_rating(page)
    editor_files = [url for url in asked if "/static/editor/" in url]
    asked.clear()
    navigated.clear()

    fill(page, answers(41, "weighing participant"))
    submit(page)
    expect(page.get_by_text("Episode 2 of 2")).to_be_visible(timeout=30_000)
    expect(page.locator(".lsf-richtext").first).not_to_have_text(first)
    second = page.locator(".lsf-richtext").first.inner_text()
    # A fresh form: nothing of the first rating is left in it.
    assert page.locator(".sotopia-rating .ant-radio-wrapper-checked").count() == 0
    assert page.locator(".sotopia-rating textarea").evaluate_all(
        "boxes => boxes.map(box => box.value).join('')") == ""
    in_place, moved = list(asked), list(navigated)

    fill(page, answers(42, "weighing participant"))
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    context.close()

    assert len(editor_files) > len(EDITOR.loader.scripts)  # its scripts, then its chunks
    assert moved == []
    assert [url.rsplit("/", 1)[1] for url in in_place] == ["submit"]
    assert second == leased_or_rated(served, pid, exclude=first)


def leased_or_rated(served: Served, pid: str, exclude: str) -> str:
    """The scenario of the participant's episode other than ``exclude``: the one the gateway
    gave them second."""
    with served.engine.connect() as conn:
        tasks = conn.execute(select(assignments.c.task_id).where(
            assignments.c.participant_id == _participant(conn, pid))
            .order_by(assignments.c.id)).scalars().all()
    scenarios = [shown_episode(served.engine, "pilot", task)["scenario"] for task in tasks]
    assert len(scenarios) == 2 and scenarios[0] == exclude
    return scenarios[1]


def test_a_lying_page_gets_the_gateway_s_episode_and_a_replay_skips_none(served):
    someone = Participant.of(served.url)
    try:
        someone.begin()
        first = someone.boot
        asking = someone.http.post(
            "/s/pilot/submit", headers={"X-CSRF-Token": first["csrf"]},
            json={"assignment": first["assignment"], "results": results_of(answers(8)),
                  "again": {"task": {"id": 1, "data": {"scenario": "one of my choosing"}}}})
        answered = in_place(someone, results_of(answers(8)))
        replayed = in_place(someone, results_of(answers(8)))
        reloaded = someone.open_episode()
    finally:
        someone.close()

    assert asking.status_code == 400
    again = answered.json()["again"]
    assert again["number"] == 2 and again["total"] == 2
    assert again["boot"]["assignment"] != first["assignment"]
    assert again["boot"]["task"]["data"]["scenario"] == leased_scenario(served, someone.pid)
    # Sent twice, the rating is recorded once and the same next episode comes back, which is
    # also what the page shows when reloaded.
    assert replayed.json()["again"]["boot"] == again["boot"]
    assert someone.boot["assignment"] == again["boot"]["assignment"]
    assert reloaded.status_code == 200

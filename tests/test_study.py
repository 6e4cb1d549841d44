"""A blind crowd study, end to end: participants from Prolific rate episodes through the gateway.

The gateway runs as a real process (`sotopia-ls study serve`, uvicorn on 127.0.0.1) in front of
the session's real Label Studio; participants use headless Chromium; Prolific's completion page
is a real local HTTP server. One participant's whole journey is the module's fixture; each test
then checks one thing a researcher relies on.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import Browser, Page, Response, expect
from sqlalchemy import select

from browser import (
    CHROMIUM,
    LOADED,
    VIEWPORT,
    checked_ratings,
    form_outline,
    in_view,
    log_in,
    open_task,
    rating_column,
    submit,
)
from conftest import invoke
from study_support import (
    CODE,
    NO_SLOTS,
    Participant,
    SAMPLE_EPISODES,
    answers,
    check_invariants,
    gateway_env,
    make_study,
    prolific_id,
    prolific_stand_in,
    study_project,
    wait_until_saved,
)
from sotopia_ls.cli import main
from sotopia_ls.config import rating_class
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.process import GatewayProcess, gateway
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.store import assignments, open_store, participants, visits

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

# The README's picture of the participant page, refreshed only on request.
README_SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "participant-screen.png"
SECRET = secrets.token_urlsafe(32)


@dataclass
class Journey:
    """What one participant did and saw, and where everything ended up."""

    study: StudyFile
    gateway: GatewayProcess
    browser: Browser
    pid: str
    study_id: str
    session_id: str
    entered: list[dict[int, dict[str, tuple[str, int]]]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    missing_in_view: bool = False  # the missing rationale was in view after the early Submit
    agent_named: str = ""  # the name the form gives agent 1 of the first episode
    covered: list[str] = field(default_factory=list)  # what the early Submit's notice lay over
    code_shown: str = ""
    prolific_paths: list[str] = field(default_factory=list)
    episodes: list[str] = field(default_factory=list)  # the scenario of each episode rated


# What of the page the notice lies over, or leaves out of view: the episode column, and the
# missing rationale with its dimension's heading and description, each whole in the window
# between the page's bar (holding the notice) and the editor's Submit bar.
COVERED = """
missingClass => {
  const notice = document.getElementById("notice").getBoundingClientRect();
  const top = document.querySelector(".study-bar").getBoundingClientRect().bottom;
  const bottom = document.querySelector(".lsf-bottombar").getBoundingClientRect().top;
  const missing = document.querySelector("." + missingClass + " textarea");
  const block = missing.closest(".sotopia-dimension");
  const heading = block.querySelector("h4");
  const texts = [...block.querySelectorAll("*")]
    .filter(element => !element.children.length && element.textContent.trim());
  const named = {
    "episode column": document.querySelector(".sotopia-episode"),
    "missing rationale": missing,
    "its dimension": heading,
    "its description": texts[texts.indexOf(heading) + 1],
  };
  return Object.entries(named).filter(([, element]) => {
    const box = element.getBoundingClientRect();
    const overlaps = box.left < notice.right && notice.left < box.right &&
      box.top < notice.bottom && notice.top < box.bottom;
    return overlaps || box.top < top || box.bottom > bottom;
  }).map(([name]) => name);
}
"""


def fill(page: Page, chosen: dict[int, dict[str, tuple[str, int]]], *,
         blank: tuple[str, int] | None = None) -> None:
    """Pick every rating and type every rationale (but ``blank``), as a participant does."""
    for agent in AGENTS:
        for key, (rationale, score) in chosen[agent].items():
            column = rating_column(page, key, agent)
            column.locator("label.ant-radio-wrapper").nth(RUBRIC[key].values.index(score)).click()
            if (key, agent) != blank:
                column.locator("textarea").fill(rationale)


def start_rating(browser: Browser, base: str, study_id: str | None = None) -> Page:
    """A new participant's page: arrived from Prolific, past the instructions, at the editor
    (close the page's context when done)."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{base}/s/pilot?PROLIFIC_PID={prolific_id()}&STUDY_ID={study_id or prolific_id()}"
              f"&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    open_rating(page)
    return page


def open_rating(page: Page) -> str:
    """Wait for the editor; the episode's scenario."""
    page.wait_for_selector(LOADED, timeout=60_000)
    return page.locator(".lsf-richtext").first.inner_text()


@pytest.fixture(scope="module")
def journey(ls_client: Client, label_studio: LocalServer, browser: Browser,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journey]:
    """A participant arrives from Prolific, reads the instructions, rates two episodes (one
    rationale left out, then one of spaces, both refused) and goes back to Prolific."""
    tmp = tmp_path_factory.mktemp("study")
    project = study_project(ls_client, f"test_study_{prolific_id()[:8]}", episodes=3)
    with prolific_stand_in() as prolific:
        base = f"http://127.0.0.1:{prolific.server_address[1]}/submissions/complete"
        study = make_study(tmp, project, completion_base=base)
        study_file = tmp / "study.json"
        study_file.write_text(study.model_dump_json())
        env = gateway_env(label_studio.url, label_studio.credentials.api_key, SECRET)
        with gateway(study_file, env) as running:
            done = Journey(study, running, browser, prolific_id(), prolific_id(), prolific_id())
            context = browser.new_context(viewport=VIEWPORT)
            page = context.new_page()
            page.on("framenavigated", lambda frame: done.paths.append(frame.url))
            page.goto(f"{running.url}/s/pilot?PROLIFIC_PID={done.pid}&STUDY_ID={done.study_id}"
                      f"&SESSION_ID={done.session_id}")
            expect(page.get_by_role("heading", name="Social Evaluation Instruction")).to_be_visible()
            page.get_by_role("button", name=re.compile("start rating")).click()

            done.episodes.append(open_rating(page))
            first = answers(101, "first participant")
            # The last rating given is at the bottom of the form; the one left out far above it.
            fill(page, first, blank=("knowledge", 1))
            assert not in_view(rating_column(page, "knowledge", 1).locator("textarea"))
            submit(page)  # too early: the page names the missing rationale and goes to it
            notice = page.locator("#notice")
            expect(notice).to_be_visible()
            done.refusals.append(" ".join(notice.locator("p").all_inner_texts()))
            done.missing_in_view = in_view(rating_column(page, "knowledge", 1).locator("textarea"))
            done.agent_named = rating_column(page, "knowledge", 1).inner_text().splitlines()[0]
            done.covered = page.evaluate(COVERED, rating_class("knowledge", 1))
            page.keyboard.type("   ")  # the page put the cursor in the missing rationale
            submit(page)  # a rationale of spaces is no rationale either
            done.refusals.append(" ".join(notice.locator("p").all_inner_texts()))
            rating_column(page, "knowledge", 1).locator("textarea").fill(first[1]["knowledge"][0])
            expect(notice).to_be_hidden()  # nothing is missing any more
            if os.environ.get("UPDATE_SCREENSHOT"):
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=str(README_SCREENSHOT))
            submit(page)
            done.entered.append(first)

            # The next episode comes into the editor already running: the page stays.
            expect(page.get_by_text("Episode 2 of 2")).to_be_visible()
            expect(page.locator(".lsf-richtext").first).not_to_have_text(done.episodes[0])
            done.episodes.append(open_rating(page))
            second = answers(202, "first participant")
            fill(page, second)
            submit(page)
            done.entered.append(second)

            page.wait_for_url(re.compile(r"/s/pilot/done$"))
            done.code_shown = page.locator("#completion-code").inner_text()
            page.wait_for_url(re.compile(r"/submissions/complete"), timeout=20_000)
            done.prolific_paths = list(prolific.paths)
            context.close()
            # The gateway's writer saves behind the participant; nothing waits on it.
            wait_until_saved(open_store(study.database), 2)
            yield done


def test_a_participant_from_prolific_rates_two_episodes_and_returns_with_the_code(journey):
    pages = [re.sub(r"^http://[^/]+", "", url).split("?")[0] for url in journey.paths]

    # The arrival answers with a redirect, so Prolific's ids leave the address bar at once.
    assert pages == ["/s/pilot/instructions", "/s/pilot/rate", "/s/pilot/done",
                     "/submissions/complete"]
    # The notice names the agent as the form does, and lies over nothing of the form.
    assert journey.agent_named and "agent" not in journey.agent_named.lower()
    assert journey.refusals == ["One answer is still missing: Please explain your Knowledge "
                                f"rating for {journey.agent_named}."] * 2
    assert journey.missing_in_view
    assert journey.covered == []
    assert journey.code_shown == CODE
    assert journey.prolific_paths == [f"/submissions/complete?cc={CODE}"]
    assert len(set(journey.episodes)) == 2


def test_their_two_ratings_are_in_label_studio_under_their_prolific_id_with_the_times(
    journey, ls_client
):
    engine = open_store(journey.study.database)
    with engine.connect() as conn:
        person = conn.execute(select(participants)).one()
        visit = conn.execute(select(visits)).one()
        rows = conn.execute(select(assignments).order_by(assignments.c.id)).all()
    users = {user.id: user.email for user in ls_client.users.list()}

    assert person.external_id == journey.pid
    assert (visit.prolific_study_id, visit.prolific_session_id) == (journey.study_id,
                                                                    journey.session_id)
    assert users[person.ls_user_id] == f"{journey.pid}@prolific.invalid"
    assert [row.state for row in rows] == ["saved", "saved"]
    for row in rows:
        annotation = ls_client.annotations.get(id=row.ls_annotation_id)
        assert annotation.completed_by == person.ls_user_id
        assert annotation.task == row.task_id
        assert annotation.lead_time == pytest.approx(row.lead_time) and row.lead_time > 0
        shown = row.first_shown_at.replace(tzinfo=annotation.draft_created_at.tzinfo)
        assert annotation.draft_created_at == shown
    check_invariants(engine, journey.study)


@dataclass
class Second:
    """A second participant at the editor, and every response their browser received."""

    page: Page
    bodies: list[tuple[str, str]]
    scenario: str


@pytest.fixture(scope="module")
def second(journey) -> Iterator[Second]:
    """The second participant's page, loaded once for the two tests that look at it: the
    first only reads it; the second clicks a rating, then leaves for Label Studio."""
    context = journey.browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    bodies: list[tuple[str, str]] = []

    def keep(response: Response) -> None:
        try:
            bodies.append((response.url, response.body().decode("utf-8", "replace")))
        except Exception:  # noqa: BLE001  (redirects have no body to read)
            bodies.append((response.url, ""))

    page.on("response", keep)
    page.goto(f"{journey.gateway.url}/s/pilot?PROLIFIC_PID={prolific_id()}"
              f"&STUDY_ID={journey.study_id}&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    scenario = open_rating(page)
    page.wait_for_timeout(500)
    page.remove_listener("response", keep)  # Label Studio's own page, opened later, is not kept
    yield Second(page, bodies, scenario)
    context.close()


def test_a_second_participant_on_the_same_episode_sees_a_blank_form_and_nothing_of_the_first(
    journey, second, ls_client, label_studio: LocalServer
):
    page, bodies, scenario = second.page, second.bodies, second.scenario
    base = journey.gateway.url

    assert scenario == journey.episodes[0]  # the episode that already had one rater
    assert checked_ratings(page) == []
    assert all(text == "" for text in page.locator("textarea").evaluate_all(
        "areas => areas.map(area => area.value)"))
    first_words = [rationale for agent in AGENTS for rationale, _ in journey.entered[0][agent].values()]
    task_id = _first_task(journey)
    data = ls_client.tasks.get(id=task_id).data
    model_said = _stored_reasonings(data["episode_id"])
    assert model_said, "the episode should carry a stored model evaluation (task meta)"
    hidden = ["first participant", journey.pid, label_studio.url, label_studio.credentials.api_key,
              SECRET, "sotopia_evaluation", data["source_file"], *model_said]
    port = label_studio.url.rsplit(":", 1)[1]
    for url, body in bodies:
        for text in hidden + first_words:
            assert text not in body, f"{text!r} reached the browser in {url}"
        if "/static/editor/" not in url:
            assert port not in body, url

    for path in ("/api/projects", f"/api/tasks/{task_id}", f"/api/tasks/{task_id}/annotations",
                 "/api/users", f"/projects/{journey.study.project}/data", "/user/login/",
                 "/s/pilot/rate/1", "/s/pilot/assignments/1", f"/s/pilot/annotations/{task_id}"):
        answer = page.request.get(f"{base}{path}")
        assert answer.status in (403, 404), path
        assert "first participant" not in answer.text()


def _first_task(journey: Journey) -> int:
    engine = open_store(journey.study.database)
    with engine.connect() as conn:
        return conn.execute(select(assignments.c.task_id).order_by(assignments.c.id)).first()[0]


def _stored_reasonings(episode_id: str) -> list[str]:
    """The stored model evaluation's rationales of a sample episode (the task's meta)."""
    episode = next(e for e in load_episodes(SAMPLE_EPISODES).episodes if e.id == episode_id)
    flat = episode.evaluation.flat() if episode.evaluation else {}
    return [text for name, text in flat.items() if "reasoning" in name and len(text) > 20]


def test_the_export_of_the_study_s_project_reproduces_every_submitted_rating(
    journey, label_studio: LocalServer, tmp_path
):
    env_args = ["--url", label_studio.url, "--api-key", label_studio.credentials.api_key]

    exported = invoke(main, "export", "--project", str(journey.study.project), *env_args,
                      "-o", str(tmp_path / "out"))

    assert exported.exit_code == 0, exported.output
    long = pd.read_csv(tmp_path / "out" / "scores_long.csv")
    engine = open_store(journey.study.database)
    with engine.connect() as conn:
        saved = conn.execute(select(assignments.c.ls_annotation_id, assignments.c.participant_id)
                             .where(assignments.c.state == "saved")).all()
    mine = [annotation for annotation, participant in saved if participant == 1]
    assert len(mine) == 2
    for annotation, entered in zip(sorted(mine), journey.entered):
        rows = long[long["annotation_id"] == annotation]
        got = {(int(r.agent), r.dimension): (r.rationale, int(r.score)) for r in rows.itertuples()}
        assert got == {(agent, key): pair for agent in AGENTS for key, pair in entered[agent].items()}
    assert long["annotation_id"].nunique() == len(saved)
    # The tables name a pseudonym; the private identity map carries the Prolific id.
    identities = (tmp_path / "out" / "annotator_identities.csv").read_text()
    pseudonym = long[long["annotation_id"] == mine[0]]["annotator_id"].iloc[0]
    assert journey.pid not in (tmp_path / "out" / "scores_long.csv").read_text()
    assert f'"{pseudonym}","{journey.pid}@prolific.invalid"' in identities


# The results Label Studio stored for the journey's second rating when the participant page ran
# the npm editor @heartexlabs/label-studio 1.4.0, recorded with it before the page moved to
# Label Studio's own editor.
SAVED_THROUGH_THE_OLD_EDITOR = Path(__file__).parent / "data" / "results_saved_through_editor_1.4.0.json"


def test_a_rating_saved_through_label_studio_s_own_editor_is_byte_identical_to_the_old_one(
    journey, ls_client
):
    engine = open_store(journey.study.database)
    with engine.connect() as conn:
        second = conn.execute(select(assignments.c.ls_annotation_id)
                              .order_by(assignments.c.id)).all()[1][0]
    stored = json.dumps(ls_client.annotations.get(id=second).result, indent=1) + "\n"

    assert stored == SAVED_THROUGH_THE_OLD_EDITOR.read_text()


def test_the_participant_sees_the_form_annotators_see_in_label_studio_and_the_last_turn(
    journey, second, label_studio: LocalServer
):
    page = second.page
    participant_form = form_outline(page)
    add_buttons = page.get_by_role("button", name="Add").count()
    columns = page.locator(".sotopia-columns").bounding_box()
    episode = page.locator(".sotopia-episode")
    last_turn = page.locator(".sotopia-dialogue [data-testid^='phrase:']").last
    overflows = episode.evaluate("column => column.scrollHeight > column.clientHeight")
    turn_at_first = in_view(last_turn)
    rating_column(page, "goal", 2).locator("label.ant-radio-wrapper").first.click()
    page.wait_for_timeout(200)  # a scroll event's handler runs after the scroll
    turn_at_last = in_view(last_turn)
    engine = open_store(journey.study.database)
    with engine.connect() as conn:
        task = conn.execute(select(assignments.c.task_id).order_by(assignments.c.id.desc())).first()[0]

    log_in(page, label_studio)
    open_task(page, label_studio, journey.study.project, task)  # shows a rating made before
    page.get_by_role("button", name="Create an annotation").click()
    expect(page.locator("textarea")).to_have_count(len(AGENTS) * len(DIMENSIONS))
    annotator_form = form_outline(page)

    assert add_buttons == 0
    # The two columns take the whole width: no empty column beside them (1.4.0 left 334 px).
    assert columns["x"] + columns["width"] >= VIEWPORT["width"] - 32
    # The episode column does not hold the whole episode, yet rating the last dimension the
    # participant sees the last turn of the dialogue.
    assert overflows and not turn_at_first and turn_at_last
    assert sum(kind == "rating" for kind, *_ in participant_form) == len(AGENTS) * len(DIMENSIONS)
    assert sum(kind == "text" for kind, *_ in participant_form) == len(AGENTS) * len(DIMENSIONS)
    assert participant_form == annotator_form


def _rate_until_full(base: str, most: int = 12) -> None:
    """Participants (plain HTTP) rate until an arrival finds nothing left to rate."""
    for _ in range(most):
        someone = Participant.of(base)
        try:
            if someone.arrive().url.path.endswith("/done"):
                return
            someone.read_instructions()
            someone.open_episode()
            while someone.boot:
                assert someone.rate(7).status_code == 200
                someone.open_episode()
        finally:
            someone.close()
    raise AssertionError(f"the study still had work after {most} participants")


def test_a_latecomer_reaches_the_no_slots_code_on_the_first_page_they_see(journey):
    _rate_until_full(journey.gateway.url)
    context = journey.browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    documents: list[str] = []
    page.on("load", lambda loaded: documents.append(loaded.url))

    page.goto(f"{journey.gateway.url}/s/pilot?PROLIFIC_PID={prolific_id()}"
              f"&STUDY_ID={journey.study_id}&SESSION_ID={prolific_id()}")
    expect(page.get_by_role("heading", name="Nothing left to rate")).to_be_visible()
    code = page.locator("#completion-code").inner_text()
    context.close()

    assert [re.sub(r"^http://[^/]+", "", url) for url in documents] == ["/s/pilot/done"]
    assert code == NO_SLOTS

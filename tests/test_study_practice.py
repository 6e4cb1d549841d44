"""A practice step before the study: a participant rates a practice episode in Label Studio's
own editor, then sees each score beside the reference and its rationale, and where they were
far off, the rubric's guidance and the seed example of their mistake. They retry and go on to
the study, or fail every attempt and get the practice's screen-out code, whatever session they
come back in. Practice ratings are no data: never in Label Studio nor in the export; the review
and the protocol give the training figures.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine, func, select

from browser import CHROMIUM, VIEWPORT, submit
from conftest import invoke, results_of, task_ids
from study_support import (
    BOOT,
    CODE,
    EDITOR,
    Participant,
    make_study,
    prolific_id,
    study_project,
    wait_until_saved,
)
from test_study import fill, open_rating
from test_study_pages import serving
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name, reasoning_name
from sotopia_ls.errors import StudyError
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.protocol import study_protocol
from sotopia_ls.study.screening.gold import csv_references
from sotopia_ls.study.screening.review import review_rows
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import StudyFile, write_study
from sotopia_ls.study.store import assignments, open_store, participants, practice_attempts

PRACTICE_OUT = "PR4CT1C3OUT"
# The reference: believability 9 (a natural conversation), the middle of every other range.
REFERENCE = {key: 9 if key == "believability" else RUBRIC[key].values[len(RUBRIC[key].values) // 2]
             for key in DIMENSION_KEYS}
SINGLE_REPETITION = "Liam repeats what Ethan said once."


def rating(**moved: int) -> dict[int, dict[str, tuple[str, int]]]:
    """The reference's scores, ``moved`` (``believability_1=1``) set, each with a rationale."""
    return {agent: {key: (f"my reason for {key} of agent {agent}",
                          moved.get(rating_name(key, agent), REFERENCE[key]))
                    for key in DIMENSION_KEYS} for agent in AGENTS}


def reference_row(episode: str) -> dict[str, Any]:
    row: dict[str, Any] = {"pk": episode}
    for agent in AGENTS:
        for key in DIMENSION_KEYS:
            row[rating_name(key, agent)] = REFERENCE[key]
            row[reasoning_name(key, agent)] = f"Our reason for {key} of agent {agent}."
    return row


@dataclass
class Run:
    study: StudyFile
    engine: Engine
    url: str
    project: int
    practice_task: int
    out: Path
    passer: str = ""
    failer: str = ""
    seen: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def run(ls_client: Client, tmp_path_factory) -> Iterator[Run]:
    """A study of one episode per participant, two practice attempts within 2 points, its
    practice episode the project's first."""
    tmp = tmp_path_factory.mktemp("practice")
    project = study_project(ls_client, f"test_practice_{prolific_id()[:8]}", episodes=3)
    episode, task = min(task_ids(ls_client, project).items(), key=lambda pair: pair[1])
    references = tmp / "practice.csv"
    pd.DataFrame([reference_row(episode)]).to_csv(references, index=False)
    study = make_study(tmp, project, episodes_per_participant=1, practice={
        "references": str(references), "attempts": 2, "max_distance": 2,
        "screen_out_code": PRACTICE_OUT, "screen_out_url": f"http://127.0.0.1:9/out?cc={PRACTICE_OUT}"})
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False)
    with serving(app) as url:
        yield Run(study, engine, url, project, task, tmp)


def in_chromium(test: Any) -> Any:
    """A test that drives Chromium through the served gateway and Label Studio's editor."""
    for mark in (pytest.mark.browser, pytest.mark.server, pytest.mark.skipif(
            not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}")):
        test = mark(test)
    return test


def arrive(browser: Browser, run: Run, pid: str) -> Page:  # noqa: F811
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{run.url}/s/pilot?PROLIFIC_PID={pid}&STUDY_ID={'a' * 24}"
              f"&SESSION_ID={prolific_id()}")
    page.get_by_role("button", name=re.compile("start rating")).click()
    return page


def practise(page: Page, chosen: dict[int, dict[str, tuple[str, int]]]) -> None:
    """Rate the practice episode in the editor and submit: on to its feedback."""
    page.wait_for_url(re.compile(r"/s/pilot/practice$"))
    open_rating(page)
    fill(page, chosen)
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/practice-feedback$"))


@in_chromium
def test_a_believability_of_one_shows_the_single_repetition_example_then_a_retry_passes(
        run, browser: Browser):  # noqa: F811
    run.passer = pid = prolific_id()
    page = arrive(browser, run, pid)

    practise(page, rating(believability_1=1))
    advice = page.locator("tr.practice-advice")
    expect(advice).to_have_count(1)
    run.seen["advice"] = advice.inner_text()
    run.seen["first row"] = page.locator("#practice-1").inner_text()
    run.seen["result"] = page.locator("#practice-result").inner_text()
    page.get_by_role("button", name="Try again").click()

    practise(page, rating(believability_1=7, goal_2=REFERENCE["goal"] - 2))
    run.seen["passed"] = page.locator("#practice-result").inner_text()
    expect(page.locator("tr.practice-advice")).to_have_count(0)
    page.get_by_role("button", name="Go on to the study").click()
    page.wait_for_url(re.compile(r"/s/pilot/rate$"))
    run.seen["episode"] = open_rating(page)
    expect(page.get_by_text("Episode 1 of 1")).to_be_visible()
    fill(page, rating(goal_1=0))
    submit(page)
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    run.seen["code"] = page.locator("#completion-code").inner_text()
    page.context.close()

    assert run.seen["advice"].startswith("Believability: " + RUBRIC["believability"].guidance)
    assert f"“{SINGLE_REPETITION}” rated 1." in run.seen["advice"]
    assert "should not rate 1 for a single repetition" in run.seen["advice"]
    assert run.seen["first row"].split("\t")[2:] == [
        "1 (more than 2 off)", "9", "Our reason for believability of agent 1."]
    assert "1 attempt left" in run.seen["result"]
    assert run.seen["passed"].startswith("Well done")
    assert run.seen["code"] == CODE


@in_chromium
def test_who_fails_every_attempt_gets_the_screen_out_code_and_no_episode_in_any_session(
        run, browser: Browser):  # noqa: F811
    run.failer = pid = prolific_id()
    page = arrive(browser, run, pid)
    practise(page, rating(believability_1=1))
    page.get_by_role("button", name="Try again").click()
    practise(page, rating(relationship_2=RUBRIC["relationship"].range_high))
    last = page.locator("#practice-result").inner_text()
    page.get_by_role("button", name="Finish").click()
    page.wait_for_url(re.compile(r"/s/pilot/done$"))
    code = page.locator("#completion-code").inner_text()
    page.context.close()
    # Back with a new Prolific session: the server remembers the attempts.
    again = Participant.of(run.url, pid=pid)
    back = again.arrive()
    tried = again.http.get("/s/pilot/practice", follow_redirects=True)

    assert "this was your last practice attempt" in last
    assert code == PRACTICE_OUT
    assert back.url.path == "/s/pilot/done" and PRACTICE_OUT in back.text
    assert tried.url.path == "/s/pilot/done"
    with run.engine.connect() as conn:
        person = conn.execute(select(participants.c.id)
                              .where(participants.c.external_id == pid)).scalar_one()
        leased = conn.execute(select(func.count()).select_from(assignments)
                              .where(assignments.c.participant_id == person)).scalar_one()
        attempts = conn.execute(select(func.count()).select_from(practice_attempts)
                                .where(practice_attempts.c.participant_id == person)).scalar_one()
    assert (leased, attempts) == (0, 2)


@pytest.mark.browser
@pytest.mark.server
def test_the_review_and_the_protocol_give_the_training_and_the_export_no_practice_rating(
        run, label_studio: LocalServer, ls_client: Client):
    assert run.passer and run.failer, "run after the two participants above"
    review = review_rows(run.engine, run.study)
    wait_until_saved(run.engine, 1)
    protocol = study_protocol(run.engine, run.study)
    write_study(run.study, run.out / "study.json", overwrite=True)
    exported = invoke(export_command, "--project", str(run.project), "--url", label_studio.url,
                      "--api-key", label_studio.credentials.api_key, "-o", str(run.out / "x"),
                      "--study", str(run.out / "study.json"))

    shown = ["practice", "practice_attempts", "episodes", "outcome", "suggested"]
    assert review.loc[review["participant"] == run.passer, shown[:-1]].values.tolist() == [
        ["passed", 2, 1, "completed"]]
    # The session that failed, then the one that came back: both screened out on Prolific.
    assert review.loc[review["participant"] == run.failer, shown].values.tolist() == [
        ["failed", 2, 0, "screened_out", "screened_out"],
        ["failed", 0, 0, "screened_out", "screened_out"]]
    assert protocol["training"] == {
        "attempts_allowed": 2, "max_distance": 2, "participants": 2, "passed": 1, "failed": 1,
        "pass_rate": 0.5, "attempts": 4, "attempts_per_participant": 2.0}
    assert exported.exit_code == 0, exported.output
    record = json.loads((run.out / "x" / "protocol.json").read_text())
    assert record["studies"][0]["training"] == protocol["training"]
    assert "1 of 2 participants passed (50%), in 4 attempts" in " ".join(
        (run.out / "x" / "protocol.md").read_text().split())
    long = pd.read_csv(run.out / "x" / "scores_long.csv")
    assert run.practice_task not in set(long["task_id"]) and len(set(long["annotation_id"])) == 1
    assert ls_client.tasks.get(id=str(run.practice_task)).total_annotations == 0


# --- the server decides, whatever the page sends --------------------------------------------


def practising(run: Run) -> Participant:
    """A new participant at the practice page (its boot data kept)."""
    person = Participant.of(run.url)
    person.arrive()
    person.read_instructions()
    page = person.http.get("/s/pilot/practice")
    person.boot = json.loads(BOOT.search(page.text).group(1))
    return person


def post_practice(person: Participant, chosen: dict[int, dict[str, tuple[str, int]]]) -> Any:
    return person.http.post("/s/pilot/practice-submit",
                            headers={"X-CSRF-Token": person.boot["csrf"]},
                            json={"assignment": person.boot["assignment"],
                                  "results": results_of(chosen)})


@pytest.mark.server
def test_a_practice_submit_sent_again_or_past_the_attempts_records_nothing_more(run):
    person = practising(run)

    first = post_practice(person, rating(believability_1=1))
    replayed = post_practice(person, rating())  # a passing rating, before the feedback was seen
    on_rate = person.http.get("/s/pilot/rate", follow_redirects=True)

    assert first.json() == replayed.json() == {"next": "/s/pilot/practice-feedback"}
    assert on_rate.url.path == "/s/pilot/practice-feedback"
    assert "1 attempt left" in on_rate.text
    with run.engine.connect() as conn:
        passed = conn.execute(select(practice_attempts.c.passed)
                              .join(participants,
                                    participants.c.id == practice_attempts.c.participant_id)
                              .where(participants.c.external_id == person.pid)).scalars().all()
    assert passed == [False]


@pytest.mark.server
def test_who_passed_and_went_on_cannot_practise_again(run):
    person = practising(run)
    post_practice(person, rating())
    feedback = person.http.get("/s/pilot/practice-feedback")
    token = re.search(r'name="csrf" value="([^"]+)"', feedback.text).group(1)
    went_on = person.http.post("/s/pilot/practice-feedback", data={"csrf": token},
                               follow_redirects=True)

    again = post_practice(person, rating(believability_1=1))
    back = person.http.get("/s/pilot/practice", follow_redirects=True)

    assert "Well done" in feedback.text and went_on.url.path == "/s/pilot/rate"
    assert again.json() == {"next": "/s/pilot/rate"} and back.url.path == "/s/pilot/rate"
    with run.engine.connect() as conn:
        assert conn.execute(select(practice_attempts.c.passed).join(
            participants, participants.c.id == practice_attempts.c.participant_id).where(
            participants.c.external_id == person.pid)).scalars().all() == [True]


@pytest.mark.server
def test_a_practice_rating_posted_as_a_study_rating_is_refused_and_no_page_skips_practice(run):
    person = practising(run)

    as_study = person.submit(results_of(rating()))  # to /submit, with the practice page's key
    skipping = person.http.get("/s/pilot/rate", follow_redirects=True)

    assert as_study.status_code == 404
    assert skipping.url.path == "/s/pilot/practice"
    with run.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(assignments).join(
            participants, participants.c.id == assignments.c.participant_id).where(
            participants.c.external_id == person.pid)).scalar_one() == 0


@pytest.mark.server
def test_study_init_writes_the_practice_step_and_refuses_its_options_alone(
        label_studio: LocalServer, run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("practice.csv").write_text("pk\n")
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    def init(*args: str) -> Any:
        return CliRunner().invoke(main, ["study", "init", "--project", str(run.project),
                                         "--name", "pilot", "--completion-code", CODE, "-o",
                                         str(tmp_path / "study.json"), *args], env=env)

    made = init("--practice", "practice.csv", "--practice-attempts", "3",
                "--practice-screen-out-code", "P1OUT")
    alone = init("--practice-attempts", "3", "--force")
    no_code = init("--practice", "practice.csv", "--force")

    assert made.exit_code == 0, made.output
    assert json.loads((tmp_path / "study.json").read_text())["practice"] == {
        "references": str(tmp_path / "practice.csv"), "attempts": 3, "max_distance": 2,
        "screen_out_code": "P1OUT",
        "screen_out_url": "https://app.prolific.com/submissions/complete?cc=P1OUT",
        "screen_out_reward": None}
    assert "A practice step first: 3 attempt(s)" in made.output
    for refused, says in ((alone, "--practice-attempts applies to a practice step only"),
                          (no_code, "--practice needs --practice-screen-out-code")):
        assert refused.exit_code != 0 and says in refused.output
        assert refused.output.count("\n") == 1 and "Traceback" not in refused.output


def test_a_practice_reference_without_a_rationale_is_one_line_naming_file_row_and_field(tmp_path):
    row = reference_row("ep1") | {reasoning_name("secret", 2): "  "}
    path = tmp_path / "practice.csv"
    pd.DataFrame([row]).to_csv(path, index=False)

    with pytest.raises(StudyError) as refused:
        csv_references(path, {"ep1": 7}, 1, rationales=True)

    assert str(refused.value) == f"{path} [row 2]: secret_reasoning_2: missing rationale"
    assert csv_references(path, {"ep1": 7}, 1)[7] == {  # gold reads the ratings only
        rating_name(key, agent): REFERENCE[key] for agent in AGENTS for key in DIMENSION_KEYS}

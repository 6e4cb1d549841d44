"""The gateway as participants and researchers meet it, against the session's real Label Studio.

The app runs in this process behind Starlette's TestClient (each participant a client with its
own cookies); Label Studio is the real server of the test session.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import stat
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, event, select
from starlette.testclient import TestClient

from conftest import invoke, results_of
from study_support import (
    CODE,
    EDITOR,
    NO_SLOTS,
    SAMPLE_EPISODES,
    CSRF_FIELD,
    Participant,
    answers,
    check_invariants,
    make_study,
    study_project,
)
from sotopia_ls.cli import main
from sotopia_ls.dimensions import DIMENSIONS
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.outbox.saving import save_all_waiting
from sotopia_ls.study.serving.app import create_app
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.serving.security import SECURITY_HEADERS
from sotopia_ls.study.settings import SECRET_ENV, StudyFile
from sotopia_ls.study.store import assignments, open_store, participants, visits

pytestmark = pytest.mark.server

SECRET = secrets.token_urlsafe(32)


class Study:
    """A study on a fresh project of three episodes, with its gateway app in this process."""

    def __init__(self, client: Client, title: str, tmp: Path, config: str | None = None,
                 **fields: object) -> None:
        self.client = client
        self.project = study_project(client, title, episodes=3)
        if config is not None:  # the researcher's own labeling config
            client.projects.update(id=self.project, label_config=config)
        self.settings: StudyFile = make_study(tmp, self.project, **fields)
        self.engine: Engine = open_store(self.settings.database)
        self.gateway = prepare_gateway(self.settings, client, self.engine)
        self.app = create_app(self.gateway, secret=SECRET, editor=EDITOR, https_only=False)

    def participant(self, **fields: object) -> Participant:
        return Participant(TestClient(self.app, base_url="http://127.0.0.1"), **fields)

    def rated(self, participant: Participant, seeds: list[int]) -> None:
        """The participant arrives, reads the instructions and rates one episode per seed."""
        participant.arrive()
        participant.read_instructions()
        for seed in seeds:
            participant.open_episode()
            assert participant.rate(seed).status_code == 200
        self.written()

    def written(self) -> int:
        """What the gateway's writer does behind the participants, done now: ratings saved."""
        return save_all_waiting(self.engine, self.client, "pilot", self.gateway.writer.targets)

    def annotations(self) -> list:
        """Every annotation of the project, once the writer has saved what waits."""
        self.written()
        tasks = self.client.tasks.list(project=self.project, include="id")
        return [a for task in tasks for a in self.client.annotations.list(id=task.id)]


@pytest.fixture
def study(ls_client: Client, project_title: str, tmp_path: Path) -> Study:
    return Study(ls_client, project_title, tmp_path)


@pytest.fixture(scope="module")
def read_study(ls_client: Client, tmp_path_factory: pytest.TempPathFactory) -> Study:
    """One study for the file's tests that only read its project and settings (the commands
    that refuse, or write a study file of their own): none rates, syncs or serves it."""
    return Study(ls_client, f"test_{secrets.token_hex(6)}", tmp_path_factory.mktemp("read"))


# --- arrival -----------------------------------------------------------------------------


@pytest.mark.parametrize("query, named", [
    ("", "PROLIFIC_PID, SESSION_ID, STUDY_ID"),
    ("?PROLIFIC_PID=123&STUDY_ID=aaaaaaaaaaaaaaaaaaaaaaaa&SESSION_ID=bbbbbbbbbbbbbbbbbbbbbbbb",
     "PROLIFIC_PID"),
    ("?PROLIFIC_PID=5f0c1d2e3a4b5c6d7e8f9a0b&STUDY_ID=<script>&SESSION_ID=bbbbbbbbbbbbbbbbbbbbbbbb",
     "STUDY_ID"),
])
def test_a_link_without_valid_prolific_parameters_gets_a_page_naming_them(study, query, named):
    page = study.participant().http.get(f"/s/pilot{query}")

    assert page.status_code == 400
    assert f"malformed {named}." in page.text
    assert "Traceback" not in page.text and "<script>" not in page.text


def test_arrival_records_the_participant_and_drops_their_ids_from_the_address(study):
    someone = study.participant()
    page = someone.arrive(study_id="c" * 24)

    assert page.url.path == "/s/pilot/instructions" and not page.url.query
    assert someone.pid not in page.text
    with study.engine.connect() as conn:
        person = conn.execute(select(participants)).one()
        visit = conn.execute(select(visits)).one()
    assert (person.external_id, visit.prolific_study_id, visit.prolific_session_id) == (
        someone.pid, "c" * 24, someone.session)


def test_a_failure_inside_the_gateway_is_a_plain_500_page_with_every_security_header(study):
    with study.engine.begin() as conn:  # the gateway's database loses a table under it
        conn.exec_driver_sql("DROP TABLE assignments")
    someone = Participant(TestClient(study.app, base_url="http://127.0.0.1",
                                     raise_server_exceptions=False))

    page = someone.arrive()

    assert page.status_code == 500
    assert "Something went wrong on our side" in page.text
    assert "Traceback" not in page.text and "assignments" not in page.text
    assert {name: page.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS
    assert page.headers["cache-control"] == "no-store"


def test_pages_need_the_session_the_arrival_gives(study):
    stranger = study.participant()
    for path in ("instructions", "rate", "done"):
        assert stranger.http.get(f"/s/pilot/{path}").status_code == 403


# --- instructions, then rating -------------------------------------------------------------


def test_the_instructions_come_first_and_stay_reachable_while_rating(study):
    someone = study.participant()
    someone.arrive()
    skipped = someone.http.get("/s/pilot/rate", follow_redirects=True)
    assert skipped.url.path == "/s/pilot/instructions"
    assert "Social Evaluation Instruction" in skipped.text
    for dimension in DIMENSIONS:
        assert dimension.label in skipped.text
        assert all(html.escape(example.rationale) in skipped.text for example in dimension.examples)

    rating = someone.read_instructions()

    assert rating.url.path == "/s/pilot/rate"
    assert '<details class="instructions-panel">' in rating.text
    assert all(dimension.label in rating.text for dimension in DIMENSIONS)
    assert someone.http.get("/s/pilot/instructions").status_code == 200


def test_the_page_gets_what_the_config_shows_and_nothing_of_the_task_besides(study):
    someone = study.participant()
    someone.arrive()
    someone.read_instructions()
    page = someone.open_episode()

    data = someone.boot["task"]["data"]
    assert set(data) == {"scenario", "dialogue"} | {
        f"agent_{n}_{part}" for n in (1, 2) for part in ("name", "profile", "secret", "goal")}
    assert all(set(turn) == {"speaker", "text"} for turn in data["dialogue"])
    assert someone.boot["task"]["id"] == 1
    for hidden in ("sotopia_evaluation", "source_file", "episode_id", "models", "gpt-3.5"):
        assert hidden not in page.text


def test_a_rationale_of_spaces_is_refused_with_the_field_named(study):
    someone = study.participant()
    someone.begin()
    results = results_of(answers(1))
    secret_2 = next(r for r in results if r["from_name"] == "secret_reasoning_2")
    secret_2["value"]["text"] = ["   \n "]

    refused = someone.submit(results)

    assert refused.status_code == 422
    assert refused.json() == {"problems": ["Secret rationale for agent 2: empty rationale"]}
    assert study.annotations() == []
    assert someone.rate(1).status_code == 200


def test_a_submission_without_the_session_csrf_token_is_refused(study):
    someone = study.participant()
    someone.begin()
    results = results_of(answers(1))
    for token in (None, "forged"):
        headers = {"X-CSRF-Token": token} if token else {}
        sent = someone.http.post("/s/pilot/submit", headers=headers,
                                 json={"assignment": someone.boot["assignment"], "results": results})
        assert sent.status_code == 403
    assert study.annotations() == []


def test_a_double_click_or_a_retried_request_saves_one_annotation(study):
    someone = study.participant()
    someone.begin()
    results = results_of(answers(2))
    answers_seen: list[int] = []

    def send() -> None:
        answers_seen.append(someone.submit(results).status_code)

    clicks = [threading.Thread(target=send) for _ in range(3)]
    for click in clicks:
        click.start()
    for click in clicks:
        click.join()
    send()  # and a retry once the first answer came back

    assert answers_seen == [200] * 4
    saved = study.annotations()
    assert len(saved) == 1
    with study.engine.connect() as conn:
        row = conn.execute(select(assignments)).one()
    assert (row.state, row.ls_annotation_id) == ("saved", saved[0].id)


@contextmanager
def reads_of_the_visit(engine: Engine) -> Iterator[list[str]]:
    """The queries that read a visit's state (whether the instructions are read) or its pages'
    answers while the block runs."""
    reads: list[str] = []

    def record(conn: object, cursor: object, statement: str, *args: object) -> None:
        if re.search(r"\bvisits\.instructions_read_at\b|\bFROM page_answers\b", statement) \
                and statement.lstrip().startswith("SELECT"):
            reads.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield reads
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_request_reads_the_visit_once_and_a_rating_once_more_for_its_count(study):
    """Every request reads the participant's visit: in one query, and not again to find the
    next page; only a rating reads it after it is recorded, for the number rated."""
    someone = study.participant()
    someone.arrive()
    token = CSRF_FIELD.search(someone.http.get("/s/pilot/instructions").text).group(1)

    with reads_of_the_visit(study.engine) as reading:
        read = someone.http.post("/s/pilot/instructions", data={"csrf": token},
                                 follow_redirects=False)
    with reads_of_the_visit(study.engine) as opening:
        someone.open_episode()
    with reads_of_the_visit(study.engine) as first_rating:
        first = someone.rate(1)
    someone.open_episode()
    with reads_of_the_visit(study.engine) as last_rating:
        last = someone.rate(2)

    assert read.headers["location"] == "/s/pilot/rate"
    assert (first.json(), last.json()) == ({"next": "/s/pilot/rate"}, {"next": "/s/pilot/done"})
    assert [len(reading), len(opening), len(first_rating), len(last_rating)] == [1, 1, 2, 2]
    with study.engine.connect() as conn:
        assert conn.execute(select(visits.c.outcome)).scalar_one() == "completed"


def test_a_saved_rating_carries_the_gateway_timestamps(study):
    someone = study.participant()
    study.rated(someone, [3])

    (annotation,) = study.annotations()
    with study.engine.connect() as conn:
        row = conn.execute(select(assignments)).one()
    assert annotation.draft_created_at == row.first_shown_at.replace(tzinfo=annotation.draft_created_at.tzinfo)
    assert annotation.lead_time == pytest.approx(row.lead_time)
    assert (row.submitted_at - row.first_shown_at).total_seconds() == pytest.approx(row.lead_time)


# --- blinding and the boundary ---------------------------------------------------------------


GUESSES = [
    "/api/projects", "/api/projects/1/export", "/api/tasks/1", "/api/tasks/1/annotations",
    "/api/users", "/projects/1/data", "/user/login/", "/data/upload/", "/s/pilot/rate/1",
    "/s/pilot/assignments/1", "/s/pilot/annotations", "/s/other", "/s/pilot/%2e%2e/api/users",
    # Encoded dot segments: a client does not tidy those away before they reach the server.
    "/static/%2e%2e/study.json", "/static/editor/%2e%2e%2f%2e%2e/gateway.sqlite3", "/admin",
]


def test_another_participant_can_reach_nothing_of_the_first_by_guessing(study):
    first, second = study.participant(), study.participant()
    study.rated(first, [4])
    second.begin()
    page = second.open_episode()

    assert "rationale 4" not in page.text
    assert second.submit(results_of(answers(5)), assignment=first.boot["assignment"]).status_code == 404
    for path in GUESSES:
        answer = second.http.get(path)
        assert answer.status_code in (403, 404), path
        assert "rationale 4" not in answer.text


def test_no_answer_of_the_gateway_carries_label_studio_s_address_or_key(
    study, label_studio: LocalServer
):
    seen: list[httpx.Response] = []
    someone = study.participant()
    someone.http.event_hooks["response"] = [lambda response: seen.append(response)]
    study.rated(someone, [6, 7])
    someone.http.get("/s/pilot/done")
    for path in GUESSES + ["/static/editor/main.js", "/static/editor/LICENSE", "/health"]:
        someone.http.get(path)

    port = label_studio.url.rsplit(":", 1)[1]
    for response in seen:
        response.read()
        body = response.text
        for secret in (label_studio.url, f"localhost:{port}", label_studio.credentials.api_key,
                       SECRET):
            assert secret not in body and secret not in str(response.headers), response.url
        if not response.url.path.startswith("/static/editor/"):
            assert port not in body, response.url


# --- coming back, finishing, running out ---------------------------------------------------------


def test_a_returning_participant_finds_the_episode_they_left_and_then_their_code(study):
    someone = study.participant()
    left = someone.begin()

    back = someone.arrive()
    assert back.url.path == "/s/pilot/rate"
    someone.open_episode()
    assert someone.boot["assignment"] == left

    someone.rate(1)
    someone.open_episode()
    finished = someone.rate(2)
    assert finished.json() == {"next": "/s/pilot/done"}
    done = someone.arrive()
    assert done.url.path == "/s/pilot/done"
    assert CODE in done.text and f"cc={CODE}" in done.text


def test_an_arrival_with_nothing_left_to_rate_gets_the_no_slots_code_at_once(study):
    # 3 episodes x 2 raters, 2 each: the third participant finds one episode they may rate,
    # the fourth holds the last slot, still rating when the latecomer arrives.
    for n, seeds in enumerate(([10, 11], [12, 13], [14])):
        study.rated(study.participant(), seeds)
    last = study.participant()
    held = last.begin()

    latecomer = study.participant()
    first = latecomer.http.get("/s/pilot", params={
        "PROLIFIC_PID": latecomer.pid, "STUDY_ID": "a" * 24, "SESSION_ID": latecomer.session}, follow_redirects=False)
    page = latecomer.http.get(first.headers["location"], follow_redirects=False)

    # One redirect from the Prolific link to the code: no instructions to read first.
    assert first.status_code == 303 and first.headers["location"] == "/s/pilot/done"
    assert page.status_code == 200
    assert "Nothing left to rate" in page.text and NO_SLOTS in page.text and CODE not in page.text
    assert latecomer.http.get("/s/pilot/rate", follow_redirects=False).headers["location"] == (
        "/s/pilot/done")
    # The holder of the last slot, back from another tab, goes on rating it.
    assert last.arrive().url.path == "/s/pilot/rate"
    assert last.open_episode() and last.boot["assignment"] == held
    assert last.rate(15).status_code == 200
    assert len(study.annotations()) == 6
    with study.engine.connect() as conn:
        outcomes = dict(conn.execute(select(participants.c.external_id, visits.c.outcome)
                                     .join(visits)).all())
    assert (outcomes[latecomer.pid], outcomes[last.pid]) == ("no_slots", None)
    check_invariants(study.engine, study.settings)


def test_a_rating_made_while_label_studio_is_down_is_saved_when_it_is_back(study):
    someone = study.participant()
    someone.begin()

    assert someone.rate(8).status_code == 200  # the participant never waits on Label Studio
    assert save_all_waiting(study.engine, connect_to_nothing(), "pilot") == 0
    with study.engine.connect() as conn:
        assert conn.execute(select(assignments.c.state)).scalar_one() == "saving"

    assert study.written() == 1
    assert len(study.annotations()) == 1


def connect_to_nothing() -> Client:
    """A client whose server is gone (a closed port), failing fast."""
    return Client(base_url="http://127.0.0.1:9", api_key="x", timeout=2)


# --- the researcher's commands ---------------------------------------------------------------


def test_study_init_writes_a_checked_study_file(read_study, label_studio: LocalServer,
                                                tmp_path):
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    target = tmp_path / "study.json"

    made = _run(env, "study", "init", "--name", "pilot-2", "--project", str(read_study.project),
                "--completion-code", "ABC123", "-o", str(target))

    assert made.exit_code == 0, made.output
    written = json.loads(target.read_text())
    assert (written["project"], written["completion_url"]) == (
        read_study.project, "https://app.prolific.com/submissions/complete?cc=ABC123")
    assert "PROLIFIC_PID={{%PROLIFIC_PID%}}" in made.output
    assert label_studio.credentials.api_key not in made.output
    again = _run(env, "study", "init", "--name", "pilot-2", "--project", str(read_study.project),
                 "--completion-code", "ABC123", "-o", str(target))
    assert again.exit_code == 1 and "pass --force" in again.output


def test_study_init_keeps_a_database_password_out_of_the_study_file(
    read_study, label_studio: LocalServer, tmp_path
):
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    target = tmp_path / "study.json"

    made = _run(env, "study", "init", "--name", "pilot-2", "--project", str(read_study.project),
                "--completion-code", "ABC123", "-o", str(target),
                "--database", "postgresql://gateway:Pa55-w0rd@db.example:5432/study")

    assert made.exit_code == 0, made.output
    assert json.loads(target.read_text())["database"] == "postgresql://gateway@db.example:5432/study"
    assert "Pa55-w0rd" not in target.read_text() and "Pa55-w0rd" not in made.output
    assert "left out of" in made.output and "PGPASSWORD" in made.output
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600  # it holds the completion code


def test_a_study_file_holding_a_database_password_is_refused_in_one_line(read_study, tmp_path):
    # As an older version wrote it.
    written = read_study.settings.model_dump() | {
        "database": "postgresql://gateway:Pa55-w0rd@db/study"}
    (tmp_path / "study.json").write_text(json.dumps(written))

    refused = invoke(main, "study", "status", "--study", str(tmp_path / "study.json"))

    assert refused.exit_code == 1
    assert refused.output.count("\n") == 1 and "Traceback" not in refused.output
    assert "database: " in refused.output and "PGPASSWORD" in refused.output
    assert "Pa55-w0rd" not in refused.output


def test_study_status_reports_progress_from_the_gateway_database(study, tmp_path):
    study.rated(study.participant(), [1, 2])
    study.participant().begin()  # and one halfway through their first episode
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())

    shown = invoke(main, "study", "status", "--study", str(tmp_path / "study.json"))

    assert shown.exit_code == 0, shown.output
    assert "episodes done:        0" in shown.output
    assert "episodes in progress: 2" in shown.output
    assert "episodes open:        1" in shown.output
    assert "active leases:        1" in shown.output
    assert "participants:         2 (1 completed, 0 found no slot, 1 under way)" in shown.output
    assert "2 saved in Label Studio" in shown.output


def test_episodes_imported_mid_study_are_offered_once_study_sync_has_run(
    study, label_studio: LocalServer, tmp_path
):
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())
    first = {task.id for task in study.client.tasks.list(project=study.project, include="id")}
    for seeds in ([10, 11], [12, 13], [14], [15]):  # every slot of the three episodes
        study.rated(study.participant(), seeds)

    # The researcher imports the rest of the sample episodes into the running study's project.
    imported = _run(env, "import", *map(str, SAMPLE_EPISODES), "--project", str(study.project))
    assert imported.exit_code == 0, imported.output
    too_early = study.participant()
    too_early.arrive()
    assert too_early.read_instructions().url.path == "/s/pilot/done"

    synced = _run(env, "study", "sync", "--study", str(tmp_path / "study.json"))
    new = len(load_episodes(SAMPLE_EPISODES).episodes) - len(first)
    assert synced.exit_code == 0, synced.output
    assert f"{new} new episode(s) with {2 * new} rating slot(s), 0 new gold" in synced.output
    again = _run(env, "study", "sync", "--study", str(tmp_path / "study.json"))
    assert "0 new episode(s) with 0 rating slot(s)" in again.output

    newcomer = study.participant()  # the running gateway, not restarted
    newcomer.begin()
    with study.engine.connect() as conn:
        given = conn.execute(select(assignments.c.task_id).where(
            assignments.c.key == newcomer.boot["assignment"])).scalar_one()
    assert given not in first
    assert newcomer.rate(16).status_code == 200
    check_invariants(study.engine, study.settings)


@pytest.mark.parametrize("args, env, says", [
    (["--host", "0.0.0.0"], {SECRET_ENV: SECRET}, "pass --public"),
    ([], {SECRET_ENV: "short"}, "at least 32 characters"),
    ([], {SECRET_ENV: " " * 40}, f"{SECRET_ENV} must hold a random session key"),
    ([], {SECRET_ENV: "a" * 64}, f"{SECRET_ENV} must hold a random session key"),
    ([], {SECRET_ENV: "ab" * 32}, "secrets.token_urlsafe(32)"),
    ([], {SECRET_ENV: SECRET, "SOTOPIA_LS_EDITOR_DIR": "/nonexistent"}, "study fetch-editor"),
])
def test_study_serve_refuses_to_start_unsafely_and_says_why(
    read_study, label_studio: LocalServer, tmp_path, args, env, says
):
    (tmp_path / "study.json").write_text(read_study.settings.model_dump_json())
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key} | env

    refused = _run(env, "study", "serve", "--study", str(tmp_path / "study.json"), *args)

    assert refused.exit_code == 1 and says in refused.output
    assert label_studio.credentials.api_key not in refused.output


def _run(env: dict[str, str], *args: str):
    from click.testing import CliRunner

    return CliRunner().invoke(main, list(args), env=env)

"""A qualification round: whoever completes it is scored against the gold references, passers
get the completion code and join its allow-list, the others the screen-out code (never their
score), and a main study that requires the round admits only its allow-list.

The first tests score visits on the gateway's database alone (a verdict is the participant's,
whatever their sessions); then `study init` writes such studies against the session's real
Label Studio; then three participants take the round through a served gateway (and Chromium
shows the screen-out page), and a main study on the same database refuses those who did not
pass. A participant who failed and comes back, or tries two sessions at once, gets nothing more;
and each study's pages know only its own visits.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pandas as pd
import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser
from sqlalchemy import Engine, func, select
from starlette.testclient import TestClient

from browser import VIEWPORT
from conftest import flat_of, results_of, task_ids
from study_support import (
    BOOT,
    CODE,
    EDITOR,
    Participant,
    make_study,
    prolific_id,
    study_project,
)
from test_study_leases import visitor
from test_study_pages import serving
from test_postgres import POSTGRES, database_settings, start_postgres
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.protocol import study_protocol
from sotopia_ls.study.screening import qualification
from sotopia_ls.study.screening.review import review_rows
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.app import SESSION_COOKIE, create_app
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.serving.flow import NOT_ADMITTED
from sotopia_ls.study.serving.gateway import prepare_gateway
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.slots import leases
from sotopia_ls.study.store import (
    allow_list,
    assignments,
    episodes,
    open_store,
    participants,
    qualification_results,
    visits,
)

SCREEN_OUT = "SCR33N0UT"
ROUND = "screening"
GOLD = [101, 102, 103]
# Each rating's reference: the middle of its dimension's range.
REFERENCE = {rating_name(key, agent): RUBRIC[key].values[len(RUBRIC[key].values) // 2]
             for agent in AGENTS for key in DIMENSION_KEYS}
OFF_BY_THREE = {"believability_1": 3}


def answers(offsets: dict[str, int], text: str = "rationale") -> dict[int, dict[str, Any]]:
    """A complete rating: the reference moved by ``offsets`` (rating name → points)."""
    return {agent: {key: (f"{text} on {key} for agent {agent}",
                          REFERENCE[rating_name(key, agent)]
                          + offsets.get(rating_name(key, agent), 0))
                    for key in DIMENSION_KEYS} for agent in AGENTS}


def ratings(offsets: dict[str, int], text: str = "rationale") -> list[dict[str, Any]]:
    """The rating as the page submits it."""
    return results_of(answers(offsets, text))


def within_two_everywhere() -> dict[str, int]:
    """Every rating two points from its reference, up or down: the most the rule allows."""
    return {name: (2 if number % 2 else -2) for number, name in enumerate(REFERENCE)}


def round_study(tmp: Path, project: int, *, max_distance: int = 2, **fields: Any) -> StudyFile:
    return make_study(tmp, project, name=ROUND, episodes_per_participant=2, qualification={
        "screen_out_code": SCREEN_OUT, "screen_out_url": f"http://127.0.0.1:9/out?cc={SCREEN_OUT}",
        "max_distance": max_distance}, **fields)


# --- scoring, on the database -------------------------------------------------------------------


def round_database(tmp_path: Path, reference: dict[str, int] = REFERENCE, url: str | None = None,
                   **fields: Any) -> tuple[Engine, StudyFile]:
    """A round's database (SQLite, or the database at ``url``) holding its gold episodes."""
    study = round_study(tmp_path, 1, **fields)
    engine = open_store(url or study.database)
    leases.add_episodes(engine, study.name, {task: {} for task in GOLD}, study.raters_per_episode,
                        references={task: reference for task in GOLD})
    return engine, study


def rated(engine: Engine, study: StudyFile, visit: arrival.Visit,
          *offsets: dict[str, int]) -> arrival.Visit:
    """The visit rates one gold episode per ``offsets``."""
    for moved in offsets:
        taken = leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                       lease_seconds=study.lease_seconds,
                                       gold_share=leases.GoldShare.of(study))
        leases.settle(engine, taken, flat_of(answers(moved)), study.raters_per_episode)
    return visit


def completed(engine: Engine, study: StudyFile, *offsets: dict[str, int],
              visit: arrival.Visit | None = None) -> arrival.Visit:
    """A participant (a new one, or the visit's) rates one gold episode per ``offsets`` and
    completes the round."""
    visit = rated(engine, study, visit or visitor(engine, study), *offsets)
    arrival.finish(engine, visit.id, "completed")
    return visit


def returning(engine: Engine, study: StudyFile, visit: arrival.Visit) -> arrival.Visit:
    """The visit's participant arrives again with a new Prolific session, the id in upper
    case."""
    return arrival.arrive(engine, study.name, ProlificParameters(
        PROLIFIC_PID=pid_of(engine, visit).upper(), STUDY_ID="a" * 24,
        SESSION_ID=prolific_id()))


def pid_of(engine: Engine, visit: arrival.Visit) -> str:
    with engine.connect() as conn:
        return conn.execute(select(participants.c.external_id).where(
            participants.c.id == visit.participant_id)).scalar_one()


def rows(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def score(engine: Engine, study: StudyFile, visit: arrival.Visit) -> qualification.Verdict:
    return qualification.score_visit(engine, study.name, visit.id,
                                     study.qualification.max_distance)


def test_two_points_from_the_reference_everywhere_passes_and_joins_the_allow_list_once(tmp_path):
    engine, study = round_database(tmp_path)
    visit = completed(engine, study, within_two_everywhere(), {})

    first = score(engine, study, visit)
    again = score(engine, study, visit)  # the done page reloaded

    assert first == again == qualification.Verdict(passed=True, largest_distance=2)
    assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 1
    pid = pid_of(engine, visit)
    assert qualification.allow_list_of(engine, ROUND) == [pid]
    assert qualification.admitted(engine, ROUND, pid.upper())
    assert not qualification.admitted(engine, "another-round", pid)


def test_three_points_off_on_one_rating_of_one_episode_fails_and_is_not_admitted(tmp_path):
    engine, study = round_database(tmp_path)
    visit = completed(engine, study, {}, OFF_BY_THREE)

    assert score(engine, study, visit) == qualification.Verdict(passed=False, largest_distance=3)
    assert qualification.allow_list_of(engine, ROUND) == []
    assert not qualification.admitted(engine, ROUND, pid_of(engine, visit))
    assert qualification.verdicts(engine, ROUND) == {
        visit.id: qualification.Verdict(passed=False, largest_distance=3)}


def test_the_rule_is_the_round_s_max_distance(tmp_path):
    engine, study = round_database(tmp_path, max_distance=3)
    visit = completed(engine, study, OFF_BY_THREE)

    assert score(engine, study, visit).passed
    assert qualification.admitted(engine, ROUND, pid_of(engine, visit))


def test_a_round_s_verdicts_are_its_own_and_list_every_scored_visit(tmp_path):
    engine, study = round_database(tmp_path)
    passer, failer = (completed(engine, study, {}), completed(engine, study, OFF_BY_THREE))
    unscored = completed(engine, study, {})
    for visit in (passer, failer):
        score(engine, study, visit)

    assert qualification.verdicts(engine, ROUND) == {
        passer.id: qualification.Verdict(True, 0), failer.id: qualification.Verdict(False, 3)}
    assert qualification.verdicts(engine, "pilot") == {}
    assert unscored.id not in qualification.verdicts(engine, ROUND)


def test_a_reference_without_a_rubric_rating_qualifies_nobody_and_records_nothing(tmp_path):
    engine, study = round_database(tmp_path, reference={"not_a_rating": 3})
    visit = completed(engine, study, {})

    assert score(engine, study, visit) == qualification.Verdict(False, None)
    assert rows(engine, qualification_results) == 0 and rows(engine, allow_list) == 0


def scored_at_once(engines: list[Engine], study: StudyFile,
                   visit: arrival.Visit) -> list[qualification.Verdict]:
    """The visit's done page asked for through each engine, four times, all at once."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda engine: score(engine, study, visit), engines * 4))


def test_many_requests_scoring_one_visit_at_once_record_it_once(tmp_path):
    engine, study = round_database(tmp_path)
    visit = completed(engine, study, {})

    assert scored_at_once([engine, engine], study, visit) == [qualification.Verdict(True, 0)] * 8
    assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 1


def test_a_participant_who_failed_keeps_the_verdict_whatever_a_new_session_rates(tmp_path):
    engine, study = round_database(tmp_path)  # three gold episodes, two a session
    first = completed(engine, study, {}, OFF_BY_THREE)
    assert not score(engine, study, first).passed
    # Back with a new session (the id in upper case), the gold episode left rated perfectly.
    again = completed(engine, study, {}, visit=returning(engine, study, first))

    assert again.participant_id == first.participant_id
    assert score(engine, study, again) == qualification.Verdict(passed=False, largest_distance=3)
    assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 0
    assert not qualification.admitted(engine, ROUND, pid_of(engine, first).upper())
    # The protocol's pass rate counts the participant once: 0 of 1, not 1 of 2.
    rate = study_protocol(engine, study)["qualification"]
    assert (rate["scored"], rate["passed"], rate["pass_rate"]) == (1, 0, 0.0)


def test_leaving_after_a_bad_rating_and_starting_again_is_judged_on_every_rating(tmp_path):
    engine, study = round_database(tmp_path)
    left = rated(engine, study, visitor(engine, study), OFF_BY_THREE)  # then closes the tab
    again = completed(engine, study, {}, {}, visit=returning(engine, study, left))

    assert score(engine, study, again) == qualification.Verdict(passed=False, largest_distance=3)
    assert qualification.allow_list_of(engine, ROUND) == []


def test_two_sessions_of_one_participant_scored_at_once_give_one_verdict(tmp_path):
    engine, study = round_database(tmp_path)
    far = completed(engine, study, OFF_BY_THREE)
    near = completed(engine, study, {}, visit=returning(engine, study, far))

    with ThreadPoolExecutor(max_workers=8) as pool:
        given = list(pool.map(lambda visit: score(engine, study, visit), [near, far] * 4))

    assert given == [qualification.Verdict(passed=False, largest_distance=3)] * 8
    assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 0
    # Each session ended by the one verdict, which the protocol counts once.
    assert qualification.verdicts(engine, ROUND) == {
        far.id: given[0], near.id: given[0]}
    assert qualification.participant_verdicts(engine, ROUND) == [given[0]]


@pytest.mark.postgres
def test_on_postgresql_two_gateways_record_one_verdict_per_visit_and_per_participant(tmp_path):
    cluster = start_postgres()
    try:
        env = database_settings(cluster)
        url = (f"postgresql://{env['POSTGRE_USER']}:{env['POSTGRE_PASSWORD']}@"
               f"{env['POSTGRE_HOST']}:{env['POSTGRE_PORT']}/{env['POSTGRE_NAME']}")
        engine, study = round_database(tmp_path, url=url)
        other = open_store(url)  # a second gateway process: its own pool, the same database
        visit = completed(engine, study, {}, {})

        verdicts = scored_at_once([engine, other], study, visit)

        assert verdicts == [qualification.Verdict(True, 0)] * 8
        assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 1
        assert qualification.admitted(other, ROUND, pid_of(engine, visit))
        # Two sessions of one participant, each scored by both gateways at once.
        far = completed(engine, study, OFF_BY_THREE)
        near = completed(engine, study, {}, visit=returning(engine, study, far))
        with ThreadPoolExecutor(max_workers=8) as pool:
            given = list(pool.map(lambda asked: score(asked[0], study, asked[1]),
                                  [(engine, near), (other, far), (other, near), (engine, far)]
                                  * 2))
        assert given == [qualification.Verdict(False, 3)] * 8
        assert rows(engine, qualification_results) == 2 and rows(engine, allow_list) == 1
        engine.dispose()
        other.dispose()
    finally:
        subprocess.run([str(POSTGRES), "stop", str(cluster)], check=False)


# --- study init ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(ls_client: Client) -> int:
    return study_project(ls_client, f"test_qualification_{prolific_id()[:8]}", episodes=3)


def init(label_studio: LocalServer, project: int, target: Path, *args: str):
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    return CliRunner().invoke(main, ["study", "init", "--project", str(project), "-o", str(target),
                                     "--completion-code", "Q1PASS", *args], env=env)


@pytest.mark.server
def test_study_init_writes_a_qualification_round_and_a_main_study_that_requires_it(
    label_studio, project, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    Path("gold.csv").write_text("pk,believability_1\n1,7\n")

    made = init(label_studio, project, tmp_path / "round.json", "--name", ROUND,
                "--qualification", "--screen-out-code", "Q1OUT", "--gold-references", "gold.csv",
                "--screen-out-reward", "0.40", "--reward", "1.50", "--currency", "GBP")
    main_made = init(label_studio, project, tmp_path / "main.json", "--name", "main",
                     "--requires-qualification", ROUND, "--gold-share", "0.2")

    assert made.exit_code == 0, made.output
    written = json.loads((tmp_path / "round.json").read_text())
    assert written["qualification"] == {
        "max_distance": 2, "screen_out_code": "Q1OUT",
        "screen_out_url": "https://app.prolific.com/submissions/complete?cc=Q1OUT",
        "screen_out_reward": 40}
    assert written["gold_references"] == str(tmp_path / "gold.csv")
    assert "Q1PASS and joins its allow-list" in made.output
    assert "get Q1OUT, paid £0.40 by Prolific." in made.output
    assert main_made.exit_code == 0, main_made.output
    written = json.loads((tmp_path / "main.json").read_text())
    assert (written["requires_qualification"], written["gold_share"]) == (ROUND, 0.2)
    assert written["qualification"] is None
    assert f"allow-list of the qualification round {ROUND}" in main_made.output


@pytest.mark.server
@pytest.mark.parametrize("args, says", [
    (["--screen-out-code", "Q1OUT"], "--screen-out-code applies to a qualification round only"),
    (["--max-distance", "3"], "--max-distance applies to a qualification round only"),
    (["--screen-out-reward", "0.40"], "--screen-out-reward applies to a qualification round"),
    (["--qualification"], "--qualification needs --screen-out-code"),
    (["--qualification", "--screen-out-code", "Q1OUT", "--gold-share", "0.2"],
     "a qualification round serves gold episodes only"),
    (["--qualification", "--screen-out-code", "Q1OUT", "--requires-qualification", "other"],
     "a qualification round cannot itself require a qualification"),
    (["--requires-qualification", ROUND], "a study cannot require itself"),
    (["--gold-references", "gold.csv"], "--gold-references needs --qualification or --gold-share"),
    (["--qualification", "--screen-out-code", "no spaces"], "qualification.screen_out_code"),
])
def test_study_init_refuses_a_bad_combination_in_one_line(label_studio, project, tmp_path,
                                                         monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    Path("gold.csv").write_text("pk,believability_1\n1,7\n")

    refused = init(label_studio, project, tmp_path / "study.json", "--name", ROUND, *args)

    assert refused.exit_code != 0
    assert says in refused.output and refused.output.count("\n") == 1, refused.output
    assert "Traceback" not in refused.output and not (tmp_path / "study.json").exists()


def write_round(tmp: Path, ls_client: Client, project: int, gold: int) -> Path:
    """A round's study file whose references (oTree layout) name the project's first ``gold``
    episodes."""
    references = tmp / "gold.csv"
    episodes = sorted(task_ids(ls_client, project).items(), key=lambda pair: pair[1])[:gold]
    pd.DataFrame([{"pk": episode, **REFERENCE} for episode, _ in episodes]
                 ).to_csv(references, index=False)
    study_file = tmp / "round.json"
    study_file.write_text(round_study(tmp, project, gold_references=str(references))
                          .model_dump_json())
    return study_file


@pytest.mark.server
def test_a_round_gives_its_tasks_without_a_reference_no_slots_and_status_counts_its_gold(
        label_studio, ls_client, project, tmp_path):
    study_file = write_round(tmp_path, ls_client, project, gold=2)
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    synced = CliRunner().invoke(main, ["study", "sync", "--study", str(study_file)], env=env)
    status = CliRunner().invoke(main, ["study", "status", "--study", str(study_file)])

    assert synced.exit_code == 0, synced.output
    assert (f"study {ROUND}: 0 new episode(s) with 0 rating slot(s), 2 new gold episode(s), "
            "1 new task(s) without a reference not served") in synced.output
    assert status.exit_code == 0, status.output
    assert "episodes open:        0" in status.output
    assert "gold episodes:        2 (the qualification round serves only these" in status.output


@pytest.mark.server
def test_a_passer_who_closes_the_tab_after_the_last_rating_is_on_the_allow_list(
        ls_client, project, tmp_path):
    study = StudyFile.model_validate_json(
        write_round(tmp_path, ls_client, project, gold=3).read_text())
    engine = open_store(study.database)
    app = create_app(prepare_gateway(study, ls_client, engine), secret=secrets.token_urlsafe(32),
                     editor=EDITOR, https_only=False)
    passer = Participant(TestClient(app, base_url="http://127.0.0.1"), study=ROUND)
    passer.arrive()
    passer.read_instructions()
    for offsets in (within_two_everywhere(), {}):
        passer.open_episode()
        answered = passer.submit(ratings(offsets))
        assert answered.status_code == 200, answered.text

    # The answer to the last rating sends the browser to the done page, never asked for.
    assert answered.json() == {"next": f"/s/{ROUND}/done"}
    assert qualification.allow_list_of(engine, ROUND) == [passer.pid]
    assert list(qualification.verdicts(engine, ROUND).values()) == [
        qualification.Verdict(passed=True, largest_distance=2)]
    # The done page, opened later, reads the verdict: the completion code, nothing recorded again.
    assert code_on(passer.http.get(f"/s/{ROUND}/done")) == CODE
    assert rows(engine, qualification_results) == 1 and rows(engine, allow_list) == 1


# --- the round and the main study, served -------------------------------------------------------


@dataclass
class Run:
    engine: Engine
    study: StudyFile
    round_url: str
    main_url: str
    passer: Participant
    failer: Participant
    quitter: Participant
    seen: list[httpx.Response]  # every response of the round a participant received


def recording(participant: Participant, seen: list[httpx.Response]) -> Participant:
    def keep(response: httpx.Response) -> None:
        response.read()
        seen.append(response)

    participant.http.event_hooks["response"].append(keep)
    return participant


@pytest.fixture(scope="module")
def run(ls_client: Client, project: int, tmp_path_factory) -> Iterator[Run]:
    """A round of two gold episodes per participant over the project's three: one participant
    within two points everywhere, one three points off on one rating, one who leaves after
    opening an episode; then a main study on the same database that requires the round."""
    tmp = tmp_path_factory.mktemp("qualification")
    references = tmp / "gold.csv"  # the oTree layout: pk is the episode id
    pd.DataFrame([{"pk": episode, **REFERENCE} for episode in task_ids(ls_client, project)]
                 ).to_csv(references, index=False)
    study = round_study(tmp, project, gold_references=str(references))
    engine = open_store(study.database)
    main_study = make_study(tmp, project, name="main", requires_qualification=ROUND)
    secret = secrets.token_urlsafe(32)
    apps = [create_app(prepare_gateway(each, ls_client, engine), secret=secret,
                       editor=EDITOR, https_only=False) for each in (study, main_study)]
    seen: list[httpx.Response] = []
    with serving(apps[0]) as round_url, serving(apps[1]) as main_url:
        people = [recording(Participant.of(round_url, study=ROUND), seen) for _ in range(3)]
        passer, failer, quitter = people
        for person, episodes_offsets in ((passer, [within_two_everywhere(), {}]),
                                         (failer, [{}, OFF_BY_THREE])):
            person.arrive()
            person.read_instructions()
            for offsets in episodes_offsets:
                person.open_episode()
                assert person.submit(ratings(offsets)).status_code == 200
            person.http.get(f"/s/{ROUND}/done")
        quitter.arrive()
        quitter.read_instructions()
        quitter.open_episode()
        yield Run(engine, study, round_url, main_url, passer, failer, quitter, seen)
        for person in people:
            person.close()


def code_on(page: httpx.Response) -> str:
    return re.search(r'id="completion-code">([^<]+)<', page.text).group(1)


@pytest.mark.server
def test_only_the_participant_within_two_everywhere_ends_on_the_allow_list(run):
    assert qualification.allow_list_of(run.engine, ROUND) == [run.passer.pid]
    with run.engine.connect() as conn:
        scored = conn.execute(select(func.count()).select_from(qualification_results)).scalar_one()
    assert scored == 2  # the participant who left was never scored


@pytest.mark.server
def test_the_passer_gets_the_completion_code_and_the_others_the_screen_out_code(run):
    passer = run.passer.http.get(f"/s/{ROUND}/done")
    failer = run.failer.http.get(f"/s/{ROUND}/done")
    quitter = run.quitter.http.get(f"/s/{ROUND}/done", follow_redirects=True)

    assert code_on(passer) == CODE and f"cc={CODE}" in passer.text
    assert code_on(failer) == SCREEN_OUT and f"cc={SCREEN_OUT}" in failer.text
    assert CODE not in failer.text and SCREEN_OUT not in passer.text
    # Leaving mid-episode is no completion: the page asked for is the episode left.
    assert quitter.url.path == f"/s/{ROUND}/rate" and "completion-code" not in quitter.text


@pytest.mark.server
def test_no_response_of_the_round_holds_a_reference_a_distance_or_a_score(run):
    with run.engine.connect() as conn:
        shown = dict(conn.execute(
            select(assignments.c.key, episodes.c.shown)
            .join(episodes, (episodes.c.study == assignments.c.study)
                  & (episodes.c.task_id == assignments.c.task_id))).all())

    for page in run.seen:
        # No rating name as a JSON key with a number: no reference as the gold table holds it.
        assert not re.search(r'"[a-z_]+_[12]"\s*:\s*-?[0-9]', page.text), page.url
        boot = BOOT.search(page.text)
        if boot:  # an episode's page gets exactly the shown part of its task, nothing more
            data = json.loads(boot.group(1))
            assert data["task"]["data"] == shown[data["assignment"]]
        else:
            assert not re.search(r"\b(distance|reference|passed)\b", page.text, re.I)
    # The screen-out page is the completion page but for the code: it tells nothing else.
    passer = run.passer.http.get(f"/s/{ROUND}/done").text
    failer = run.failer.http.get(f"/s/{ROUND}/done").text
    assert failer.replace(SCREEN_OUT, CODE).replace("out?cc=", "complete?cc=") == passer


@pytest.mark.server
def test_the_main_study_refuses_who_did_not_pass_and_admits_the_passer(run, ls_client):
    stranger = Participant.of(run.main_url, study="main")
    refused = [Participant.of(run.main_url, study="main", pid=person.pid)
               for person in (run.failer, run.quitter)] + [stranger]
    admitted = Participant.of(run.main_url, study="main", pid=run.passer.pid)
    try:
        for person in refused:
            page = person.arrive()
            assert page.url.path == "/s/main/admission" and NOT_ADMITTED in page.text
            assert "completion-code" not in page.text and CODE not in page.text
            # Skipping ahead leads back; there is nothing to submit.
            assert person.http.get("/s/main/rate", follow_redirects=True).url.path == \
                "/s/main/admission"
            assert person.http.get("/s/main/done", follow_redirects=True).url.path == \
                "/s/main/admission"
        welcomed = admitted.arrive()
        assert welcomed.url.path == "/s/main/instructions"
        admitted.read_instructions()
        assert admitted.open_episode().status_code == 200 and admitted.boot is not None
    finally:
        for person in (*refused, admitted):
            person.close()

    with run.engine.connect() as conn:
        leased = set(conn.execute(
            select(participants.c.external_id)
            .join(assignments, assignments.c.participant_id == participants.c.id)
            .where(assignments.c.study == "main")).scalars())
    assert leased == {run.passer.pid}
    emails = {(user.email or "").lower() for user in ls_client.users.list()}
    assert f"{stranger.pid}@prolific.invalid" not in emails
    assert f"{run.quitter.pid}@prolific.invalid" not in emails


@pytest.mark.server
def test_chromium_shows_the_screen_out_code_and_no_score(run, browser: Browser):  # noqa: F811
    context = browser.new_context(viewport=VIEWPORT)
    context.add_cookies([{"name": SESSION_COOKIE, "url": run.round_url,
                          "value": run.failer.http.cookies[SESSION_COOKIE]}])
    page = context.new_page()
    # The redirect to the screen-out address is Prolific's part; the page before it is ours.
    page.route(re.compile(r"^http://127\.0\.0\.1:9/"), lambda route: route.abort())
    page.goto(f"{run.round_url}/s/{ROUND}/done")

    assert page.locator("#completion-code").inner_text() == SCREEN_OUT
    assert page.locator("#completion-link").get_attribute("href").endswith(f"cc={SCREEN_OUT}")
    seen = page.locator("main").inner_text().lower()
    assert "distance" not in seen and "score" not in seen and "reference" not in seen
    context.close()


# --- coming back, two sessions at once, another study's cookie --------------------------------


def participant_id(engine: Engine, study: str, pid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(select(participants.c.id).where(
            participants.c.study == study, participants.c.external_id == pid)).scalar_one()


def visit_of(engine: Engine, study: str, pid: str) -> int:
    """The last visit of the participant ``pid`` of ``study``."""
    with engine.connect() as conn:
        return conn.execute(
            select(visits.c.id).join(participants, participants.c.id == visits.c.participant_id)
            .where(participants.c.study == study, participants.c.external_id == pid)
            .order_by(visits.c.id.desc()).limit(1)).scalar_one()


def stored_visit(engine: Engine, visit: int) -> tuple[Any, ...]:
    """The visit's row and its assignments' states, as stored."""
    with engine.connect() as conn:
        return (tuple(conn.execute(select(visits).where(visits.c.id == visit)).one()),
                tuple(conn.execute(select(assignments.c.state).where(
                    assignments.c.visit_id == visit)).scalars()))


def link(base: str, study: str, pid: str, session: str) -> str:
    return (f"{base}/s/{study}?PROLIFIC_PID={pid}&STUDY_ID={'a' * 24}&SESSION_ID={session}")


@pytest.mark.server
def test_chromium_who_failed_and_comes_back_with_a_new_session_gets_the_screen_out_code_only(
        run, browser: Browser):  # noqa: F811
    failer = participant_id(run.engine, ROUND, run.failer.pid)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.route(re.compile(r"^http://127\.0\.0\.1:9/"), lambda route: route.abort())

    # The same Prolific id, in upper case, with a session Prolific never gave them before.
    page.goto(link(run.round_url, ROUND, run.failer.pid.upper(), prolific_id()))

    assert urlparse(page.url).path == f"/s/{ROUND}/done"
    assert page.locator("#completion-code").inner_text() == SCREEN_OUT
    assert "taken part in this study before" in page.locator("main").inner_text()
    page.goto(f"{run.round_url}/s/{ROUND}/rate")  # skipping ahead finds no episode either
    assert urlparse(page.url).path == f"/s/{ROUND}/done" and page.locator("#boot").count() == 0
    context.close()

    with run.engine.connect() as conn:
        leased = conn.execute(select(func.count()).where(
            assignments.c.participant_id == failer)).scalar_one()
    assert leased == 2  # the two episodes of their first session, nothing since
    assert qualification.verdict_of(run.engine, failer) == qualification.Verdict(False, 3)
    assert run.failer.pid not in qualification.allow_list_of(run.engine, ROUND)
    assert not qualification.admitted(run.engine, ROUND, run.failer.pid.upper())
    # The review suggests nothing to pay for the new submission: screened out like the first.
    review = review_rows(run.engine, run.study).set_index("participant").loc[[run.failer.pid]]
    assert review["suggested"].tolist() == ["screened_out"] * 2
    assert sorted(review["outcome"]) == ["completed", "screened_out"]


@pytest.mark.server
def test_who_fails_in_one_session_gets_nothing_more_in_another_open_at_once(run):
    pid = prolific_id()
    one = Participant.of(run.round_url, study=ROUND, pid=pid)
    other = Participant.of(run.round_url, study=ROUND, pid=pid.upper())
    try:
        for session in (one, other):
            session.arrive()
            session.read_instructions()
            session.open_episode()
        for offsets in ({}, OFF_BY_THREE):
            assert one.submit(ratings(offsets)).status_code == 200
            one.open_episode()
        assert code_on(one.http.get(f"/s/{ROUND}/done")) == SCREEN_OUT
        # The other session's episode, rated perfectly, is kept; the verdict stands.
        assert other.submit(ratings({})).status_code == 200
        after = other.http.get(f"/s/{ROUND}/rate", follow_redirects=True)
    finally:
        one.close()
        other.close()

    assert after.url.path == f"/s/{ROUND}/done" and code_on(after) == SCREEN_OUT
    someone = participant_id(run.engine, ROUND, pid)
    with run.engine.connect() as conn:
        recorded = conn.execute(select(qualification_results.c.passed).join(
            visits, visits.c.id == qualification_results.c.visit_id).where(
            visits.c.participant_id == someone)).scalars().all()
    assert recorded == [False]
    assert pid not in qualification.allow_list_of(run.engine, ROUND)
    review = review_rows(run.engine, run.study).set_index("participant").loc[[pid]]
    assert review["suggested"].tolist() == ["screened_out"] * 2


@pytest.mark.server
def test_a_round_cookie_sent_to_the_main_study_changes_nothing_in_the_round(
        run, browser: Browser):  # noqa: F811
    pid = prolific_id()
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(link(run.round_url, ROUND, pid, prolific_id()))
    page.get_by_role("button", name=re.compile("start rating")).click()
    page.wait_for_url(f"**/s/{ROUND}/rate")
    boot = json.loads(page.locator("#boot").text_content())
    round_visit = visit_of(run.engine, ROUND, pid)
    before = stored_visit(run.engine, round_visit)

    # The main study is served on another port of the same host: the browser sends it the
    # round's cookie, and the main study finds no visit of its own in it.
    for asked in ("rate", "admission", "instructions", "done"):
        answer = page.goto(f"{run.main_url}/s/main/{asked}")
        assert answer.status == 403, asked
        assert "open this study from its link on Prolific" in page.locator("main").inner_text()
    cookie = next(c["value"] for c in context.cookies() if c["name"] == SESSION_COOKIE)
    with httpx.Client(base_url=run.main_url, cookies={SESSION_COOKIE: cookie}) as main_page:
        submitted = main_page.post("/s/main/submit", headers={"X-CSRF-Token": boot["csrf"]},
                                   json={"assignment": boot["assignment"],
                                         "results": ratings({})})
    assert submitted.status_code == 403

    assert stored_visit(run.engine, round_visit) == before  # still under way, nothing rated
    assert arrival.load_visit(run.engine, "main", round_visit) is None
    # The round goes on where it was: the same episode, its rating taken.
    page.goto(f"{run.round_url}/s/{ROUND}/rate")
    assert json.loads(page.locator("#boot").text_content())["assignment"] == boot["assignment"]
    cookie = next(c["value"] for c in context.cookies() if c["name"] == SESSION_COOKIE)
    context.close()
    with httpx.Client(base_url=run.round_url, cookies={SESSION_COOKIE: cookie}) as round_page:
        assert round_page.post(f"/s/{ROUND}/submit", headers={"X-CSRF-Token": boot["csrf"]},
                               json={"assignment": boot["assignment"],
                                     "results": ratings({})}).status_code == 200


@pytest.mark.server
def test_a_main_study_cookie_sent_to_the_round_takes_no_episode_there(run):
    admitted = Participant.of(run.main_url, study="main", pid=run.passer.pid)
    try:
        assert admitted.arrive().url.path == "/s/main/instructions"
        admitted.read_instructions()
        cookie = admitted.http.cookies[SESSION_COOKIE]
    finally:
        admitted.close()
    main_visit = visit_of(run.engine, "main", run.passer.pid)

    with httpx.Client(base_url=run.round_url, cookies={SESSION_COOKIE: cookie}) as round_page:
        for asked in ("rate", "instructions", "done"):
            assert round_page.get(f"/s/{ROUND}/{asked}").status_code == 403, asked

    with run.engine.connect() as conn:
        assert conn.execute(select(func.count()).where(
            assignments.c.study == ROUND, assignments.c.visit_id == main_visit)).scalar_one() == 0

"""What a participant sends either becomes a rating Label Studio keeps, or is refused at once
with the problem named; a rating Label Studio itself refuses is never retried silently for
ever: `study status` shows it with the reason, and `study retry` sends it again once the
cause is fixed. The gateway runs in this process (``Study``), Label Studio is the real server
of the test session.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import MISSING, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from conftest import invoke, results_of
from study_support import answers, check_invariants
from test_study_gateway import Study
from sotopia_ls.cli import main
from sotopia_ls.config import labeling_config
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.outbox.saving import save_all_waiting
from sotopia_ls.study.settings import DATABASE_ENV
from sotopia_ls.study.slots.leases import FailedSave
from sotopia_ls.study.status import StudyStatus, study_options
from sotopia_ls.study.store import assignments, slots

pytestmark = pytest.mark.server


@pytest.fixture
def study(ls_client: Client, project_title: str, tmp_path: Path) -> Study:
    return Study(ls_client, project_title, tmp_path)


def rating(**changes: dict | None) -> list:
    """A complete, valid rating with the named controls' results replaced (None: removed)."""
    results = [r for r in results_of(answers(3)) if changes.get(r["from_name"], r) is not None]
    return [changes.get(r["from_name"], r) for r in results]


def rationale(text: object) -> dict:
    return {"from_name": "believability_reasoning_1", "to_name": "dialogue", "type": "textarea",
            "value": {"text": text}}


def valid() -> list:
    return rating()


# Each malformed submission, and what the refusal must name.
MALFORMED: dict[str, tuple[object, str]] = {
    "from_name a list": ([*valid(), {"from_name": ["x"], "value": {}}],
                         "result 29: from_name is not a control's name: ['x']"),
    "from_name an object": ([*valid(), {"from_name": {"a": 1}, "value": {}}],
                            "result 29: from_name is not a control's name: {'a': 1}"),
    "from_name a number": ([*valid(), {"from_name": 7, "value": {}}],
                           "result 29: from_name is not a control's name: 7"),
    "from_name null": ([*valid(), {"from_name": None, "value": {}}],
                       "result 29: from_name is not a control's name: None"),
    "a rubric result's from_name a list": (
        [r | {"from_name": [r["from_name"]]} if r["from_name"] == "goal_1" else r
         for r in valid()],
        "Goal rating for agent 1: missing rating"),
    "a result that is a number": ([*valid(), 5], "result 29: not a result object: 5"),
    "a result that is null": ([*valid(), None], "result 29: not a result object: None"),
    "a result that is a list": ([[]] + valid(), "result 1: not a result object: []"),
    "value missing": (rating(goal_1={"from_name": "goal_1"}),
                      "value of 'goal_1' is not an object: None"),
    "value a list": (rating(goal_1={"from_name": "goal_1", "value": ["8"]}),
                     "value of 'goal_1' is not an object: ['8']"),
    "choices an object": (rating(goal_1={"from_name": "goal_1", "value": {"choices": {"8": 1}}}),
                          "Goal rating for agent 1: expected exactly one choice"),
    "a choice that is a list": (rating(goal_1={"from_name": "goal_1",
                                               "value": {"choices": [["8"]]}}),
                                "Goal rating for agent 1: not an integer: ['8']"),
    "text an object": (rating(believability_reasoning_1=rationale({"a": "b"})),
                       "Believability rationale for agent 1: no rationale text"),
    "text a list of numbers": (rating(believability_reasoning_1=rationale([1, 2])),
                               "Believability rationale for agent 1: no rationale text"),
    "a rationale of NUL": (rating(believability_reasoning_1=rationale(["\x00\x00"])),
                           "Believability rationale for agent 1: empty rationale"),
    "a rationale of zero-width spaces": (rating(believability_reasoning_1=rationale(["\u200b"])),
                                         "Believability rationale for agent 1: empty rationale"),
    "a rationale of a byte order mark and a word joiner": (
        rating(believability_reasoning_1=rationale(["\ufeff\u2060"])),
        "Believability rationale for agent 1: empty rationale"),
    "a rating twice": (valid() + valid()[:1], "Believability rating for agent 1: 2 ratings"),
    "results an object": ({"believability_1": 8}, "results: Input should be a valid array"),
    "results a string": ("8", "results: Input should be a valid array"),
    "a huge list": ([{"from_name": "x", "value": {}}] * 501, "results: List should have at most 500"),
    "deeply nested": ([*valid(), {"from_name": "x", "value": {"text": [[[[[[["a"]]]]]]]}}, 1],
                      "result 30: not a result object: 1"),
}


def test_malformed_submissions_are_refused_with_the_problem_named_never_a_server_error(study):
    someone = study.participant()
    someone.begin()
    wrong = {}
    for case, (results, named) in MALFORMED.items():
        answer = someone.http.post(
            "/s/pilot/submit", headers={"X-CSRF-Token": someone.boot["csrf"]},
            json={"assignment": someone.boot["assignment"], "results": results})
        if not 400 <= answer.status_code < 500 or named not in answer.text:
            wrong[case] = (answer.status_code, answer.text[:200])
    too_long = rating(believability_reasoning_1=rationale(["why " * 70_000]))
    for body, named in ((b"{not json", "body: Invalid JSON"),
                        (json.dumps({"assignment": 5, "results": []}).encode(), "assignment:"),
                        (json.dumps({"assignment": someone.boot["assignment"],
                                     "results": too_long}).encode(), "rationales together")):
        answer = someone.http.post("/s/pilot/submit", content=body, headers={
            "X-CSRF-Token": someone.boot["csrf"], "Content-Type": "application/json"})
        if not 400 <= answer.status_code < 500 or named not in answer.text:
            wrong[named] = (answer.status_code, answer.text[:200])

    assert wrong == {}, json.dumps(wrong, indent=1)
    assert study.annotations() == []
    assert someone.rate(3).status_code == 200  # the same episode, still theirs


def test_a_rationale_holding_nul_is_saved_without_it(study):
    someone = study.participant()
    someone.begin()

    assert someone.submit(rating(believability_reasoning_1=rationale(["cal\x00m"]))
                          ).status_code == 200

    (annotation,) = study.annotations()
    saved = next(r for r in annotation.result if r["from_name"] == "believability_reasoning_1")
    assert saved["value"]["text"] == ["calm"]


def test_a_rating_is_saved_labelling_the_object_the_project_s_config_names(
    ls_client: Client, project_title: str, tmp_path: Path
):
    # The researcher's config names the conversation otherwise; the page sends "dialogue".
    renamed = labeling_config().replace('name="dialogue"', 'name="conversation"').replace(
        'toName="dialogue"', 'toName="conversation"')
    study = Study(ls_client, project_title, tmp_path, config=renamed)
    someone = study.participant()
    someone.begin()

    assert someone.rate(3).status_code == 200

    (annotation,) = study.annotations()
    assert {result["to_name"] for result in annotation.result} == {"conversation"}
    assert len(annotation.result) == len(results_of(answers(3)))


def refused_by_label_studio(study: Study, label_studio: LocalServer) -> None:
    """A participant's rating, then its save refused with a 4xx: the owner's key was replaced
    in Label Studio while the gateway ran with the old one."""
    revoked = Client(base_url=label_studio.url, api_key="revoked-" + "0" * 32)
    someone = study.participant()
    someone.begin()
    assert someone.rate(5).status_code == 200
    assert save_all_waiting(study.engine, revoked, "pilot") == 1
    assert save_all_waiting(study.engine, revoked, "pilot") == 0  # not tried again by itself


def test_a_rating_label_studio_refuses_is_shown_with_its_reason_and_saved_by_a_retry(
    study, label_studio: LocalServer, tmp_path
):
    study_file = tmp_path / "my studies" / "pilot.json"  # not the default study.json
    study_file.parent.mkdir()
    study_file.write_text(study.settings.model_dump_json())
    refused_by_label_studio(study, label_studio)

    shown = invoke(main, "study", "status", "--study", str(study_file))

    assert shown.exit_code == 0, shown.output
    with study.engine.connect() as conn:
        (row,) = conn.execute(select(assignments)).all()
    assert row.state == "failed" and row.results  # the participant's rating is kept
    assert "0 saved in Label Studio, 1 refused by Label Studio" in shown.output
    assert "  waiting to be saved:  none" in shown.output
    assert f"assignment {row.id} (task {row.task_id})" in shown.output
    assert "HTTP 401" in shown.output and "check the API key" in shown.output
    hints = dict(line.strip().split(": ", 1) for line in shown.output.splitlines()
                 if line.strip().startswith(("retry: ", "or shelve: ")))
    assert hints == {
        "retry": f"sotopia-ls study retry --study '{study_file}' --assignment {row.id}",
        "or shelve": f"sotopia-ls study shelve --study '{study_file}' --assignment {row.id}"}
    assert study.annotations() == []

    # The researcher runs the command as printed, with Label Studio's address and key.
    retried = CliRunner().invoke(main, [
        *shlex.split(hints["retry"])[1:],
        "--url", label_studio.url, "--api-key", label_studio.credentials.api_key])

    assert retried.exit_code == 0, retried.output
    assert retried.output == f"assignment {row.id}: saved in Label Studio\n"
    assert len(study.annotations()) == 1
    after = invoke(main, "study", "status", "--study", str(study_file))
    assert "1 saved in Label Studio, 0 refused" in after.output
    assert "  waiting to be saved:  none" in after.output
    assert "retry" not in after.output
    check_invariants(study.engine, study.settings)


def test_a_refused_rating_that_can_never_be_saved_is_shelved_and_its_slot_given_again(
    study, label_studio: LocalServer, tmp_path
):
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())
    refused_by_label_studio(study, label_studio)

    shelved = invoke(main, "study", "shelve", "--study", str(tmp_path / "study.json"), "--all")

    assert shelved.exit_code == 0, shelved.output
    with study.engine.connect() as conn:
        (row,) = conn.execute(select(assignments)).all()
        holders = set(conn.execute(select(slots.c.assignment_id)).scalars())
    assert shelved.output == f"assignment {row.id}: shelved, its slot free for another participant\n"
    assert row.state == "shelved" and row.results and row.id not in holders
    shown = invoke(main, "study", "status", "--study", str(tmp_path / "study.json")).output
    assert "0 refused by Label Studio, 1 shelved" in shown and "episodes done:        0" in shown
    assert "retry" not in shown
    again = invoke(main, "study", "shelve", "--study", str(tmp_path / "study.json"),
                   "--assignment", str(row.id))
    assert again.exit_code == 1 and f"has assignment id {row.id}" in again.output
    check_invariants(study.engine, study.settings)


def test_the_suggested_commands_name_a_database_given_on_the_command_line_without_its_password(
    study, label_studio: LocalServer, tmp_path
):
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())
    refused_by_label_studio(study, label_studio)
    database = study.settings.database

    given = invoke(main, "study", "status", "--study", str(tmp_path / "study.json"),
                   "--database", database).output
    from_environment = CliRunner().invoke(
        main, ["study", "status", "--study", str(tmp_path / "study.json")],
        env={DATABASE_ENV: database}).output

    assert f"retry --study {tmp_path / 'study.json'} --database {database} --assignment" in given
    assert "--database" not in from_environment  # the retry reads the same variable
    assert study_options(Path("pilot.json"), "postgresql://ann:hunter2@db.example/study") == (
        "--study pilot.json --database postgresql://ann@db.example/study")


def test_a_refusal_time_postgresql_gives_in_its_session_time_zone_is_shown_in_utc(study):
    tokyo = timezone(timedelta(hours=9))  # as psycopg hands back a timestamptz
    refusal = FailedSave(7, 3, "HTTP 400: bad", datetime(2025, 3, 1, 18, 30, tzinfo=tokyo))
    figures = StudyStatus(**{f.name: 0 for f in fields(StudyStatus) if f.default is MISSING} | {
        "median_seconds": None, "oldest_waiting_seconds": None, "failed": [refusal]})

    shown = figures.lines(study.settings, "--study study.json")

    assert "  assignment 7 (task 3), 2025-03-01 09:30 UTC: HTTP 400: bad" in shown


def test_study_retry_names_an_assignment_that_was_not_refused(
    study, label_studio: LocalServer, tmp_path
):
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())

    refused = CliRunner().invoke(main, [
        "study", "retry", "--study", str(tmp_path / "study.json"), "--assignment", "99",
        "--url", label_studio.url, "--api-key", label_studio.credentials.api_key])

    assert refused.exit_code == 1
    assert "no failed rating of study pilot has assignment id 99" in refused.output


def test_study_status_says_when_a_rating_has_waited_long_while_label_studio_fails(
    study, tmp_path
):
    (tmp_path / "study.json").write_text(study.settings.model_dump_json())
    someone = study.participant()
    someone.begin()
    assert someone.rate(6).status_code == 200
    gone = Client(base_url="http://127.0.0.1:9", api_key="x", timeout=2)  # a closed port

    assert save_all_waiting(study.engine, gone, "pilot") == 0  # kept waiting, not failed
    with study.engine.begin() as conn:  # as if submitted five minutes ago
        conn.execute(update(assignments).values(
            submitted_at=datetime.now(timezone.utc) - timedelta(minutes=5)))
    shown = invoke(main, "study", "status", "--study", str(tmp_path / "study.json"))

    assert "waiting to be saved:  1 rating (the oldest for 30" in shown.output  # 300 s, a little
    assert "0 refused by Label Studio" in shown.output
    assert "a rating has waited 5 min to be saved" in shown.output

"""Time on task, honestly: a researcher reads how long participants spent on each episode in
the export and the report, and what the study's reward comes to per hour.

The gateway records per rating when the episode was given, first shown and submitted, and the
seconds its page was visible and focused. The export given the study (``--study``) carries
them for every annotation made through the gateway, the report gives their quartiles per
rating and per participant (from the export alone), and ``study status`` / ``study review``
turn the reward per visit into a pay per hour, warning under Prolific's minimum. The gateway's
database is left as its own functions leave it (arrival, lease, first showing, submission,
save, visible time), as the export-review tests build it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import Engine, select, update

from conftest import invoke, results_of
from study_support import answers, make_study, prolific_id, study_project
from sotopia_ls.cli import main
from sotopia_ls.errors import StudyError
from sotopia_ls.exporter.commands import export_command, report_command
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.study.payment.hourly import hourly_pay
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.settings import Reward, StudyFile, read_study, write_study
from sotopia_ls.study.slots import leases
from sotopia_ls.study.slots.leases import Assignment
from sotopia_ls.study.status import study_status
from sotopia_ls.study.store import assignments, aware, open_store

Timing = tuple[float, float | None]  # Label Studio's lead seconds, the visible seconds if measured


def rated_visit(engine: Engine, study: StudyFile, timings: list[Timing],
                outcome: str | None = "completed",
                save: Callable[[Assignment], int] | None = None) -> list[int]:
    """One participant's visit as the gateway leaves it: per timing an episode given, shown,
    submitted with that lead time, saved in Label Studio (``save`` makes the annotation and
    returns its id) and, where measured, its visible time kept; the visit ended with
    ``outcome``. Returns the assignment ids."""
    visit = arrival.arrive(engine, study.name, ProlificParameters(
        PROLIFIC_PID=prolific_id(), STUDY_ID="a" * 24, SESSION_ID=prolific_id()))
    given = []
    for lead, visible in timings:
        taken = leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                       lease_seconds=study.lease_seconds)
        shown = leases.mark_shown(engine, taken.id)
        spent = timedelta(seconds=lead)  # the participant's minutes on the gateway's clock
        with engine.begin() as conn:
            conn.execute(update(assignments).where(assignments.c.id == taken.id).values(
                assigned_at=taken.assigned_at - spent, first_shown_at=shown - spent))
        leases.settle(engine, taken, [{"stand-in": True}], study.raters_per_episode,
                      visible_seconds=visible)
        with engine.begin() as conn:  # those minutes exactly, without the test's milliseconds
            conn.execute(update(assignments).where(assignments.c.id == taken.id)
                         .values(lead_time=lead))
        if save is not None:
            leases.mark_saved(engine, taken.id, save(taken))
        given.append(taken.id)
    if outcome is not None:
        arrival.finish(engine, visit.id, outcome)
    return given


# --- the export and the report ---------------------------------------------------------------


@pytest.mark.server
def test_the_export_and_its_report_carry_each_gateway_ratings_time_on_task(
        label_studio: LocalServer, ls_client: Client, tmp_path: Path):
    # A project of two episodes; two participants rate both through the gateway, one
    # annotator rates the first in Label Studio itself.
    project = study_project(ls_client, f"test_{uuid.uuid4().hex[:12]}", 2)
    tasks = sorted(task.id for task in ls_client.tasks.list(project=project))
    study = make_study(tmp_path, project)
    engine = open_store(study.database)
    leases.add_episodes(engine, study.name, {task: {} for task in tasks},
                        study.raters_per_episode)

    def saved_as(user: int) -> Callable[[Assignment], int]:
        def save(taken: Assignment) -> int:
            return ls_client.annotations.create(
                id=taken.task_id, result=results_of(answers(taken.id)), completed_by=user,
                lead_time=600.0).id
        return save

    users = [ls_client.users.create(email=f"p-{uuid.uuid4().hex[:8]}@prolific.invalid",
                                    username=f"p-{uuid.uuid4().hex[:8]}") for _ in range(3)]
    first = rated_visit(engine, study, [(600.0, 120.0), (600.0, 240.0)], save=saved_as(users[0].id))
    second = rated_visit(engine, study, [(600.0, 480.0), (600.0, None)], save=saved_as(users[1].id))
    by_hand = ls_client.annotations.create(id=tasks[0], result=results_of(answers(9)),
                                           completed_by=users[2].id, lead_time=300.0).id
    study_file = write_study(study, tmp_path / "study.json")

    out = tmp_path / "out"
    exported = invoke(export_command, "--project", str(project), "--url", label_studio.url,
                      "--api-key", label_studio.credentials.api_key, "--study", str(study_file),
                      "-o", str(out))
    assert exported.exit_code == 0, exported.output

    rows = pd.read_parquet(out / "scores_long.parquet").groupby("annotation_id").first()
    assert len(rows) == 5
    with engine.connect() as conn:
        recorded = {row.ls_annotation_id: row for row in conn.execute(select(assignments))}
    for annotation, assignment in recorded.items():
        row = rows.loc[annotation]
        for column in ("assigned_at", "first_shown_at", "submitted_at"):
            assert row[column].endswith("Z")  # UTC, as Label Studio writes created_at
            assert pd.Timestamp(row[column]) == aware(getattr(assignment, column))
        assert row["assigned_at"] <= row["first_shown_at"] <= row["submitted_at"]
    minutes = rows["visible_minutes"]
    assert minutes[recorded_id(recorded, first[0])] == pytest.approx(2.0)
    assert minutes[recorded_id(recorded, first[1])] == pytest.approx(4.0)
    assert minutes[recorded_id(recorded, second[0])] == pytest.approx(8.0)
    assert pd.isna(minutes[recorded_id(recorded, second[1])])  # the page measured none
    # Made in Label Studio itself: no gateway, no time on task.
    assert rows.loc[by_hand, ["assigned_at", "first_shown_at", "submitted_at",
                              "visible_minutes"]].isna().all()
    csv = pd.read_csv(out / "scores_long.csv")
    assert csv.groupby("annotation_id")["visible_minutes"].first().dropna().sort_values().tolist(
        ) == pytest.approx([2.0, 4.0, 8.0])

    # The report of that export, read from the folder alone.
    report = tmp_path / "report"
    made = invoke(report_command, "--from-export", str(out), "-o", str(report), "--bootstrap", "0")
    assert made.exit_code == 0, made.output
    table = pd.read_csv(report / "time_on_task.csv").set_index("per")
    # Ratings of 2, 4 and 8 minutes measured, of five; participants of 6 and 8 minutes, of three.
    assert table.loc["rating"].tolist() == pytest.approx([3, 5, 3.0, 4.0, 6.0])
    assert table.loc["participant"].tolist() == pytest.approx([2, 3, 6.5, 7.0, 7.5])
    html = (report / "report.html").read_text()
    assert "<h2>Time on task</h2>" in html and "visible and focused" in html


def recorded_id(recorded: dict, assignment_id: int) -> int:
    """The Label Studio annotation id the gateway recorded for an assignment."""
    return next(annotation for annotation, row in recorded.items() if row.id == assignment_id)


@pytest.mark.report
def test_a_report_of_an_export_without_the_study_says_why_it_shows_no_time_on_task(
        export_file, tmp_path):
    out, report = tmp_path / "out", tmp_path / "report"
    assert invoke(export_command, "--from-file", str(export_file), "-o", str(out)).exit_code == 0
    assert pd.read_parquet(out / "scores_long.parquet")["visible_minutes"].isna().all()

    made = invoke(report_command, "--from-export", str(out), "-o", str(report), "--bootstrap", "0")

    assert made.exit_code == 0, made.output
    html = (report / "report.html").read_text()
    assert "<h2>Time on task</h2>" in html
    assert "No rating carries a measured time on task" in html
    assert "sotopia-ls export --study FILE" in html
    assert not (report / "time_on_task.csv").exists()


# --- the pay per hour ------------------------------------------------------------------------


def paid_study(tmp_path: Path, cents: int | None) -> tuple[StudyFile, Engine]:
    """A study paying ``cents`` pence per visit (None: no reward given) whose three completed
    visits took 25, 30 and 40 minutes on task, and one participant who left after an hour."""
    reward = Reward(cents=cents, currency="GBP") if cents is not None else None
    study = make_study(tmp_path, 1, raters_per_episode=4, reward=reward)
    engine = open_store(study.database)
    leases.add_episodes(engine, study.name, {task: {} for task in (1, 2, 3)}, 4)
    rated_visit(engine, study, [(1500.0, 900.0), (1500.0, 600.0)])  # 25 min visible
    rated_visit(engine, study, [(1800.0, None)])  # the page measured none: its lead time
    rated_visit(engine, study, [(3000.0, 1200.0), (3000.0, 1200.0)])  # 40 min visible
    rated_visit(engine, study, [(3600.0, 3600.0)], outcome=None)  # never finished: not paid
    return study, engine


PAY = ("pay per hour: £4.00 (£2.00 per visit over a median 30.0 min per visit, 3 visit(s) "
       "completed; time on task: the visible time of 4 rating(s) and Label Studio's lead time "
       "of 1 rating(s) the page did not measure)")
UNDER = ("⚠ under Prolific's minimum of £6.00 an hour: raise the reward to at least £3.00 per "
         "visit, or pay the difference as a bonus")


def test_study_status_warns_when_the_reward_comes_to_less_than_prolifics_minimum(tmp_path):
    study, engine = paid_study(tmp_path, 200)

    estimate = hourly_pay(engine, study)
    shown = study_status(engine, study).lines(study, "--study study.json")

    assert estimate.cents_per_hour == pytest.approx(400)
    assert (estimate.visits, estimate.visible, estimate.lead) == (3, 4, 1)
    assert f"  {PAY}" in shown and f"  {UNDER}" in shown


def test_study_status_gives_the_visible_minutes_per_participant_too(tmp_path):
    study, engine = paid_study(tmp_path, 200)

    shown = study_status(engine, study).lines(study, "")

    # Measured: 25 and 40 minutes of two who completed, 60 of the one who left; one had none.
    assert ("  visible time per participant: median 40.0 min (quartiles 32.5 to 50.0 min; "
            "3 participants measured)") in shown
    assert ("  visible time per episode: median 20.0 min (quartiles 15.0 to 20.0 min; "
            "5 ratings measured)") in shown


def test_study_review_prints_the_same_estimate_from_the_command_line(tmp_path):
    study, _ = paid_study(tmp_path, 200)
    path = write_study(study, tmp_path / "study.json")

    result = invoke(main, "study", "review", "--study", str(path), "-o",
                    str(tmp_path / "review.csv"))

    assert result.exit_code == 0, result.output
    assert PAY in result.output.splitlines() and UNDER in result.output.splitlines()


@pytest.mark.parametrize(("cents", "said", "unsaid"), [
    (400, "(Prolific recommends at least £9.00 an hour: £4.50 per visit)", "⚠"),
    (500, "pay per hour: £10.00 (£5.00 per visit", "Prolific recommends"),
])
def test_a_reward_above_the_minimum_is_not_warned_about(tmp_path, cents, said, unsaid):
    study, engine = paid_study(tmp_path, cents)

    shown = "\n".join(study_status(engine, study).lines(study, ""))

    assert said in shown and unsaid not in shown


def test_a_study_without_a_reward_says_how_to_give_one(tmp_path):
    study, engine = paid_study(tmp_path, None)

    shown = study_status(engine, study).lines(study, "")

    assert hourly_pay(engine, study) is None
    assert "  pay per hour: no reward in the study file (`study init --reward`)" in shown


@pytest.mark.server
def test_study_init_keeps_the_reward_in_hundredths_as_prolifics_api_takes_it(
        label_studio: LocalServer, ls_client: Client, tmp_path: Path):
    project = study_project(ls_client, f"test_{uuid.uuid4().hex[:12]}", 1)
    server = ["--url", label_studio.url, "--api-key", label_studio.credentials.api_key]

    def init(*options: str):
        return invoke(main, "study", "init", "--name", "paid", "--project", str(project),
                      "--completion-code", "C0DE", "-o", str(tmp_path / "study.json"),
                      "--force", *server, *options)

    written = init("--reward", "2.35", "--currency", "USD")
    assert written.exit_code == 0, written.output
    assert read_study(tmp_path / "study.json").reward == Reward(cents=235, currency="USD")
    assert json.loads((tmp_path / "study.json").read_text())["reward"] == {
        "cents": 235, "currency": "USD"}

    alone = init("--reward", "2.35")
    assert alone.exit_code != 0 and "--reward and --currency go together" in alone.output
    fraction = init("--reward", "2.355", "--currency", "GBP")
    assert fraction.exit_code != 0 and "more than two decimals" in fraction.output
    assert "Traceback" not in alone.output + fraction.output


def test_the_study_file_is_built_from_init_s_options_without_label_studio():
    study = StudyFile.from_options(project=3, name="paid", completion_code="C0DE",
                                   database="postgresql://gateway:hunter2@db/study",
                                   reward=2.35, currency="USD", is_adaptive=True)

    assert study.completion_url == "https://app.prolific.com/submissions/complete?cc=C0DE"
    assert study.database == "postgresql://gateway@db/study"
    assert (study.reward, study.adaptive.max_raters) == (Reward(cents=235, currency="USD"), 3)
    with pytest.raises(StudyError, match="^--reward: 2.355 has more than two decimals$"):
        StudyFile.from_options(project=3, name="paid", completion_code="C0DE", reward=2.355,
                               currency="GBP")

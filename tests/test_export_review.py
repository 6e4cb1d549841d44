"""A researcher who reviewed a crowd study exports and reports it with the decisions shown.

The study review marks each reviewed annotation in its task's meta (``sotopia_review``:
annotation id → approve, look or reject). The export carries the decision on every
annotation-level row (never in the oTree layout), ``--exclude-rejected`` leaves the rejected
ones out of everything and says how many, the report gets a section on the decisions, and the
protocol record holds what a methods section needs, with no id in it.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

from conftest import invoke, results_of, scores, with_meta
from study_support import make_study, prolific_id
from sotopia_ls.exporter import export_file as export_path
from sotopia_ls.exporter.commands import export_command, report_command
from sotopia_ls.exporter.review import NOT_REVIEWED, decision_counts
from sotopia_ls.exporter.tables import LONG_ROWS_PER_ANNOTATION, WIDE_COLUMNS
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project, import_batch, update_task_meta
from sotopia_ls.labelstudio.tasks import REVIEW, episode_to_task
from sotopia_ls.study.protocol import study_protocol
from sotopia_ls.study.serving import arrival
from sotopia_ls.study.serving.arrival import ProlificParameters
from sotopia_ls.study.settings import Qualification, read_study, write_study
from sotopia_ls.study.slots import leases
from sotopia_ls.study.store import (
    assignments,
    decisions,
    insert_once,
    now,
    open_store,
    participants,
    qualification_results,
)

# Tasks 1-3 of the ``export_file`` fixture hold annotations 11, 12 / 21, 22 / 31, 32.
MARKS = {1: {"11": "approve", "12": "reject"}, 2: {"21": "look"}}


def export(*args: str):
    result = invoke(export_command, *args)
    assert result.exit_code == 0, result.output
    return result


def decisions_by_annotation(out: Path) -> dict[int, str]:
    long = pd.read_parquet(out / "scores_long.parquet")
    return dict(long.groupby("annotation_id")["review_decision"].first())


def test_the_export_shows_each_annotations_decision_but_not_in_the_otree_layout(
        export_file, tmp_path):
    out = tmp_path / "out"
    result = export("--from-file", str(with_meta(export_file, REVIEW, MARKS)), "-o", str(out))

    assert decisions_by_annotation(out) == {11: "approve", 12: "reject", 21: "look", 22: "",
                                            31: "", 32: ""}
    rows = pd.read_csv(out / "scores_long.csv")["review_decision"].fillna("").value_counts()
    assert (rows / LONG_ROWS_PER_ANNOTATION).to_dict() == {"": 3, "approve": 1, "reject": 1,
                                                           "look": 1}
    assert list(pd.read_csv(out / "scores_wide.csv").columns) == [
        "Unnamed: 0", *WIDE_COLUMNS[1:]]
    # Without --exclude-rejected the rejected annotation stays, marked.
    assert "6 annotations = 6 exported + 0 rejected + 0 cancelled" in result.output
    assert "review: 1 approve, 1 look, 1 reject" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["review"] == {"approve": 1, "look": 1, "reject": 1}
    assert summary["excluded"] == 0 and summary["balanced"]


def test_the_annotation_rows_from_python_carry_the_decision(export_file):
    rows = export_path(with_meta(export_file, REVIEW, MARKS)).annotations.set_index(
        "annotation_id")
    assert rows.loc[12, "review_decision"] == "reject" and rows.loc[31, "review_decision"] == ""


def test_exclude_rejected_drops_exactly_the_rejected_and_says_how_many(export_file, tmp_path):
    out = tmp_path / "out"
    result = export("--from-file", str(with_meta(export_file, REVIEW, MARKS)), "-o", str(out),
                    "--exclude-rejected")

    assert "6 annotations = 5 exported + 0 rejected + 0 cancelled/skipped + 1 excluded by " \
           "review" in result.output
    assert "wrote " in result.output and "(5 annotation(s); 1 marked reject in review " \
           "excluded)" in result.output
    assert set(decisions_by_annotation(out)) == {11, 21, 22, 31, 32}
    assert 12 not in set(pd.read_csv(out / "scores_wide.csv")["Unnamed: 0"])
    for name in ("annotations.jsonl", "evaluations.jsonl"):
        lines = (out / name).read_text().splitlines()
        assert len(lines) == 5 and not any('"12"' in line or ": 12," in line for line in lines)
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(episode["annotator_count"] for episode in episodes) == [1, 2, 2]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["excluded"] == 1 and summary["exported"] == 5 and summary["balanced"]
    # The decisions are still counted: the rejected one among them.
    assert summary["review"] == {"approve": 1, "look": 1, "reject": 1}


@pytest.mark.parametrize(("mark", "reason"), [
    ("approve", "not an object of annotation id → decision: 'approve'"),
    ({"11": "accept"}, "annotation 11: 'accept' is no decision (one of approve, look, reject)"),
    ({"eleven": "approve"}, "'eleven' is not an annotation id"),
    ({"11": None}, "annotation 11: None is no decision"),
])
def test_a_malformed_review_mark_is_one_line_naming_the_task_and_field(
        export_file, tmp_path, mark, reason):
    result = invoke(export_command, "--from-file",
                    str(with_meta(export_file, REVIEW, {2: mark})), "-o",
                    str(tmp_path / "out"))
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"[task 2]: meta.sotopia_review: {reason}" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.report
def test_the_report_shows_the_decisions_only_when_there_are_any(export_file, tmp_path):
    unmarked = invoke(report_command, "--from-file", str(export_file), "-o",
                      str(tmp_path / "plain"), "--bootstrap", "0")
    assert unmarked.exit_code == 0, unmarked.output
    assert "Review decisions" not in (tmp_path / "plain" / "report.html").read_text()
    assert not (tmp_path / "plain" / "review.csv").exists()

    path = str(with_meta(export_file, REVIEW, MARKS))
    excluded = invoke(report_command, "--from-file", path, "-o", str(tmp_path / "excluded"),
                      "--bootstrap", "0", "--exclude-rejected")
    assert excluded.exit_code == 0, excluded.output
    assert "+ 1 excluded by review" in excluded.output
    page = (tmp_path / "excluded" / "report.html").read_text()
    assert "<h2>Review decisions</h2>" in page
    assert "1 annotation marked reject left out of every table and figure" in page
    table = pd.read_csv(tmp_path / "excluded" / "review.csv").set_index("decision")
    assert table["annotations"].to_dict() == {"approve": 1, "look": 1, "reject": 1,
                                              "not reviewed": 3}
    assert table.loc["reject", "excluded"] == 1 and table["share"].sum() == pytest.approx(1)
    assert pd.read_csv(tmp_path / "excluded" / "annotators.csv")["annotations"].sum() == 5

    # From an export folder that kept them: the report says they are kept.
    export("--from-file", path, "-o", str(tmp_path / "kept"))
    kept = invoke(report_command, "--from-export", str(tmp_path / "kept"), "-o",
                  str(tmp_path / "kept-report"), "--bootstrap", "0")
    assert kept.exit_code == 0, kept.output
    assert "1 annotation marked reject kept in every table" in (
        tmp_path / "kept-report" / "report.html").read_text()
    refused = invoke(report_command, "--from-export", str(tmp_path / "kept"), "-o",
                     str(tmp_path / "r"), "--exclude-rejected")
    assert refused.exit_code != 0 and "--exclude-rejected does nothing with --from-export" in (
        refused.output)


def test_study_options_that_cannot_be_read_stop_the_export_before_it_writes(
        export_file, tmp_path):
    out = tmp_path / "out"
    alone = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                   "--database", f"sqlite:///{tmp_path / 'x.sqlite3'}")
    assert alone.exit_code != 0 and "--database is for --study" in alone.output

    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    result = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                    "--study", str(broken))
    assert result.exit_code != 0 and f"study file {broken}: name: Field required" in result.output

    study = write_study(make_study(tmp_path, 1), tmp_path / "study.json")
    unreachable = invoke(export_command, "--from-file", str(export_file), "-o", str(out),
                         "--study", str(study),
                         "--database", "postgresql://gateway:hunter2secret@127.0.0.1:9/study")
    assert unreachable.exit_code != 0 and "cannot open the study database" in unreachable.output
    assert "hunter2secret" not in unreachable.output and "Traceback" not in unreachable.output
    assert not out.exists()


def test_the_protocol_record_holds_the_export_facts_and_no_ids(export_file, tmp_path):
    out = tmp_path / "out"
    export("--from-file", str(with_meta(export_file, REVIEW, MARKS)), "-o", str(out),
           "--exclude-rejected")

    record = json.loads((out / "protocol.json").read_text())
    assert record["episodes"] == 3
    # Task 1 lost its rejected annotation: one rater left there, two on the others.
    assert record["raters_per_episode"] == {"min": 1, "median": 2.0, "max": 2}
    # Each task's lead times are 41 s and 42 s (the fixture's); the rejected one's (42 s)
    # left out, three of 41 s remain against two of 42 s.
    assert record["median_minutes_per_episode"] == round(41 / 60, 2)
    assert record["review_decisions"] == {"approve": 1, "look": 1, "reject": 1}
    assert record["exclusions"] == {"rejected_by_review_excluded": True, "excluded": 1}
    assert record["studies"] == []
    prose = (out / "protocol.md").read_text()
    assert "Each episode was rated by 1 to 2 annotators (median 2)." in prose
    assert "review approved 1 annotation, marked 1 to look at and rejected 1. Rejected " \
           "annotations were excluded from every table and figure (1)." in prose
    for text in ((out / "protocol.json").read_text(), prose):
        assert "@" not in text and "annotator-" not in text


# --- with the study's gateway database ------------------------------------------------------


def participant(engine, study: str):
    return arrival.arrive(engine, study, ProlificParameters(
        PROLIFIC_PID=prolific_id(), STUDY_ID="a" * 24, SESSION_ID=prolific_id()))


def qualification_round(engine, tmp_path: Path, database: str) -> Path:
    """A qualification round of three participants: two passed, one did not."""
    study = make_study(tmp_path, 1, name="screening", database=database,
                       qualification=Qualification(screen_out_code="SCR33N",
                                                   screen_out_url="http://127.0.0.1:9/out"))
    for passed in (True, True, False):
        visit = participant(engine, study.name)
        arrival.finish(engine, visit.id, "completed")
        insert_once(engine, qualification_results, {
            "visit_id": visit.id, "passed": passed, "largest_distance": 1 if passed else 3,
            "scored_at": now()})
    return write_study(study, tmp_path / "screening.json")


def main_study(engine, tmp_path: Path, database: str) -> tuple[Path, list[str]]:
    """The main study, open to the round's passers, with a gold episode hidden among its two:
    two participants rate both; the review approves one session and rejects the other.
    Returns the study file and the Prolific ids."""
    # Half of two episodes: exactly one gold episode in each session.
    study = make_study(tmp_path, 1, name="main", database=database, gold_share=0.5,
                       requires_qualification="screening")
    leases.add_episodes(engine, study.name, {1: {}, 2: {}}, study.raters_per_episode,
                        references={2: {"believability_1": 7}})
    for decision in ("approve", "reject"):
        visit = participant(engine, study.name)
        for _ in range(2):
            taken = leases.lease_for_visit(engine, study.name, visit.id, visit.participant_id,
                                           lease_seconds=study.lease_seconds,
                                           gold_share=leases.GoldShare.of(study))
            leases.mark_shown(engine, taken.id)
            leases.settle(engine, taken, [{"stand-in": True}], study.raters_per_episode)
        arrival.finish(engine, visit.id, "completed")
        insert_once(engine, decisions, {"visit_id": visit.id, "decision": decision,
                                        "message": None, "category": None,
                                        "recorded_at": now()})
    with engine.connect() as conn:
        ids = list(conn.execute(select(participants.c.external_id)).scalars())
    return write_study(study, tmp_path / "main.json"), ids


@pytest.mark.server
def test_a_reviewed_project_exports_with_the_study_protocol(
        label_studio, ls_client, sample_data, tmp_path):
    # The project: three episodes, each rated by two annotators; the review marked three.
    episodes = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[:3]
    project = create_project(ls_client, f"test_{uuid.uuid4().hex[:12]}")
    import_batch(ls_client, project.id, [{"data": episode_to_task(e)} for e in episodes])
    raters = [ls_client.users.create(email=f"rater-{uuid.uuid4().hex[:8]}@example.com",
                                     username=f"rater-{uuid.uuid4().hex[:8]}") for _ in range(2)]
    tasks = sorted(task.id for task in ls_client.tasks.list(project=project.id))
    made = {task: [ls_client.annotations.create(id=task, result=results_of(scores(k)),
                                                completed_by=rater.id, lead_time=60.0 * (k + 1))
                   for k, rater in enumerate(raters)] for task in tasks}
    rejected = made[tasks[0]][1].id
    update_task_meta(ls_client, project.id, tasks[0], {REVIEW: {
        str(made[tasks[0]][0].id): "approve", str(rejected): "reject"}})
    update_task_meta(ls_client, project.id, tasks[1], {REVIEW: {
        str(made[tasks[1]][0].id): "look"}})

    # The gateway's database, as the study's own functions leave it.
    url = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"
    engine = open_store(url)
    screening = qualification_round(engine, tmp_path, url)
    main, prolific_ids = main_study(engine, tmp_path, url)
    with engine.connect() as conn:
        lead_times = sorted(conn.execute(
            select(assignments.c.lead_time)
            .where(assignments.c.study == "main")).scalars())

    out = tmp_path / "out"
    result = invoke(export_command, "--project", str(project.id), "--url", label_studio.url,
                    "--api-key", label_studio.credentials.api_key, "-o", str(out),
                    "--exclude-rejected", "--study", str(screening), "--study", str(main),
                    "--database", url)
    assert result.exit_code == 0, result.output
    assert "(5 annotation(s); 1 marked reject in review excluded)" in result.output
    assert rejected not in set(pd.read_csv(out / "scores_long.csv")["annotation_id"])

    record = json.loads((out / "protocol.json").read_text())
    assert record["review_decisions"] == {"approve": 1, "look": 1, "reject": 1}
    # Each task's raters took 60 s and 120 s; one of 120 s excluded: three of 60 s, two of 120 s.
    assert record["median_minutes_per_episode"] == 1.0
    first, second = record["studies"]
    assert first["kind"] == "qualification round" and first["qualification"] == {
        "role": "this study is the qualification round",
        "rule": "every rating was within ±2 of the reference rating", "max_distance": 2,
        "scored": 3, "passed": 2, "pass_rate": round(2 / 3, 4)}
    assert second["kind"] == "main study" and second["qualification"]["round"] == "screening"
    assert second["qualification"]["pass_rate"] == round(2 / 3, 4)
    assert (second["raters_per_episode"], second["episodes_per_participant"]) == (2, 2)
    assert second["gold_share"] == 0.5 and (second["ratings"], second["gold_ratings"]) == (4, 2)
    assert second["participants"] == 2 and second["sessions"]["completed"] == 2
    assert second["decisions"] == {"approve": 1, "look": 0, "reject": 1}
    assert second["median_minutes_per_episode"] == round(
        (lead_times[1] + lead_times[2]) / 2 / 60, 2)
    assert second["flag_thresholds"]["min_rationale_words"] == 5

    prose = (out / "protocol.md").read_text()
    assert "A participant passed when every rating was within ±2 of the reference rating: 2 " \
           "of 3 scored participants passed (67%)." in prose
    assert "Only participants who passed the qualification round screening were admitted" in prose
    # No id, code, address or database URL in either file.
    for text in ((out / "protocol.json").read_text(), prose):
        assert not re.search(r"[0-9a-f]{24}", text)
        assert not any(pid in text for pid in prolific_ids)
        assert "C0MPL3T3" not in text and "SCR33N" not in text and "127.0.0.1" not in text
        assert "@" not in text and "sqlite" not in text and "gateway.sqlite3" not in text


def test_the_study_side_counts_refusals_at_admission_and_screen_outs_apart(tmp_path):
    url = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"
    engine = open_store(url)
    screening = read_study(qualification_round(engine, tmp_path, url))
    with engine.connect() as conn:
        failed = conn.execute(select(qualification_results.c.visit_id).where(
            qualification_results.c.passed.is_(False))).scalar_one()
    insert_once(engine, decisions, {"visit_id": failed, "decision": "screened_out",
                                    "message": None, "category": None, "recorded_at": now()})
    main = make_study(tmp_path, 1, name="main", database=url,
                      requires_qualification="screening")
    refused = participant(engine, main.name)
    arrival.finish(engine, refused.id, "not_admitted")

    assert study_protocol(engine, main)["sessions"] == {
        "total": 1, "completed": 0, "no_slots": 0, "not_admitted": 1, "screened_out": 0,
        "unfinished": 0}
    assert study_protocol(engine, screening)["decisions"] == {
        "approve": 0, "look": 0, "reject": 0, "screened_out": 1}


def test_the_round_s_protocol_md_counts_its_screen_outs(export_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'gateway.sqlite3'}"
    engine = open_store(url)
    screening = qualification_round(engine, tmp_path, url)
    with engine.connect() as conn:
        scored = conn.execute(select(qualification_results.c.visit_id,
                                     qualification_results.c.passed)).all()
    for visit, passed in scored:
        insert_once(engine, decisions, {"visit_id": visit,
                                        "decision": "approve" if passed else "screened_out",
                                        "message": None, "category": None, "recorded_at": now()})

    out = tmp_path / "out"
    export("--from-file", str(export_file), "-o", str(out), "--study", str(screening),
           "--database", url)

    assert "The review decided on sessions: 2 approved, 0 to look at, 0 rejected, 1 screened " \
           "out." in (out / "protocol.md").read_text()


def test_the_summary_and_the_report_count_decisions_with_one_function():
    marks = pd.Series(["approve", None, "reject", "", "look", "approve"])

    counts = decision_counts(marks, excluded=2)

    assert counts == {"approve": 2, "look": 1, "reject": 3, NOT_REVIEWED: 2}

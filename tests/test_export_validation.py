"""Every annotation ends in exactly one place: a record, errors.jsonl, or the cancelled count.

One episode with a stored model evaluation (the EpisodeLog fixture) is annotated on a real
Label Studio by a small crowd: two good annotators (one of whom submits twice), four who make
one mistake each, one who skips, and an expert whose annotation is marked ground truth.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import results_of, task_ids
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.exporter import export_project
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.tasks import episode_to_task
from sotopia_ls.report.build import build_report

pytestmark = pytest.mark.server

FIXTURE = Path("episodelog") / "fixture_episode.json"


def ratings(offset: int, who: str) -> dict[int, dict[str, tuple[str, int]]]:
    """Valid scores: each dimension's midpoint moved by ``offset`` (kept inside the range)."""
    def score(d) -> int:
        return max(d.range_low, min(d.range_high, (d.range_low + d.range_high) // 2 + offset))

    return {a: {d.key: (f"{who} on {d.key} of agent {a}", score(d)) for d in DIMENSIONS}
            for a in AGENTS}


def results_with(offset: int, who: str, control: str, value: dict | None) -> list[dict]:
    """Valid results except ``control``: its value replaced, or the result left out (None)."""
    results = results_of(ratings(offset, who))
    if value is None:
        return [r for r in results if r["from_name"] != control]
    return [r | {"value": value} if r["from_name"] == control else r for r in results]


@dataclass
class Crowd:
    project_id: int
    task_id: int
    users: dict[str, int]
    annotations: dict[str, int]
    env: dict[str, str]


@pytest.fixture(scope="module")
def crowd(ls_client, label_studio, sample_data) -> Crowd:
    project = create_project(ls_client, f"test_{uuid.uuid4().hex[:12]}")
    episode = load_episodes([sample_data / FIXTURE]).episodes[0]
    ls_client.projects.import_tasks(id=project.id, request=[task_payload(episode)])
    task_id = task_ids(ls_client, project.id)[episode.id]
    run = uuid.uuid4().hex[:6]
    users = {
        name: ls_client.users.create(username=f"{name}-{run}", email=f"{name}-{run}@crowd.test").id
        for name in ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "expert")
    }
    plan = [
        ("alice-first", "alice", results_of(ratings(0, "alice")), {}),
        ("alice", "alice", results_of(ratings(1, "alice")), {}),
        ("bob", "bob", results_of(ratings(-1, "bob")), {}),
        ("carol", "carol", results_with(0, "carol", "secret_2", {"choices": ["5"]}), {}),
        ("dave", "dave", results_with(0, "dave", "goal_reasoning_1", None), {}),
        ("erin", "erin", results_with(0, "erin", "knowledge_1", {"choices": ["3.5"]}), {}),
        ("frank", "frank",
         results_with(0, "frank", "relationship_reasoning_2", {"text": ["  "]}), {}),
        ("grace", "grace", [], {"was_cancelled": True}),
        ("expert", "expert", results_of(ratings(2, "expert")), {"ground_truth": True}),
    ]
    annotations = {}
    for label, user, result, extra in plan:
        created = ls_client.annotations.create(
            id=task_id, result=result, completed_by=users[user], lead_time=12.0, **extra
        )
        annotations[label] = created.id
    # The owner saves bob's annotation again, unchanged, a moment later: what Label Studio
    # Community lets anyone do to anyone's annotation.
    time.sleep(1.5)
    ls_client.annotations.update(id=annotations["bob"], result=results_of(ratings(-1, "bob")))
    # An unsubmitted draft: the SDK has no call for drafts, so use its HTTP client directly.
    ls_client._client_wrapper.httpx_client.request(
        f"api/tasks/{task_id}/drafts", method="POST",
        json={"result": results_of(ratings(3, "draft")), "lead_time": 3.0},
    ).raise_for_status()
    return Crowd(project.id, task_id, users, annotations,
                 {"LABEL_STUDIO_URL": label_studio.url,
                  "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key})


def run_export(crowd: Crowd, out: Path, *args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(export_command, [*args, "-o", str(out)],
                                env=crowd.env if env is None else env, catch_exceptions=False)
    assert crowd.env["LABEL_STUDIO_API_KEY"] not in result.output
    return result


def test_each_bad_annotation_lands_in_errors_naming_its_field(crowd, tmp_path):
    result = run_export(crowd, tmp_path, "--project", str(crowd.project_id))
    assert result.exit_code == 0, result.output
    assert "9 annotations = 3 exported + 5 rejected + 1 cancelled/skipped" in result.output
    assert "1 duplicate(s) refused; 1 unsubmitted draft(s) ignored" in result.output

    errors = [json.loads(line) for line in (tmp_path / "errors.jsonl").open()]
    found = {(e["annotation_id"], e["field"]): e["reason"] for e in errors}
    a = crowd.annotations
    assert found == {
        (a["carol"], "secret_2"): "secret score 5 is outside -10 to 0",
        (a["dave"], "goal_reasoning_1"): "missing rationale",
        (a["erin"], "knowledge_1"): "not an integer: '3.5'",
        (a["frank"], "relationship_reasoning_2"): "empty rationale",
        (a["alice-first"], ""): f"duplicate: the same annotator also submitted annotation "
                                f"{a['alice']} on this task; only the latest is kept",
    }
    assert all(e["task_id"] == crowd.task_id and e["annotator"].startswith("annotator-")
               for e in errors)
    assert {e["annotator"] for e in errors if e["annotation_id"] == a["carol"]} == {
        f"annotator-{crowd.users['carol']}"}

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["balanced"] and summary["cancelled"] == 1 and summary["ground_truth"] == 1
    exported = pd.read_csv(tmp_path / "scores_long.csv")
    assert set(exported["annotation_id"]) == {a["alice"], a["bob"], a["expert"]}


def test_aggregated_episode_averages_the_crowd_but_not_the_expert(crowd, tmp_path):
    assert run_export(crowd, tmp_path, "--project", str(crowd.project_id)).exit_code == 0
    [episode] = [json.loads(line) for line in (tmp_path / "episodes.jsonl").open()]
    assert episode["annotator_count"] == 2
    for agent, (overall, scores) in zip(AGENTS, episode["rewards"]):
        for d in DIMENSIONS:
            alice, bob = ratings(1, "alice")[agent][d.key][1], ratings(-1, "bob")[agent][d.key][1]
            assert scores[d.key] == (alice + bob) / 2
        assert overall == pytest.approx(scores["overall_score"])
    assert episode["reasoning"].count("Agent 1 comments:") == 2


def test_an_export_file_gives_the_same_records_as_the_live_project(ls_client, crowd, tmp_path):
    export_file = tmp_path / "export.json"
    with export_file.open("wb") as out:
        for chunk in ls_client.projects.exports.download_sync(
            crowd.project_id, export_type="JSON", download_all_tasks=True
        ):
            out.write(chunk)
    live = export_project(ls_client, crowd.project_id)

    named = run_export(crowd, tmp_path / "named", "--from-file", str(export_file))
    assert named.exit_code == 0, named.output
    from_file = pd.read_parquet(tmp_path / "named" / "scores_long.parquet")
    pd.testing.assert_frame_equal(from_file, live.scores_long, check_dtype=False)

    offline = run_export(crowd, tmp_path / "offline", "--from-file", str(export_file), env={})
    assert offline.exit_code == 0, offline.output
    ids = set(pd.read_csv(tmp_path / "offline" / "scores_long.csv")["annotator_id"])
    assert ids == {f"annotator-{crowd.users[name]}" for name in ("alice", "bob", "expert")}


def test_a_broken_export_file_is_refused_and_nothing_is_written(crowd, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('[{"id": 1, "data": {"episode_id": "x"}, "annotations": [')
    result = run_export(crowd, tmp_path / "out", "--from-file", str(broken), env={})
    assert result.exit_code == 1
    assert "not a Label Studio JSON export" in result.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_report_compares_humans_with_the_stored_evaluation_and_the_expert(ls_client, crowd):
    export = export_project(ls_client, crowd.project_id)
    report = build_report(export.scores_long, export.model_scores, export.tally)

    model = export.model_scores.set_index(["agent", "dimension"])["score"]
    assert len(model) == 14 and set(export.model_scores["evaluator"]) == {"gpt-4"}
    comparison = report.human_vs_model.set_index("dimension")
    for d in DIMENSIONS:
        human = [(ratings(1, "a")[agent][d.key][1] + ratings(-1, "b")[agent][d.key][1]) / 2
                 for agent in AGENTS]
        bias = sum(h - model[(agent, d.key)] for h, agent in zip(human, AGENTS)) / 2
        assert comparison.loc[d.key, "n"] == 2
        assert comparison.loc[d.key, "bias"] == pytest.approx(bias)

    # The expert's annotation is the reference: alice is at most 1 point away, bob up to 3.
    names = {f"annotator-{crowd.users[name]}": name for name in ("alice", "bob")}
    qualification = report.qualification.assign(
        name=lambda q: q["annotator_id"].map(names)
    ).set_index("name")
    assert qualification["passed"].to_dict() == {"alice": True, "bob": False}
    assert qualification.loc["alice", "failed_dimensions"] == ""
    assert "goal" in qualification.loc["bob", "failed_dimensions"]
    assert set(report.annotators["annotator_id"].map(names)) == {"alice", "bob"}


def test_a_backends_predictions_stand_in_for_a_missing_stored_evaluation(ls_client, sample_data):
    project = create_project(ls_client, f"test_{uuid.uuid4().hex[:12]}")
    episode = load_episodes([sample_data / "otree_episodes" / "GPT3.5-GPT3.5"]).episodes[0]
    assert episode.evaluation is None
    judged = ratings(2, "backend")
    prediction = {"model_version": "backend-v1", "result": results_of(judged)}
    ls_client.projects.import_tasks(
        id=project.id, request=[{"data": episode_to_task(episode), "predictions": [prediction]}]
    )
    task_id = task_ids(ls_client, project.id)[episode.id]
    user = ls_client.users.create(username=f"solo-{uuid.uuid4().hex[:6]}",
                                  email=f"solo-{uuid.uuid4().hex[:6]}@crowd.test")
    ls_client.annotations.create(id=task_id, result=results_of(ratings(0, "solo")),
                                 completed_by=user.id)

    assert export_project(ls_client, project.id).model_scores.empty
    model = export_project(ls_client, project.id, with_predictions=True).model_scores
    assert set(model["evaluator"]) == {"backend-v1"} and len(model) == 14
    scores = model.set_index(["agent", "dimension"])["score"].to_dict()
    assert scores == {(a, key): judged[a][key][1] for a in AGENTS for key in judged[a]}


def test_the_export_audits_what_a_blind_study_must_not_have(crowd, tmp_path):
    result = run_export(crowd, tmp_path, "--project", str(crowd.project_id))
    assert result.exit_code == 0, result.output
    findings = [json.loads(line) for line in (tmp_path / "audit.jsonl").open()]
    a, users = crowd.annotations, crowd.users
    by_kind = {(f["kind"], f["annotation_id"]): f for f in findings}
    assert by_kind[("edited_by_another_user", a["bob"])]["annotator"] == f"annotator-{users['bob']}"
    assert ("repeated_annotator", a["alice-first"]) in by_kind
    # The project asks for 2 annotations per task; 8 were submitted (one was skipped).
    overlap = by_kind[("more_annotations_than_overlap", None)]
    assert overlap["task_id"] == crowd.task_id and overlap["detail"].startswith("8 submitted")
    # Annotations the owner created on the annotators' behalf are not edits.
    assert sum(f["kind"] == "edited_by_another_user" for f in findings) == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["audit"] == {"edited_by_another_user": 1, "more_annotations_than_overlap": 1,
                                "repeated_annotator": 1, "episode_in_several_tasks": 0}
    assert "audit: 1 edited by another user, 1 more annotations than overlap" in result.output

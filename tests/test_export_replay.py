"""The Sotopia oTree study, replayed in Label Studio, comes back out unchanged.

The 42 sample human-eval episodes are imported into a real Label Studio; every row of both
sample ``*_final.csv`` files becomes an annotation by its own Label Studio user. Exporting the
project must give back every score and rationale, the oTree CSV layout, the same
Krippendorff's α as the CSVs, and records Sotopia's own pydantic models accept.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import row_results, sotopia_python, task_ids
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, rating_name, reasoning_name
from sotopia_ls.exporter import ExportResult, export_project
from sotopia_ls.exporter.commands import export_command, report_command
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.statistics.agreement import agreement_table

pytestmark = pytest.mark.server

CSV_FILES = ("gpt3.5_final.csv", "mistral-instruct_final.csv")
MODEL_LABELS = {
    "gpt-3.5-turbo_gpt-3.5-turbo_v0.0.1_clean": "gpt3.5",
    "mistral-instruct_gpt-3.5-turbo_test": "mistral",
}


@dataclass
class Replay:
    project_id: int
    rows: pd.DataFrame  # both CSVs, plus the pseudonym of the Label Studio user who replayed each row
    export: ExportResult
    out: Path
    server_env: dict[str, str]


def read_study(samples: Path) -> pd.DataFrame:
    frames = [pd.read_csv(samples / "human_eval" / name).assign(file=name) for name in CSV_FILES]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def replay(ls_client, label_studio, sample_data, tmp_path_factory) -> Replay:
    project = create_project(ls_client, f"test_{uuid.uuid4().hex[:12]}")
    episodes = load_episodes([sample_data / "otree_episodes"]).episodes
    ls_client.projects.import_tasks(
        id=project.id, request=[task_payload(e) for e in episodes],
        return_task_ids=True,
    )
    tasks = task_ids(ls_client, project.id)
    rows = read_study(sample_data)
    run = uuid.uuid4().hex[:6]
    annotators = []
    for number, row in enumerate(rows.to_dict("records")):
        # One Label Studio user per CSV row: the same oTree participant once rated the same
        # episode twice, and both ratings are part of the study.
        email = f"row{number}-{run}@replay.test"
        user = ls_client.users.create(username=email.split("@")[0], email=email)
        ls_client.annotations.create(
            id=tasks[row["pk"]], result=row_results(row),
            completed_by=user.id, lead_time=30.0 + number,
        )
        annotators.append(f"annotator-{user.id}")
    out = tmp_path_factory.mktemp("replay-export")
    return Replay(
        project_id=project.id,
        rows=rows.assign(annotator=annotators),
        export=export_project(ls_client, project.id, out),
        out=out,
        server_env={"LABEL_STUDIO_URL": label_studio.url,
                    "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key},
    )


def csv_long(rows: pd.DataFrame) -> pd.DataFrame:
    """The CSVs as one row per annotator × agent × dimension, keyed by the replaying user."""
    parts = [
        pd.DataFrame({
            "episode_id": rows["pk"], "annotator_id": rows["annotator"], "agent": agent,
            "dimension": key, "score": rows[rating_name(key, agent)].astype("int64"),
            "rationale": rows[reasoning_name(key, agent)],
        })
        for agent in AGENTS for key in DIMENSION_KEYS
    ]
    return pd.concat(parts, ignore_index=True)


KEY = ["episode_id", "annotator_id", "agent", "dimension"]

SOTOPIA_CHECK = """
import json, sys
from pathlib import Path
from sotopia.database import AnnotationForEpisode, SotopiaDimensions

out = Path(sys.argv[1])
lines = lambda name: [json.loads(l) for l in (out / name).read_text().splitlines()]
counts = {"AnnotationForEpisode": 0, "SotopiaDimensions": 0, "aggregated_episodes": 0}
for record in lines("annotations.jsonl"):
    AnnotationForEpisode(**record)
    counts["AnnotationForEpisode"] += 1
for record in lines("evaluations.jsonl"):
    for evaluation in (record["agent_1_evaluation"], record["agent_2_evaluation"],
                       *record["evaluations"].values()):
        SotopiaDimensions(**evaluation)
        counts["SotopiaDimensions"] += 1
for record in lines("episodes.jsonl"):
    AnnotationForEpisode(episode=record["episode"], annotator_id="aggregate",
                         rewards=record["rewards"], reasoning=record["reasoning"])
    counts["aggregated_episodes"] += 1
print(json.dumps(counts))
"""


def validate_with_sotopia(out: Path, home: Path) -> dict[str, int]:
    """Load every exported record with sotopia's own models; returns how many passed."""
    env = {**os.environ, "SOTOPIA_STORAGE_BACKEND": "local", "HOME": str(home)}
    done = subprocess.run(
        [str(sotopia_python()), "-c", SOTOPIA_CHECK, str(out)],
        env=env, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_every_row_is_exported_and_accounted_for(replay):
    tally = replay.export.tally
    assert (tally.total, tally.exported, tally.rejected, tally.cancelled) == (85, 85, 0, 0)
    assert tally.balanced
    assert (replay.out / "errors.jsonl").read_text() == ""


def test_export_reproduces_every_score_and_rationale_exactly(replay):
    expected = csv_long(replay.rows).sort_values(KEY, ignore_index=True)
    exported = pd.read_parquet(replay.out / "scores_long.parquet")
    got = exported[expected.columns].sort_values(KEY, ignore_index=True)
    assert len(got) == 85 * 14
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert exported["agent_name"].notna().all() and (exported["lead_time"] >= 30).all()


def test_annotations_jsonl_has_sotopia_rewards_and_reasoning(replay):
    records = [json.loads(line) for line in (replay.out / "annotations.jsonl").open()]
    by_annotator = {r["annotator_id"]: r for r in records}
    assert len(by_annotator) == 85
    for _, row in replay.rows.iterrows():
        record = by_annotator[row["annotator"]]
        assert record["episode"] == row["pk"]
        for agent, (overall, scores) in zip(AGENTS, record["rewards"]):
            seven = [int(row[rating_name(key, agent)]) for key in DIMENSION_KEYS]
            assert [scores[key] for key in DIMENSION_KEYS] == seven
            assert overall == pytest.approx(sum(seven) / 7) == scores["overall_score"]
        assert record["reasoning"].startswith("Agent 1 comments:\nbelievability: ")
        assert f"goal: {row['goal_reasoning_2']}\n" in record["reasoning"]


def test_scores_wide_has_the_csv_columns_rows_and_values(replay, sample_data, tmp_path):
    out = tmp_path / "wide"
    labels = [f"--model-name={tag}={label}" for tag, label in MODEL_LABELS.items()]
    result = CliRunner().invoke(
        export_command, ["--project", str(replay.project_id), "-o", str(out), *labels],
        env=replay.server_env, catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert "85 annotations = 85 exported + 0 rejected + 0 cancelled/skipped" in result.output
    assert replay.server_env["LABEL_STUDIO_API_KEY"] not in result.output

    wide = pd.read_csv(out / "scores_wide.csv")
    original = replay.rows
    for name in CSV_FILES:
        assert list(wide.columns) == list(pd.read_csv(sample_data / "human_eval" / name).columns)
    assert len(wide) == len(original)
    wide = wide.set_index("prolific_id").loc[original["annotator"]].reset_index()
    score_columns = list(wide.columns[5:])
    pd.testing.assert_frame_equal(
        wide[["model", "pk", *score_columns]],
        original[["model", "pk", *score_columns]].reset_index(drop=True),
        check_dtype=False,
    )
    for shown, source in zip(wide["data"], original["data"]):
        shown, source = json.loads(shown), json.loads(source)
        assert shown["names"] == source["names"]
        assert shown["personal_info"] == source["personal_info"]


def alpha_from_csvs(rows: pd.DataFrame, dimension: str) -> float:
    """α straight from the CSV rows: each row one rater, each episode × agent one unit."""
    units = [(pk, agent) for pk in rows["pk"].unique() for agent in AGENTS]
    column = {unit: i for i, unit in enumerate(units)}
    matrix = np.full((len(rows), len(units)), np.nan)
    for r, (_, row) in enumerate(rows.iterrows()):
        for agent in AGENTS:
            matrix[r, column[(row["pk"], agent)]] = row[rating_name(dimension, agent)]
    try:
        return krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval")
    except ValueError:  # one value only (every secret rating is 0): α is undefined
        return math.nan


@pytest.mark.parametrize("dimension", DIMENSION_KEYS)
def test_alpha_matches_krippendorff_on_the_csvs(replay, dimension):
    exported = replay.export.scores_long
    ours = agreement_table(exported).set_index("dimension").loc[dimension, "alpha"]
    direct = alpha_from_csvs(replay.rows, dimension)
    print(f"{dimension}: alpha export={ours:.4f} csv={direct:.4f}")
    if math.isnan(direct):
        assert math.isnan(ours)
    else:
        assert round(ours, 3) == round(direct, 3)


def test_records_validate_against_sotopia_0_1_5_models(replay, tmp_path):
    counts = validate_with_sotopia(replay.out, home=tmp_path)
    assert counts == {"AnnotationForEpisode": 85, "SotopiaDimensions": 85 * 4,
                      "aggregated_episodes": 42}


def test_report_is_one_html_file_with_every_dimension_and_plot(replay, tmp_path):
    result = CliRunner().invoke(
        report_command, ["--project", str(replay.project_id), "-o", str(tmp_path)],
        env=replay.server_env, catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    # α per dimension, each agent model's scores (people's alone) and each dimension's
    # distribution (no judge: no human-vs-model plot).
    assert page.count('src="data:image/png;base64,') == 2 + len(DIMENSION_KEYS)
    assert "<script" not in page and 'src="http' not in page
    agreement = pd.read_csv(tmp_path / "agreement.csv").set_index("dimension")
    for dimension in DIMENSION_KEYS:
        row = agreement.loc[dimension]
        assert f"<td>{dimension}</td>" in page
        if not math.isnan(row["alpha"]):
            assert f"α = {row['alpha']:.3f}" in page
    assert agreement.loc["secret", "low_variance"]
    assert "Near-constant ratings" in page and "No rated episode in this export has a model evaluation" in page
    assert {"annotators.csv", "human_vs_model.csv"} <= {p.name for p in tmp_path.iterdir()}

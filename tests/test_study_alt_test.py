"""While the study runs, the researcher's dashboard says whether each judge can replace a person:
the alternative annotator test of the report, computed in the dashboard's worker on the ratings
so far and the judges' evaluations the gateway copied from the tasks' meta.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

from conftest import project_sections
from study_support import SAMPLE_EPISODES, make_study, study_project
from test_extras import without
from test_study_adaptive import Gateway
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import Client, create_project, import_batch
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.labelstudio.tasks import JUDGES
from sotopia_ls.study.live.dashboard import Dashboard
from sotopia_ls.study.live.figures import ALT_TEST_SHOWN, live_figures
from sotopia_ls.study.live.snapshots import MODEL_TABLE, save_snapshot
from sotopia_ls.study.store import episodes

JUDGE = "stand-in"


def evaluation(offset: int) -> dict:
    """A judge's evaluation as `sotopia-ls evaluate` stores it in a task's meta."""
    return {"evaluator": JUDGE, "agents": [
        {d.key: [f"why {d.key}", d.range_low + (offset + agent) % (d.range_high - d.range_low + 1)]
         for d in DIMENSIONS} for agent in AGENTS]}


@pytest.mark.server
def test_the_dashboard_tests_each_judge_as_the_report_does(
        label_studio: LocalServer, ls_client: Client, project_title: str, tmp_path: Path):
    project = study_project(ls_client, project_title, episodes=4)
    for offset, task in enumerate(ls_client.tasks.list(project=project, include="id,meta")):
        ls_client.tasks.update(id=str(task.id), meta={
            **(task.meta or {}), JUDGES: {JUDGE: evaluation(offset)}})
    # Every episode rated by three participants; the gateway copies the judges at start.
    study = make_study(tmp_path, project, episodes_per_participant=1, third_rater_share=1.0)
    gateway = Gateway(ls_client, study)
    for goal in range(4 * 3):
        gateway.rates(goal % 10)

    snapshot = live_figures(gateway.engine, study)
    report = project_sections(ls_client, project, "paired", "alt_test", bootstrap=0)
    pooled = report.alt_test[report.alt_test["agent"] == "all"]
    for key in RUBRIC.keys:
        expected = [{name: (None if pd.isna(row[name]) else row[name]) for name in ALT_TEST_SHOWN}
                    for row in pooled[pooled["dimension"] == key].to_dict("records")]
        assert snapshot.figures[key]["alt_test"] == expected, key
    goal = {test["evaluator"]: test for test in snapshot.figures["goal"]["alt_test"]}
    # The first episode also holds the Sotopia evaluation stored with it: a second judge.
    assert JUDGE in goal and len(goal) == 2
    assert goal[JUDGE]["verdict"] == "too few items" and goal[JUDGE]["items"] == 8
    assert goal[JUDGE]["third_raters_needed"] == 11  # 30 units: 11 more episodes of two agents

    save_snapshot(gateway.engine, study.name, snapshot)
    dashboard = Dashboard(gateway.engine, study)
    dashboard.refresh(None)
    shown = {d["key"]: d for d in dashboard.shown()["agreement"]["dimensions"]}
    assert shown["goal"]["alt_test"] == snapshot.figures["goal"]["alt_test"]


MODELS = (("gpt-4o", "llama-3-70b"), ("llama-3-70b", "gpt-4o"))
# A worker process of an install without ppi-python: it computes the figures and the dashboard
# shows what it has.
WITHOUT_PPI = """
from sotopia_ls.study.live.dashboard import Dashboard
from sotopia_ls.study.live.figures import live_figures
from sotopia_ls.study.live.snapshots import MODEL_TABLE, save_snapshot
from sotopia_ls.study.store import episodes
from sotopia_ls.study.settings import StudyFile
from sotopia_ls.study.store import open_store
study = StudyFile.model_validate_json(sys.argv[1])
engine = open_store(study.database)
save_snapshot(engine, study.name, live_figures(engine, study))
dashboard = Dashboard(engine, study)
dashboard.refresh(None)
agreement = dashboard.shown()["agreement"]
print(len(agreement["dimensions"]), agreement["models"], agreement["models_unavailable"])
"""


@pytest.mark.server
def test_the_dashboard_shows_each_agent_models_scores_as_the_report_does(
        label_studio: LocalServer, ls_client: Client, project_title: str, tmp_path: Path):
    # Six episodes of two agent models, each model in either seat; a judge scored every one.
    loaded = load_episodes(SAMPLE_EPISODES).episodes[:6]
    loaded = [episode.model_copy(update={"source": episode.source.model_copy(
        update={"agent_models": MODELS[number % 2]})}) for number, episode in enumerate(loaded)]
    project = create_project(ls_client, project_title).id
    import_batch(ls_client, project, [task_payload(e, with_predictions=False) for e in loaded])
    for offset, task in enumerate(ls_client.tasks.list(project=project, include="id,meta")):
        ls_client.tasks.update(id=str(task.id), meta={
            **(task.meta or {}), JUDGES: {JUDGE: evaluation(offset)}})
    # Eight participants rate: some episodes twice, some once, some not yet.
    study = make_study(tmp_path, project, episodes_per_participant=1)
    gateway = Gateway(ls_client, study)
    for goal in range(8):
        gateway.rates(goal % 10)

    snapshot = live_figures(gateway.engine, study)
    report = project_sections(ls_client, project, "agent_model_scores", bootstrap=0)
    expected = report.agent_model_scores.astype(object).where(
        report.agent_model_scores.notna(), None).to_dict("records")
    assert snapshot.figures[MODEL_TABLE] == expected
    assert {row["agent_model"] for row in expected} == {"gpt-4o", "llama-3-70b"}
    powered = [row for row in expected if row["estimate"] == "prediction-powered"
               and row["mean"] is not None]
    assert powered, "the judge's unrated episodes correct nothing: the test shows nothing"

    save_snapshot(gateway.engine, study.name, snapshot)
    dashboard = Dashboard(gateway.engine, study)
    dashboard.refresh(None)
    assert dashboard.shown()["agreement"]["models"] == expected
    assert dashboard.shown()["agreement"]["models_unavailable"] is None
    # The models are kept for the worker, never shown on a participant's page.
    with gateway.engine.connect() as conn:
        shown = json.dumps(conn.execute(select(episodes.c.shown)).scalars().all())
    assert "gpt-4o" not in shown and "llama-3-70b" not in shown

    # Without ppi-python the worker computes the rest; the dashboard says what to install.
    done = without(["ppi_py"], WITHOUT_PPI, study.model_dump_json(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{len(RUBRIC.keys)} [] Each agent model's scores needs the ppi extra (ppi_py not "
        "installed): pip install 'sotopia-label-studio[ppi]'.\n")

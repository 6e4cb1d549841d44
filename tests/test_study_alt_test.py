"""While the study runs, the researcher's dashboard says whether each judge can replace a person:
the alternative annotator test of the report, computed in the dashboard's worker on the ratings
so far and the judges' evaluations the gateway copied from the tasks' meta.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from study_support import make_study, study_project
from test_study_adaptive import Gateway
from sotopia_ls.dimensions import AGENTS, DIMENSIONS, RUBRIC
from sotopia_ls.labelstudio.client import Client
from sotopia_ls.labelstudio.server import LocalServer
from sotopia_ls.labelstudio.tasks import JUDGES
from sotopia_ls.report.build import report_project
from sotopia_ls.study.live.dashboard import Dashboard
from sotopia_ls.study.live.figures import ALT_TEST_SHOWN, live_figures
from sotopia_ls.study.live.snapshots import save_snapshot

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
    report = report_project(ls_client, project, tmp_path / "report", bootstrap=0)
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

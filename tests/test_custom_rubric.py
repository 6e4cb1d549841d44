"""A researcher edits the rubric and nothing else: a dimension added, or one removed.

With the rubric file named by SOTOPIA_LS_RUBRIC, every command runs as a new process, as a
researcher's would: the generated config, the import (Sotopia's stored evaluation lacks the
new dimension: kept, the gap reported), an annotator rating every control of the new form in
Label Studio's own page, the export and the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from browser import CHROMIUM, fresh_page, open_task, rate, submit
from test_browser import wait_for_annotations
from sotopia_ls.dimensions import RUBRIC
from sotopia_ls.labelstudio.client import find_project
from sotopia_ls.samples import EPISODELOG

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]

HUMOR = {"key": "humor", "label": "Humor", "range_low": -2, "range_high": 3,
         "guidance": "Does the agent lighten the conversation when it helps?"}


def rubric_with(added: dict | None = None, removed: str | None = None) -> dict:
    rubric = RUBRIC.model_dump(mode="json")
    rubric["dimensions"] = [d for d in rubric["dimensions"] if d["key"] != removed]
    rubric["worked_example"]["agents"] = [
        agent | {"ratings": [r for r in agent["ratings"] if r["dimension"] != removed]}
        for agent in rubric["worked_example"]["agents"]
    ]
    if added:
        rubric["dimensions"].append(added)
    return rubric


@pytest.mark.parametrize(("added", "removed"), [(HUMOR, None), (None, "knowledge")],
                         ids=["a dimension added", "a dimension removed"])
def test_a_project_runs_end_to_end_on_an_edited_rubric(
    added, removed, label_studio, ls_client, browser, logged_in, project_title, tmp_path
):
    rubric = rubric_with(added, removed)
    keys = [d["key"] for d in rubric["dimensions"]]
    (tmp_path / "rubric.json").write_text(json.dumps(rubric))
    env = {**os.environ, "SOTOPIA_LS_RUBRIC": str(tmp_path / "rubric.json"),
           "LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}

    def sotopia_ls(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "sotopia_ls", *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    sotopia_ls("config", "-o", "config.xml")
    config = (tmp_path / "config.xml").read_text()
    assert f'name="{keys[-1]}_2"' in config and f"All {2 * len(keys)} ratings" in config
    assert (removed is None) == ('name="knowledge_1"' in config)

    imported = sotopia_ls("import", str(EPISODELOG), "--title", project_title)
    if added:
        assert ("the stored evaluation of 1 episode(s) has no agent 1 humor score: kept"
                in imported)
    project = find_project(ls_client, project_title)
    task = ls_client.tasks.list(project=project.id, include="id,meta")
    (task,) = list(task)
    stored = task.meta["sotopia_evaluation"]["agents"][0]
    assert ("humor" in stored and stored["humor"] is None) if added else "knowledge" not in stored

    with fresh_page(browser, storage_state=logged_in) as page:
        open_task(page, label_studio, project.id, task.id)
        for dimension in rubric["dimensions"]:
            for agent in (1, 2):
                rate(page, dimension["key"], agent, dimension["range_high"],
                     f"{dimension['label']} for agent {agent}")
        submit(page)
        assert wait_for_annotations(ls_client, task.id)

    sotopia_ls("export", "--project", str(project.id), "-o", "results")
    long = pd.read_csv(tmp_path / "results" / "scores_long.csv")
    assert sorted(set(long["dimension"])) == sorted(keys) and len(long) == 2 * len(keys)
    highest = {d["key"]: d["range_high"] for d in rubric["dimensions"]}
    assert (long["score"] == long["dimension"].map(highest)).all()
    model = pd.read_csv(tmp_path / "results" / "model_scores.csv")
    assert set(model["dimension"]) == set(keys) - {"humor"}

    sotopia_ls("report", "--from-export", "results", "-o", "report", "--bootstrap", "0")
    page_html = (tmp_path / "report" / "report.html").read_text()
    for dimension in rubric["dimensions"]:
        assert f"<h2>{dimension['label']} ({dimension['range_low']} to " in page_html
    agreement = pd.read_csv(tmp_path / "report" / "agreement.csv")
    assert list(agreement["dimension"]) == keys
    coverage = pd.read_csv(tmp_path / "report" / "model_coverage.csv").set_index("dimension")
    if added:
        assert coverage.loc["humor", "units_with_model"] == 0

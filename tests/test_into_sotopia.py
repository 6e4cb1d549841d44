"""A researcher hands the export to Sotopia: its own models load the records and its own
aggregation averages the annotators, on its local storage backend (no Redis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import invoke, results_of, scores, sotopia_python, task_ids
from sotopia_ls.dimensions import AGENTS, DIMENSIONS
from sotopia_ls.exporter import export_project
from sotopia_ls.exporter.commands import export_command
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import task_payload
from sotopia_ls.samples import DEMO, EPISODELOG, OTREE_EPISODES

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "into_sotopia.py"
# Sotopia's own model reads every record; a record it refuses fails the run.
EPISODE_LOGS_CHECK = """
import json, sys
from sotopia.database import EpisodeLog
for line in open(sys.argv[1], encoding="utf-8"):
    log = EpisodeLog(**json.loads(line))
    print(json.dumps({"pk": log.pk, "environment": log.environment, "agents": log.agents}))
"""


def in_sotopia(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(sotopia_python()), *args],
        env={**os.environ, "SOTOPIA_STORAGE_BACKEND": "local", "HOME": str(home)},
        capture_output=True, text=True,
    )


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def assert_same_rewards(aggregated: list[dict], exported: list[dict]) -> None:
    theirs = {record["episode"]: record["rewards"] for record in aggregated}
    ours = {record["episode"]: record["rewards"] for record in exported}
    assert theirs.keys() == ours.keys()
    for episode, rewards in ours.items():
        for their, mine in zip(theirs[episode], rewards, strict=True):
            assert their[1] == pytest.approx(mine[1]) and their[0] == pytest.approx(mine[0])


def test_sotopia_aggregates_the_exported_annotations_as_the_export_does(tmp_path):
    episode = json.loads(EPISODELOG.read_text(encoding="utf-8"))
    annotations = [
        {"id": k, "completed_by": k,
         "result": results_of({agent: {d.key: (f"rater {k}", d.range_low + k) for d in DIMENSIONS}
                               for agent in AGENTS})}
        for k in (1, 2)
    ]
    export_file = tmp_path / "export.json"
    export_file.write_text(json.dumps([{"id": 1, "data": {"episode_id": episode["pk"]},
                                        "annotations": annotations}]))
    assert invoke(export_command, "--from-file", str(export_file), "-o",
                  str(tmp_path / "results")).exit_code == 0

    done = in_sotopia(str(EXAMPLE), str(tmp_path / "results"), str(EPISODELOG), home=tmp_path)
    assert done.returncode == 0, done.stderr
    (aggregated,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (ours,) = [json.loads(line) for line in (tmp_path / "results" / "episodes.jsonl").open()]
    assert aggregated["episode"] == ours["episode"] == episode["pk"]
    for theirs, mine in zip(aggregated["rewards"], ours["rewards"]):
        assert theirs[1] == mine[1] and abs(theirs[0] - mine[0]) < 1e-9


@pytest.mark.server
def test_episodes_imported_from_otree_reach_sotopia_from_the_export_folder_alone(
        ls_client, tmp_path):
    # Two oTree episodes (one with non-verbal turns, an action and a leave) and the
    # EpisodeLog sample: no one needs Sotopia's own records of them.
    paths = [*(path for path in DEMO if OTREE_EPISODES in path.parents), EPISODELOG]
    episodes = load_episodes(paths).episodes
    project = create_project(ls_client, f"test_{uuid.uuid4().hex[:12]}")
    ls_client.projects.import_tasks(id=project.id, request=[task_payload(e) for e in episodes],
                                    return_task_ids=True)
    run = uuid.uuid4().hex[:6]
    raters = [ls_client.users.create(username=f"rater{k}-{run}", email=f"rater{k}-{run}@lab.test")
              for k in (1, 2)]
    for task in task_ids(ls_client, project.id).values():
        for offset, rater in enumerate(raters, start=1):
            ls_client.annotations.create(id=task, result=results_of(scores(offset)),
                                         completed_by=rater.id, lead_time=30.0)
    results = tmp_path / "results"
    export_project(ls_client, project.id, results)

    done = in_sotopia(str(EXAMPLE), str(results), home=tmp_path)
    assert done.returncode == 0, done.stderr
    exported = json_lines((results / "episodes.jsonl").read_text(encoding="utf-8"))
    assert_same_rewards(json_lines(done.stdout), exported)
    assert len(exported) == len(episodes)

    checked = in_sotopia("-c", EPISODE_LOGS_CHECK, str(results / "episode_logs.jsonl"),
                         home=tmp_path)
    assert checked.returncode == 0, checked.stderr
    logs = {log["pk"]: log for log in json_lines(checked.stdout)}
    assert logs.keys() == {episode.id for episode in episodes}
    # The environment ids the files named are kept; agents get ids derived from their profile.
    for episode in episodes:
        assert logs[episode.id]["environment"] == episode.source.environment
        assert all(agent.startswith("agent-") for agent in logs[episode.id]["agents"])

    # Our own importer reads the records back as the episodes that were rated.
    again = load_episodes([results / "episode_logs.jsonl"])
    assert not again.problems
    assert {(e.id, e.scenario, e.agents, e.turns) for e in again.episodes} == {
        (e.id, e.scenario, e.agents, e.turns) for e in episodes}


def test_run_where_sotopia_is_missing_the_example_names_the_install_in_one_line(tmp_path):
    """This package's own environment has no sotopia (its pins would change ours)."""
    done = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path)], capture_output=True,
                          text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"sotopia is not installed in {sys.executable}: run scripts/sotopia-env and then this "
        'with .venv-sotopia/bin/python (README.md, "Into Sotopia")']

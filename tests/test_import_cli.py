"""A researcher imports Sotopia episodes into a real Label Studio with `sotopia-ls import`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from conftest import task_ids
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, rating_name
from sotopia_ls.errors import LabelStudioError
from sotopia_ls.importer import load_episodes
from sotopia_ls.labelstudio.client import create_project, find_project, import_batch
from sotopia_ls.labelstudio.push import push_episodes, task_payload

pytestmark = pytest.mark.server

FIXTURE_ID = "01H9FG15A2NDTNH8K6F2T5MZN3"


def run_import(label_studio, *args: str) -> Result:
    env = {"LABEL_STUDIO_URL": label_studio.url, "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key}
    result = CliRunner().invoke(main, ["import", *args], env=env, catch_exceptions=False)
    assert label_studio.credentials.api_key not in result.output
    return result


def all_sources(samples: Path) -> list[str]:
    return [
        str(samples / "otree_episodes"),
        str(samples / "episodelog" / "fixture_episode.json"),
        str(samples / "hf_jsonl" / "episode_tuple_rewards.jsonl"),
    ]


def task_count(ls_client, title: str) -> int:
    return len(task_ids(ls_client, find_project(ls_client, title).id))


def test_every_sample_episode_becomes_one_task_and_reruns_add_nothing(
    label_studio, ls_client, sample_data, project_title
):
    first = run_import(label_studio, *all_sources(sample_data), "--title", project_title)
    assert first.exit_code == 0, first.output
    print(first.output)
    # 42 oTree episodes + the EpisodeLog fixture; the dump record is the same episode.
    assert "imported 43 task(s)" in first.output
    project = find_project(ls_client, project_title)
    assert project.maximum_annotations == 2
    assert project.show_instruction and "Believability" in project.expert_instruction
    assert task_count(ls_client, project_title) == 43

    again = run_import(label_studio, *all_sources(sample_data), "--project", str(project.id))
    assert again.exit_code == 0, again.output
    assert "imported 0 task(s)" in again.output and "43 already in the project" in again.output
    assert task_count(ls_client, project_title) == 43


def test_an_interrupted_import_resumes_to_one_task_per_episode(
    label_studio, ls_client, sample_data, project_title
):
    episodes = load_episodes([sample_data / "otree_episodes"]).episodes
    created = run_import(label_studio, str(sample_data / "episodelog"), "--title", project_title)
    assert created.exit_code == 0, created.output
    project = find_project(ls_client, project_title)
    # The state an interrupted run leaves behind: some complete batches, the rest missing.
    push_episodes(ls_client, project.id, episodes[:10], batch_size=4, progress=False)

    resumed = run_import(label_studio, str(sample_data / "otree_episodes"), "--project", project_title, "--batch-size", "7")
    assert resumed.exit_code == 0, resumed.output
    assert "imported 32 task(s) in 5 batch(es); 10 already in the project" in resumed.output
    ids = task_ids(ls_client, project.id)
    assert sorted(ids) == sorted({e.id for e in episodes} | {FIXTURE_ID})


def test_with_predictions_attaches_the_stored_evaluation(
    label_studio, ls_client, sample_data, project_title
):
    source = sample_data / "episodelog" / "fixture_episode.json"
    rewards = json.loads(source.read_text())["rewards"]
    result = run_import(label_studio, str(source), "--title", project_title, "--with-predictions")
    assert result.exit_code == 0, result.output
    assert "1 with predictions" in result.output

    task_id = task_ids(ls_client, find_project(ls_client, project_title).id)[FIXTURE_ID]
    predictions = ls_client.tasks.get(id=str(task_id)).predictions
    assert len(predictions) == 1
    prediction = predictions[0]
    assert prediction.model_version == "gpt-4"
    assert len(prediction.result) == 28
    chosen = {r["from_name"]: r["value"]["choices"][0] for r in prediction.result if r["type"] == "choices"}
    for agent in AGENTS:
        for key in DIMENSION_KEYS:
            assert int(chosen[rating_name(key, agent)]) == rewards[agent - 1][1][key]


def test_predictions_are_off_by_default(label_studio, ls_client, sample_data, project_title):
    result = run_import(label_studio, str(sample_data / "episodelog"), "--title", project_title)
    assert result.exit_code == 0, result.output
    task_id = task_ids(ls_client, find_project(ls_client, project_title).id)[FIXTURE_ID]
    assert ls_client.tasks.get(id=str(task_id)).predictions == []


BAD_INPUTS = {
    "truncated.json": lambda good: json.dumps(good)[:-40],
    "no_participants.json": lambda good: json.dumps(
        {**good, "rewards_prompt": good["rewards_prompt"].replace("Participants:", "Persons:")}
    ),
    "one_agent.json": lambda good: json.dumps(
        {**good, "rewards_prompt": _drop_second_agent(good["rewards_prompt"])}
    ),
    "empty_dialogue.json": lambda good: json.dumps(
        {**good, "rewards_prompt": good["rewards_prompt"].split("Turn #1")[0]}
    ),
    "wrong_types.json": lambda good: json.dumps({**good, "rewards_prompt": 42}),
}


def _drop_second_agent(prompt: str) -> str:
    lines = prompt.splitlines()
    second = lines[next(i for i, line in enumerate(lines) if line.startswith("Participants:"))]
    name = second.split(" and ")[-1].strip()
    kept = [line for line in lines if not line.startswith(f"{name}'s")]
    return "\n".join(line.replace(f" and {name}", "") for line in kept)


@pytest.mark.parametrize("bad_name", sorted(BAD_INPUTS))
def test_a_bad_record_is_named_and_nothing_is_imported(
    label_studio, ls_client, sample_data, project_title, tmp_path, bad_name
):
    good_path = next((sample_data / "otree_episodes" / "GPT3.5-GPT3.5").glob("*.json"))
    good = json.loads(good_path.read_text())
    bad = tmp_path / bad_name
    bad.write_text(BAD_INPUTS[bad_name](good))

    result = run_import(label_studio, str(good_path), str(bad), "--title", project_title)
    assert result.exit_code != 0
    assert f"{bad}" in result.output and "invalid record" in result.output
    assert not [p for p in ls_client.projects.list(title=project_title) if p.title == project_title]


def test_skip_invalid_imports_the_rest_and_writes_rejects(
    label_studio, ls_client, sample_data, project_title, tmp_path
):
    bad = tmp_path / "truncated.json"
    bad.write_text('{"pk": "x", "rewards_prompt": "Scenario')
    rejects = tmp_path / "rejects.jsonl"
    result = run_import(
        label_studio, str(sample_data / "episodelog"), str(bad),
        "--title", project_title, "--skip-invalid", "--rejects", str(rejects),
    )
    assert result.exit_code == 0, result.output
    assert "imported 1 task(s)" in result.output
    (reject,) = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert reject["file"] == str(bad) and reject["reason"]


def test_dry_run_writes_tasks_without_a_server(sample_data, tmp_path):
    out = tmp_path / "tasks.json"
    result = CliRunner().invoke(
        main, ["import", str(sample_data / "otree_episodes"), "--dry-run", "-o", str(out)],
        env={"LABEL_STUDIO_URL": "", "LABEL_STUDIO_API_KEY": ""},
    )
    assert result.exit_code == 0, result.output
    tasks = json.loads(out.read_text())
    assert len(tasks) == 42 and all("predictions" not in t for t in tasks)
    assert {t["data"]["episode_id"] for t in tasks} == {
        p.stem for p in (sample_data / "otree_episodes").rglob("*.json")
    }


def test_a_wrong_key_is_a_clear_error_that_does_not_echo_it(label_studio, sample_data):
    result = CliRunner().invoke(
        main, ["import", str(sample_data / "episodelog"), "--url", label_studio.url, "--api-key", "not-the-key-123"],
    )
    assert result.exit_code != 0
    assert "HTTP 401" in result.output and "not-the-key-123" not in result.output


def test_config_check_fails_when_the_file_is_stale(tmp_path):
    path = tmp_path / "labeling_config.xml"
    assert CliRunner().invoke(main, ["config", "-o", str(path)]).exit_code == 0
    assert CliRunner().invoke(main, ["config", "-o", str(path), "--check"]).exit_code == 0
    path.write_text(path.read_text().replace("believability_1", "believability_one"))
    stale = CliRunner().invoke(main, ["config", "-o", str(path), "--check"])
    assert stale.exit_code == 1 and "out of date" in stale.output


def test_a_batch_label_studio_refuses_is_a_clear_error_and_adds_nothing(
    label_studio, ls_client, sample_data, project_title
):
    episode = load_episodes([sample_data / "episodelog"]).episodes[0]
    project = create_project(ls_client, project_title)
    ids = import_batch(ls_client, project.id, [task_payload(episode)])
    assert task_ids(ls_client, project.id) == {episode.id: ids[0]}

    # Label Studio refuses a task without the fields its labeling config shows.
    with pytest.raises(LabelStudioError) as refused:
        import_batch(ls_client, project.id, [{"data": {"episode_id": "other"}}])
    message = str(refused.value)
    print(message)
    assert f"project {project.id}" in message and "HTTP 400" in message
    assert "scenario" in message  # Label Studio's own reason reaches the researcher
    assert task_ids(ls_client, project.id) == {episode.id: ids[0]}

"""Model scores for any episode: an LLM judge evaluates episodes that carry none.

A researcher imports the oTree sample episodes (Sotopia's human study: no model evaluation in
the files) and runs `sotopia-ls evaluate` against an OpenAI-compatible endpoint, here a stub
on 127.0.0.1 answering over real HTTP: every episode gets an evaluation in its task's meta,
after a 429 and after a malformed first answer too; a rerun asks nothing; a second model adds
a second judge, whose malformed and out-of-range answers are reported, never stored. Two
annotators rate a few tasks; the export's model_scores.csv holds both judges, and the report
compares people with each judge, dimension by dimension.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from chat_stub import ChatStub, answer, chat_stub, out_of_range
from conftest import results_of, task_ids
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, DIMENSIONS
from sotopia_ls.exporter import export_project
from sotopia_ls.importer import load_episodes
from sotopia_ls.importer.records import written
from sotopia_ls.judge import evaluation_prompt
from sotopia_ls.labelstudio.client import create_project
from sotopia_ls.labelstudio.push import push_episodes
from sotopia_ls.labelstudio.tasks import EVALUATION, JUDGES, episode_to_task
from sotopia_ls.report.build import report_export
from sotopia_ls.statistics.comparison import PANELS

API_KEY = "sk-stub-key-never-shown-0123456789"
JUDGE_A, JUDGE_B = "judge-a", "judge-b"
EPISODES = "otree_episodes/GPT3.5-GPT3.5"


@pytest.fixture
def stub() -> Iterator[ChatStub]:
    with chat_stub() as server:
        yield server


def participants(episode: Any) -> str:
    return " and ".join(agent.name for agent in episode.agents)


def test_the_prompt_is_sotopias_own_evaluation_prompt(sample_data: Path) -> None:
    """Every context line and every turn of the evaluator prompt Sotopia's study kept with
    each oTree episode (``rewards_prompt``) is in ours, word for word; then Sotopia's
    instruction and the rubric's dimensions with their ranges."""
    for path in sorted((sample_data / "otree_episodes").rglob("*.json")):
        (episode,) = load_episodes([path]).episodes
        prompt = evaluation_prompt(episode_to_task(episode))
        ours = " ".join(prompt.split())  # the importer trims what it reads
        # Their prompt holds the text's quotes escaped, some twice (a repr of a repr); ours
        # the text as written.
        theirs = written(written(json.loads(path.read_text())["rewards_prompt"]
                                 .split("Prompt after formatting:")[-1]))
        # Some of their files put "Turn #n: " before the action, some on a line of its own.
        kept = [re.sub(r"^Turn #\d+: ", "", " ".join(line.split())) for line in theirs.splitlines()
                if re.match(r"(Here is the context|Scenario: |Participants: |.+'s goal: )", line)
                or re.search(r" (said: \"|\[non-verbal communication\] |\[action\] )", line)]
        assert kept and [line for line in kept if line not in ours] == [], path.name
    assert "Based on previous interactions, evaluate how well participants achieve their goals." in prompt
    for d in DIMENSIONS:
        assert d.guidance in prompt
        assert f'"minimum": {d.range_low}, "maximum": {d.range_high}' in prompt


@pytest.mark.server
def test_two_judges_evaluate_the_otree_episodes_and_the_report_compares_people_with_each(
    label_studio, ls_client, stub, sample_data, project_title, tmp_path
):
    episodes = load_episodes([sample_data / EPISODES]).episodes
    assert all(episode.evaluation is None for episode in episodes)  # oTree files carry none
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, episodes, progress=False)
    names = [participants(episode) for episode in episodes]
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key, "STUB_KEY": API_KEY}

    def evaluate(model: str) -> Any:
        return CliRunner().invoke(main, [
            "evaluate", "--project", str(project.id), "--model", model,
            "--base-url", stub.base_url, "--api-key-env", "STUB_KEY", "--workers", "3",
            "--attempts", "2", "--batch-size", "4"], env=env)

    def judges() -> dict[str, dict[str, Any]]:
        tasks = ls_client.tasks.list(project=project.id, include="id,data,meta")
        return {participants_of(task.data): task for task in tasks}

    # Judge A: a 429 before one answer, a malformed first answer for another; all stored.
    stub.script = {(JUDGE_A, names[0]): ["429"], (JUDGE_A, names[1]): ["I'd rather not."]}
    first = evaluate(JUDGE_A)
    assert first.exit_code == 0, first.output
    assert f"{len(episodes)} task(s), 0 already judged by {JUDGE_A}; {len(episodes)} evaluation(s) added" in first.output
    assert stub.calls[(JUDGE_A, names[0])] == 2 and stub.calls[(JUDGE_A, names[1])] == 2
    assert sum(n for (model, _), n in stub.calls.items() if model == JUDGE_A) == len(episodes) + 2
    assert stub.auth == {f"Bearer {API_KEY}"}
    for name, task in judges().items():
        stored = task.meta[JUDGES][JUDGE_A]
        assert stored["evaluator"] == JUDGE_A and len(stored["agents"]) == 2
        assert json.loads(answer(JUDGE_A, name))["agent_1_evaluation"]["goal"][1] == \
            stored["agents"][0]["goal"][1]
        assert EVALUATION not in task.meta and JUDGES not in task.data  # out of raters' sight

    # A rerun asks nothing.
    before = sum(stub.calls.values())
    again = evaluate(JUDGE_A)
    assert again.exit_code == 0, again.output
    assert f"{len(episodes)} already judged by {JUDGE_A}; 0 evaluation(s) added" in again.output
    assert sum(stub.calls.values()) == before

    # Judge B: always malformed for one episode, always out of range for another.
    malformed, wrong = names[2], names[3]
    stub.script = {(JUDGE_B, malformed): ["{'agent_1': nonsense}"] * 2,
                   (JUDGE_B, wrong): [out_of_range(JUDGE_B, wrong)] * 2}
    second = evaluate(JUDGE_B)
    assert second.exit_code == 1
    assert f"{len(episodes) - 2} evaluation(s) added" in second.output
    assert "2 task(s) left without an evaluation by judge-b" in second.output
    by_name = {participants(e): e.id for e in episodes}
    assert re.search(rf"episode {by_name[malformed]} \(task \d+\): .*attempt 2: the answer is not valid JSON",
                     second.output)
    assert re.search(rf"episode {by_name[wrong]} \(task \d+\): .*believability score 12 is outside 0 to 10",
                     second.output)
    stored = judges()
    assert set(stored[malformed].meta[JUDGES]) == set(stored[wrong].meta[JUDGES]) == {JUDGE_A}
    assert all(set(task.meta[JUDGES]) == {JUDGE_A, JUDGE_B}
               for name, task in stored.items() if name not in (malformed, wrong))
    for result in (first, again, second):
        assert API_KEY not in result.output

    # Asking B again asks only for the two it lacks (they answer now).
    stub.script = {}
    calls = sum(stub.calls.values())
    third = evaluate(JUDGE_B)
    assert third.exit_code == 0, third.output
    assert sum(stub.calls.values()) == calls + 2

    # Two annotators rate five episodes; export and report.
    raters = [ls_client.users.create(email=f"r{k}-{uuid.uuid4().hex[:6]}@example.com",
                                     username=f"r{k}-{uuid.uuid4().hex[:6]}") for k in (1, 2)]
    ids = task_ids(ls_client, project.id)
    for number, episode in enumerate(episodes[:5]):
        for k, rater in enumerate(raters, start=1):
            ls_client.annotations.create(id=ids[episode.id], completed_by=rater.id,
                                         result=results_of(_ratings(number + k)))
    export_project(ls_client, project.id, tmp_path / "export")
    model_scores = pd.read_csv(tmp_path / "export" / "model_scores.csv")
    rated = {e.id for e in episodes[:5]}
    assert set(model_scores["evaluator"]) == {JUDGE_A, JUDGE_B}
    # Every judge score, people rated the episode or not, and which they rated.
    assert set(model_scores["episode_id"]) == {e.id for e in episodes}
    assert set(model_scores.loc[model_scores["rated"], "episode_id"]) == rated
    assert len(model_scores) == 2 * len(episodes) * len(AGENTS) * len(DIMENSION_KEYS)

    report = report_export(tmp_path / "export", tmp_path / "report", bootstrap=50)
    table = report.human_vs_model
    assert list(zip(table["evaluator"], table["dimension"])) == [
        (judge, panel) for judge in (JUDGE_A, JUDGE_B) for panel in PANELS]
    assert (table["n"] == 2 * len(rated)).all()
    assert table[["mse", "bias"]].notna().all().all()
    for _, judged in table.groupby("evaluator"):  # correlations with bootstrap intervals
        assert judged[["pearson", "pearson_ci_low", "pearson_ci_high"]].notna().all(axis=1).any()
    noise = report.model_vs_human_noise
    assert list(noise["evaluator"].unique()) == [JUDGE_A, JUDGE_B]
    html = (tmp_path / "report" / "report.html").read_text()
    for judge in (JUDGE_A, JUDGE_B):
        assert re.search(rf"<td>{judge}</td>\s*<td>goal</td>", html)


@pytest.mark.server
def test_a_refused_request_stops_the_run_and_keeps_every_answer_already_in(
    label_studio, ls_client, stub, sample_data, project_title
):
    """The endpoint refuses one request (401) while the others are still on their way: the
    run stops in one line, and the answers that arrive meanwhile are stored all the same."""
    episodes = load_episodes([sample_data / EPISODES]).episodes[:4]
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, episodes, progress=False)
    names = [participants(episode) for episode in episodes]
    stub.script = {(JUDGE_A, names[0]): ["401"]}
    stub.refuse_when = len(episodes)  # all four asked, then the refusal, then the answers

    result = CliRunner().invoke(main, [
        "evaluate", "--project", str(project.id), "--model", JUDGE_A, "--base-url", stub.base_url,
        "--api-key-env", "STUB_KEY", "--workers", "4", "--batch-size", "10"], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key, "STUB_KEY": API_KEY})

    assert result.exit_code == 1
    assert "answered HTTP 401 (check the API key); nothing more was asked" in result.output
    assert "Traceback" not in result.output and API_KEY not in result.output
    judged = {participants_of(task.data): set((task.meta or {}).get(JUDGES, {}))
              for task in ls_client.tasks.list(project=project.id, include="id,data,meta")}
    assert judged == {names[0]: set(), **{name: {JUDGE_A} for name in names[1:]}}


@pytest.mark.server
def test_each_task_holding_the_same_episode_is_reported_on_its_own(
    label_studio, ls_client, stub, sample_data, project_title
):
    """One episode imported into two tasks: when the judge cannot evaluate it, both tasks
    are named, each with the episode it holds."""
    (episode,) = load_episodes([sample_data / EPISODES]).episodes[:1]
    project = create_project(ls_client, project_title)
    tasks = [ls_client.tasks.create(project=project.id, data=episode_to_task(episode)).id
             for _ in range(2)]
    stub.script = {(JUDGE_A, participants(episode)): ["no JSON here"] * 4}

    result = CliRunner().invoke(main, [
        "evaluate", "--project", str(project.id), "--model", JUDGE_A, "--base-url", stub.base_url,
        "--api-key-env", "STUB_KEY", "--attempts", "2"], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key, "STUB_KEY": API_KEY})

    assert result.exit_code == 1
    assert "2 task(s) left without an evaluation by judge-a" in result.output
    for task in tasks:
        assert re.search(rf"no evaluation for episode {episode.id} \(task {task}\): .*attempt 2",
                         result.output)


@pytest.mark.server
def test_answers_no_evaluation_can_come_from_are_refused_task_by_task(
    label_studio, ls_client, stub, sample_data, project_title
):
    """The judge answers one episode with a score of 5,000 digits, one with 10 MB of
    reasoning, one with a reasoning over --max-reasoning-chars, and one with 429 for ever:
    each of those tasks is one line naming its episode and why, nothing is stored for it, the
    last episode is judged all the same, and the 429 is sent exactly --retries + 1 times."""
    episodes = load_episodes([sample_data / EPISODES]).episodes[:5]
    project = create_project(ls_client, project_title)
    push_episodes(ls_client, project.id, episodes, progress=False)
    names = [participants(episode) for episode in episodes]

    def answering(name: str, reasoning: str = "", score: str = "") -> str:
        document = json.loads(answer(JUDGE_A, name))
        document["agent_1_evaluation"]["goal"] = [reasoning or "fine", 1234567]
        return json.dumps(document).replace("1234567", score or "7")

    huge, verbose, wordy, throttled, judged = names
    stub.script = {(JUDGE_A, huge): [answering(huge, score="9" * 5000)] * 2,
                   (JUDGE_A, verbose): [answering(verbose, reasoning="x" * 10_000_000)] * 2,
                   (JUDGE_A, wordy): [answering(wordy, reasoning="y" * 201)] * 2,
                   (JUDGE_A, throttled): ["429"] * 10}

    result = CliRunner().invoke(main, [
        "evaluate", "--project", str(project.id), "--model", JUDGE_A, "--base-url", stub.base_url,
        "--api-key-env", "STUB_KEY", "--attempts", "2", "--retries", "2",
        "--max-reasoning-chars", "200"], env={
        "LABEL_STUDIO_URL": label_studio.url,
        "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key, "STUB_KEY": API_KEY})

    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and API_KEY not in result.output
    assert f"5 task(s), 0 already judged by {JUDGE_A}; 1 evaluation(s) added" in result.output
    assert "4 task(s) left without an evaluation by judge-a" in result.output
    url = f"{stub.base_url}/chat/completions"
    reasons = {
        huge: "attempt 2: the answer holds an integer of 5,000 digits; a score is a small integer",
        verbose: f"attempt 1: the answer from {url} is longer than 8,388,608 bytes; not read "
                 "further",
        wordy: "attempt 2: agent_1: goal reasoning of 201 characters, over the 200 allowed",
        throttled: f"attempt 1: {url} answered HTTP 429 (3 tries)",
    }
    by_name = {participants(e): e.id for e in episodes}
    for name, reason in reasons.items():
        (line,) = [line for line in result.output.splitlines()
                   if f"no evaluation for episode {by_name[name]} (task " in line]
        assert line.endswith(reason), line
    assert dict(stub.calls) == {(JUDGE_A, huge): 2, (JUDGE_A, verbose): 1, (JUDGE_A, wordy): 2,
                                (JUDGE_A, throttled): 3, (JUDGE_A, judged): 1}
    stored = {participants_of(task.data): (task.meta or {}).get(JUDGES, {})
              for task in ls_client.tasks.list(project=project.id, include="id,data,meta")}
    assert {name for name, judges in stored.items() if judges} == {judged}


def _ratings(offset: int) -> dict[int, dict[str, tuple[str, int]]]:
    """Ratings that vary over episodes, dimension by dimension, inside every range."""
    return {agent: {d.key: (f"rationale {offset}", d.range_low + (offset * (i + agent)) % 7)
                    for i, d in enumerate(DIMENSIONS)} for agent in AGENTS}


def participants_of(data: dict[str, Any]) -> str:
    return f"{data['agent_1_name']} and {data['agent_2_name']}"

"""A researcher wants each agent model's scores, as a Sotopia paper prints them, with honest
intervals: people's ratings alone, each judge alone, and the judge corrected by people
(prediction-powered inference, ppi-python), and the difference between models.

A simulation with known truth checks the intervals; a fixture checks the table against
ppi-python called directly; a story runs import → judges → annotate → export → report on the
sample episodes with two stand-in judges (a local chat-completions server).
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from chat_stub import chat_stub
from test_researcher_path import RATED, annotate
from sotopia_ls.cli import main
from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS
from sotopia_ls.importer import load_episodes
from sotopia_ls.report.plots import MODEL_CHART_ALT
from sotopia_ls.statistics.agent_models import agent_model_differences, agent_model_scores
from sotopia_ls.statistics.comparison import PANELS
from sotopia_ls.statistics.ppi import classical_mean, prediction_powered_mean

MISTRAL_TAG = "mistral-instruct_gpt-3.5-turbo_test"


def test_prediction_powered_intervals_cover_the_true_mean_and_a_biased_judge_does_not():
    """500 studies of one model: 100 units rated by two noisy people, 600 scored by a judge
    that rates 0.8 too high. The prediction-powered interval covers the true mean about 95% of
    the time and is narrower than people's alone; the judge's own interval almost never."""
    rng = np.random.default_rng(31)
    studies, rated, judged, truth, bias = 500, 100, 600, 1.0, 0.8
    merit = rng.normal(truth, 1.0, (studies, judged))
    people = merit[:, :rated] + rng.normal(0, 1.0, (studies, rated, 2)).mean(axis=2)
    judge = merit + bias + rng.normal(0, 0.5, (studies, judged))
    powered = [prediction_powered_mean(y, j[:rated], j[rated:]) for y, j in zip(people, judge)]
    alone = [classical_mean(y) for y in people]
    naive = [classical_mean(j) for j in judge]

    def covered(intervals) -> float:
        return float(np.mean([i.low <= truth <= i.high for i in intervals]))

    error = 3 * np.sqrt(0.95 * 0.05 / studies)
    assert abs(covered(powered) - 0.95) <= error
    assert abs(covered(alone) - 0.95) <= error
    assert covered(naive) < 0.05
    width = np.mean([i.high - i.low for i in powered])
    assert width < 0.9 * np.mean([i.high - i.low for i in alone])
    assert np.mean([i.effective_n for i in powered]) > 1.2 * rated


def fixture_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two models, 30 episodes (each agent a model), two judges scoring every unit, people
    (two raters) on the first 12 episodes only."""
    rng = np.random.default_rng(7)
    long, judged = [], []
    for episode in range(30):
        for agent in AGENTS:
            model = ("model-a", "model-b")[(episode + agent) % 2]
            for key in DIMENSION_KEYS:
                merit = int(rng.integers(0, 8))
                for judge, shift in (("judge-1", 1), ("judge-2", 0)):
                    judged.append((f"e{episode}", agent, key,
                                   merit + shift + int(rng.integers(0, 3)), judge, model))
                if episode < 12:
                    long += [(f"e{episode}", agent, key, merit + int(rng.integers(-1, 2)),
                              2 * episode + rater, model) for rater in (0, 1)]
    return (pd.DataFrame(long, columns=["episode_id", "agent", "dimension", "score",
                                        "annotation_id", "agent_model"]),
            pd.DataFrame(judged, columns=["episode_id", "agent", "dimension", "score",
                                          "evaluator", "agent_model"]))


def test_each_figure_is_what_ppi_python_gives_on_the_same_units():
    import ppi_py  # numba, statsmodels, sklearn: loaded by the test that compares with it

    long, judged = fixture_tables()
    scores = agent_model_scores(long, judged).set_index(["agent_model", "dimension", "estimate",
                                                         "evaluator"])
    unit = ["episode_id", "agent"]
    people = long[long["dimension"] == "goal"].groupby(unit)["score"].mean()
    for model in ("model-a", "model-b"):
        mine = judged[(judged["agent_model"] == model) & (judged["dimension"] == "goal")]
        y = people[people.index.isin(mine.set_index(unit).index)]
        low, high = ppi_py.classical_mean_ci(y.to_numpy(float), alpha=0.05)
        row = scores.loc[(model, "goal", "people", "")]
        assert (row["mean"], row["mean_ci_low"], row["mean_ci_high"]) == pytest.approx(
            (y.mean(), low, high), abs=1e-4)
        for judge in ("judge-1", "judge-2"):
            hat = mine[mine["evaluator"] == judge].set_index(unit)["score"].astype(float)
            rated = hat.index.isin(y.index)
            labelled, unlabelled = hat[rated].loc[y.index].to_numpy(), hat[~rated].to_numpy()
            args = (y.to_numpy(float), labelled, unlabelled)
            low, high = ppi_py.ppi_mean_ci(*args, alpha=0.05)
            row = scores.loc[(model, "goal", "prediction-powered", judge)]
            assert (row["mean"], row["mean_ci_low"], row["mean_ci_high"]) == pytest.approx(
                (ppi_py.ppi_mean_pointestimate(*args)[0], low[0], high[0]), abs=1e-4)
            assert row["n"] == len(y) == 12
            low, high = ppi_py.classical_mean_ci(hat.to_numpy(), alpha=0.05)
            row = scores.loc[(model, "goal", "judge", judge)]
            assert (row["mean"], row["mean_ci_low"], row["mean_ci_high"], row["n"]) == \
                pytest.approx((hat.mean(), low, high, 30), abs=1e-4)

    # A difference's interval: the two models' intervals as independent.
    differences = agent_model_differences(scores.reset_index()).set_index(
        ["dimension", "estimate", "evaluator"])
    a, b = (scores.loc[(model, "goal", "prediction-powered", "judge-1")]
            for model in ("model-a", "model-b"))
    half = np.hypot((a["mean_ci_high"] - a["mean_ci_low"]) / 2,
                    (b["mean_ci_high"] - b["mean_ci_low"]) / 2)
    row = differences.loc[("goal", "prediction-powered", "judge-1")]
    assert (row["model_a"], row["model_b"], row["n"]) == ("model-a", "model-b", 24)
    assert (row["difference"], row["difference_ci_low"], row["difference_ci_high"]) == \
        pytest.approx((a["mean"] - b["mean"], a["mean"] - b["mean"] - half,
                       a["mean"] - b["mean"] + half), abs=1e-4)


def test_the_agent_models_are_read_from_what_each_format_carries(sample_data):
    loaded = load_episodes([sample_data / "otree_episodes", sample_data / "episodelog",
                            sample_data / "hf_jsonl"]).episodes
    models = {episode.source.tag: episode.source.agent_models for episode in loaded}
    assert models == {
        "gpt-3.5-turbo_gpt-3.5-turbo_v0.0.1_clean": ("gpt-3.5-turbo", "gpt-3.5-turbo"),
        # oTree's app ran Mistral as a custom model: --models names it.
        MISTRAL_TAG: ("custom_model", "gpt-3.5-turbo"),
        "togethercomputer/mpt-30b-chat_togethercomputer/llama-2-70b-chat_v0.0.1_clean":
            ("togethercomputer/mpt-30b-chat", "togethercomputer/llama-2-70b-chat"),
    }
    csv = load_episodes([sample_data / "human_eval"]).episodes
    assert {episode.source.agent_models for episode in csv} == {()}


def test_a_placeholder_named_once_is_the_model_in_whichever_seat_it_played(sample_data,
                                                                            tmp_path):
    # oTree's app seated Mistral first in half of its episodes, second in the others: one
    # pair per tag would give gpt-3.5-turbo's ratings to Mistral in half of them.
    result = CliRunner().invoke(main, ["import", str(sample_data / "otree_episodes"),
                                       "--dry-run", "-o", str(tmp_path / "tasks.json"),
                                       "--models", "custom_model=mistral-instruct"])
    assert result.exit_code == 0, result.output
    tasks = json.loads((tmp_path / "tasks.json").read_text())
    pairs = Counter((task["data"]["source_tag"], *task["data"]["agent_models"])
                    for task in tasks)
    assert pairs == {
        ("gpt-3.5-turbo_gpt-3.5-turbo_v0.0.1_clean", "gpt-3.5-turbo", "gpt-3.5-turbo"): 14,
        (MISTRAL_TAG, "mistral-instruct", "gpt-3.5-turbo"): 14,
        (MISTRAL_TAG, "gpt-3.5-turbo", "mistral-instruct"): 14,
    }


@pytest.mark.parametrize("option", ["custom_model=a,b,c", "nosuchmodel=a", "mistral=only-one", "=a,b", "mistral", "mistral=a,,",
                                    "nosuchtag=a,b"])
def test_a_models_mapping_that_is_wrong_stops_the_import_in_one_line(option, sample_data,
                                                                       tmp_path):
    result = CliRunner().invoke(main, ["import", str(sample_data / "human_eval"), "--dry-run",
                                       "-o", str(tmp_path / "tasks.json"), "--models", option])
    assert result.exit_code == 1
    assert result.output.count("\n") == len(result.output.splitlines()) and "Traceback" not in \
        result.output
    assert "Error: --models:" in result.output.splitlines()[-1]
    assert not (tmp_path / "tasks.json").exists()


@pytest.mark.server
def test_from_otree_files_to_each_models_scores_three_ways(label_studio, ls_client,
                                                           project_title, tmp_path,
                                                           monkeypatch, sample_data):
    """The sample episodes imported with the Mistral model named, two stand-in judges on all
    42, three people on the first 15: the export gives each row its agent's model and every judge score
    (rated or not); the report gives the model table, the differences and the plot."""
    monkeypatch.chdir(tmp_path)
    env = {"LABEL_STUDIO_URL": label_studio.url,
           "LABEL_STUDIO_API_KEY": label_studio.credentials.api_key,
           "SOTOPIA_LS_ANNOTATOR_PASSWORD": "stand-in-password"}

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result.output

    # The Mistral episodes first: people rate the first tasks, both models play in them.
    folders = [sample_data / "otree_episodes" / pair
               for pair in ("GPT3.5-MistralInstruct", "GPT3.5-GPT3.5")]
    run("import", *map(str, folders), "--title", project_title,
        "--models", f"{MISTRAL_TAG}=mistral-instruct,gpt-3.5-turbo")
    with chat_stub() as stub:
        for judge in ("judge-a", "judge-b"):
            run("evaluate", "--project", project_title, "--model", judge,
                "--base-url", stub.base_url)
    raters = [f"rater{k}-{project_title[-6:]}@lab.example" for k in (1, 2, 3)]
    run("annotators", "--project", project_title, *(f"--add={email}" for email in raters))
    annotate(label_studio.url, ls_client, project_title, raters,
             env["SOTOPIA_LS_ANNOTATOR_PASSWORD"])
    run("export", "--project", project_title, "-o", "results")
    run("report", "--from-export", "results", "-o", "report", "--bootstrap", "0")

    long = pd.read_csv("results/scores_long.csv", dtype={"episode_id": str})
    assert set(zip(long["source_tag"], long["agent"], long["agent_model"])) == {
        (MISTRAL_TAG, 1, "mistral-instruct"), (MISTRAL_TAG, 2, "gpt-3.5-turbo")}
    judged = pd.read_csv("results/model_scores.csv", dtype={"episode_id": str})
    assert set(zip(judged["agent"], judged["agent_model"])) == {
        (1, "mistral-instruct"), (1, "gpt-3.5-turbo"), (2, "gpt-3.5-turbo")}
    assert judged.groupby("evaluator")["episode_id"].nunique().to_dict() == {
        "judge-a": 42, "judge-b": 42}
    rated = judged.drop_duplicates("episode_id").set_index("episode_id")["rated"]
    assert set(rated[rated].index) == set(long["episode_id"]) and rated.sum() == RATED
    assert set(judged["agent_model"]) == {"mistral-instruct", "gpt-3.5-turbo"}

    scores = pd.read_csv("report/agent_model_scores.csv", keep_default_na=False,
                         na_values=[""])
    scores["evaluator"] = scores["evaluator"].fillna("")
    assert set(scores["agent_model"]) == {"mistral-instruct", "gpt-3.5-turbo"}
    per_model = [("people", "")] + [(estimate, judge) for judge in ("judge-a", "judge-b")
                                    for estimate in ("judge", "prediction-powered")]
    for model in ("mistral-instruct", "gpt-3.5-turbo"):
        mine = scores[scores["agent_model"] == model]
        assert sorted(zip(mine["dimension"], mine["estimate"], mine["evaluator"])) == sorted(
            (panel, *each) for panel in PANELS for each in per_model)
        units = judged[(judged["agent_model"] == model) & (judged["evaluator"] == "judge-a")
                       & (judged["dimension"] == "goal")]
        judge_row = mine[(mine["estimate"] == "judge") & (mine["evaluator"] == "judge-a")
                         & (mine["dimension"] == "goal")].iloc[0]
        assert judge_row["n"] == len(units)  # every episode the judge scored
        powered = mine[mine["estimate"] == "prediction-powered"]
        assert (powered["n"] == units["rated"].sum()).all() and units["rated"].sum() == RATED
    assert scores[["mean", "mean_ci_low", "mean_ci_high"]].notna().all().all()
    assert (scores["mean_ci_low"] <= scores["mean"]).all()
    differences = pd.read_csv("report/agent_model_differences.csv", keep_default_na=False,
                              na_values=[""])
    assert set(zip(differences["model_a"], differences["model_b"])) == {
        ("gpt-3.5-turbo", "mistral-instruct")}
    assert len(differences) == len(PANELS) * len(per_model)

    page = Path("report/report.html").read_text(encoding="utf-8")
    section = page.split("<h2>Each agent model&#x27;s scores</h2>")[1].split("<h2>")[0]
    assert f'<img alt="{html.escape(MODEL_CHART_ALT)}" src="data:image/png;base64,' in section
    assert "mistral-instruct" in section and "prediction-powered" in section

"""A researcher with a pilot asks how many people to pay for: `sotopia-ls plan` reads the
pilot's export folder and answers per judge and dimension, with its assumptions; the README
quotes its answer on the sample ratings, and this test checks the quote.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import invoke, read_study
from sotopia_ls.cli import main
from sotopia_ls.statistics.planning import plan

REPO = Path(__file__).resolve().parents[1]
README_COMMAND = ("sotopia-ls plan --from-export sample-pilot/ --width 1 --study-episodes 400 "
                  "--resamples 30")


def pilot_folder(folder: Path, long: pd.DataFrame, judge: pd.DataFrame) -> Path:
    """An export folder as `sotopia-ls export` writes the files plan reads."""
    folder.mkdir()
    long.assign(ground_truth=False).to_parquet(folder / "scores_long.parquet")
    judge.to_csv(folder / "model_scores.csv", index=False)
    (folder / "summary.json").write_text(json.dumps({"tasks": 0}))
    return folder


def sample_pilot_folder(folder: Path, study: pd.DataFrame) -> Path:
    """The sample ratings as a pilot rated by one person per episode, with a stand-in judge
    exactly as good as a person: each unit's second rater (taken out of the ratings)."""
    order = study.sort_values("annotation_id", kind="stable")
    position = order.groupby(["episode_id", "agent", "dimension"]).cumcount()
    judge = order[position == 1][["episode_id", "agent", "dimension", "score"]]
    return pilot_folder(folder, order[position == 0], judge.assign(evaluator="second-rater"))


@pytest.fixture(scope="module")
def sample_pilot(sample_data, tmp_path_factory) -> Path:
    return sample_pilot_folder(tmp_path_factory.mktemp("plan") / "sample-pilot",
                               read_study(sample_data))


def test_plan_on_the_sample_pilot_prints_the_readmes_numbers_and_its_assumptions(
        sample_pilot):
    words = README_COMMAND.split()[1:]
    words[words.index("sample-pilot/")] = str(sample_pilot)
    result = invoke(main, *words)
    assert result.exit_code == 0, result.output
    table, assumptions = result.output.split("\n- ", 1)
    assert "episodes_people_alone" in table and "episodes_with_judge" in table
    goal = next(line.split() for line in table.splitlines() if " goal " in line)
    # The sample names no agent model: one row for all of them.
    assert goal[:3] == ["second-rater", "all", "goal"] and int(goal[6]) > int(goal[7])
    # No unit of this pilot has three raters: nothing to say of the test.
    assert goal[-2:] == ["–", "–"]
    assert "--study-episodes" in assumptions and "seed 0" in assumptions

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quoted = readme.split(f"$ {README_COMMAND}\n", 1)[1].split("```", 1)[0]
    assert quoted == result.output


def test_a_judge_close_to_the_truth_saves_people_and_passes_the_test_on_few_units(tmp_path):
    rng = np.random.default_rng(3)
    units = pd.MultiIndex.from_product(
        [[f"ep{i:03d}" for i in range(60)], [1, 2]], names=["episode_id", "agent"]
    ).to_frame(index=False)
    truth = rng.integers(0, 11, len(units))
    long = pd.concat([units.assign(
        annotation_id=units.index * 10 + k, annotator_id=f"p{(units.index // 2 * 3 + k) % 20}",
        dimension="goal", score=np.clip(np.round(truth + rng.normal(0, 2, len(units))), 0, 10))
        for k in range(3)], ignore_index=True)
    judge = units.assign(dimension="goal", score=truth, evaluator="oracle")
    planned = plan(long, judge, 1.0, study_episodes=300, resamples=30).table
    goal = planned.set_index("dimension").loc["goal"]
    assert goal["episodes_with_judge"] < goal["episodes_people_alone"]
    assert goal["pilot_units_with_three"] == 120
    assert goal["alt_test_units"] == 30 and goal["alt_test_episodes"] == 15


def test_each_agent_model_gets_its_own_plan_beside_all_together(tmp_path):
    # Two agent models, each in one seat of 60 episodes; people rated each unit once.
    rng = np.random.default_rng(5)
    units = pd.MultiIndex.from_product(
        [[f"ep{i:03d}" for i in range(60)], [1, 2]], names=["episode_id", "agent"]
    ).to_frame(index=False)
    units = units.assign(agent_model=np.where(units["agent"] == 1, "gpt-4o", "llama-3-70b"))
    truth = rng.integers(0, 11, len(units))
    long = units.assign(annotation_id=units.index, annotator_id="p1", dimension="goal",
                        score=np.clip(np.round(truth + rng.normal(0, 2, len(units))), 0, 10))
    judge = units.assign(dimension="goal", score=truth, evaluator="oracle")
    planned = plan(long, judge, 1.5, study_episodes=300, resamples=30).table
    goal = planned[planned["dimension"] == "goal"].set_index("agent_model")
    assert list(goal.index) == ["all", "gpt-4o", "llama-3-70b"]
    # A model's mean rests on its own units, one per episode: more episodes for the same width.
    for model in ("gpt-4o", "llama-3-70b"):
        assert goal.at[model, "episodes_people_alone"] > goal.at["all", "episodes_people_alone"]
        assert goal.at[model, "episodes_with_judge"] < goal.at[model, "episodes_people_alone"]
        assert goal.at[model, "pilot_units"] == 60
        assert pd.isna(goal.at[model, "alt_test_units"])  # planned for all models together


def test_a_folder_without_a_judge_is_one_line_naming_the_file(sample_pilot, tmp_path):
    empty = pilot_folder(tmp_path / "no-judge", pd.read_parquet(
        sample_pilot / "scores_long.parquet"), pd.DataFrame(
            columns=["episode_id", "agent", "dimension", "score", "evaluator"]))
    result = invoke(main, "plan", "--from-export", str(empty), "--width", "1")
    assert result.exit_code != 0
    assert re.fullmatch(r"Error: 1 invalid record\(s\):\n  \S*model_scores\.csv: no judge's "
                        r"scores: run sotopia-ls evaluate[^\n]*\n", result.output), result.output
    (empty / "model_scores.csv").unlink()
    result = invoke(main, "plan", "--from-export", str(empty), "--width", "1")
    assert result.exit_code != 0 and "no model_scores.csv" in result.output
    assert "Traceback" not in result.output


def test_plans_help_has_examples():
    result = invoke(main, "plan", "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output and "sotopia-ls plan --from-export results/" in (
        result.output)

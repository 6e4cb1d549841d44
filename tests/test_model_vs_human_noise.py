"""Is the LLM judge as good as one more human?

A simulated study where the answer is known: every unit has a true goal score, three
annotators rate it with the same noise, and three judges are compared with them: the truth
itself (closer than any human), a fourth annotator with the same noise (as close as a human)
and a careless judge (farther than a human).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sotopia_ls.statistics.comparison import held_out_rows, model_vs_human_noise

EPISODES = 80
NOISE = 1.5


@pytest.fixture(scope="module")
def study() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(2024)
    units = pd.MultiIndex.from_product(
        [[f"ep{i:03d}" for i in range(EPISODES)], [1, 2]], names=["episode_id", "agent"]
    ).to_frame(index=False)
    truth = rng.integers(0, 11, len(units))

    def rater(noise: float) -> np.ndarray:
        return np.clip(np.round(truth + rng.normal(0, noise, len(units))), 0, 10).astype(int)

    crowd = pd.concat([
        units.assign(annotation_id=units.index * 10 + k, annotator_id=f"a{k}",
                     dimension="goal", score=rater(NOISE))
        for k in range(3)
    ], ignore_index=True)

    def judge(scores: np.ndarray) -> pd.DataFrame:
        return units.assign(dimension="goal", score=scores, evaluator="judge")

    return {"crowd": crowd, "truth": judge(truth), "one more human": judge(rater(NOISE)),
            "careless": judge(rater(4 * NOISE))}


@pytest.mark.parametrize(("judge", "verdict"), [
    ("truth", "closer than a human"),
    ("one more human", "as close as a human"),
    ("careless", "farther than a human"),
])
def test_the_verdict_places_the_judge_among_the_humans(study, judge, verdict):
    table = model_vs_human_noise(study["crowd"], study[judge]).set_index("dimension")
    goal = table.loc["goal"]
    assert goal["verdict"] == verdict
    assert goal["units"] == 2 * EPISODES and goal["rows"] == 3 * 2 * EPISODES
    for name in ("human_human_r", "model_human_r", "mad_difference"):
        assert goal[f"{name}_ci_low"] <= goal[name] <= goal[f"{name}_ci_high"]
    assert (table["bootstrap_resamples"] == 1000).all()


def test_each_annotator_and_the_judge_are_compared_with_the_same_other_annotators(study):
    rows = held_out_rows(study["crowd"], study["careless"])
    goal = rows[rows["dimension"] == "goal"]
    table = model_vs_human_noise(study["crowd"], study["careless"]).set_index("dimension")
    # The held-out annotator's target is the mean of the two others on that unit.
    first = goal.iloc[0]
    same_unit = study["crowd"][(study["crowd"]["episode_id"] == first["episode_id"])
                               & (study["crowd"]["agent"] == first["agent"])]
    others = same_unit.loc[same_unit["annotation_id"] != first["annotation_id"], "score"]
    assert first["others"] == others.mean()
    assert table.loc["goal", "human_human_r"] == pytest.approx(
        stats.pearsonr(goal["score"], goal["others"])[0])
    assert table.loc["goal", "model_human_r"] == pytest.approx(
        stats.pearsonr(goal["model"], goal["others"])[0])
    assert table.loc["goal", "model_human_mad"] == pytest.approx(
        (goal["model"] - goal["others"]).abs().mean())
    # Overall is the mean over dimensions of one annotator's scores (here goal alone).
    assert table.loc["overall", "human_human_mad"] == pytest.approx(
        table.loc["goal", "human_human_mad"])


def test_without_model_scores_there_is_nothing_to_compare(study):
    empty = study["truth"].iloc[0:0]
    assert model_vs_human_noise(study["crowd"], empty).empty

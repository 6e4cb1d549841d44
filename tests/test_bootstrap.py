"""A bootstrap resample is the study with some episodes drawn twice and some left out.

The intervals are computed from episode weights, not from resampled tables; these tests
build one resample as a table, episode by episode (both agents of a drawn episode together,
each copy a new episode), and check that the weighted figures equal what krippendorff,
pingouin and scipy compute on it.
"""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from sotopia_ls.statistics.bootstrap import (
    Bootstrap,
    Draw,
    moments,
    pearson_from_moments,
    weighted_spearman,
)
from sotopia_ls.statistics.reliability import UNIT, alpha_and_icc, episode_sums, rated_units

from conftest import study_long


@pytest.fixture(scope="module")
def goal(sample_data) -> pd.DataFrame:
    """The study's goal ratings, each with its slot (0, 1, 2) on its unit."""
    csvs = sorted((sample_data / "human_eval").glob("*_final.csv"))
    long = study_long(pd.concat([pd.read_csv(p) for p in csvs], ignore_index=True))
    return rated_units(long[long["dimension"] == "goal"])


def resampled(ratings: pd.DataFrame, episodes: pd.Index, weights: np.ndarray) -> pd.DataFrame:
    """The ratings of each episode repeated as often as it was drawn, each copy renamed."""
    copies = [
        ratings[ratings["episode_id"] == episode].assign(episode_id=f"{episode}#{copy}")
        for episode, drawn in zip(episodes, weights) for copy in range(drawn)
    ]
    return pd.concat(copies, ignore_index=True)


def alpha_of(ratings: pd.DataFrame) -> float:
    matrix = ratings.pivot_table(index="slot", columns=UNIT, values="score")
    return krippendorff.alpha(reliability_data=matrix.to_numpy(float),
                              level_of_measurement="interval")


def test_a_resample_draws_whole_episodes_with_replacement():
    weights = np.concatenate(list(Bootstrap(resamples=2500, seed=3).weights(42)))
    assert weights.shape == (2500, 42)
    assert (weights.sum(axis=1) == 42).all()  # each resample has as many episodes as the study
    assert 0.3 < (weights == 0).mean() < 0.42  # about 1/e of the episodes left out
    again = np.concatenate(list(Bootstrap(resamples=2500, seed=3).weights(42)))
    assert (again == weights).all()


def test_weighted_alpha_and_icc_are_the_libraries_figures_on_the_resampled_table(goal):
    import pingouin  # the reference, imported by the one test that uses it (seconds)
    episodes = pd.Index(sorted(goal["episode_id"].unique()))
    sums = episode_sums(goal, episodes)
    alpha, icc1, icc1k, _ = alpha_and_icc(sums.sum(axis=0))
    assert alpha == pytest.approx(alpha_of(goal))

    weights = next(Bootstrap(resamples=3, seed=11).weights(len(episodes)))
    for drawn in weights:
        table = resampled(goal, episodes, drawn)
        alpha, icc1, icc1k, k0 = alpha_and_icc(drawn @ sums)
        assert alpha == pytest.approx(alpha_of(table))
        raters = table.groupby(UNIT).size()
        n = raters.sum()
        assert k0 == pytest.approx((n - (raters**2).sum() / n) / (len(raters) - 1))

    balanced = goal[goal["slot"] < 2]  # pingouin needs two ratings on every unit
    sums = episode_sums(balanced, episodes)
    for drawn in weights:
        table = resampled(balanced, episodes, drawn).assign(
            unit=lambda t: t["episode_id"] + t["agent"].astype(str))
        direct = pingouin.intraclass_corr(data=table, targets="unit", raters="slot",
                                          ratings="score").set_index("Type")["ICC"]
        _, icc1, icc1k, _ = alpha_and_icc(drawn @ sums)
        assert icc1 == pytest.approx(direct["ICC(1,1)"])
        assert icc1k == pytest.approx(direct["ICC(1,k)"])


def test_weighted_correlations_are_scipys_on_the_resampled_rows():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 11, 40).astype(float)
    y = np.clip(x + rng.integers(-3, 4, 40), 0, 10)
    episode = np.repeat(np.arange(20), 2)  # two rows (agents) per episode
    weights = rng.multinomial(20, np.full(20, 1 / 20), size=4)
    draw = Draw(weights, episode)
    pearson = pearson_from_moments(draw.totals(moments(x, y)))
    spearman = weighted_spearman(x, y, draw)
    for row, drawn in enumerate(weights):
        rows = np.repeat(np.arange(40), drawn[episode])  # each drawn episode's rows, repeated
        assert pearson[row] == pytest.approx(stats.pearsonr(x[rows], y[rows])[0])
        assert spearman[row] == pytest.approx(stats.spearmanr(x[rows], y[rows])[0])
    assert np.isnan(pearson_from_moments(draw.totals(moments(np.ones(40), y)))).all()
    assert np.isnan(weighted_spearman(np.zeros(40), y, draw)).all()


def test_an_interval_leaves_out_resamples_where_the_figure_is_undefined():
    replicates = np.array([[0.1], [0.2], [np.nan], [0.3]])
    low, high = Bootstrap(resamples=4).interval(replicates, (1,))[0]
    assert 0.1 <= low < high <= 0.3
    mostly_undefined = np.array([[0.1], [np.nan], [np.nan], [np.nan]])
    assert np.isnan(Bootstrap(resamples=4).interval(mostly_undefined, (1,))).all()
    assert np.isnan(Bootstrap(resamples=0).interval(None, (2, 3))).all()

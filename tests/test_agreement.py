"""Agreement, human-vs-model and qualification figures equal what the libraries compute directly.

These use the real ratings of the sample oTree study (no server needed): the statistics are
pure functions of the ``scores_long`` table.
"""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.inter_rater import fleiss_kappa

from conftest import read_study
from sotopia_ls.dimensions import DIMENSION_KEYS, RUBRIC
from sotopia_ls.statistics.agreement import agreement_breakdown, agreement_table, rubric_binarize
from sotopia_ls.statistics.bootstrap import Bootstrap
from sotopia_ls.statistics.comparison import (
    annotator_table,
    human_vs_model,
    paired_scores,
    qualification,
)
from sotopia_ls.statistics.reliability import randolph_kappa
from sotopia_ls.statistics.sotopia_pi import sotopia_pi_figures

UNIT = ["episode_id", "agent"]
NO_INTERVALS = Bootstrap(resamples=0)


@pytest.fixture(scope="module")
def long(sample_data) -> pd.DataFrame:
    return read_study(sample_data)


@pytest.fixture(scope="module")
def table(long) -> pd.DataFrame:
    return agreement_table(long).set_index("dimension")


def first_two(long: pd.DataFrame) -> pd.DataFrame:
    """Each unit's first two ratings (by annotation id): every unit has two raters."""
    ordered = long.sort_values("annotation_id")
    slot = ordered.groupby([*UNIT, "dimension"]).cumcount()
    return ordered[slot < 2]


def as_pairs(long: pd.DataFrame, dimension: str) -> pd.DataFrame:
    """One dimension of ``first_two`` as one row per unit, columns 0 and 1."""
    ratings = long[long["dimension"] == dimension].sort_values("annotation_id")
    return ratings.assign(slot=ratings.groupby(UNIT).cumcount()).pivot_table(
        index=UNIT, columns="slot", values="score"
    )


def test_every_unit_of_the_study_has_two_annotators_or_more(table):
    assert (table["units"] == 84).all()  # 42 episodes × 2 agents
    assert (table["ratings"] == 170).all()  # 85 rows × 2 agents: one episode has 3 raters
    assert (table["max_raters"] == 3).all()


@pytest.mark.parametrize("dimension", ["believability", "goal", "knowledge"])
def test_alpha_is_krippendorffs_interval_alpha_on_every_rating(long, table, dimension):
    ratings = long[long["dimension"] == dimension]
    matrix = ratings.pivot_table(index="annotator_id", columns=UNIT, values="score")
    assert table.loc[dimension, "alpha"] == pytest.approx(krippendorff.alpha(
        reliability_data=matrix.to_numpy(float), level_of_measurement="interval"))


@pytest.mark.parametrize("dimension", ["believability", "goal", "knowledge"])
def test_icc_is_pingouins_one_way_icc_when_every_unit_has_two_raters(long, dimension):
    import pingouin  # the reference, imported by the one test that uses it (seconds)
    ours = agreement_table(first_two(long), NO_INTERVALS).set_index("dimension").loc[dimension]
    tidy = as_pairs(first_two(long), dimension).reset_index().melt(
        id_vars=UNIT, var_name="rater", value_name="score")
    tidy["unit"] = tidy["episode_id"] + tidy["agent"].astype(str)
    direct = pingouin.intraclass_corr(data=tidy, targets="unit", raters="rater",
                                      ratings="score").set_index("Type")["ICC"]
    assert ours["icc1"] == pytest.approx(direct["ICC(1,1)"])
    assert ours["icc1k"] == pytest.approx(direct["ICC(1,k)"])
    assert ours["icc_k0"] == 2


@pytest.mark.parametrize("dimension", ["goal", "knowledge"])
def test_the_third_rating_of_a_unit_counts_in_icc_and_kappa(long, table, dimension):
    # One episode of the study was rated three times; dropping its third rating changes both.
    two_only = agreement_table(first_two(long), NO_INTERVALS).set_index("dimension")
    for column in ("icc1", "icc1k", "randolph_kappa_rubric_binary"):
        assert table.loc[dimension, column] != pytest.approx(two_only.loc[dimension, column])
    # k₀ of the unbalanced design: (N − Σnᵢ²/N)/(n − 1) with 82 units of 2 and 2 of 3.
    assert table.loc[dimension, "icc_k0"] == pytest.approx((170 - (82 * 4 + 2 * 9) / 170) / 83)


@pytest.mark.parametrize("dimension", ["believability", "relationship", "social_rules"])
def test_kappa_is_statsmodels_randolph_when_every_unit_has_two_raters(long, dimension):
    ours = agreement_table(first_two(long), NO_INTERVALS).set_index("dimension")
    binary = as_pairs(first_two(long), dimension).apply(lambda s: rubric_binarize(s, dimension))
    possible = sorted(set(rubric_binarize(pd.Series(RUBRIC[dimension].values), dimension)))
    counts = np.array([[int((row == c).sum()) for c in possible] for row in binary.to_numpy()])
    assert ours.loc[dimension, "randolph_kappa_rubric_binary"] == pytest.approx(
        fleiss_kappa(counts, method="randolph"))
    assert len(possible) == (3 if dimension == "relationship" else 2)


def test_kappa_never_exceeds_one_when_a_unit_has_three_raters():
    # Two units of three raters who all agree, one unit of two who disagree.
    counts = np.array([[3, 0], [0, 3], [1, 1]])
    assert randolph_kappa(counts, 2) == pytest.approx((2 / 3 - 1 / 2) / (1 / 2))
    assert randolph_kappa(np.array([[3, 0], [0, 3]]), 2) == 1.0
    assert randolph_kappa(np.array([[3, 0, 0], [2, 0, 0]]), 3) == 1.0


def test_the_sotopia_pi_columns_sit_beside_ours_and_every_kappa_stays_at_most_one(long, table):
    for dimension in DIMENSION_KEYS:
        theirs = sotopia_pi_figures(long[long["dimension"] == dimension])
        assert table.loc[dimension, list(theirs)].to_dict() == pytest.approx(theirs, nan_ok=True)
    assert table.loc["financial_and_material_benefits", "pi_divisor"] == 3
    assert (table["randolph_kappa_rubric_binary"] <= 1).all()
    assert (table["pi_randolph_kappa"] <= 1).all()


def test_rubric_binarization_scales_by_the_rubric_and_rounds_half_to_even():
    assert rubric_binarize(pd.Series([0, 4, 5, 6, 10]), "goal").tolist() == [0, 0, 0, 1, 1]
    assert rubric_binarize(pd.Series([-10, -6, -5, 0]), "secret").tolist() == [-1, -1, 0, 0]
    assert rubric_binarize(pd.Series([-5, -3, 2, 3, 5]), "relationship").tolist() == [
        -1, -1, 0, 1, 1]


def test_pair_shares_are_the_shares_of_agreeing_raw_score_pairs(long):
    table = agreement_table(first_two(long), NO_INTERVALS).set_index("dimension")
    pairs = as_pairs(first_two(long), "goal")
    gap = (pairs[0] - pairs[1]).abs()
    assert table.loc["goal", "pairs_exact"] == pytest.approx((gap == 0).mean())
    assert table.loc["goal", "pairs_within_2"] == pytest.approx((gap <= 2).mean())


def test_secret_is_flagged_with_every_figure_that_looks_like_perfect_agreement(table):
    secret = table.loc["secret"]
    assert secret["low_variance"] and secret["modal_share"] == 1.0 and np.isnan(secret["alpha"])
    # Perfect-looking, and meaningless: nobody ever gave anything but 0.
    assert secret["pairs_exact"] == 1.0 and secret["randolph_kappa_rubric_binary"] == 1.0
    assert not table.drop(index="secret")["low_variance"].any()


def test_goal_and_knowledge_intervals_are_those_of_an_episode_bootstrap(table):
    # Orientation figures of the issue: goal α ≈ [.47, .80], knowledge α ≈ [−.27, −.04].
    goal, knowledge = table.loc["goal"], table.loc["knowledge"]
    assert goal["alpha_ci_low"] == pytest.approx(0.47, abs=0.03)
    assert goal["alpha_ci_high"] == pytest.approx(0.80, abs=0.03)
    assert knowledge["alpha_ci_low"] == pytest.approx(-0.27, abs=0.03)
    assert knowledge["alpha_ci_high"] == pytest.approx(-0.04, abs=0.03)
    assert (table["bootstrap_resamples"] == 1000).all() and (table["bootstrap_seed"] == 0).all()


def test_intervals_cover_the_estimate_and_come_back_with_the_same_seed(long, table):
    defined = table.dropna(subset=["alpha"])
    for name in ("alpha", "icc1", "icc1k"):
        assert (defined[f"{name}_ci_low"] <= defined[name]).all()
        assert (defined[name] <= defined[f"{name}_ci_high"]).all()
    again = agreement_table(long).set_index("dimension")
    pd.testing.assert_frame_equal(again, table)
    other = agreement_table(long, Bootstrap(seed=1)).set_index("dimension")
    assert not np.allclose(other["alpha_ci_low"].dropna(), table["alpha_ci_low"].dropna())


def test_breakdowns_show_where_agreement_differs_by_model_pair(long):
    breakdown = agreement_breakdown(long, NO_INTERVALS).set_index(["breakdown", "group",
                                                                    "dimension"])
    believability = breakdown.xs("believability", level="dimension").loc["model pair", "alpha"]
    assert believability.round(3).to_dict() == {"gpt3.5": 0.015, "mistral": 0.535}
    for pair, units in (("gpt3.5", 28), ("mistral", 56)):
        ratings = long[(long["source_tag"] == pair) & (long["dimension"] == "believability")]
        matrix = ratings.pivot_table(index="annotator_id", columns=UNIT, values="score")
        assert believability[pair] == pytest.approx(krippendorff.alpha(
            reliability_data=matrix.to_numpy(float), level_of_measurement="interval"))
        assert breakdown.loc[("model pair", pair, "believability"), "units"] == units
    agents = breakdown.loc["agent"]
    assert set(agents.index.get_level_values("group")) == {"agent 1", "agent 2"}
    assert (agents["units"] == 42).all()


def test_human_vs_model_pools_both_agents_like_sotopias_benchmark(long):
    # A "model" that gives each unit its first annotator's score, minus one point on goal.
    first = long.sort_values("annotation_id").drop_duplicates(["episode_id", "agent", "dimension"])
    model = first[["episode_id", "agent", "dimension", "score"]].assign(evaluator="m")
    model.loc[model["dimension"] == "goal", "score"] -= 1
    result = human_vs_model(paired_scores(long, model)).set_index("dimension")

    human = long.groupby(["episode_id", "agent", "dimension"])["score"].mean()
    paired = model.set_index(["episode_id", "agent", "dimension"])["score"]
    goal = pd.concat([human.xs("goal", level="dimension"),
                      paired.xs("goal", level="dimension")], axis=1, keys=["h", "m"])
    assert result.loc["goal", "n"] == 84
    assert result.loc["goal", "pearson"] == pytest.approx(stats.pearsonr(goal.h, goal.m)[0])
    assert result.loc["goal", "spearman_p"] == pytest.approx(stats.spearmanr(goal.h, goal.m)[1])
    assert result.loc["goal", "mse"] == pytest.approx(((goal.h - goal.m) ** 2).mean())
    assert result.loc["goal", "bias"] == pytest.approx((goal.h - goal.m).mean())
    assert np.isnan(result.loc["secret", "pearson"])  # constant: no correlation to speak of
    assert np.isnan(result.loc["secret", "pearson_ci_low"])
    assert result.loc["overall", "n"] == 84
    for name in ("pearson", "spearman"):
        defined = result.dropna(subset=[name])
        assert (defined[f"{name}_ci_low"] <= defined[name]).all()
        assert (defined[name] <= defined[f"{name}_ci_high"]).all()
    assert (result["bootstrap_resamples"] == 1000).all()


def test_qualification_passes_within_two_points_and_fails_at_three():
    reference = pd.DataFrame({"episode_id": "e", "agent": 1, "dimension": list(DIMENSION_KEYS),
                              "score": 0})

    def annotator(name: str, goal: int) -> pd.DataFrame:
        return reference.assign(
            annotator_id=name, score=[goal if k == "goal" else 2 for k in DIMENSION_KEYS]
        )
    crowd = pd.concat([annotator("close", goal=-2), annotator("far", goal=3)])
    result = qualification(crowd, reference).set_index("annotator_id")
    assert result["passed"].to_dict() == {"close": True, "far": False}
    assert result.loc["far", "failed_dimensions"] == "goal"
    assert result.loc["far", "max_gap_goal"] == 3 and result.loc["close", "units"] == 1


def test_annotator_table_measures_distance_from_the_others_on_common_units():
    long = pd.DataFrame({
        "episode_id": "e", "agent": 1, "dimension": "goal", "annotation_id": [1, 2, 3],
        "annotator_id": ["a", "b", "c"], "score": [4, 6, 8], "lead_time": [10.0, 20.0, 30.0],
    })
    table = annotator_table(long).set_index("annotator_id")
    assert table.loc["a", "mean_abs_diff_from_others"] == 3  # |4 - mean(6, 8)|
    assert table.loc["b", "mean_abs_diff_from_others"] == 0
    assert table["annotations"].tolist() == [1, 1, 1]
    assert table.loc["c", "median_lead_time_s"] == 30.0

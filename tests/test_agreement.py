"""Agreement, human-vs-model and qualification figures equal what the libraries compute directly.

These use the real ratings of the sample oTree study (no server needed): the statistics are
pure functions of the ``scores_long`` table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pingouin
import pytest
from scipy import stats
from statsmodels.stats.inter_rater import fleiss_kappa

from sotopia_ls.dimensions import AGENTS, DIMENSION_KEYS, RUBRIC, rating_name, reasoning_name
from sotopia_ls.exporter.agreement import agreement_table, binarize
from sotopia_ls.exporter.comparison import annotator_table, human_vs_model, qualification


def study_long(study: pd.DataFrame) -> pd.DataFrame:
    """The sample CSVs as ``scores_long``: each CSV row one annotation by its own annotator."""
    parts = [
        pd.DataFrame({
            "episode_id": study["pk"], "annotation_id": study.index,
            "annotator_id": "row-" + study.index.astype(str), "agent": agent,
            "dimension": key, "score": study[rating_name(key, agent)].astype("int64"),
            "rationale": study[reasoning_name(key, agent)], "lead_time": 60.0,
            "ground_truth": False,
        })
        for agent in AGENTS for key in DIMENSION_KEYS
    ]
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def long(sample_data) -> pd.DataFrame:
    csvs = sorted((sample_data / "human_eval").glob("*_final.csv"))
    return study_long(pd.concat([pd.read_csv(p) for p in csvs], ignore_index=True))


@pytest.fixture(scope="module")
def table(long) -> pd.DataFrame:
    return agreement_table(long).set_index("dimension")


def first_two(long: pd.DataFrame, dimension: str) -> pd.DataFrame:
    """Each unit's first two ratings (by annotation id), as one row per unit."""
    ratings = long[long["dimension"] == dimension].sort_values("annotation_id")
    ratings = ratings.assign(slot=ratings.groupby(["episode_id", "agent"]).cumcount())
    return ratings[ratings["slot"] < 2].pivot_table(
        index=["episode_id", "agent"], columns="slot", values="score"
    )


def test_every_unit_of_the_study_has_two_annotators_or_more(table):
    assert (table["units"] == 84).all()  # 42 episodes × 2 agents
    assert (table["ratings"] == 170).all()  # 85 rows × 2 agents


@pytest.mark.parametrize("dimension", ["believability", "goal", "knowledge"])
def test_icc_is_pingouins_one_way_icc_on_the_first_two_ratings(long, table, dimension):
    pairs = first_two(long, dimension).reset_index()
    tidy = pairs.melt(id_vars=["episode_id", "agent"], var_name="rater", value_name="score")
    tidy["unit"] = tidy["episode_id"] + tidy["agent"].astype(str)
    direct = pingouin.intraclass_corr(data=tidy, targets="unit", raters="rater", ratings="score")
    assert table.loc[dimension, "icc"] == pytest.approx(
        direct.set_index("Type").loc["ICC(1,1)", "ICC"]
    )


@pytest.mark.parametrize("dimension", ["believability", "relationship", "social_rules"])
def test_randolph_kappa_counts_every_category_sotopias_binarization_allows(
    long, table, dimension
):
    pairs = first_two(long, dimension)
    binary = pairs.apply(lambda column: binarize(column, dimension))
    possible = sorted(set(binarize(pd.Series(RUBRIC[dimension].values), dimension)))
    counts = np.array([[int((row == c).sum()) for c in possible] for row in binary.to_numpy()])
    assert table.loc[dimension, "randolph_kappa"] == pytest.approx(
        fleiss_kappa(counts, method="randolph")
    )
    assert len(possible) == (3 if dimension == "relationship" else 2)


def test_binarization_rounds_half_to_even_like_sotopias_pandas_code():
    assert binarize(pd.Series([0, 4, 5, 6, 10]), "goal").tolist() == [0, 0, 0, 1, 1]
    assert binarize(pd.Series([-10, -6, -5, 0]), "secret").tolist() == [-1, -1, 0, 0]
    assert binarize(pd.Series([-5, -3, 2, 3, 5]), "relationship").tolist() == [-1, -1, 0, 1, 1]


def test_exact_and_within_two_are_the_shares_of_agreeing_pairs(table, long):
    pairs = first_two(long, "goal")
    # Every unit but one has exactly two ratings, so the pair shares are close to these.
    gap = (pairs[0] - pairs[1]).abs()
    assert table.loc["goal", "exact"] == pytest.approx((gap == 0).mean(), abs=0.02)
    assert table.loc["goal", "within_2"] == pytest.approx((gap <= 2).mean(), abs=0.02)


def test_secret_is_flagged_because_every_rating_is_the_same(table):
    assert table.loc["secret", "low_variance"] and table.loc["secret", "modal_share"] == 1.0
    assert np.isnan(table.loc["secret", "alpha"]) and table.loc["secret", "exact"] == 1.0
    assert not table.drop(index="secret")["low_variance"].any()


def test_human_vs_model_pools_both_agents_like_sotopias_benchmark(long):
    # A "model" that gives each unit its first annotator's score, minus one point on goal.
    first = long.sort_values("annotation_id").drop_duplicates(["episode_id", "agent", "dimension"])
    model = first[["episode_id", "agent", "dimension", "score"]].assign(evaluator="m")
    model.loc[model["dimension"] == "goal", "score"] -= 1
    result = human_vs_model(long, model).set_index("dimension")

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
    assert result.loc["overall", "n"] == 84


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

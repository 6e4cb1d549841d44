"""Inter-annotator agreement per dimension, over episode × agent units.

For each dimension, over units rated by at least two annotators:

- ``alpha``: Krippendorff's α, interval level (``krippendorff``), from every rating;
- ``icc``: ICC(1,1) (``pingouin``), one-way random: annotators differ from unit to unit, so
  each unit contributes its first ``k`` ratings (by annotation id), ``k`` the smallest count;
- ``exact`` / ``within_2``: the share of annotator pairs on a unit giving the same score / scores
  at most 2 apart, averaged over units (Sotopia's pairwise agreement);
- ``randolph_kappa``: Randolph's free-marginal κ (``statsmodels``) on Sotopia's binarization
  ``round(score / max|range|)``, from the same first-``k`` ratings as the ICC;
- spread: standard deviation and the share of the most common score. A dimension where almost
  every rating is the same value (``low_variance``) has α near zero or undefined however well
  annotators agree; read its ``exact`` share instead.
"""

from __future__ import annotations

import warnings

import krippendorff
import numpy as np
import pandas as pd
import pingouin
from statsmodels.stats.inter_rater import fleiss_kappa

from ..dimensions import RUBRIC

UNIT = ["episode_id", "agent"]
LOW_VARIANCE_MODAL_SHARE = 0.9
AGREEMENT_COLUMNS = [
    "dimension", "units", "ratings", "alpha", "icc", "exact", "within_2", "randolph_kappa",
    "std", "modal_share", "low_variance",
]


def rated_units(long: pd.DataFrame) -> pd.DataFrame:
    """Ratings of units with ≥ 2 annotators, each with its ``slot`` (0, 1, … by annotation id)."""
    counts = long.groupby([*UNIT, "dimension"])["score"].transform("size")
    multi = long[counts >= 2].sort_values("annotation_id", kind="stable")
    return multi.assign(slot=multi.groupby([*UNIT, "dimension"]).cumcount())


def _matrix(ratings: pd.DataFrame) -> pd.DataFrame:
    """Slots × units (NaN where a unit has fewer ratings): the shape α and ICC read."""
    return ratings.pivot_table(index="slot", columns=UNIT, values="score", aggfunc="first")


def _alpha(ratings: pd.DataFrame) -> float:
    matrix = _matrix(ratings).to_numpy(dtype=float)
    if np.unique(matrix[~np.isnan(matrix)]).size < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval"))


def _balanced(ratings: pd.DataFrame) -> pd.DataFrame:
    k = int(ratings.groupby(UNIT)["slot"].max().min()) + 1
    return ratings[ratings["slot"] < k]


def _icc(ratings: pd.DataFrame) -> float:
    balanced = _balanced(ratings).assign(
        unit=lambda r: r["episode_id"].astype(str) + "/" + r["agent"].astype(str)
    )
    if balanced["unit"].nunique() < 3 or balanced["score"].nunique() < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = pingouin.intraclass_corr(
            data=balanced, targets="unit", raters="slot", ratings="score"
        )
    return float(table.set_index("Type").loc["ICC(1,1)", "ICC"])


def _pairwise(ratings: pd.DataFrame) -> tuple[float, float]:
    pairs = ratings.merge(ratings, on=UNIT, suffixes=("_a", "_b"))
    pairs = pairs[pairs["slot_a"] < pairs["slot_b"]]
    gap = (pairs["score_a"] - pairs["score_b"]).abs()
    per_unit = pd.DataFrame(
        {"exact": gap == 0, "within_2": gap <= 2, **{c: pairs[c] for c in UNIT}}
    ).groupby(UNIT)[["exact", "within_2"]].mean()
    return float(per_unit["exact"].mean()), float(per_unit["within_2"].mean())


def binarize(scores: pd.Series, dimension: str) -> pd.Series:
    """Sotopia's binarization: ``round(score / max|range|)`` (half to even, as pandas rounds)."""
    return (scores / RUBRIC[dimension].max_abs).round(0).astype("int64")


def _randolph(ratings: pd.DataFrame, dimension: str) -> float:
    balanced = _balanced(ratings)
    codes = binarize(pd.Series(RUBRIC[dimension].values), dimension)
    low, n_categories = int(codes.min()), int(codes.max() - codes.min() + 1)
    table = (
        balanced.assign(category=binarize(balanced["score"], dimension) - low)
        .groupby([*UNIT, "category"]).size().unstack(fill_value=0)
        .reindex(columns=range(n_categories), fill_value=0)
        .to_numpy()
    )
    if table.shape[0] == 0:
        return float("nan")
    return float(fleiss_kappa(table, method="randolph"))


def _spread(scores: pd.Series) -> tuple[float, float]:
    if scores.empty:
        return float("nan"), float("nan")
    return float(scores.std(ddof=0)), float(scores.value_counts(normalize=True).iloc[0])


def agreement_table(long: pd.DataFrame) -> pd.DataFrame:
    """One row per dimension (rubric order) with the statistics described above.

    ``long`` is ``scores_long`` without ground-truth rows: one annotator's score per row.
    """
    rows = []
    units = rated_units(long)
    for dimension in RUBRIC.keys:
        ratings = units[units["dimension"] == dimension]
        std, modal = _spread(long.loc[long["dimension"] == dimension, "score"])
        if ratings.empty:
            stats = dict(units=0, ratings=0, alpha=np.nan, icc=np.nan, exact=np.nan,
                         within_2=np.nan, randolph_kappa=np.nan)
        else:
            exact, within_2 = _pairwise(ratings)
            stats = dict(
                units=int(ratings.groupby(UNIT).ngroups),
                ratings=len(ratings),
                alpha=_alpha(ratings),
                icc=_icc(ratings),
                exact=exact,
                within_2=within_2,
                randolph_kappa=_randolph(ratings, dimension),
            )
        rows.append(
            dict(dimension=dimension, **stats, std=std, modal_share=modal,
                 low_variance=bool(modal >= LOW_VARIANCE_MODAL_SHARE))
        )
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)

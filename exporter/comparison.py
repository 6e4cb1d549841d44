"""Human scores against the model's, against reference ratings, and against each other.

- ``human_vs_model``: per dimension and overall, annotator-averaged human scores against the
  episode's stored model evaluation, both agents pooled, as Sotopia's
  ``examples/benchmark_evaluator.py`` does: Pearson and Spearman (with p-values), MSE, and mean
  bias (human − model).
- ``qualification``: each annotator against reference ratings; an annotator passes when every
  score on every reference unit is within ±2 of the reference (Sotopia's pilot-study rule).
- ``annotator_table``: per annotator, annotation count, median time, and mean absolute
  difference from the other annotators of the same units.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from ..dimensions import DIMENSION_KEYS

UNIT = ["episode_id", "agent"]
OVERALL = "overall"
QUALIFICATION_TOLERANCE = 2
COMPARISON_COLUMNS = [
    "dimension", "n", "pearson", "pearson_p", "spearman", "spearman_p", "mse", "bias",
]


def with_overall(scores: pd.DataFrame) -> pd.DataFrame:
    """``scores`` (episode_id, agent, dimension, score) plus each unit's overall (mean of 7)."""
    overall = scores.groupby(UNIT, as_index=False)["score"].mean().assign(dimension=OVERALL)
    return pd.concat([scores[[*UNIT, "dimension", "score"]], overall], ignore_index=True)


def _correlate(human: pd.Series, model: pd.Series) -> dict[str, float]:
    n = len(human)
    if n < 3 or human.nunique() < 2 or model.nunique() < 2:
        pearson = spearman = (np.nan, np.nan)
    else:
        pearson = stats.pearsonr(human, model)
        spearman = stats.spearmanr(human, model)
    return {
        "n": n,
        "pearson": float(pearson[0]),
        "pearson_p": float(pearson[1]),
        "spearman": float(spearman[0]),
        "spearman_p": float(spearman[1]),
        "mse": float(((human - model) ** 2).mean()) if n else np.nan,
        "bias": float((human - model).mean()) if n else np.nan,
    }


def paired_scores(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Annotator-averaged human score next to the model score, per unit and dimension."""
    human = with_overall(long.groupby([*UNIT, "dimension"], as_index=False)["score"].mean())
    model = with_overall(model_scores)
    return human.merge(model, on=[*UNIT, "dimension"], suffixes=("_human", "_model"))


def human_vs_model(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """One row per dimension, then ``overall``; empty when no episode has a model score."""
    paired = paired_scores(long, model_scores)
    rows = []
    for dimension in (*DIMENSION_KEYS, OVERALL):
        subset = paired[paired["dimension"] == dimension]
        rows.append({"dimension": dimension,
                     **_correlate(subset["score_human"], subset["score_model"])})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def qualification(long: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Per annotator: units compared, the largest gap per dimension, and pass/fail.

    ``reference`` has ``episode_id, agent, dimension, score`` (several reference raters are
    averaged). Annotators who rated no reference unit are not listed.
    """
    truth = reference.groupby([*UNIT, "dimension"], as_index=False)["score"].mean()
    compared = long.merge(truth, on=[*UNIT, "dimension"], suffixes=("", "_reference"))
    if compared.empty:
        return pd.DataFrame(columns=["annotator_id", "units", "passed", "failed_dimensions"])
    compared["gap"] = (compared["score"] - compared["score_reference"]).abs()
    worst = compared.pivot_table(
        index="annotator_id", columns="dimension", values="gap", aggfunc="max"
    ).reindex(columns=list(DIMENSION_KEYS))
    units = compared.groupby("annotator_id")[UNIT].apply(lambda u: len(u.drop_duplicates()))
    failed = worst.gt(QUALIFICATION_TOLERANCE)
    table = pd.DataFrame({
        "units": units,
        "passed": ~failed.any(axis=1),
        "failed_dimensions": failed.apply(lambda row: ", ".join(row.index[row]), axis=1),
    })
    table = table.join(worst.add_prefix("max_gap_"))
    return table.reset_index().rename(columns={"index": "annotator_id"})


def annotator_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per annotator: annotations, median lead time (s), mean |score − others' mean| per unit."""
    cell = long.groupby([*UNIT, "dimension"])["score"]
    total, count = cell.transform("sum"), cell.transform("size")
    others = (total - long["score"]) / (count - 1).where(count > 1)
    frame = long.assign(gap=(long["score"] - others).abs())
    per_annotation = frame.drop_duplicates("annotation_id")
    table = pd.DataFrame({
        "annotations": per_annotation.groupby("annotator_id").size(),
        "median_lead_time_s": per_annotation.groupby("annotator_id")["lead_time"].median(),
        "mean_abs_diff_from_others": frame.groupby("annotator_id")["gap"].mean(),
    })
    return table.rename_axis("annotator_id").reset_index()

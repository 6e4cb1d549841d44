"""Human scores against each judge's, against reference ratings, and against each other:
``human_vs_model``, ``model_vs_human_noise`` (is the model as close as one more human?),
``model_coverage``, ``qualification`` and ``annotator_table``. Each is made per judge on the
episodes it evaluated; the columns are defined in README.md's report table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats

from ..dimensions import DIMENSION_KEYS
from .bootstrap import (
    DEFAULT_BOOTSTRAP,
    Bootstrap,
    Draw,
    moments,
    pearson_from_moments,
    weighted_spearman,
)
from .reliability import UNIT

OVERALL = "overall"
PANELS = (*DIMENSION_KEYS, OVERALL)
QUALIFICATION_TOLERANCE = 2
BOOTSTRAP_COLUMNS = ["bootstrap_resamples", "bootstrap_seed"]
JUDGE = "evaluator"
COMPARISON_COLUMNS = [
    JUDGE, "dimension", "n", "pearson", "pearson_ci_low", "pearson_ci_high", "pearson_p",
    "spearman", "spearman_ci_low", "spearman_ci_high", "spearman_p", "mse", "bias",
    *BOOTSTRAP_COLUMNS,
]
NOISE_STATISTICS = (
    "human_human_r", "model_human_r", "r_difference",
    "human_human_mad", "model_human_mad", "mad_difference",
)
NOISE_COLUMNS = [
    JUDGE, "dimension", "units", "rows",
    *[f"{name}{part}" for name in NOISE_STATISTICS for part in ("", "_ci_low", "_ci_high")],
    "verdict", *BOOTSTRAP_COLUMNS,
]


def with_overall(scores: pd.DataFrame, keys: list[str] = UNIT) -> pd.DataFrame:
    """``scores`` (``keys``, dimension, score) plus each key's overall (mean of the dimensions)."""
    overall = scores.groupby(keys, as_index=False)["score"].mean().assign(dimension=OVERALL)
    return pd.concat([scores[[*keys, "dimension", "score"]], overall], ignore_index=True)


def _per_panel(
    rows: pd.DataFrame,
    statistics: Callable[[pd.DataFrame, Draw], np.ndarray],
    bootstrap: Bootstrap,
) -> tuple[list[np.ndarray], np.ndarray]:
    """``statistics(panel_rows, draw)`` per dimension and overall: estimates and intervals.

    The estimate is the statistic on the data as it is (every episode drawn once).
    """
    episodes = pd.Index(sorted(rows["episode_id"].unique()))
    panels = [rows[rows["dimension"] == panel] for panel in PANELS]
    where = [episodes.get_indexer(panel["episode_id"]) for panel in panels]
    everything = np.ones((1, len(episodes)))
    with np.errstate(divide="ignore", invalid="ignore"):  # an empty or constant panel: NaN
        estimates = [statistics(panel, Draw(everything, index))[0]
                     for panel, index in zip(panels, where)]
    replicates = bootstrap.replicates(len(episodes), lambda weights: np.stack(
        [statistics(panel, Draw(weights, index)) for panel, index in zip(panels, where)], axis=1
    ))
    return estimates, bootstrap.interval(replicates, (len(PANELS), len(estimates[0])))


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


def judge_scores(model_scores: pd.DataFrame) -> pd.DataFrame:
    """``model_scores`` plus each judge's overall; a judge without a name is named ""."""
    named = model_scores.assign(**{JUDGE: model_scores[JUDGE].fillna("").astype(str)
                                   if JUDGE in model_scores else ""})
    return with_overall(named, [*UNIT, JUDGE])


def _per_judge(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``(judge, its rows)`` in name order; one unnamed judge with no rows when there are none."""
    return list(rows.groupby(JUDGE, sort=True)) or [("", rows)]


def paired_scores(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Annotator-averaged human score next to each judge's score, per unit and dimension."""
    human = with_overall(long.groupby([*UNIT, "dimension"], as_index=False)["score"].mean())
    return human.merge(judge_scores(model_scores), on=[*UNIT, "dimension"],
                       suffixes=("_human", "_model"))


def _correlations(paired: pd.DataFrame, draw: Draw) -> np.ndarray:
    human, model = paired["score_human"].to_numpy(float), paired["score_model"].to_numpy(float)
    if len(paired) < 3:
        return np.full((draw.weights.shape[0], 2), np.nan)
    return np.stack([pearson_from_moments(draw.totals(moments(human, model))),
                     weighted_spearman(human, model, draw)], axis=1)


def _recorded(bootstrap: Bootstrap) -> dict[str, int]:
    return dict(bootstrap_resamples=bootstrap.resamples, bootstrap_seed=bootstrap.seed)


def human_vs_model(paired: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """Per judge, one row per dimension, then ``overall``, from ``paired_scores``; n = 0 when
    no episode has a model score."""
    rows = []
    for judge, judged in _per_judge(paired):
        rows += _versus(judge, judged, bootstrap)
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _versus(judge: str, paired: pd.DataFrame, bootstrap: Bootstrap) -> list[dict[str, object]]:
    """One judge's ``human_vs_model`` rows."""
    _, intervals = _per_panel(paired, _correlations, bootstrap)
    rows = []
    for panel, ((p_low, p_high), (s_low, s_high)) in zip(PANELS, intervals):
        subset = paired[paired["dimension"] == panel]
        rows.append({JUDGE: judge, "dimension": panel,
                     **_correlate(subset["score_human"], subset["score_model"]),
                     "pearson_ci_low": p_low, "pearson_ci_high": p_high,
                     "spearman_ci_low": s_low, "spearman_ci_high": s_high,
                     **_recorded(bootstrap)})
    return rows


def _others_mean(long: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Per row, the mean score of the other rows of its ``keys`` group (NaN when alone)."""
    cell = long.groupby(keys)["score"]
    total, count = cell.transform("sum"), cell.transform("size")
    return (total - long["score"]) / (count - 1).where(count > 1)


def held_out_rows(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Per unit with ≥ 2 annotators, dimension and overall, annotator held out and judge: the
    held-out ``score``, the ``others`` mean of the unit's other annotators and the judge's
    ``model`` score."""
    rated = with_overall(long, [*UNIT, "annotation_id"])
    rated = rated.assign(others=_others_mean(rated, [*UNIT, "dimension"])).dropna(
        subset=["others"]
    )
    model = judge_scores(model_scores).rename(columns={"score": "model"})
    return rated.merge(model, on=[*UNIT, "dimension"])


def _noise(rows: pd.DataFrame, draw: Draw) -> np.ndarray:
    human, others, model = (rows[c].to_numpy(float) for c in ("score", "others", "model"))
    totals = draw.totals(np.column_stack([
        moments(human, others), moments(model, others),
        np.abs(human - others), np.abs(model - others),
    ]))
    human_r, model_r = pearson_from_moments(totals[:, 0:6]), pearson_from_moments(totals[:, 6:12])
    human_mad, model_mad = totals[:, 12] / totals[:, 0], totals[:, 13] / totals[:, 0]
    return np.stack([human_r, model_r, model_r - human_r,
                     human_mad, model_mad, model_mad - human_mad], axis=1)


def _verdict(low: float, high: float) -> str:
    if np.isnan(low) or np.isnan(high):
        return ""
    if high < 0:
        return "closer than a human"
    return "farther than a human" if low > 0 else "as close as a human"


def model_vs_human_noise(
    long: pd.DataFrame, model_scores: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> pd.DataFrame:
    """Per judge, one row per dimension, then ``overall``: the judge against the spread
    between humans."""
    rows = held_out_rows(long, model_scores)
    if rows.empty:
        return pd.DataFrame(columns=NOISE_COLUMNS)
    table = []
    for judge, judged in _per_judge(rows):
        table += _against_noise(judge, judged, bootstrap)
    return pd.DataFrame(table, columns=NOISE_COLUMNS)


def _against_noise(judge: str, rows: pd.DataFrame, bootstrap: Bootstrap) -> list[dict[str, object]]:
    """One judge's ``model_vs_human_noise`` rows."""
    estimates, intervals = _per_panel(rows, _noise, bootstrap)
    table = []
    for panel, estimate, interval in zip(PANELS, estimates, intervals):
        subset = rows[rows["dimension"] == panel]
        row = {JUDGE: judge, "dimension": panel, "units": len(subset[UNIT].drop_duplicates()),
               "rows": len(subset), **_recorded(bootstrap)}
        for name, value, (low, high) in zip(NOISE_STATISTICS, estimate, interval):
            row.update({name: value, f"{name}_ci_low": low, f"{name}_ci_high": high})
        row["verdict"] = _verdict(*interval[NOISE_STATISTICS.index("mad_difference")])
        table.append(row)
    return table


def model_coverage(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Per dimension: the episodes and units (episode × agent) the crowd rated, and how many
    of them have a model score to compare with."""
    rated = long[["episode_id", "agent", "dimension"]].drop_duplicates()
    scored = model_scores[["episode_id", "agent", "dimension"]].drop_duplicates()
    both = rated.merge(scored, on=["episode_id", "agent", "dimension"])
    rows = []
    for key in DIMENSION_KEYS:
        units, paired = rated[rated["dimension"] == key], both[both["dimension"] == key]
        rows.append({"dimension": key, "episodes": units["episode_id"].nunique(),
                     "units": len(units), "episodes_with_model": paired["episode_id"].nunique(),
                     "units_with_model": len(paired)})
    return pd.DataFrame(rows, columns=["dimension", "episodes", "units", "episodes_with_model",
                                       "units_with_model"])


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
    others = _others_mean(long, [*UNIT, "dimension"])
    frame = long.assign(gap=(long["score"] - others).abs())
    per_annotation = frame.drop_duplicates("annotation_id")
    table = pd.DataFrame({
        "annotations": per_annotation.groupby("annotator_id").size(),
        "median_lead_time_s": per_annotation.groupby("annotator_id")["lead_time"].median(),
        "mean_abs_diff_from_others": frame.groupby("annotator_id")["gap"].mean(),
    })
    return table.rename_axis("annotator_id").reset_index()

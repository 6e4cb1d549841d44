"""Inter-annotator agreement per dimension, over episode × agent units, pooled
(``agreement_table``) and per model pair and agent position (``agreement_breakdown``).

The columns (α, ICC, pair shares, κ, spread, the ``pi_*`` figures) are defined in README.md's
``agreement.csv`` row; the formulas are in ``reliability``.
"""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd

from ..dimensions import RUBRIC
from .bootstrap import DEFAULT_BOOTSTRAP, Bootstrap
from .reliability import (
    alpha_and_icc,
    code_counts,
    pair_gaps,
    randolph_kappa,
    rated_units,
    table_sums,
    unit_mean,
    unit_table,
)
from .sotopia_pi import PI_COLUMNS, pi_figures

LOW_VARIANCE_MODAL_SHARE = 0.9
INTERVAL_STATISTICS = ("alpha", "icc1", "icc1k")
AGREEMENT_COLUMNS = [
    "dimension", "units", "ratings", "max_raters",
    "alpha", "alpha_ci_low", "alpha_ci_high",
    "icc1", "icc1_ci_low", "icc1_ci_high",
    "icc1k", "icc1k_ci_low", "icc1k_ci_high", "icc_k0",
    "pairs_exact", "pairs_within_2", "randolph_kappa_rubric_binary",
    *PI_COLUMNS,
    "std", "modal_share", "low_variance",
    "bootstrap_resamples", "bootstrap_seed",
]
BREAKDOWN_COLUMNS = ["breakdown", "group", *AGREEMENT_COLUMNS]
UNTAGGED = "(untagged)"


def interval_alpha(values: np.ndarray) -> float:
    """Krippendorff's interval α of a ``unit_table``'s values; NaN with one value only."""
    if np.unique(values[~np.isnan(values)]).size < 2:
        return float("nan")
    # Slots × units, as krippendorff reads them.
    return float(krippendorff.alpha(reliability_data=values.T, level_of_measurement="interval"))


def rubric_binarize(scores: pd.Series | np.ndarray, dimension: str) -> pd.Series | np.ndarray:
    """Codes scaled by the rubric: ``round(score / max|range|)`` (half to even, as pandas)."""
    return np.round(scores / RUBRIC[dimension].max_abs)


def _rubric_kappa(values: np.ndarray, dimension: str) -> float:
    categories = sorted(set(rubric_binarize(pd.Series(RUBRIC[dimension].values), dimension)))
    codes = rubric_binarize(values, dimension)
    return randolph_kappa(code_counts(codes, categories), len(categories))


def _spread(scores: pd.Series) -> tuple[float, float]:
    if scores.empty:
        return float("nan"), float("nan")
    return float(scores.std(ddof=0)), float(scores.value_counts(normalize=True).iloc[0])


def _pair_shares(values: np.ndarray) -> dict[str, float]:
    gaps = pair_gaps(values)
    valid = ~np.isnan(gaps)
    return dict(pairs_exact=unit_mean(gaps == 0, valid), pairs_within_2=unit_mean(gaps <= 2, valid))


def _intervals(
    tables: list[pd.DataFrame], episodes: pd.Index, bootstrap: Bootstrap
) -> tuple[np.ndarray, np.ndarray]:
    """Per dimension: α, ICC(1,1), ICC(1,k), k₀ from all episodes, and their intervals."""
    sums = np.stack([table_sums(table, episodes) for table in tables], axis=1)
    # episodes × dimensions × sums
    point = alpha_and_icc(sums.sum(axis=0))
    replicates = bootstrap.replicates(
        len(episodes),
        # One matrix product per chunk of resamples: (resamples × episodes) @ (episodes × …).
        lambda weights: alpha_and_icc(np.tensordot(weights, sums, axes=1))[..., :3],
    )
    return point, bootstrap.interval(replicates, (len(RUBRIC.keys), 3))


def agreement_table(long: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """One row per dimension (rubric order) with the statistics described above.

    ``long`` is ``scores_long`` without ground-truth rows: one annotator's score per row.
    """
    units = rated_units(long)
    # Each dimension's units × slots, built once: every figure below reads it.
    tables = [unit_table(units[units["dimension"] == key]) for key in RUBRIC.keys]
    point, interval = _intervals(tables, pd.Index(sorted(long["episode_id"].unique())), bootstrap)
    rows = []
    for index, (dimension, table) in enumerate(zip(RUBRIC.keys, tables)):
        values = table.to_numpy(dtype=float)
        everything = long[long["dimension"] == dimension]
        std, modal = _spread(everything["score"])
        row = dict(dimension=dimension, units=0, ratings=0, max_raters=0,
                   **pi_figures(everything["score"], values), std=std, modal_share=modal,
                   bootstrap_resamples=bootstrap.resamples, bootstrap_seed=bootstrap.seed)
        if len(table):
            row.update(
                units=len(table), ratings=int((~np.isnan(values)).sum()),
                max_raters=values.shape[1], alpha=interval_alpha(values),
                icc1=point[index, 1], icc1k=point[index, 2], icc_k0=point[index, 3],
                randolph_kappa_rubric_binary=_rubric_kappa(values, dimension),
                **_pair_shares(values),
            )
            for column, (low, high) in zip(INTERVAL_STATISTICS, interval[index]):
                row.update({f"{column}_ci_low": low, f"{column}_ci_high": high})
        row["low_variance"] = bool(
            modal >= LOW_VARIANCE_MODAL_SHARE or (row["units"] and np.isnan(row.get("alpha")))
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def model_pair(long: pd.DataFrame) -> pd.Series:
    """Each row's model pair: its ``source_tag``, else its ``models``, else ``(untagged)``."""
    labels = pd.Series(UNTAGGED, index=long.index, dtype=object)
    for column in ("models", "source_tag"):  # the later, more specific, wins
        if column in long:
            named = long[column].fillna("").astype(str)
            labels = labels.where(named == "", named)
    return labels


def agreement_breakdown(
    long: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> pd.DataFrame:
    """``agreement_table`` per model pair and per agent position (``breakdown``, ``group``)."""
    groupings = {
        "model pair": model_pair(long),
        "agent": "agent " + long["agent"].astype(str),
    }
    parts = [
        agreement_table(subset, bootstrap).assign(breakdown=breakdown, group=group)
        for breakdown, labels in groupings.items()
        for group, subset in long.groupby(labels, sort=True)
    ]
    if not parts:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    return pd.concat(parts, ignore_index=True)[BREAKDOWN_COLUMNS]

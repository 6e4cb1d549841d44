"""Gwet's AC1 and AC2 per dimension, computed by irrCAC, with the episode bootstrap of α.

They stay readable where ratings crowd one end of the scale, which α does not (README.md,
"Gwet's AC1 and AC2"). A resample is evaluated as weighted sums over episodes, equal to the
library's figure (a test checks this), so a thousand resamples cost a few matrix products.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from irrCAC.raw import CAC
from irrCAC.weights import Weights

from ..dimensions import RUBRIC
from .bootstrap import DEFAULT_BOOTSTRAP, Bootstrap, Draw
from .reliability import UNIT, category_counts, rated_units, unit_table

WEIGHTS = {"ac1": "identity", "ac2": "ordinal"}
GWET_COLUMNS = [
    "dimension", "units", "ratings", "categories",
    *[f"{name}{part}" for name in WEIGHTS for part in ("", "_ci_low", "_ci_high")],
    "bootstrap_resamples", "bootstrap_seed",
]


def gwet(table: pd.DataFrame, dimension: str, weights: str) -> float:
    """irrCAC's Gwet coefficient of a units × raters ``table`` (NaN: no rating), with the
    rubric's scores for ``dimension`` as the categories; NaN without a unit."""
    if table.empty:
        return float("nan")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # One unit leaves the library's standard error (not used here) undefined.
        warnings.simplefilter("ignore", RuntimeWarning)
        result = CAC(table, weights=weights, categories=RUBRIC[dimension].values,
                     digits=15).gwet()
    return float(result["est"]["coefficient_value"])


def resampled_coefficients(
    counts: np.ndarray, weights: list[np.ndarray], draw: Draw
) -> np.ndarray:
    """Resamples × len(weights): Gwet's coefficient for each weight matrix, each unit counted
    as often as its episode was drawn.

    As irrCAC computes it: pa = mean over units of Σₖ cₖ((Wc)ₖ − 1) / (r(r − 1)), πₖ = mean over
    units of cₖ / r, pe = ΣW · Σₖ πₖ(1 − πₖ) / (q(q − 1)), coefficient = (pa − pe) / (1 − pe);
    c: a unit's category counts, r its ratings, q the categories.
    """
    raters = counts.sum(axis=1)
    agreement = [(counts * (counts @ matrix.T - 1)).sum(axis=1) / (raters * (raters - 1))
                 for matrix in weights]
    totals = draw.totals(np.column_stack([np.ones(len(counts)), *agreement,
                                          counts / raters[:, None]]))
    units, shares = totals[:, :1], totals[:, 1 + len(weights):] / totals[:, :1]
    q = counts.shape[1]
    spread = (shares * (1 - shares)).sum(axis=1, keepdims=True) / (q * (q - 1))
    chance = np.array([matrix.sum() for matrix in weights]) * spread
    observed = totals[:, 1:1 + len(weights)] / units
    return (observed - chance) / (1 - chance)


def gwet_table(long: pd.DataFrame, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> pd.DataFrame:
    """One row per dimension (rubric order): AC1 and AC2 with their intervals.

    ``long`` is ``scores_long`` without ground-truth rows: one annotator's score per row.
    """
    units = rated_units(long)
    episodes = pd.Index(sorted(long["episode_id"].unique()))
    rows, parts = [], []
    for key in RUBRIC.keys:
        ratings = units[units["dimension"] == key]
        table = unit_table(ratings)
        categories = RUBRIC[key].values
        matrices = [Weights(categories)[name] for name in WEIGHTS.values()]
        # Units in the same order as the table's rows: sorted by episode and agent.
        unit_episodes = ratings[UNIT].drop_duplicates().sort_values(UNIT)["episode_id"]
        counts = category_counts(ratings, ratings["score"], categories)
        parts.append((counts, matrices, episodes.get_indexer(unit_episodes)))
        rows.append({"dimension": key, "units": len(table), "ratings": len(ratings),
                     "categories": len(categories),
                     **{name: gwet(table, key, weights) for name, weights in WEIGHTS.items()},
                     "bootstrap_resamples": bootstrap.resamples, "bootstrap_seed": bootstrap.seed})
    replicates = bootstrap.replicates(len(episodes), lambda draws: np.stack(
        [resampled_coefficients(counts, matrices, Draw(draws, episode))
         for counts, matrices, episode in parts], axis=1))
    intervals = bootstrap.interval(replicates, (len(rows), len(WEIGHTS)))
    for row, interval in zip(rows, intervals):
        for name, (low, high) in zip(WEIGHTS, interval):
            row.update({f"{name}_ci_low": low, f"{name}_ci_high": high})
    return pd.DataFrame(rows, columns=GWET_COLUMNS)

"""The formulas behind the agreement figures, as pure functions of one dimension's ratings.

Every formula uses every rating of a unit (one agent of one episode) rated twice or more.
α and the ICCs come from per-episode sums, so a bootstrap resample costs one matrix product;
the ICC formulas are in docs/internals.md, "Agreement formulas".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

UNIT = ["episode_id", "agent"]


def rated_units(long: pd.DataFrame) -> pd.DataFrame:
    """Ratings of units with ≥ 2 annotators, each with its ``slot`` (0, 1, … by annotation id)."""
    counts = long.groupby([*UNIT, "dimension"])["score"].transform("size")
    multi = long[counts >= 2].sort_values("annotation_id", kind="stable")
    return multi.assign(slot=multi.groupby([*UNIT, "dimension"]).cumcount())


def unit_table(ratings: pd.DataFrame, column: str = "score") -> pd.DataFrame:
    """Units × slots: a unit's ratings on its row, NaN where it has fewer than the most."""
    return ratings.set_index([*UNIT, "slot"])[column].unstack("slot")


def pair_gaps(values: np.ndarray) -> np.ndarray:
    """Units × pairs of slots of a ``unit_table``'s values: |a − b|, NaN where a slot is empty."""
    first, second = np.triu_indices(values.shape[1], 1)
    return np.abs(values[:, first] - values[:, second])


def unit_mean(values: np.ndarray, valid: np.ndarray) -> float:
    """``values`` (units × pairs) averaged over each unit's ``valid`` pairs, then over units:
    units weigh alike."""
    return float((np.where(valid, values, 0).sum(axis=1) / valid.sum(axis=1)).mean())


def category_counts(ratings: pd.DataFrame, codes: pd.Series, categories: list) -> np.ndarray:
    """Units × ``categories``: how many of a unit's ratings fall in each category."""
    return (
        ratings[UNIT].assign(category=codes.to_numpy())
        .groupby([*UNIT, "category"]).size().unstack(fill_value=0)
        .reindex(columns=categories, fill_value=0)
        .to_numpy()
    )


def code_counts(codes: np.ndarray, categories: list) -> np.ndarray:
    """Units × ``categories`` from a ``unit_table``'s codes (NaN: no rating)."""
    return (codes[:, :, None] == np.asarray(categories, dtype=float)).sum(axis=1)


def randolph_kappa(counts: np.ndarray, categories: int) -> float:
    """Randolph's free-marginal multirater κ; units may have different numbers of raters.

    ``counts`` is units × categories (ratings per category; each unit ≥ 2 ratings). A unit's
    agreement is the share of its ordered rater pairs that agree, Σ nᵢc(nᵢc − 1)/(nᵢ(nᵢ − 1)),
    so it is at most 1 whatever nᵢ; chance agreement is 1/categories. With the same nᵢ on
    every unit this is statsmodels' ``fleiss_kappa(table, method="randolph")``.
    """
    if counts.shape[0] == 0 or categories < 2:
        return float("nan")
    raters = counts.sum(axis=1)
    agreement = (counts * (counts - 1)).sum(axis=1) / (raters * (raters - 1))
    chance = 1 / categories
    return float((agreement.mean() - chance) / (1 - chance))


# Per-episode sums over its rated units, in this order (the last axis of episode_sums).
SUMS = ("units", "ratings", "total", "total_sq", "unit_total_sq_over_n", "ratings_sq",
        "pair_sq_diffs")


def episode_sums(ratings: pd.DataFrame, episodes: pd.Index) -> np.ndarray:
    """``table_sums`` of ``rated_units`` rows."""
    return table_sums(unit_table(ratings), episodes)


def table_sums(table: pd.DataFrame, episodes: pd.Index) -> np.ndarray:
    """Episodes × ``SUMS``: the sufficient statistics of α and ICC, summed over each episode's
    units of a ``unit_table`` (zeros for an episode without a rated unit)."""
    values = table.to_numpy(dtype=float)
    n = (~np.isnan(values)).sum(axis=1).astype(float)
    total, total_sq = np.nansum(values, axis=1), np.nansum(values**2, axis=1)
    per_unit = np.column_stack([
        np.ones_like(n), n, total, total_sq, total**2 / n, n**2,
        # Σ over ordered pairs i ≠ j of (yᵢ − yⱼ)², divided by n − 1 as α's coincidences are.
        2 * (n * total_sq - total**2) / (n - 1),
    ])
    episode = episodes.get_indexer(table.index.get_level_values("episode_id"))
    return np.column_stack([np.bincount(episode, weights=column, minlength=len(episodes))
                            for column in per_unit.T]).reshape(len(episodes), len(SUMS))


def alpha_and_icc(sums: np.ndarray) -> np.ndarray:
    """Interval α, ICC(1,1), ICC(1,k) and k₀ from ``SUMS`` totals (last axis), NaN if undefined.

    α = 1 − D_o/D_e with D_o = Σ pair_sq_diffs / N and D_e = 2(N·Σy² − (Σy)²)/(N(N − 1)).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        units, n, total, total_sq, between_sq, n_sq, pair_sq = np.moveaxis(sums, -1, 0)
        expected = 2 * (n * total_sq - total**2)
        alpha = np.where(expected > 1e-9, 1 - (n - 1) * pair_sq / expected, np.nan)
        ms_between = (between_sq - total**2 / n) / (units - 1)
        ms_within = (total_sq - between_sq) / (n - units)
        k0 = (n - n_sq / n) / (units - 1)
        defined = (units >= 2) & (n > units) & (ms_between + (k0 - 1) * ms_within > 1e-12)
        icc1 = np.where(defined, (ms_between - ms_within) / (ms_between + (k0 - 1) * ms_within),
                        np.nan)
        icc1k = np.where(defined & (ms_between > 1e-12), (ms_between - ms_within) / ms_between,
                         np.nan)
        return np.stack([alpha, icc1, icc1k, k0], axis=-1)

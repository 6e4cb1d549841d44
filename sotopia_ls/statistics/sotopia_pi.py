"""Sotopia-π's agreement figures, computed as its script (``human_eval/agreement.py`` of
sotopia-lab/sotopia-pi, commit 5756713) computes them, so a study can be set next to that
paper's numbers; they are not this report's headline figures. Where and why they differ from
ours is in README.md, "Comparable with Sotopia-π".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .reliability import code_counts, pair_gaps, randolph_kappa, rated_units, unit_mean, unit_table

PI_COLUMNS = ["pi_divisor", "pi_pairwise_agreement", "pi_alpha", "pi_randolph_kappa"]


def pi_binarize(scores: np.ndarray, divisor: float) -> np.ndarray:
    """Sotopia-π's codes: ``round(score / divisor)``, the divisor being max|score observed|;
    0 where that is 0/0 (a missing score stays missing)."""
    with np.errstate(invalid="ignore"):
        codes = np.round(scores / divisor)
    return np.where(np.isnan(codes) & ~np.isnan(scores), 0.0, codes)


def _chance_agreement(codes: np.ndarray) -> float:
    """Agreement 1 − |a − b| of two different ratings drawn from ``codes`` without replacement."""
    values, n = np.unique(codes, return_counts=True)
    values, n = values.astype(float), n.astype(float)
    same = np.equal.outer(values, values)
    pairs = np.outer(n, n) - np.diag(n) * same  # ordered pairs of different ratings
    agreement = 1 - np.abs(np.subtract.outer(values, values))
    return float((pairs * agreement).sum() / pairs.sum())


def sotopia_pi_figures(ratings: pd.DataFrame) -> dict[str, float]:
    """``PI_COLUMNS`` for one dimension's ratings (``episode_id``, ``agent``, ``score``, …)."""
    return pi_figures(ratings["score"], unit_table(rated_units(ratings)).to_numpy(dtype=float))


def pi_figures(scores: pd.Series, values: np.ndarray) -> dict[str, float]:
    """``PI_COLUMNS`` from all of a dimension's ``scores`` and the ``unit_table`` values of its
    units rated twice or more."""
    divisor = float(scores.abs().max()) if len(scores) else float("nan")
    if not len(values):
        return dict(pi_divisor=divisor, pi_pairwise_agreement=np.nan, pi_alpha=np.nan,
                    pi_randolph_kappa=np.nan)
    codes = pi_binarize(values, divisor)
    gaps = pair_gaps(codes)
    pairwise = unit_mean(1 - gaps, ~np.isnan(gaps))
    chance = _chance_agreement(codes[~np.isnan(codes)])
    alpha = np.nan if chance == 1 else 1 - (1 - pairwise) / (1 - chance)
    observed = sorted(set(pi_binarize(scores.to_numpy(dtype=float), divisor)))
    # One observed code: every pair agrees; the script calls that κ = 1.
    kappa = 1.0 if len(observed) == 1 else randolph_kappa(code_counts(codes, observed),
                                                          len(observed))
    return dict(pi_divisor=divisor, pi_pairwise_agreement=pairwise, pi_alpha=alpha,
                pi_randolph_kappa=kappa)

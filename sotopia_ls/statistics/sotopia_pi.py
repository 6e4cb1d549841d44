"""Sotopia-π's agreement figures, computed as its script (``human_eval/agreement.py`` of
sotopia-lab/sotopia-pi, commit 5756713) computes them, so a study can be set next to that
paper's numbers; they are not this report's headline figures. Where and why they differ from
ours is in README.md, "Comparable with Sotopia-π".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .reliability import category_counts, pair_gaps, randolph_kappa, rated_units, unit_mean

PI_COLUMNS = ["pi_divisor", "pi_pairwise_agreement", "pi_alpha", "pi_randolph_kappa"]


def pi_binarize(scores: pd.Series) -> pd.Series:
    """Sotopia-π's codes: ``round(score / max|score observed|)``, 0 where that is 0/0."""
    return (scores / scores.abs().max()).round(0).fillna(0)


def _chance_agreement(codes: pd.Series) -> float:
    """Agreement 1 − |a − b| of two different ratings drawn from ``codes`` without replacement."""
    counts = codes.value_counts()
    values, n = counts.index.to_numpy(dtype=float), counts.to_numpy(dtype=float)
    same = np.equal.outer(values, values)
    pairs = np.outer(n, n) - np.diag(n) * same  # ordered pairs of different ratings
    agreement = 1 - np.abs(np.subtract.outer(values, values))
    return float((pairs * agreement).sum() / pairs.sum())


def sotopia_pi_figures(ratings: pd.DataFrame) -> dict[str, float]:
    """``PI_COLUMNS`` for one dimension's ratings (``episode_id``, ``agent``, ``score``, …)."""
    divisor = float(ratings["score"].abs().max()) if len(ratings) else float("nan")
    coded = ratings.assign(code=pi_binarize(ratings["score"].astype(float)))
    multi = rated_units(coded)
    if multi.empty:
        return dict(pi_divisor=divisor, pi_pairwise_agreement=np.nan, pi_alpha=np.nan,
                    pi_randolph_kappa=np.nan)
    pairs = pair_gaps(multi, "code")
    pairwise = unit_mean(pairs, 1 - pairs["gap"])
    chance = _chance_agreement(multi["code"])
    alpha = np.nan if chance == 1 else 1 - (1 - pairwise) / (1 - chance)
    observed = sorted(coded["code"].unique())
    counts = category_counts(multi, multi["code"], observed)
    # One observed code: every pair agrees; the script calls that κ = 1.
    kappa = 1.0 if len(observed) == 1 else randolph_kappa(counts, len(observed))
    return dict(pi_divisor=divisor, pi_pairwise_agreement=pairwise, pi_alpha=alpha,
                pi_randolph_kappa=kappa)

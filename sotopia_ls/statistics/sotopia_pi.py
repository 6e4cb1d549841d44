"""Sotopia-π's agreement figures, computed as its script computes them.

These columns exist so that a study can be set next to the numbers of the Sotopia-π paper;
they are not this report's headline figures (interval α and ICC are). The script is
``human_eval/agreement.py`` of sotopia-lab/sotopia-pi (branch
``feature/add-human-eval-agreement-code``, commit 5756713, 2024-04-01). Per dimension it pools
every file and both agents (a unit is one agent of one episode) and computes:

- ``pi_divisor``: its binarization divides by the largest |score| *observed* in the pooled
  ratings, not by the rubric's range: code = round(score / divisor) (half to even, as pandas
  rounds), 0 when every score is 0. On a dimension whose ratings never reach the end of the
  scale the codes differ from a rubric-based binarization.
- ``pi_pairwise_agreement``: per unit with two ratings or more, the mean over its rater pairs
  of 1 − |code₁ − code₂|, averaged over units (codes −1 and 1 make a pair worth −1).
- ``pi_alpha``: 1 − (1 − pairwise) / (1 − chance), chance being the same agreement between
  two different ratings drawn from all codes of those units; undefined (NaN) when every code
  is the same. For two codes and two raters per unit it is Krippendorff's nominal α on the
  codes; it is not comparable with the interval α on the scores.
- ``pi_randolph_kappa``: Randolph's κ on the codes with as many categories as codes
  *observed*. The script applies the two-rater formula to every unit, so a unit with three
  ratings counts for more than full agreement (κ > 1, or infinite with one category); here
  each unit uses its own rater count, which is the same on two-rater units. With one code
  observed the script reports κ = 1, and so does this column (flagged as near-constant).
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

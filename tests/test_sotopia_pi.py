"""A researcher sets our study next to the Sotopia-π paper's agreement numbers.

The ``pi_*`` columns must be what Sotopia-π's own script reports on the same ratings. The
script is ``human_eval/agreement.py`` of sotopia-lab/sotopia-pi, branch
``feature/add-human-eval-agreement-code``, commit 57567136a64c33f4777ea7d46b19991a7f4f4451
(2024-04-01, "merge all tables into one"); the same functions lived in sotopia-lab/sotopia's
``human_eval/agreement.py``. Below is a transcription of its formulas, loop for loop, and of
how its ``__main__`` block reads the CSVs: every file and both agents pooled, a unit being
``pk + "_" + agent``, the rater being ``prolific_id``.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from sotopia_ls.dimensions import DIMENSION_KEYS, RUBRIC
from sotopia_ls.statistics.reliability import UNIT
from sotopia_ls.statistics.sotopia_pi import sotopia_pi_figures

from conftest import study_long


# --- Sotopia-π's agreement.py, transcribed -----------------------------------------------

def their_long_table(files: list[pd.DataFrame], dimension: str) -> pd.DataFrame:
    """``__main__``: rows of every file and agent, unit ids ``pk_agent``, binary codes."""
    parts = []
    for frame in files:
        for agent in (1, 2):
            part = frame[["pk", "prolific_id", f"{dimension}_{agent}"]].copy()
            part["pk"] = part["pk"].astype(str) + "_" + str(agent)
            parts.append(part.set_axis(["id", "raterId", "rating"], axis=1))
    long = pd.concat(parts, ignore_index=True)
    long["ratingBinary"] = (long["rating"] / long["rating"].abs().max()).round(0)
    long["ratingBinary"] = long["ratingBinary"].fillna(0)
    return long


def their_pairwise_agreement(long: pd.DataFrame) -> tuple[float, list]:
    """``computePairwiseAgreement`` with ``distNumeric``, minN = 2."""
    per_unit = {}
    for unit, votes in long.groupby("id")["ratingBinary"]:
        if len(votes) >= 2:
            per_unit[unit] = np.mean([1 - abs(a - b) for a, b in combinations(votes, r=2)])
    return float(np.mean(list(per_unit.values()))), list(per_unit)


def their_random_agreement(long: pd.DataFrame) -> float:
    """``computeRandomAgreement``: pairs of distinct ratings over every code of those units."""
    counts = Counter(long["ratingBinary"])
    agree = total = 0.0
    for first in counts:
        for second in counts:
            pairs = counts[first] * (counts[second] - (1 if first == second else 0))
            agree += pairs * (1 - abs(first - second))
            total += pairs
    return agree / total


def their_alpha(long: pd.DataFrame) -> tuple[float, float]:
    """``computeAlpha``: returns (alpha, ppa)."""
    ppa, units = their_pairwise_agreement(long)
    chance = their_random_agreement(long[long["id"].isin(units)])
    alpha = np.nan if chance == 1 else 1 - (1 - ppa) / (1 - chance)
    return alpha, ppa


def their_randolph_kappa(long: pd.DataFrame, n_rater: int = 2) -> float:
    """``computeFleissKappa(longDf, "ratingBinary", "id", 2, "randolf")``."""
    table = long.groupby(["id", "ratingBinary"])["ratingBinary"].count().unstack(fill_value=0)
    table = table.to_numpy()
    categories = table.shape[1]  # only the codes observed
    table = table[table.sum(axis=1) >= n_rater]
    observed = ((table**2).sum(axis=1) - n_rater).sum() / (
        n_rater * (n_rater - 1) * table.shape[0])
    chance = 1 / categories
    if observed == 1 and chance == 1:
        return 1.0
    with np.errstate(divide="ignore"):
        return float(np.float64(observed - chance) / (1 - chance))


# --- the study, read as their script reads it and as ours does ----------------------------

@pytest.fixture(scope="module")
def files(sample_data) -> list[pd.DataFrame]:
    return [pd.read_csv(p) for p in sorted((sample_data / "human_eval").glob("*_final.csv"))]


def figures(long: pd.DataFrame) -> pd.DataFrame:
    """Our ``pi_*`` columns, one row per dimension."""
    return pd.DataFrame.from_dict({
        key: sotopia_pi_figures(long[long["dimension"] == key]) for key in DIMENSION_KEYS
    }, orient="index")


@pytest.fixture(scope="module")
def ours(files) -> pd.DataFrame:
    return figures(study_long(pd.concat(files, ignore_index=True)))


@pytest.fixture(scope="module")
def ours_on_two_rater_units(files) -> pd.DataFrame:
    long = study_long(pd.concat(files, ignore_index=True))
    raters = long.groupby([*UNIT, "dimension"])["score"].transform("size")
    return figures(long[raters == 2])


def two_rater_files(files: list[pd.DataFrame]) -> list[pd.DataFrame]:
    return [frame[frame["pk"].map(frame["pk"].value_counts()) == 2] for frame in files]


@pytest.mark.parametrize("dimension", DIMENSION_KEYS)
def test_pairwise_agreement_and_alpha_are_sotopia_pis_on_the_same_csvs(files, ours, dimension):
    long = their_long_table(files, dimension)
    alpha, ppa = their_alpha(long)
    row = ours.loc[dimension]
    assert row["pi_divisor"] == long["rating"].abs().max()
    assert round(row["pi_pairwise_agreement"], 3) == round(ppa, 3)
    if math.isnan(alpha):  # every code the same
        assert math.isnan(row["pi_alpha"])
    else:
        assert round(row["pi_alpha"], 3) == round(alpha, 3)


@pytest.mark.parametrize("dimension", DIMENSION_KEYS)
def test_kappa_is_sotopia_pis_on_the_units_with_two_raters(
    files, ours_on_two_rater_units, dimension
):
    theirs = their_randolph_kappa(their_long_table(two_rater_files(files), dimension))
    ours = ours_on_two_rater_units.loc[dimension, "pi_randolph_kappa"]
    assert round(ours, 3) == round(theirs, 3)


def test_their_kappa_exceeds_one_on_a_unit_with_three_raters_and_ours_never_does(files, ours):
    theirs = {d: their_randolph_kappa(their_long_table(files, d)) for d in DIMENSION_KEYS}
    assert theirs["social_rules"] > 1 and math.isinf(theirs["secret"])
    assert (ours["pi_randolph_kappa"] <= 1).all()


def test_their_binarization_divides_by_the_largest_score_observed_not_the_rubric(ours):
    # Nobody rated financial benefits beyond ±3, so their codes are round(score / 3).
    assert ours.loc["financial_and_material_benefits", "pi_divisor"] == 3
    assert RUBRIC["financial_and_material_benefits"].max_abs == 5
    assert ours.loc["secret", "pi_divisor"] == 0  # every secret rating is 0: all codes 0


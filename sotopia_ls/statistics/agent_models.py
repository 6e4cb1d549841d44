"""Each agent model's scores three ways, per dimension and overall: people alone, each judge
alone, and prediction-powered (people's ratings correcting the judge on every episode it
scored); and the difference between each pair of models, the same three ways.

The unit is one agent of one episode: Y the mean of its human raters' scores, Ŷ a judge's
score. README.md, "Each agent model's scores", says what the intervals assume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum
from itertools import combinations

import numpy as np
import pandas as pd

from .comparison import JUDGE, PANELS, judge_scores, with_overall
from .ppi import DEFAULT_ALPHA, MeanInterval, classical_mean, prediction_powered_mean
from .reliability import UNIT

MODEL = "agent_model"
UNKNOWN_MODEL = "(unknown)"


class Estimate(StrEnum):
    """How a mean is estimated."""

    PEOPLE = "people"
    JUDGE = "judge"
    POWERED = "prediction-powered"


FIGURES = ["mean", "mean_ci_low", "mean_ci_high", "n", "effective_n"]
SCORE_COLUMNS = [MODEL, "dimension", "estimate", JUDGE, *FIGURES]
DIFFERENCE_COLUMNS = ["model_a", "model_b", "dimension", "estimate", JUDGE,
                      "difference", "difference_ci_low", "difference_ci_high", "n"]


def unit_models(long: pd.DataFrame, model_scores: pd.DataFrame) -> pd.DataFrame:
    """Each unit's agent model (``UNKNOWN_MODEL`` where none was named), from the ratings and
    the judges' scores (exports made before the column have none)."""
    named = [frame.reindex(columns=[*UNIT, MODEL]) for frame in (long, model_scores)]
    models = pd.concat(named, ignore_index=True)
    models[MODEL] = models[MODEL].astype("string").fillna("").astype(str)
    models = models.sort_values(MODEL, ascending=False).drop_duplicates(UNIT)
    return models.replace({MODEL: {"": UNKNOWN_MODEL}})


def _units(long: pd.DataFrame, model_scores: pd.DataFrame
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Y per unit and panel (``human``), and Ŷ per unit, panel and judge (``judged``, with
    ``rated``: the unit has a Y on that panel), each with its unit's model."""
    models = unit_models(long, model_scores)
    human = with_overall(long.groupby([*UNIT, "dimension"], as_index=False)["score"].mean())
    human = human.merge(models, on=UNIT)
    judged = judge_scores(model_scores).merge(models, on=UNIT)
    rated = judged.merge(human[[*UNIT, "dimension"]].assign(rated=True), how="left",
                         on=[*UNIT, "dimension"])
    return human, rated.assign(rated=rated["rated"].fillna(False).astype(bool))


def _figures(estimate: Callable[[], MeanInterval], n: int, least: int) -> list[float]:
    """``FIGURES`` of ``estimate()`` from ``n`` units; blank (NaN) when a sample it reads has
    fewer than 2 (``least``): no interval can be had."""
    if least < 2:
        return [np.nan, np.nan, np.nan, n, np.nan]
    found = estimate()
    return [found.mean, found.low, found.high, n, found.effective_n]


def _cells(human: pd.DataFrame, judged: pd.DataFrame
           ) -> Iterator[tuple[str, pd.DataFrame, str, pd.DataFrame]]:
    """``(panel, its human rows, judge, the judge's rows on that panel)`` in rubric and name
    order; judges with no score on a panel are skipped."""
    for panel in PANELS:
        people = human[human["dimension"] == panel]
        scored = judged[judged["dimension"] == panel]
        for judge, rows in scored.groupby(JUDGE, sort=True):
            yield panel, people, str(judge), rows


def _paired(people: pd.DataFrame, rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The judge's ``rows`` with Y where people rated the unit, and those people did not."""
    both = rows[rows["rated"]].merge(people[[*UNIT, "score"]], on=UNIT,
                                     suffixes=("_judge", "_human"))
    return both, rows[~rows["rated"]]


def agent_model_scores(long: pd.DataFrame, model_scores: pd.DataFrame,
                       alpha: float = DEFAULT_ALPHA) -> pd.DataFrame:
    """Per agent model and panel: the people's mean, then per judge its mean and the
    prediction-powered mean, each with its (1 − ``alpha``) interval (``SCORE_COLUMNS``)."""
    human, judged = _units(long, model_scores)
    rows = []
    for model in sorted(set(human[MODEL]) | set(judged[MODEL])):
        mine_human, mine_judged = human[human[MODEL] == model], judged[judged[MODEL] == model]
        for panel in PANELS:
            y = mine_human.loc[mine_human["dimension"] == panel, "score"]
            rows.append([model, panel, Estimate.PEOPLE, "",
                         *_figures(lambda: classical_mean(y, alpha), len(y), len(y))])
        for panel, people, judge, scored in _cells(mine_human, mine_judged):
            both, unrated = _paired(people, scored)
            rows.append([model, panel, Estimate.JUDGE, judge, *_figures(
                lambda: classical_mean(scored["score"], alpha), len(scored), len(scored))])
            rows.append([model, panel, Estimate.POWERED, judge, *_figures(
                lambda: prediction_powered_mean(both["score_human"], both["score_judge"],
                                                unrated["score"], alpha),
                len(both), min(len(both), len(unrated)))])
    frame = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    return frame.assign(estimate=frame["estimate"].astype(str))


def agent_model_differences(scores: pd.DataFrame) -> pd.DataFrame:
    """Per pair of agent models (``model_a`` − ``model_b``, in name order), panel and estimate
    of ``agent_model_scores``: the difference of their means, its interval's half-width that of
    the two intervals taken as independent (the units of two models are apart), √(h_a² + h_b²)
    (``DIFFERENCE_COLUMNS``)."""
    keys = ["dimension", "estimate", JUDGE]
    pairs = []
    for first, second in combinations(sorted(scores[MODEL].unique()), 2):
        both = scores[scores[MODEL] == first].merge(scores[scores[MODEL] == second], on=keys,
                                                    suffixes=("_a", "_b"), sort=False)
        half = np.hypot(*((both[f"mean_ci_high_{side}"] - both[f"mean_ci_low_{side}"]) / 2
                          for side in "ab"))
        difference = both["mean_a"] - both["mean_b"]
        pairs.append(both[keys].assign(
            model_a=first, model_b=second, difference=difference,
            difference_ci_low=difference - half, difference_ci_high=difference + half,
            n=both["n_a"] + both["n_b"]))
    return pd.concat(pairs, ignore_index=True).reindex(columns=DIFFERENCE_COLUMNS) if pairs \
        else pd.DataFrame(columns=DIFFERENCE_COLUMNS)

"""How many people to pay for: from a pilot, the human-rated episodes a target interval width
needs with and without a judge's help, and the units the alternative annotator test needs.

Everything is found by resampling the pilot, never by formula: the means are ``ppi``'s, the
test is ``alttest``'s. The assumptions are returned with the figures, and README.md, "sotopia-ls
plan", says how to read them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from . import DEFAULT_EPSILON, DEFAULT_PLAN_RESAMPLES
from .agent_models import MODEL, unit_models
from .alttest import DEFAULT_Q, MIN_ITEMS, _crowded, duels
from .comparison import JUDGE, PANELS, judge_scores, with_overall
from .ppi import MeanInterval, classical_mean, prediction_powered_mean
from .reliability import UNIT

DEFAULT_POWER = 0.8
MOST_UNITS = 100_000
# Fewer units say too little: the fewest rated units a mean is planned on, and the fewest
# units with three raters a pilot needs to say how the test would go.
FEWEST_TO_RESAMPLE = 10
# The test's sizes tried, in units (episode × agent) with three raters.
ALT_TEST_SIZES = (30, 40, 50, 60, 80, 100, 125, 150, 200, 250, 300, 400, 500, 750, 1000)
# The rows of every agent model together.
ALL_MODELS = "all"
PLAN_COLUMNS = [
    JUDGE, MODEL, "dimension", "target_width", "pilot_units", "study_episodes",
    "episodes_people_alone", "episodes_with_judge", "pilot_units_with_three",
    "alt_test_units", "alt_test_episodes",
]


@dataclass(frozen=True)
class Plan:
    """The figures (``PLAN_COLUMNS``, one row per judge, agent model and dimension) and the
    assumptions behind them, one sentence each."""

    table: pd.DataFrame
    assumptions: list[str]


def _smallest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] that ``fits`` (taken as monotone): doubled until it fits,
    then halved; None when even ``high`` does not."""
    n = low
    while not fits(n):
        if n >= high:
            return None
        low, n = n + 1, min(2 * n, high)
    high = n
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle + 1, high)
    return low


def _width(interval: MeanInterval) -> float:
    return interval.high - interval.low


def _episodes_needed(human: np.ndarray, judge: np.ndarray, every_judged: np.ndarray,
                     study_units: int, width: float, resamples: int,
                     rng: np.random.Generator) -> tuple[int | None, int | None]:
    """Human-rated units for a mean interval ``width`` wide: people alone, and with the judge
    on ``study_units`` units (``prediction_powered_mean``); each size's width averaged over
    ``resamples`` draws of the pilot's units, with replacement."""
    def draws(n: int) -> np.ndarray:
        return rng.integers(0, len(human), (resamples, n))

    def alone(n: int) -> bool:
        return np.mean([_width(classical_mean(human[i])) for i in draws(n)]) <= width

    def helped(n: int) -> bool:
        unrated = rng.integers(0, len(every_judged), (resamples, study_units - n))
        return np.mean([_width(prediction_powered_mean(human[i], judge[i], every_judged[u]))
                        for i, u in zip(draws(n), unrated)]) <= width

    people = _smallest(alone, FEWEST_TO_RESAMPLE, MOST_UNITS)
    if np.ptp(judge) == 0 or np.ptp(every_judged) == 0:  # a constant judge tells nothing
        return people, people
    return people, (_smallest(helped, FEWEST_TO_RESAMPLE, study_units - 1)
                    if study_units > FEWEST_TO_RESAMPLE else None)


def _passes(wins: pd.DataFrame, size: int, epsilon: float, resamples: int,
            rng: np.random.Generator) -> float:
    """How often the judge passes the test on ``size`` units drawn from the pilot's (rater
    positions as annotators, each unit's duels kept whole)."""
    units = wins.index.unique()
    drawn = rng.integers(0, len(units), (resamples, size))
    p_values = []
    for _, position in wins.groupby("position"):
        difference = (position["human_wins"].astype(int) - position["judge_wins"].astype(int))
        row = difference.reindex(units).to_numpy(float)
        sample = row[drawn]
        with np.errstate(invalid="ignore", divide="ignore"):
            p = stats.ttest_1samp(sample, epsilon, axis=1, alternative="less",
                                  nan_policy="omit").pvalue
        p_values.append(np.nan_to_num(np.asarray(p, float), nan=1.0))
    p_values = np.column_stack(p_values)
    won = (stats.false_discovery_control(p_values, axis=1, method="by") <= DEFAULT_Q).mean(axis=1)
    return float(np.mean(won >= 0.5))


def _alt_test_units(crowded: pd.DataFrame, epsilon: float, power: float, resamples: int,
                    rng: np.random.Generator) -> int | None:
    """The fewest units with three raters (of ``ALT_TEST_SIZES``) on which the judge passes in
    ``power`` of the resamples; None when no size does or the pilot has too few such units
    to resample."""
    if len(crowded[UNIT].drop_duplicates()) < FEWEST_TO_RESAMPLE:
        return None
    wins = duels(crowded, "position").set_index(UNIT)
    for size in ALT_TEST_SIZES:
        if _passes(wins, size, epsilon, resamples, rng) >= power:
            return size
    return None


def plan(long: pd.DataFrame, model_scores: pd.DataFrame, width: float, *,
         study_episodes: int | None = None, epsilon: float = DEFAULT_EPSILON,
         power: float = DEFAULT_POWER, resamples: int = DEFAULT_PLAN_RESAMPLES,
         seed: int = 0) -> Plan:
    """Per judge, agent model (all together, then each where the pilot has several) and
    dimension (then overall), from a pilot's ratings (``scores_long``) and the judges' scores:
    the episodes people must rate for a 95% interval of the mean ``width`` wide, alone and
    with the judge scoring all ``study_episodes`` (default: as many as it scored in the
    pilot); and, all models together, the units with three raters on which the judge passes
    the alternative annotator test at ``epsilon`` in ``power`` of the resamples."""
    rng = np.random.default_rng(seed)
    human = with_overall(long, [*UNIT, "annotation_id"]).groupby(
        [*UNIT, "dimension"], as_index=False)["score"].mean()
    models = unit_models(long, model_scores)
    judged = judge_scores(model_scores).merge(models, on=UNIT)
    agents = max(long["agent"].nunique(), 1)
    episodes = study_episodes or int(judged["episode_id"].nunique())
    crowded = _crowded(long)
    raters = int(round(long.groupby(UNIT)["annotator_id"].nunique().mean())) if len(long) else 0
    named = sorted(models[MODEL].unique())
    rows = []
    for judge, scores in judged.groupby(JUDGE, sort=True):
        triples = crowded.merge(scores.drop(columns=MODEL).rename(columns={"score": "model"}),
                                on=[*UNIT, "dimension"])
        for model in [ALL_MODELS, *(named if len(named) > 1 else [])]:
            mine = scores if model == ALL_MODELS else scores[scores[MODEL] == model]
            # The model's units per episode of the pilot; its share of the study's episodes.
            per_episode = len(mine[UNIT].drop_duplicates()) / mine["episode_id"].nunique()
            units = round(episodes * per_episode * mine["episode_id"].nunique()
                          / scores["episode_id"].nunique())
            for panel in PANELS:
                rows.append(
                    {JUDGE: judge, MODEL: model, "dimension": panel, "target_width": width,
                     "study_episodes": episodes}
                    | _panel_plan(human, mine[mine["dimension"] == panel], units, per_episode,
                                  width, resamples, rng)
                    | _alt_test_plan(triples[triples["dimension"] == panel]
                                     if model == ALL_MODELS else None,
                                     agents, epsilon, power, resamples, rng))
    table = pd.DataFrame(rows, columns=PLAN_COLUMNS).astype({
        name: "Int64" for name in ("episodes_people_alone", "episodes_with_judge",
                                   "pilot_units_with_three", "alt_test_units",
                                   "alt_test_episodes")})
    return Plan(table, _assumptions(width, episodes, agents, raters, epsilon, power,
                                    resamples, seed))


def _panel_plan(human: pd.DataFrame, scores: pd.DataFrame, study_units: int,
                per_episode: float, width: float, resamples: int,
                rng: np.random.Generator) -> dict[str, int | None]:
    """The pilot's units people rated of a judge's ``scores`` on one panel, and the episodes
    people must rate, alone and with the judge on ``study_units`` units."""
    pairs = human.merge(scores, on=[*UNIT, "dimension"], suffixes=("_human", "_judge"))
    alone = helped = None
    if len(pairs) >= 2:
        alone, helped = _episodes_needed(
            pairs["score_human"].to_numpy(float), pairs["score_judge"].to_numpy(float),
            scores["score"].to_numpy(float), study_units, width, resamples, rng)
    return {"pilot_units": len(pairs), "episodes_people_alone": _in_episodes(alone, per_episode),
            "episodes_with_judge": _in_episodes(helped, per_episode)}


def _alt_test_plan(three: pd.DataFrame | None, agents: int, epsilon: float, power: float,
                   resamples: int, rng: np.random.Generator) -> dict[str, int | None]:
    """The pilot's units with three raters and the units the test needs (None: not planned,
    as for one agent model's rows)."""
    if three is None:
        return {"pilot_units_with_three": None, "alt_test_units": None,
                "alt_test_episodes": None}
    units = _alt_test_units(three, epsilon, power, resamples, rng)
    return {"pilot_units_with_three": len(three[UNIT].drop_duplicates()),
            "alt_test_units": units, "alt_test_episodes": _in_episodes(units, agents)}


def _in_episodes(units: int | None, per_episode: float) -> int | None:
    return None if units is None else math.ceil(units / per_episode)


def _assumptions(width: float, episodes: int, agents: int, raters: int, epsilon: float,
                 power: float, resamples: int, seed: int) -> list[str]:
    return [
        f"A unit is one agent of an episode ({agents} per episode, counted together); its "
        f"human score is the mean of its raters, {raters} per episode as in the pilot.",
        f"Target: a 95% interval of a dimension's mean at most {width:g} points wide, averaged "
        f"over {resamples} resamples of the pilot's units (with replacement, seed {seed}); "
        f"{FEWEST_TO_RESAMPLE} rated units at the least.",
        f"With the judge: it scores all {episodes} episodes of the study "
        "(--study-episodes); people rate the fewest that give the width "
        "(prediction-powered mean, ppi-python); –: not within the study. An agent model's "
        "rows plan its own mean on its units, its share of the study's episodes as in the "
        "pilot.",
        "Alternative annotator test: units with three raters drawn from the pilot's, rater "
        f"positions as annotators, ε = {epsilon:g}; the fewest of "
        f"{', '.join(map(str, ALT_TEST_SIZES))} on which the judge passes in {power:.0%} of "
        f"the resamples; –: none, or fewer than {FEWEST_TO_RESAMPLE} units of the pilot "
        f"have three raters (at least {MIN_ITEMS} are needed in any case); planned for all "
        "agent models together (the rows of one model leave it blank).",
    ]

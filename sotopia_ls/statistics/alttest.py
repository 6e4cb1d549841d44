"""Can a judge replace one of the people? The alternative annotator test (Calderon, Reichart &
Dror, ACL 2025), as ``nitaytech/AltTest`` runs it, per judge, agent and dimension.

Leave one annotator out; on each item, does the judge or the left-out annotator align better
with the others (negative RMSE, the paper's measure for numeric labels)? A one-sided paired
t-test per annotator at the cost-benefit margin ε, Benjamini–Yekutieli over the annotators:
the share won is the winning rate ω, and the judge passes when ω ≥ 0.5. README.md, "Can the
judge replace a person?", says how the annotators are formed and what each column means.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np
import pandas as pd
from scipy import stats

from . import DEFAULT_EPSILON
from .comparison import JUDGE, PANELS, judge_scores, with_overall
from .reliability import UNIT

MEASURE = "negative RMSE"
DEFAULT_Q = 0.05  # the false discovery rate of Benjamini–Yekutieli
MIN_RATERS = 3  # on an item: the left-out annotator and at least two others
MIN_ITEMS = 30  # per annotator: the reference code's floor for the t-test
ALL_AGENTS = "all"
ALT_TEST_COLUMNS = [
    JUDGE, "agent", "dimension", "measure", "annotators", "items", "annotators_tested",
    "epsilon", "q", "winning_rate", "advantage_probability", "verdict", "third_raters_needed",
]


class Annotators(StrEnum):
    """Who the left-out annotators are: the people themselves when each rated enough items,
    else the first, second, third… rater of every item (the paper's "combined annotators")."""

    PEOPLE = "people"
    POSITIONS = "rater positions"


class Verdict(StrEnum):
    PASSES = "passes"
    FAILS = "fails"
    TOO_FEW = "too few items"


def _crowded(long: pd.DataFrame) -> pd.DataFrame:
    """Ratings (dimensions and overall) of the items rated by ``MIN_RATERS`` or more, each
    with its ``position`` on the item (0, 1, … by annotation id)."""
    rated = with_overall(long, [*UNIT, "annotation_id", "annotator_id"])
    rated = rated[rated.groupby([*UNIT, "dimension"])["score"].transform("size") >= MIN_RATERS]
    rated = rated.sort_values("annotation_id", kind="stable")
    return rated.assign(position=rated.groupby([*UNIT, "dimension"]).cumcount())


def duels(rows: pd.DataFrame, annotator: str) -> pd.DataFrame:
    """Per item, dimension and left-out ``annotator``: whether the judge (``model``) aligns
    with the other annotators at least as well as the left-out one (``judge_wins``), and the
    converse."""
    item = [*UNIT, "dimension"]
    rows = rows[[*item, annotator, "score", "model"]]
    pairs = rows.merge(rows[[*item, annotator, "score"]], on=item, suffixes=("", "_other"))
    pairs = pairs[pairs[annotator] != pairs[f"{annotator}_other"]]
    pairs = pairs.assign(human=(pairs["score"] - pairs["score_other"]) ** 2,
                         judge=(pairs["model"] - pairs["score_other"]) ** 2)
    # Mean squared errors compared for RMSEs; rounded so a tie is a tie whatever the sum order.
    errors = pairs.groupby([annotator, *item])[["human", "judge"]].mean().round(9)
    return pd.DataFrame({"judge_wins": errors["judge"] <= errors["human"],
                         "human_wins": errors["human"] <= errors["judge"]}).reset_index()


def _test(rows: pd.DataFrame, wins: dict[str, pd.DataFrame], epsilon: float, q: float,
          min_items: int, items_per_episode: int) -> dict[str, object]:
    """ω, ρ and the verdict on one judge's ``rows`` of one agent (or all) and dimension, and
    their ``duels`` by each way of forming the annotators (``wins``, by column)."""
    if rows.empty:  # no item with three raters yet: nothing to compute
        return {"annotators": "", "items": 0, "annotators_tested": 0, "winning_rate": np.nan,
                "advantage_probability": np.nan, "verdict": Verdict.TOO_FEW.value,
                "third_raters_needed": math.ceil(min_items / items_per_episode)}
    people = rows.drop_duplicates(["annotator_id", *UNIT]).groupby("annotator_id").size()
    grouping = Annotators.PEOPLE if (people >= min_items).all() else Annotators.POSITIONS
    annotator = "annotator_id" if grouping is Annotators.PEOPLE else "position"
    items = len(rows[UNIT].drop_duplicates())
    p_values, advantages = [], []
    for _, duel in wins[annotator].groupby(annotator):
        if len(duel) < min_items:
            continue
        difference = duel["human_wins"].astype(int) - duel["judge_wins"].astype(int)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = stats.ttest_1samp(difference, epsilon, alternative="less").pvalue
        p_values.append(1.0 if np.isnan(p) else float(p))  # no variance: no evidence
        advantages.append(float(duel["judge_wins"].mean()))
    row = {"annotators": grouping.value, "items": items, "annotators_tested": len(p_values),
           "third_raters_needed": math.ceil(max(0, min_items - items) / items_per_episode)}
    if not p_values:
        return row | {"winning_rate": np.nan, "advantage_probability": np.nan,
                      "verdict": Verdict.TOO_FEW.value}
    won = int((stats.false_discovery_control(p_values, method="by") <= q).sum())
    winning = won / len(p_values)
    return row | {"winning_rate": winning, "advantage_probability": float(np.mean(advantages)),
                  "verdict": (Verdict.PASSES if winning >= 0.5 else Verdict.FAILS).value}


def _scoped(frame: pd.DataFrame, agent: object, panel: str) -> pd.DataFrame:
    """The rows of one agent (or all) and dimension."""
    kept = frame["dimension"] == panel
    return frame[kept if agent == ALL_AGENTS else kept & (frame["agent"] == agent)]


def alt_test(long: pd.DataFrame, model_scores: pd.DataFrame, epsilon: float = DEFAULT_EPSILON,
             q: float = DEFAULT_Q, min_items: int = MIN_ITEMS) -> pd.DataFrame:
    """Per judge, agent (all agents first, then each) and dimension (then overall): the
    alternative annotator test on the items rated by three people or more. Where too few
    items have three raters, ``third_raters_needed`` says how many more episodes need one."""
    crowded = _crowded(long)
    judged = judge_scores(model_scores).rename(columns={"score": "model"})
    judges = sorted(judged[JUDGE].unique()) or [""]
    agents = [ALL_AGENTS, *sorted(long["agent"].unique())]
    table = []
    for judge in judges:
        rows = crowded.merge(judged[judged[JUDGE] == judge], on=[*UNIT, "dimension"])
        wins = {column: duels(rows, column) for column in ("annotator_id", "position")}
        for agent in agents:
            for panel in PANELS:
                test = _test(_scoped(rows, agent, panel),
                             {column: _scoped(w, agent, panel) for column, w in wins.items()},
                             epsilon, q, min_items,
                             max(len(agents) - 1, 1) if agent == ALL_AGENTS else 1)
                table.append({JUDGE: judge, "agent": str(agent), "dimension": panel,
                              "measure": MEASURE, "epsilon": epsilon, "q": q, **test})
    return pd.DataFrame(table, columns=ALT_TEST_COLUMNS)

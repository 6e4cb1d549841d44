"""``sotopia-ls plan``: how many people to pay for, read from a pilot's export folder
(``statistics.planning`` computes it)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import InvalidInput, Problem
from ..statistics import DEFAULT_EPSILON, DEFAULT_PLAN_RESAMPLES
from ..statistics.planning import DEFAULT_POWER, Plan, plan
from .build import model_scores_csv, read_export


def plan_export(folder: Path, width: float, *, study_episodes: int | None = None,
                epsilon: float = DEFAULT_EPSILON, power: float = DEFAULT_POWER,
                resamples: int = DEFAULT_PLAN_RESAMPLES, seed: int = 0) -> Plan:
    """``plan`` on the crowd's ratings (reference ratings left out) and the judges' scores of
    the export folder ``folder``."""
    long = read_export(folder, "scores_long.parquet", pd.read_parquet)
    judges = read_export(folder, "model_scores.csv", model_scores_csv)
    if judges.empty:
        raise InvalidInput([Problem(str(folder / "model_scores.csv"), "", "no judge's scores: "
                                    "run sotopia-ls evaluate on the pilot's project, then "
                                    "export again")])
    crowd = long[~long["ground_truth"].astype(bool)] if "ground_truth" in long else long
    return plan(crowd, judges, width, study_episodes=study_episodes, epsilon=epsilon,
                power=power, resamples=resamples, seed=seed)

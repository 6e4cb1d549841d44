"""Means with intervals from people alone, from a judge alone, and prediction-powered (people's
ratings correcting the judge's bias; Angelopoulos et al., Science 2023), all by ``ppi-python``.

One call per mean, on plain arrays; callers pick the rows. The judge-alone interval treats the
judge's scores as if they were the truth, which is exactly what a paper reporting them does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import ppi_py

DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class MeanInterval:
    """A mean with its (1 - alpha) interval; ``effective_n`` is how many human ratings alone
    would give an interval this narrow (for a human-only mean, the ratings it used)."""

    mean: float
    low: float
    high: float
    n: int
    effective_n: float


def _as_floats(values) -> np.ndarray:
    return np.asarray(values, dtype=float).ravel()


def classical_mean(values, alpha: float = DEFAULT_ALPHA) -> MeanInterval:
    """The sample mean with its normal-approximation interval (``ppi_py.classical_mean_ci``)."""
    y = _as_floats(values)
    low, high = ppi_py.classical_mean_ci(y, alpha=alpha)
    return MeanInterval(float(y.mean()), float(low), float(high), len(y), float(len(y)))


def prediction_powered_mean(human, judge_on_rated, judge_on_unrated,
                            alpha: float = DEFAULT_ALPHA) -> MeanInterval:
    """The judge's mean over every episode, corrected by people's ratings where both exist.

    ``human[i]`` and ``judge_on_rated[i]`` are the same rated unit; ``judge_on_unrated`` holds
    the judge's scores on the units no person rated. Power-tuned (PPI++): never wider than
    people alone, up to sampling error. ``effective_n`` is the human-only sample size whose
    interval would be as wide.
    """
    y, y_hat, y_hat_unlabeled = (_as_floats(v) for v in (human, judge_on_rated, judge_on_unrated))
    mean = float(np.ravel(ppi_py.ppi_mean_pointestimate(y, y_hat, y_hat_unlabeled))[0])
    low, high = (float(np.ravel(bound)[0])
                 for bound in ppi_py.ppi_mean_ci(y, y_hat, y_hat_unlabeled, alpha=alpha))
    people = classical_mean(y, alpha)
    width, people_width = high - low, people.high - people.low
    effective = len(y) * (people_width / width) ** 2 if width > 0 else float("inf")
    return MeanInterval(mean, low, high, len(y), float(effective))

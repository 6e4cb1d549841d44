"""Percentile bootstrap intervals that resample episodes, and the weighted statistics they use.

Both agents of an episode are rated from the same conversation, usually by the same annotators,
so the two units of an episode are not independent: a resample draws *episodes* with
replacement and every unit of a drawn episode comes along. A resample is held as weights (how
often each episode was drawn), so a statistic written as a weighted sum over episodes is
evaluated for a thousand resamples in a few matrix products instead of a thousand data frames.
Each weighted statistic here equals the plain statistic on the resampled data with every drawn
copy of an episode as a distinct episode (the tests check this against the libraries).

``Bootstrap(resamples, seed)`` is recorded next to every interval: the same seed, data and
number of resamples give the same intervals.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from scipy import sparse

DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
# Resamples × episodes held at once; bounds memory on studies with thousands of episodes.
_CHUNK_CELLS = 2_000_000


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: ``resamples`` of the episodes, from ``seed``; 0 resamples = none."""

    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    level: float = 0.95

    def weights(self, episodes: int) -> Iterator[np.ndarray]:
        """Chunks of resamples × episodes: how many times each episode was drawn."""
        rng = np.random.default_rng(self.seed)
        chunk = max(1, _CHUNK_CELLS // max(episodes, 1))
        for start in range(0, self.resamples, chunk):
            size = min(chunk, self.resamples - start)
            draws = rng.integers(0, episodes, size=(size, episodes))
            flat = (draws + episodes * np.arange(size)[:, None]).ravel()
            yield np.bincount(flat, minlength=size * episodes).reshape(size, episodes)

    def replicates(
        self, episodes: int, statistic: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray | None:
        """``statistic(weights)`` for every resample, stacked; None when there are none."""
        if self.resamples <= 0 or episodes == 0:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.concatenate([statistic(w) for w in self.weights(episodes)])

    def interval(self, replicates: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
        """Percentile interval over resamples (axis 0): ``[low, high]`` stacked on a last axis.

        Resamples where the statistic is undefined (e.g. a resample with one distinct score)
        are left out; an interval needs at least half of the resamples to be defined.
        """
        if replicates is None:
            return np.full((*shape, 2), np.nan)
        tail = (1 - self.level) / 2 * 100
        defined = np.isfinite(replicates)
        kept = np.where(defined, replicates, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a statistic never defined
            bounds = np.nanpercentile(kept, [tail, 100 - tail], axis=0)
        bounds[:, defined.mean(axis=0) < 0.5] = np.nan
        return np.moveaxis(bounds, 0, -1)


def weighted_pearson(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Pearson's r of ``x`` and ``y`` (per row, or shared), each row of ``weights`` a resample.

    Returns NaN where either side is constant in a resample.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        total = weights.sum(axis=-1, keepdims=True)
        dx = x - (weights * x).sum(axis=-1, keepdims=True) / total
        dy = y - (weights * y).sum(axis=-1, keepdims=True) / total
        sxy = (weights * dx * dy).sum(axis=-1)
        sxx = (weights * dx * dx).sum(axis=-1)
        syy = (weights * dy * dy).sum(axis=-1)
        # Rounding leaves a constant side with a variance of ~1e-30, not 0.
        tiny = 1e-12 * total[..., 0]
        return np.where((sxx > tiny) & (syy > tiny), sxy / np.sqrt(sxx * syy), np.nan)


def weighted_midranks(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each value's average rank (ties share the mean rank) in every resample.

    A value drawn ``w`` times counts ``w`` times, as ``scipy.stats.rankdata`` would count the
    copies on the resampled data. Ranks depend only on the distinct values, so they are
    computed per distinct value (few: scores are integers or means of a few integers).
    """
    distinct, code = np.unique(values, return_inverse=True)
    one_hot = sparse.csr_matrix((np.ones(code.size), (np.arange(code.size), code)),
                                shape=(code.size, distinct.size))
    per_value = np.asarray(one_hot.T @ weights.T).T  # resamples × distinct values
    below = np.cumsum(per_value, axis=1) - per_value
    return (below + (per_value + 1) / 2)[:, code]


def weighted_spearman(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Spearman's ρ per resample: Pearson's r of the weighted midranks."""
    return weighted_pearson(weighted_midranks(x, weights), weighted_midranks(y, weights), weights)

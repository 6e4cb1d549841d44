"""Percentile bootstrap intervals that resample episodes, and the weighted statistics they use.

Both agents of an episode come from one conversation, so episodes are drawn, not units. A
resample is held as episode weights (``Draw``), so a thousand cost a few matrix products; the
same seed, data and number of resamples give the same intervals.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

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


DEFAULT_BOOTSTRAP = Bootstrap()  # frozen: one value serves every call that gives none


@dataclass(frozen=True)
class Draw:
    """Resamples of the episodes seen from a table's rows, each row belonging to an episode.

    ``weights`` is resamples × episodes (draw counts; a single row of ones is the data as it
    is), ``episode`` each row's column in it.
    """

    weights: np.ndarray
    episode: np.ndarray

    def totals(self, columns: np.ndarray) -> np.ndarray:
        """Weighted column sums per resample (rows × k → resamples × k), summed per episode
        first: one matrix product whatever the number of rows."""
        per_episode = np.stack([
            np.bincount(self.episode, weights=column, minlength=self.weights.shape[1])
            for column in columns.T
        ], axis=1)
        return self.weights @ per_episode


def moments(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Rows × 6: the terms whose sums give Pearson's r (``pearson_from_moments``)."""
    return np.column_stack([np.ones_like(x), x, y, x * y, x * x, y * y])


def pearson_from_moments(totals: np.ndarray) -> np.ndarray:
    """Pearson's r from summed ``moments`` (last axis); NaN where either side is constant."""
    n, sx, sy, sxy, sxx, syy = np.moveaxis(totals, -1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        vx, vy = sxx - sx * sx / n, syy - sy * sy / n
        # Rounding leaves a constant side a variance of ~1e-16 of its sum of squares, not 0.
        constant = (vx <= 1e-10 * sxx) | (vy <= 1e-10 * syy)
        return np.where(constant, np.nan, (sxy - sx * sy / n) / np.sqrt(vx * vy))


def _value_weights(draw: Draw, codes: np.ndarray, size: int) -> np.ndarray:
    """Resamples × ``size``: the summed draw counts of the rows with each code."""
    from scipy import sparse  # the export extra; imported when used

    per_episode = sparse.csr_matrix(
        (np.ones(codes.size), (draw.episode, codes)), shape=(draw.weights.shape[1], size)
    )  # episodes × codes; a repeated (episode, code) is summed
    return np.asarray((per_episode.T @ draw.weights.T).T)


def _midranks(counts: np.ndarray) -> np.ndarray:
    """Average rank of each distinct value (columns, in order) given how often it occurs."""
    return np.cumsum(counts, axis=-1) - counts + (counts + 1) / 2


def weighted_spearman(x: np.ndarray, y: np.ndarray, draw: Draw) -> np.ndarray:
    """Spearman's ρ per resample: Pearson's r of the midranks, ties sharing their mean rank.

    A row drawn ``w`` times counts ``w`` times, as ``scipy.stats.spearmanr`` counts the copies
    on the resampled data. Ranks depend only on the distinct values, so the sums run over
    distinct values and distinct (x, y) pairs (few: scores are integers or means of a few),
    never over rows.
    """
    xs, x_code = np.unique(x, return_inverse=True)
    ys, y_code = np.unique(y, return_inverse=True)
    pairs, pair_code = np.unique(x_code * ys.size + y_code, return_inverse=True)
    count_x, count_y = _value_weights(draw, x_code, xs.size), _value_weights(draw, y_code, ys.size)
    count_xy = _value_weights(draw, pair_code, pairs.size)
    rank_x, rank_y = _midranks(count_x), _midranks(count_y)
    joint = rank_x[:, pairs // ys.size] * rank_y[:, pairs % ys.size]
    totals = np.stack([
        count_x.sum(axis=1), (count_x * rank_x).sum(axis=1), (count_y * rank_y).sum(axis=1),
        (count_xy * joint).sum(axis=1), (count_x * rank_x**2).sum(axis=1),
        (count_y * rank_y**2).sum(axis=1),
    ], axis=-1)
    return pearson_from_moments(totals)

"""Bootstrap resampling of whole groups (documents, or each sentence its own), shared by the
BLEU Δ intervals (score.py) and CXMI's (cxmi.py).

WHY groups: the sentences of one document (a Bible chapter, a TED talk) share a topic, names
and style, so their errors are correlated; resampling single sentences treats them as
independent and gives intervals that are too narrow (a test set of 529 verses is 28 chapters).
Resampling whole documents keeps that correlation inside each draw."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def resampled_sums(stats: np.ndarray, groups: Sequence, draws: int, seed: int) -> np.ndarray:
    """``draws`` bootstrap totals of the per-item ``stats`` (N, K): each draw picks as many
    groups as there are, with replacement, and sums their items' rows -> (draws, K)."""
    _, inverse = np.unique(np.asarray(groups, dtype=str), return_inverse=True)
    per_group = np.zeros((inverse.max() + 1, stats.shape[1]))
    np.add.at(per_group, inverse, stats)
    picks = np.random.default_rng(seed).integers(0, len(per_group),
                                                 size=(draws, len(per_group)))
    return per_group[picks].sum(axis=1)


def interval(samples: np.ndarray, level: float = 0.95, digits: int = 4) -> list[float]:
    """The percentile interval of bootstrap ``samples``."""
    tail = (1 - level) / 2 * 100
    return [round(float(np.percentile(samples, tail)), digits),
            round(float(np.percentile(samples, 100 - tail)), digits)]


def statistic_interval(stats: np.ndarray, groups: Sequence, statistic: Callable[[np.ndarray],
                       float], draws: int, seed: int, level: float = 0.95,
                       digits: int = 4) -> list[float]:
    """Percentile interval of ``statistic`` (a function of summed stats) over group resamples."""
    sums = resampled_sums(stats, groups, draws, seed)
    return interval(np.array([statistic(s) for s in sums]), level, digits)

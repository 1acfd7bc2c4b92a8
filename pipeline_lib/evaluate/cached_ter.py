"""sacreBLEU's TER that computes each (hypothesis, references) pair's edit statistics once, and
can compute a test set's pairs in several processes first.

WHY: TER's shift search is pure Python (``sacrebleu.metrics.lib_ter``) and was 89 % of
``score_test``'s time in a profile of the default run (2026-11-30, bench/RESULTS.md): every
system's segment statistics were computed for its score, then again by the paired bootstrap.
The statistics are a function of the pair alone, so the second computation can return the
first's, and the pairs can be computed side by side (``fill``); scores, intervals and p-values
are unchanged (tests/unit/evaluate/test_cached_ter.py).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import TER

Pair = tuple[str, tuple[tuple[str, ...], ...]]   # (tokenized hypothesis, each reference's words)


#: sacreBLEU's own TER for the pairs' statistics (they do not depend on its tokenizer settings:
#: the pairs are tokenized already), built once per process, not once per pair
_PLAIN = TER()


def _edit_statistics(pair: Pair) -> list[float]:
    """TER's statistics of one pair (sacreBLEU's code; the tokenizer has already run)."""
    hyp, refs = pair
    return _PLAIN._compute_segment_statistics(hyp, {"ref_words": [list(r) for r in refs]})


def _pair(hypothesis: str, ref_kwargs: dict) -> Pair:
    """The key of a tokenized hypothesis and sacreBLEU's cached reference words."""
    return hypothesis, tuple(map(tuple, ref_kwargs["ref_words"]))


class CachedTER(TER):
    """TER whose segment statistics are kept for the life of the object (one test set)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stats: dict[Pair, list[float]] = {}

    def _compute_segment_statistics(self, hypothesis: str, ref_kwargs: dict) -> list[float]:
        key = _pair(hypothesis, ref_kwargs)
        if key not in self._stats:
            self._stats[key] = super()._compute_segment_statistics(hypothesis, ref_kwargs)
        return list(self._stats[key])

    def fill(self, systems: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
             workers: int) -> None:
        """Compute every new pair of ``systems`` (hypothesis lists) against ``references``
        (sacreBLEU's reference streams) in ``workers`` processes (spawned: the scorer has
        pyarrow's threads, which a fork would copy mid-flight)."""
        todo: dict[Pair, None] = {}
        ref_cache = self._cache_references(references)
        for hyps in systems:
            for hyp, ref_kwargs in zip(hyps, ref_cache):
                key = _pair(self._preprocess_segment(hyp), ref_kwargs)
                if key not in self._stats:
                    todo[key] = None
        pairs = list(todo)
        if workers < 2 or len(pairs) < 2:
            stats = [_edit_statistics(p) for p in pairs]
        else:
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                stats = pool.map(_edit_statistics, pairs,
                                 chunksize=max(1, len(pairs) // (workers * 8)))
        self._stats.update(zip(pairs, stats))

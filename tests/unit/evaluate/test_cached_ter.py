"""pipeline_lib/evaluate/cached_ter.py: sacreBLEU's TER with each pair's edit statistics kept,
and filled by several processes. The scores and the paired bootstrap must not change, and a
pair must not be computed twice."""

from __future__ import annotations

import random

import pytest
from sacrebleu.metrics import TER
from sacrebleu.metrics import ter as ter_module
from sacrebleu.significance import PairedTest

from pipeline_lib.evaluate.cached_ter import CachedTER

WORDS = "the he she his her said unto them and of in Lord king went came , .".split()


def _sentences(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 14))) for _ in range(n)]


@pytest.fixture
def corpus() -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(7)
    refs = [_sentences(rng, 40)]
    systems = [_sentences(rng, 40), _sentences(rng, 40)]
    systems.append(list(systems[0][:20]) + _sentences(rng, 20))    # shares pairs with the first
    return systems, refs


@pytest.fixture
def count_edits(monkeypatch) -> list[int]:
    calls = [0]
    real = ter_module.translation_edit_rate

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ter_module, "translation_edit_rate", counted)
    return calls


@pytest.mark.parametrize("case_sensitive", [True, False])
def test_scores_and_the_bootstrap_are_sacrebleus(corpus, case_sensitive):
    systems, refs = corpus
    plain, cached = TER(case_sensitive=case_sensitive), CachedTER(case_sensitive=case_sensitive)
    for hyps in systems:
        assert cached.corpus_score(hyps, refs).score == plain.corpus_score(hyps, refs).score
        assert cached._extract_corpus_statistics(hyps, refs) == \
            plain._extract_corpus_statistics(hyps, refs)
    named = [(f"s{i}", h) for i, h in enumerate(systems)]
    ours = PairedTest(named, {"ter": cached}, refs, test_type="bs", n_samples=50)()
    theirs = PairedTest(named, {"ter": plain}, refs, test_type="bs", n_samples=50)()
    assert [(r.score, r.p_value, r.mean, r.ci) for r in ours[1]["TER"]] == \
        [(r.score, r.p_value, r.mean, r.ci) for r in theirs[1]["TER"]]


def test_each_pair_is_computed_once(corpus, count_edits):
    systems, refs = corpus
    cached = CachedTER()
    cached.corpus_score(systems[0], refs)
    assert count_edits[0] == 40
    cached.corpus_score(systems[0], refs)
    assert count_edits[0] == 40                  # the second time: kept statistics
    cached.corpus_score(systems[2], refs)
    assert count_edits[0] == 60                  # its first 20 pairs are the first system's


@pytest.mark.parametrize("workers", [1, 2])
def test_fill_computes_every_new_pair_with_the_same_statistics(corpus, count_edits, workers):
    systems, refs = corpus
    cached = CachedTER()
    cached.fill(systems, refs, workers)
    # with 2 workers the pairs were computed in other processes, whose calls are not counted
    assert count_edits[0] == (100 if workers == 1 else 0)
    assert len(cached._stats) == 100
    for hyps in systems:
        assert cached._extract_corpus_statistics(hyps, refs) == \
            TER()._extract_corpus_statistics(hyps, refs)
    assert count_edits[0] == (100 if workers == 1 else 0) + 3 * 40   # the plain TER's only

"""Documents regrouped from other documents' sentences (pipeline_lib/mixed_documents.py): the
random and empty context of the models that read whole documents (issue 34 items 2-3)."""

from __future__ import annotations

import random

import pytest

from pipeline_lib.mixed_documents import interleaved, regroup


def _docs(sizes):
    return [[(d, i) for i in range(n)] for d, n in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [[4, 3, 2], [10, 1, 1, 1, 9], [2] * 30, [7, 7]])
def test_random_keeps_every_sentence_and_size_and_no_neighbours_share_a_document(sizes):
    docs = _docs(sizes)
    out = regroup(docs, "random", seed=3)
    assert [len(d) for d in out] == sizes
    assert sorted(s for d in out for s in d) == sorted(s for d in docs for s in d)
    flat = [s for d in out for s in d]
    # a neighbour from the same document only where no arrangement avoids it (the longest
    # document with more than half of the sentences)
    if 2 * max(sizes) <= sum(sizes) + 1:
        assert all(a[0] != b[0] for a, b in zip(flat, flat[1:])), flat
    for d in range(len(sizes)):               # each document's sentences keep their order
        own = [i for doc, i in flat if doc == d]
        assert own == sorted(own)


def test_random_is_a_function_of_the_seed():
    docs = _docs([5, 4, 3, 2])
    assert regroup(docs, "random", "1:shard") == regroup(docs, "random", "1:shard")
    assert regroup(docs, "random", 1) != regroup(docs, "random", 2)


def test_empty_gives_every_sentence_a_document_and_true_keeps_them():
    docs = _docs([3, 2])
    assert regroup(docs, "empty", 1) == [[s] for d in docs for s in d]
    assert regroup(docs, "true", 1) == docs


def test_one_document_is_shuffled_within_itself():
    out = regroup(_docs([6]), "random", 1)
    assert len(out) == 1 and sorted(out[0]) == _docs([6])[0] and out[0] != _docs([6])[0]


def test_interleaving_leaves_no_long_document_alone_at_the_end():
    """Taking the fullest document first: [3, 3, 2] never ends with two of one document."""
    for seed in range(20):
        order = [d for d, _ in interleaved([3, 3, 2], random.Random(seed))]
        assert all(a != b for a, b in zip(order, order[1:])), order


def test_an_unknown_condition_is_refused():
    with pytest.raises(ValueError, match="context condition 'shuffled'"):
        regroup(_docs([2, 2]), "shuffled", 1)

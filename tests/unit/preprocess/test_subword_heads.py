"""Subword projection of dependency heads (Deguchi et al. 2019): paper example, tokenisation
mismatches, and property tests on random trees and random segmentations."""

from __future__ import annotations

import random

import pytest

from pipeline_lib.preprocess.subword_heads import NO_HEAD, project_heads


def test_paper_example():
    # Fing@@ er@@ print -> input: non-final pieces point right, the final piece to input.
    words, heads = ["Fingerprint", "input"], [2, 0]
    pieces = ["▁Fing", "er", "print", "▁input"]
    assert project_heads(words, heads, pieces) == [1, 2, 3, 3]


def test_head_to_multi_piece_word_points_to_its_final_piece():
    # "the Fingerprint": "the" -> final piece of Fingerprint (print), not its first.
    words, heads = ["the", "Fingerprint"], [2, 0]
    pieces = ["▁the", "▁Fing", "er", "print"]
    assert project_heads(words, heads, pieces) == [3, 2, 3, 3]


def test_multiword_token_del_is_aligned_by_characters():
    # stanza expands Spanish "del" into the UD words "de" + "el"; sentencepiece keeps "del".
    words = ["la", "casa", "de", "el", "hombre"]
    heads = [2, 0, 5, 5, 2]
    pieces = ["▁la", "▁casa", "▁del", "▁hom", "bre"]
    assert project_heads(words, heads, pieces) == [1, 1, 4, 4, 1]


def test_piece_spanning_words_takes_the_span_head():
    # sentencepiece joins "can" + "not" into one piece; the span's head word is "can" (-> go).
    words, heads = ["I", "can", "not", "go"], [4, 4, 2, 0]
    pieces = ["▁I", "▁cannot", "▁go"]
    assert project_heads(words, heads, pieces) == [2, 2, 2]


def test_bare_space_piece_and_empty_sentence():
    words, heads = ["(", "a", ")"], [2, 0, 2]
    pieces = ["▁", "(", "a", ")"]
    assert project_heads(words, heads, pieces) == [1, 2, 2, 2]
    assert project_heads([], [], []) == []


def test_invalid_trees_are_rejected():
    with pytest.raises(ValueError):
        project_heads(["a", "b"], [0], ["▁a", "▁b"])
    with pytest.raises(ValueError):
        project_heads(["a", "b"], [0, 3], ["▁a", "▁b"])
    with pytest.raises(ValueError):
        project_heads(["a", "b", "c"], [0, 3, 2], ["▁a", "▁b", "▁c"])  # b <-> c cycle


def _random_tree(n: int, rng: random.Random) -> list[int]:
    """1-based heads of a random tree: a random order, each word attached to an earlier one."""
    order = list(range(n))
    rng.shuffle(order)
    heads = [0] * n
    for k, w in enumerate(order[1:], start=1):
        heads[w] = order[rng.randrange(k)] + 1
    return heads


def _random_word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeñáxyz") for _ in range(rng.randint(1, 8)))


def _check_chain(out: list[int], n_pieces: int) -> int:
    """Valid indices, one self-pointing piece (the root) reached from every piece."""
    assert len(out) == n_pieces
    assert all(0 <= h < n_pieces for h in out)
    roots = [p for p, h in enumerate(out) if h == p]
    assert len(roots) == 1
    for p in range(n_pieces):
        seen = set()
        while out[p] != p:
            assert p not in seen, "cycle"
            seen.add(p)
            p = out[p]
        assert p == roots[0]
    return roots[0]


@pytest.mark.parametrize("seed", range(200))
def test_random_words_split_within_words(seed):
    """Pieces inside word boundaries: exact paper structure."""
    rng = random.Random(seed)
    n = rng.randint(1, 15)
    words = [_random_word(rng) for _ in range(n)]
    heads = _random_tree(n, rng)
    pieces, final = [], []
    for w in words:
        k = rng.randint(0, len(w) - 1)
        cuts = sorted(rng.sample(range(1, len(w)), k)) if k else []
        parts = [w[a:b] for a, b in zip([0] + cuts, cuts + [len(w)])]
        parts[0] = "▁" + parts[0]
        pieces.extend(parts)
        final.append(len(pieces) - 1)
    out = project_heads(words, heads, pieces)
    root = _check_chain(out, len(pieces))
    assert root == final[heads.index(0)]
    finals = set(final)
    for p in range(len(pieces)):
        if p not in finals:
            assert out[p] == p + 1                              # non-final -> right neighbour
    for w, h in enumerate(heads):
        if h:
            assert out[final[w]] == final[h - 1]                # final -> head's final piece


def _mutate(text: str, rng: random.Random) -> str:
    """Character edits like MWT expansion or normalisation make words and pieces differ."""
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(chars))
        op = rng.choice("sdi")
        if op == "s" and chars[i] != " ":
            chars[i] = "q"
        elif op == "d" and chars[i] != " " and len(chars) > 1:
            del chars[i]
        else:
            chars.insert(i, "w")
    return "".join(chars).strip() or "w"


@pytest.mark.parametrize("seed", range(300))
def test_random_segmentations_across_word_boundaries(seed):
    """Arbitrary pieces of the text (crossing words, bare spaces, and for a third of the cases
    characters that differ from the words): still one tree over the pieces."""
    rng = random.Random(1000 + seed)
    n = rng.randint(1, 12)
    words = [_random_word(rng) for _ in range(n)]
    heads = _random_tree(n, rng)
    text = " ".join(words)
    if seed % 3 == 0:
        text = _mutate(text, rng)
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, min(len(text) - 1, 20))))
    pieces = [text[a:b].replace(" ", "▁") for a, b in zip([0] + cuts, cuts + [len(text)])]
    out = project_heads(words, heads, pieces)
    nonempty = [p for p, s in enumerate(pieces) if s.strip("▁")]
    # Only pieces with characters can be a word's final piece; a trailing bare "▁" has no head.
    valid = [h for h in out if h != NO_HEAD]
    assert all(0 <= h < len(pieces) for h in valid)
    assert out[nonempty[-1]] != NO_HEAD
    roots = [p for p, h in enumerate(out) if h == p]
    assert len(roots) == 1
    for p in range(len(pieces)):
        steps = 0
        while out[p] not in (p, NO_HEAD):
            p = out[p]
            steps += 1
            assert steps <= len(pieces), "cycle"

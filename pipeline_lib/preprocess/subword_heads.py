"""Project word-level dependency heads onto subwords (Deguchi et al. 2019, "Dependency-Based
Self-Attention for Transformer NMT", Sec. 3.3).

The rule, as in the paper:

* every **non-final** piece of a word points to its **right neighbour** (the next piece of the
  same word);
* the **final** piece of a word points to the **final piece of its head word**;
* the final piece of the **root** word points to **itself**.

Paper example: ``Fing@@ er@@ print`` with head ``input`` gives
``Fing@@ -> er@@ -> print -> input``.

Words (stanza's UD words) and pieces (sentencepiece) tokenise the same text differently, and UD
multi-word tokens even change characters (Spanish ``del`` -> ``de el``). They are therefore
aligned **by characters, ignoring whitespace**: both sides are concatenated without whitespace,
an exact match is the fast path, otherwise ``difflib`` aligns the two strings and unmatched
stretches are mapped proportionally (monotonically), so every word end lands in some piece.

* A piece is *final* for word ``w`` when it holds ``w``'s last character. When one piece holds the
  last characters of several words (``del`` for ``de`` + ``el``) it stands for the shallowest of
  them in the tree (the root if present), whose head lies outside the piece; choosing by depth
  keeps the projected piece graph acyclic.
* Pieces without any word end (a bare ``▁``, or the non-final pieces of a word) point right.

Output: 0-based positions **in the piece sequence as encoded, without BOS/EOS** (the loader adds
EOS at the end of the source, so source heads need no shift; a target prefixed by BOS needs
+1 and -1 at the BOS position). ``NO_HEAD`` (-1) = no supervision for that position.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import Sequence

from pipeline_lib.vocab import NO_HEAD

# Characters that do not count for the alignment: whitespace and sentencepiece's "▁" mark.
# (Every character str.isspace() knows lies below U+3001.)
_DROP = {c: None for c in range(0x3001) if chr(c).isspace()} | {0x2581: None}


def _clean(s: str) -> str:
    """``s`` without whitespace or ``▁``; the fast path covers pieces and words that only carry
    them at the edges (every whitespace character but " " is non-printable)."""
    t = s.strip().strip("\u2581")
    if t.isprintable() and " " not in t and "\u2581" not in t:
        return t
    return t.translate(_DROP)


def _char_map(words_chars: str, piece_chars: str) -> list[int]:
    """Monotone map from each index of ``words_chars`` to an index of ``piece_chars``."""
    n, m = len(words_chars), len(piece_chars)
    if words_chars == piece_chars:
        return list(range(n))
    out = [0] * n
    # autojunk off: long sentences must not have frequent characters ignored.
    matcher = SequenceMatcher(None, words_chars, piece_chars, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if i2 == i1:
            continue
        for i in range(i1, i2):
            if tag == "equal":
                out[i] = j1 + (i - i1)
            elif j2 > j1:
                out[i] = j1 + (i - i1) * (j2 - j1) // (i2 - i1)
            else:  # deleted on the piece side: attach to the piece character before the gap
                out[i] = max(j1 - 1, 0)
    return [min(x, m - 1) for x in out]


def tree_depths(heads: Sequence[int]) -> list[int]:
    """Depth of each word (root = 0); ValueError unless ``heads`` (1-based, 0 = root) is one
    tree: a single root, no cycle."""
    n = len(heads)
    if any(not 0 <= h <= n for h in heads):
        raise ValueError(f"head index out of range in {list(heads)}")
    if n and sum(h == 0 for h in heads) != 1:
        raise ValueError(f"not exactly one root in {list(heads)}")
    depth: list[int | None] = [None] * n
    for start in range(n):
        path, on_path, w = [], set(), start
        while w >= 0 and depth[w] is None:
            if w in on_path:
                raise ValueError(f"heads {list(heads)} contain a cycle")
            path.append(w)
            on_path.add(w)
            w = heads[w] - 1
        d = -1 if w < 0 else depth[w]
        for v in reversed(path):
            d += 1
            depth[v] = d
    return depth  # type: ignore[return-value]


def project_heads(words: Sequence[str], heads: Sequence[int], pieces: Sequence[str]) -> list[int]:
    """Subword head positions for ``pieces`` given a word-level tree.

    :param words: UD words of the sentence.
    :param heads: 1-based head of each word, 0 = root (CoNLL-U convention).
    :param pieces: surface text of each subword piece (whitespace ignored, may be empty).
    :returns: one 0-based piece position per piece, ``NO_HEAD`` where nothing can be said.
    :raises ValueError: when ``heads`` is not a tree over ``words``.
    """
    n_words, n_pieces = len(words), len(pieces)
    if len(heads) != n_words:
        raise ValueError(f"{n_words} words but {len(heads)} heads")
    depth = tree_depths(heads)
    if n_pieces == 0:
        return []
    word_chars = [_clean(w) for w in words]
    piece_chars = [_clean(p) for p in pieces]
    wtext, ptext = "".join(word_chars), "".join(piece_chars)
    if not wtext or not ptext:
        return [NO_HEAD] * n_pieces

    # owner[c] = the piece holding character c of ptext (empty pieces own nothing).
    owner: list[int] = []
    for k, pc in enumerate(piece_chars):
        owner.extend([k] * len(pc))
    cmap = None if wtext == ptext else _char_map(wtext, ptext)

    # final_piece[w]: the piece holding word w's last character (a word without characters
    # takes the previous word's end, or the first character).
    final_piece: list[int] = []
    end = 0
    for wc in word_chars:
        end += len(wc)
        pchar = 0 if end == 0 else (end - 1 if cmap is None else cmap[end - 1])
        final_piece.append(owner[pchar])
    final_piece[-1] = owner[-1]                      # the last word ends the sentence

    # Pieces without a word end point right (the last piece always ends a word unless empty).
    out = list(range(1, n_pieces + 1))
    out[-1] = NO_HEAD
    span: dict[int, int] = {}
    for w, p in enumerate(final_piece):
        # Several words ending in one piece: it stands for the shallowest (its head lies
        # outside the piece; depth strictly falls along final pieces, so no cycle).
        if p not in span or depth[w] < depth[span[p]]:
            span[p] = w
    for p, w in span.items():
        out[p] = p if heads[w] == 0 else final_piece[heads[w] - 1]
    return out

"""Cutting documents into sub-documents: one rule for the restoration data (preprocess.noise),
the training loader and decoding (Chen et al. 2021 work on sub-documents of at most
``max_sentences`` sentences), so that a model is decoded on the units it was trained on."""

from __future__ import annotations


def split_document(n: int, max_sentences: int) -> list[tuple[int, int]]:
    """[start, end) of ceil(n / max) chunks of balanced size (no 1-sentence tail chunk)."""
    if n == 0:
        return []
    k = -(-n // max_sentences)
    base, extra = divmod(n, k)
    bounds, start = [], 0
    for i in range(k):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds

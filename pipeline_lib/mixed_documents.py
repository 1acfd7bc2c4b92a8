"""Documents rebuilt from other documents' sentences: the random and empty context of models whose
context is the document itself, not a per-sentence rule (the cache's translation history, Tu et
al. 2018; cross-task's sub-documents, Chen et al. 2021).

WHY its own module: the trainer's loader (a random-context twin of such a model) and the decoder
(an ablated decoding) regroup the same way, and the regrouping knows nothing of tensors, models
or files. A per-sentence context rule (DocT, CAMN) is swapped by ``ModelInputs.ablated`` instead.

- ``random``: every document's sentences are laid out in one stream in which no two neighbours
  come from the same document (:func:`interleaved`), then cut into pseudo-documents of the
  original sizes, in the original order. A sentence's preceding sentence, and so the start of its
  history, is then another document's; sentences further back may come from its own document,
  but not in its order or next to it. Our choice: the papers define no random-document control;
  this one keeps every sentence, every document size and so every batch's token count.
- ``empty``: every sentence a document of its own (no history, a one-sentence sub-document).
- With one document there is no other to draw from: ``random`` then shuffles its sentences
  (``within_document`` in the manifests, as for the per-sentence rules).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from typing import TypeVar

from pipeline_lib.context_conditions import CONTEXT_CONDITIONS

T = TypeVar("T")

def interleaved(sizes: Sequence[int], rng: random.Random) -> list[tuple[int, int]]:
    """(document, sentence) pairs of every sentence, each document's in its own order, such
    that no two neighbours share a document wherever that is possible: each step takes the next
    sentence of the document with the most sentences left (ties drawn at random) other than the
    previous step's. Taking the fullest first is what keeps a long document from being left
    alone at the end. A heap keeps it O(n log documents) for a training shard's thousands."""
    heap = [(-n, rng.random(), d) for d, n in enumerate(sizes) if n]
    heapq.heapify(heap)
    taken = [0] * len(sizes)
    out: list[tuple[int, int]] = []
    held = None                  # the previous step's document, out of the heap for one step
    while heap:
        neg, tie, d = heapq.heappop(heap)
        out.append((d, taken[d]))
        taken[d] += 1
        if held is not None:
            heapq.heappush(heap, held)
        held = (neg + 1, tie, d) if neg + 1 else None
        if not heap and held is not None:   # only this document is left
            heap, held = [held], None
    return out


def regroup(docs: Sequence[Sequence[T]], condition: str, seed: int | str) -> list[list[T]]:
    """``docs`` under ``condition`` (module docstring): ``true`` as they are, ``random`` as
    pseudo-documents of the original sizes drawn from an interleaving of all of them, ``empty``
    one sentence each. The same ``seed`` gives the same regrouping."""
    if condition == "true":
        return [list(d) for d in docs]
    if condition == "empty":
        return [[s] for d in docs for s in d]
    if condition != "random":
        raise ValueError(f"context condition {condition!r}: one of {CONTEXT_CONDITIONS}")
    rng = random.Random(seed)
    kept = [d for d in docs if len(d)]
    if len(kept) < 2:
        flat = [s for d in kept for s in d]
        rng.shuffle(flat)
        return [flat] if flat else []
    order = iter(interleaved([len(d) for d in kept], rng))
    out = []
    for d in kept:
        out.append([kept[a][b] for a, b in (next(order) for _ in d)])
    return out

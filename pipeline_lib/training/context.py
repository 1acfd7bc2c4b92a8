"""Document context for context-aware models: the ONE place that turns a document's sentences
(lists of subword ids) into what a model reads besides the current sentence.

The loader (data.py), the decoder (decode.py) and the contrastive scorer (discourse.py) all build
context here, so training, validation, decoding and contrastive evaluation see the same layout
(documented in the models' "Data" sections):

* ``ctx_src`` (DocT, CAMN concat): :func:`context_ids`;
* ``extra["ctx_sents"]`` (CAMN weighted): :func:`context_sentences`;
* CAMN ``random_context`` ablation: :func:`random_previous`;
* cross-task language tags: :func:`tagged` (document tensors come from
  :func:`pipeline_lib.models.crosstask.document_extra`, sub-documents from
  :func:`pipeline_lib.preprocess.noise.split_document`).

Special piece ids are passed in explicitly (:class:`SpecialIds`, read once from the
sentencepiece model) so that no hot loop re-loads sentencepiece.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline_lib.constants import BOS_ID, EOS_ID, MASK_TOKEN, PAD_ID, SENT_BREAK, DataMode

_TAG = re.compile(r"^<2[^>]+>$")


@dataclass(frozen=True)
class SpecialIds:
    """Piece ids context building needs: the sentence break and the two language tags.

    ``src_tag`` / ``tgt_tag`` are ``<2{src_lang}>`` / ``<2{tgt_lang}>``. bpe.py adds them as
    user-defined symbols in the order (src, tgt) right after the mask symbols, so their ids are
    ordered the same way; that is how they are told apart without the language names (the
    trainer's and decoder's CLI carry only the sentencepiece model)."""

    sent_break: int
    src_tag: int
    tgt_tag: int

    @classmethod
    def from_spm(cls, model: str | Path) -> "SpecialIds":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(model))
        brk = sp.piece_to_id(SENT_BREAK)
        if brk == sp.unk_id() or sp.id_to_piece(brk) != SENT_BREAK:
            raise ValueError(f"{model}: no piece {SENT_BREAK!r} (bpe.py trains it as a user symbol)")
        start = sp.piece_to_id(MASK_TOKEN)
        tags = [i for i in range(sp.get_piece_size()) if _TAG.match(sp.id_to_piece(i))
                and (start == sp.unk_id() or i > start)][:2]
        if len(tags) != 2:
            raise ValueError(f"{model}: expected two language-tag pieces <2xx> (bpe.user_symbols), "
                             f"found {[sp.id_to_piece(i) for i in tags]}")
        return cls(sent_break=brk, src_tag=tags[0], tgt_tag=tags[1])


def context_ids(prev: Sequence[Sequence[int]], k: int, max_len: int, sent_break: int) -> list[int]:
    """``ctx_src`` of one sentence: its previous ``k`` source sentences, oldest first, joined by
    ``sent_break`` and ending in EOS; a lone BOS when there is none.

    :param prev: the document's sentences before the current one, in order (ids, no EOS).
    :param max_len: the model's positions; a longer context keeps its most recent tokens (cut
        from the oldest end), so the EOS and the sentence nearest the current one survive.
    """
    chosen = [list(s) for s in prev[-k:]] if k > 0 else []
    if not chosen:
        return [BOS_ID]
    ids: list[int] = []
    for j, s in enumerate(chosen):
        if j:
            ids.append(sent_break)
        ids.extend(s)
    ids.append(EOS_ID)
    return ids[-max_len:]


def context_sentences(prev: Sequence[Sequence[int]], n: int, max_len: int) -> list[list[int]]:
    """CAMN weighted memory of one sentence: ``n`` slots, slot ``n-1`` the previous sentence,
    slot ``n-1-j`` the (j+1)-th previous; each ``ids + [EOS]`` (the last ``max_len - 1`` ids);
    missing sentences are empty slots; no previous sentence at all: a lone BOS in slot ``n-1``."""
    slots: list[list[int]] = [[] for _ in range(n)]
    chosen = list(prev[-n:]) if n > 0 else []
    if not chosen:
        slots[n - 1] = [BOS_ID]
        return slots
    for j, s in enumerate(chosen):
        slots[n - len(chosen) + j] = list(s)[-(max_len - 1):] + [EOS_ID]
    return slots


def random_previous(pool: Sequence[Sequence[int]], current: int, n_prev: int, n: int, seed: int,
                    doc_id: str, sent_idx: int) -> list[list[int]]:
    """CAMN ``random_context``: ``n`` sentences drawn uniformly from ``pool`` (the source
    sentences available to the reader) other than ``pool[current]`` and its ``n_prev`` true
    previous sentences ``pool[current - n_prev:current]``; deterministic in (seed, doc_id,
    sent_idx) so training, validation and decoding draw the same memory for a sentence whatever
    the order it is met in. Returned oldest first like true previous sentences."""
    excluded = set(range(max(0, current - n_prev), current + 1))
    allowed = len(pool) - len(excluded)
    if allowed <= 0:
        raise ValueError(f"random_context: no sentence to draw for {doc_id}:{sent_idx} "
                         f"(pool of {len(pool)} sentences)")
    rng = random.Random(seed * 1_000_003 + zlib.crc32(f"{doc_id}\t{sent_idx}".encode()))
    out = []
    for _ in range(n):
        j = rng.randrange(allowed)
        for e in sorted(excluded):  # map the j-th allowed index onto the pool
            if j >= e:
                j += 1
        out.append(list(pool[j]))
    return out


def pad_2d(seqs: Sequence[Sequence[int]], value: int = PAD_ID) -> torch.Tensor:
    """(B, max len) long tensor, right-padded with ``value``."""
    out = torch.full((len(seqs), max(1, max(len(s) for s in seqs))), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def pad_3d(rows: Sequence[Sequence[Sequence[int]]]) -> torch.Tensor:
    """(B, N, L) long tensor of ``rows`` of N sentences each, PAD_ID padded."""
    L = max(1, max(len(s) for r in rows for s in r))
    out = torch.full((len(rows), len(rows[0]), L), PAD_ID, dtype=torch.long)
    for b, r in enumerate(rows):
        for j, s in enumerate(r):
            if s:
                out[b, j, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def tagged(ids: Sequence[int], tag: int) -> list[int]:
    """A cross-task sentence: the output language's tag, then the ids (Chen et al. 2021)."""
    return [tag] + list(ids)


@dataclass(frozen=True)
class ContextSpec:
    """What context a model reads, taken once from the model (:meth:`for_model`) and handed to
    the loader and the decoder, so both build exactly the same inputs.

    ``k``: previous source sentences (DocT ``context_sentences``, CAMN ``memory_sentences``);
    ``as_sentences``: CAMN weighted memory (``extra["ctx_sents"]``) instead of ``ctx_src``;
    ``random_context``: CAMN ablation; ``max_sentences``: cross-task sub-document size;
    ``tags``: cross-task language tags on every sentence (in its sentence batches too);
    ``special``: piece ids (None for models that need none)."""

    mode: DataMode = DataMode.SENTENCE
    k: int = 0
    as_sentences: bool = False
    random_context: bool = False
    max_sentences: int = 0
    tags: bool = False
    special: SpecialIds | None = None

    @classmethod
    def for_model(cls, model: torch.nn.Module, spm_model: str | Path) -> "ContextSpec":
        mode = DataMode(type(model).data_mode)
        if mode is DataMode.SENTENCE or mode is DataMode.STREAM:
            return cls(mode=mode)
        special = SpecialIds.from_spm(spm_model)
        if mode is DataMode.DOCUMENT:
            return cls(mode=mode, max_sentences=int(model.max_sentences), tags=True, special=special)
        camn = getattr(model, "camn", None)
        return cls(mode=mode, k=int(model.context_sentences), special=special,
                   as_sentences=camn is not None and camn.memory_mode.value == "weighted",
                   random_context=bool(getattr(model, "random_context", False)))

    @property
    def tag(self) -> int | None:
        """The target-language tag put before every translation sentence (cross-task only)."""
        return self.special.tgt_tag if self.tags else None


#: Row key holding a row's context (``list[int]`` ctx_src, or ``list[list[int]]`` ctx_sents).
CTX_KEY = "ctx"


def add_context(doc_rows: Sequence[Sequence[dict]], spec: ContextSpec, max_len: int,
                seed: int) -> None:
    """Give every row of ``doc_rows`` (documents, each its rows in sentence order) its context
    under ``CTX_KEY``, built from the previous rows of the same document (or, with
    ``random_context``, drawn from all sentences of ``doc_rows``, which is the reader's pool)."""
    flat = [r for d in doc_rows for r in d]
    pool = [r["src_ids"] for r in flat] if spec.random_context else []
    pos = 0
    for d in doc_rows:
        for i, r in enumerate(d):
            prev = [x["src_ids"] for x in d[:i]]
            if spec.random_context:
                prev = random_previous(pool, pos, min(i, spec.k), spec.k, seed, str(r["doc_id"]),
                                       int(r["sent_idx"]))
            r[CTX_KEY] = (context_sentences(prev, spec.k, max_len) if spec.as_sentences
                          else context_ids(prev, spec.k, max_len, spec.special.sent_break))
            pos += 1


def context_tensors(rows: Sequence[dict], spec: ContextSpec) -> tuple[torch.Tensor | None, dict]:
    """``(ctx_src, extra)`` of a batch of context-enriched rows (see :func:`add_context`)."""
    if spec.as_sentences:
        from pipeline_lib.models.camn import CTX_SENTS

        return None, {CTX_SENTS: pad_3d([r[CTX_KEY] for r in rows])}
    return pad_2d([r[CTX_KEY] for r in rows]), {}

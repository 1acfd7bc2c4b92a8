"""The model protocol: what a model reads besides the sentence pair, declared by the model itself.

Every model class answers :meth:`Transformer.inputs` (given the special piece ids of its
sentencepiece model, :class:`SpecialIds`) with a :class:`ModelInputs`. The loader
(training/data.py), the trainer, the test-set decoder (evaluate/decode.py), ``translate`` and the
contrastive scorer (evaluate/discourse.py) build their batches from that object alone, so they
never import a specific model and all of them feed a model exactly the same layout. Adding a
model with a new kind of context means writing its :class:`ContextRule` (or
:class:`DocumentRule`) in the model's own file; nothing in shared code changes.

What a ``ModelInputs`` declares:

* ``mode`` (:class:`~pipeline_lib.batch.DataMode`): the shape of the data: sentence pairs,
  pairs with a context built from their source document (CONTEXT), document streams whose rows
  continue across batches (STREAM), or whole sub-documents (DOCUMENT);
* ``context``: a :class:`ContextRule` (CONTEXT mode): each row's context from its document, and
  how a batch of contexts becomes ``Batch.ctx_src`` and/or ``Batch.extra`` tensors;
* ``documents``: a :class:`DocumentRule` (DOCUMENT mode): sub-document size and the
  ``Batch.extra`` tensors of a batch of sub-documents;
* ``tag`` / ``restore_tag``: a piece put before every translation / restoration sentence
  (language tags of multi-task models), stripped from hypotheses;
* ``heads``: the loader reads the subword dependency heads (parse supervision);
* ``in_document_order``: decoding walks documents sentence by sentence, in order, calling the
  model's ``start_documents`` / ``finish_sentences`` hooks (translation history);
* ``dev_bleu_skip``: why greedy dev BLEU would not measure this model (None = it does);
* ``batch_invariant``: False when a sentence's output depends on the sentences batched with it
  (a memory shared by the batch); the contract tests then skip batch-invariance;
* ``schedule``: which training steps take the second (``--aux-shards``) data stream.

The context helpers below (:func:`context_ids`, :func:`context_sentences`,
:func:`random_previous`) are the layouts the seed models share; their rules are
:class:`PreviousSentences`, :class:`PreviousSentenceSlots` and :class:`RandomSentences`.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import BOS_ID, EOS_ID, MASK_TOKEN, PAD_ID, SENT_BREAK

_TAG = re.compile(r"^<2[^>]+>$")

#: Row key holding a row's context (whatever its rule builds) in the loader and decoder.
CTX_KEY = "ctx"


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

    @classmethod
    def find(cls, model: str | Path) -> "SpecialIds | None":
        """The special ids of a sentencepiece model, or None when it has none (a model trained
        outside the pipeline's BPE stage can still drive a sentence-level Transformer)."""
        try:
            return cls.from_spm(model)
        except ValueError:
            return None


def require_special(special: SpecialIds | None, model: str) -> SpecialIds:
    """``special``, or a clear error for a model that cannot be fed without its pieces."""
    if special is None:
        raise ValueError(f"{model}: the sentencepiece model lacks the pieces {SENT_BREAK!r} and "
                         "the language tags <2xx> this model reads (pipeline_lib/preprocess/bpe.py "
                         "trains them as user symbols)")
    return special


def inputs_for(model: Any, spm_model: str | Path) -> "ModelInputs":
    """``model.inputs(...)`` with the special ids of the sentencepiece model it was trained with."""
    return model.inputs(SpecialIds.find(spm_model))


# --------------------------------------------------------------------------- context layouts


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
    """``n`` memory slots of one sentence: slot ``n-1`` the previous sentence, slot ``n-1-j`` the
    (j+1)-th previous; each ``ids + [EOS]`` (the last ``max_len - 1`` ids); missing sentences are
    empty slots; no previous sentence at all: a lone BOS in slot ``n-1``."""
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
    """``n`` sentences drawn uniformly from ``pool`` (the source sentences available to the
    reader) other than ``pool[current]`` and its ``n_prev`` true previous sentences
    ``pool[current - n_prev:current]``; deterministic in (seed, doc_id, sent_idx) so training,
    validation and decoding draw the same context for a sentence whatever the order it is met in.
    Returned oldest first like true previous sentences."""
    excluded = range(max(0, current - n_prev), current + 1)
    if len(pool) <= len(excluded):
        raise ValueError(f"random_context: no sentence to draw for {doc_id}:{sent_idx} "
                         f"(pool of {len(pool)} sentences)")
    return _draw(pool, excluded, n, seed, doc_id, sent_idx)


def pad_2d(seqs: Sequence[Sequence[int]], value: int = PAD_ID) -> torch.Tensor:
    """(B, max len) long tensor, right-padded with ``value`` (at least one column): one numpy
    fill, not a tensor per row (which cost the loader more than all else in context mode)."""
    lengths = np.fromiter((len(s) for s in seqs), np.int64, len(seqs))
    out = np.full((len(seqs), max(1, int(lengths.max(initial=0)))), value, dtype=np.int64)
    out[np.arange(out.shape[1]) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(seqs), np.int64, int(lengths.sum()))
    return torch.from_numpy(out)


def pad_3d(rows: Sequence[Sequence[Sequence[int]]]) -> torch.Tensor:
    """(B, N, L) long tensor of ``rows`` of N sentences each, PAD_ID padded."""
    flat = pad_2d([s for r in rows for s in r])
    return flat.view(len(rows), len(rows[0]), flat.size(1))


def tagged(ids: Sequence[int], tag: int) -> list[int]:
    """A sentence with a leading tag piece (the output language of a multi-task model)."""
    return [tag] + list(ids)


# --------------------------------------------------------------------------- rules


class ContextRule(ABC):
    """How a CONTEXT-mode model's extra input is built from the source document.

    Rows are mappings with ``doc_id``, ``sent_idx`` and ``src_ids`` (ids without EOS, as the
    model reads the sentence); documents are lists of rows in sentence order. The loader calls
    :meth:`contexts` on the documents of one reading unit (a shard, or a test set), then
    :meth:`collate` on a batch of the contexts it returned."""

    @abstractmethod
    def context(self, doc: Sequence[Mapping], i: int) -> Any:
        """The context of row ``i`` of document ``doc``."""

    def contexts(self, docs: Sequence[Sequence[Mapping]], seed: int) -> list[list[Any]]:
        """Contexts of every row of ``docs`` (per document, per row). ``seed``: the data seed,
        for rules that draw at random."""
        return [[self.context(d, i) for i in range(len(d))] for d in docs]

    @abstractmethod
    def collate(self, contexts: Sequence[Any]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """A batch of contexts -> ``(Batch.ctx_src, Batch.extra entries)``."""

    def true_context(self) -> "ContextRule":
        """The rule that reads the document's real context (contrastive suites test what the
        context changes, so ablations that replace it are scored with the real one)."""
        return self


@dataclass(frozen=True)
class PreviousSentences(ContextRule):
    """``ctx_src``: the previous ``k`` source sentences joined by the break piece (DocT, CAMN)."""

    k: int
    max_len: int
    sent_break: int

    def context(self, doc: Sequence[Mapping], i: int) -> list[int]:
        return context_ids([r["src_ids"] for r in doc[:i]], self.k, self.max_len, self.sent_break)

    def collate(self, contexts: Sequence[Any]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return pad_2d(contexts), {}


@dataclass(frozen=True)
class PreviousSentenceSlots(ContextRule):
    """``extra[key]`` (B, n, L): the previous ``n`` source sentences one per slot (CAMN's
    weighted memory, Eq. 14-15)."""

    n: int
    max_len: int
    key: str

    def context(self, doc: Sequence[Mapping], i: int) -> list[list[int]]:
        return context_sentences([r["src_ids"] for r in doc[:i]], self.n, self.max_len)

    def collate(self, contexts: Sequence[Any]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return None, {self.key: pad_3d(contexts)}


@dataclass(frozen=True)
class RandomSentences(ContextRule):
    """The layout of ``rule`` filled with random sentences of the reading unit instead of the
    true previous ones: by default ``n`` sentences other than the true context
    (:func:`random_previous`; CAMN's "without inter-sentence attention"); with
    ``other_documents``, as many sentences as the true context holds, drawn from other
    documents only (a context ablation, Kim et al. 2019; Li et al. 2020: the context's form
    and amount stay, its content no longer belongs to the document). A reading unit of one
    document has no other: its sentences are drawn as by default (:func:`within_document`)."""

    rule: PreviousSentences | PreviousSentenceSlots
    other_documents: bool = False

    def context(self, doc: Sequence[Mapping], i: int) -> Any:
        raise NotImplementedError("random contexts are drawn over all documents: use contexts()")

    def contexts(self, docs: Sequence[Sequence[Mapping]], seed: int) -> list[list[Any]]:
        pool = [r["src_ids"] for d in docs for r in d]
        n = self.rule.k if isinstance(self.rule, PreviousSentences) else self.rule.n
        # one document (a dev or test set of one talk, chapter...): no other to draw from, so
        # its own sentences outside the true context, CAMN's condition (random_previous)
        other = self.other_documents and len(docs) > 1
        out, start = [], 0
        for d in docs:
            ctxs = []
            for i, r in enumerate(d):
                doc_id, idx = str(r["doc_id"]), int(r["sent_idx"])
                if other:
                    k = min(i, n)
                    drawn = _draw(pool, range(start, start + len(d)), k, seed, doc_id, idx)
                else:
                    k = n
                    drawn = random_previous(pool, start + i, min(i, n), n, seed, doc_id, idx)
                ctxs.append(self.rule.context([{"src_ids": s} for s in drawn] + [r], k))
            out.append(ctxs)
            start += len(d)
        return out

    def collate(self, contexts: Sequence[Any]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return self.rule.collate(contexts)

    def true_context(self) -> ContextRule:
        return self.rule


@dataclass(frozen=True)
class NoContext(ContextRule):
    """Every sentence gets the context a document's first sentence gets (none): what the
    model makes of the sentence alone (CXMI's baseline, Fernandes et al. 2021)."""

    rule: PreviousSentences | PreviousSentenceSlots

    def context(self, doc: Sequence[Mapping], i: int) -> Any:
        return self.rule.context([doc[i]], 0)

    def collate(self, contexts: Sequence[Any]) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        return self.rule.collate(contexts)

    def true_context(self) -> ContextRule:
        return self.rule


def _draw(pool: Sequence[Sequence[int]], excluded: range, n: int, seed: int, doc_id: str,
          sent_idx: int) -> list[list[int]]:
    """``n`` sentences of ``pool`` outside ``excluded`` (a run of indices), uniformly;
    deterministic in (seed, doc_id, sent_idx), so every reader draws the same for a sentence."""
    allowed = len(pool) - len(excluded)
    if n and allowed <= 0:
        raise ValueError(f"context: no sentence to draw for {doc_id}:{sent_idx} outside its "
                         f"{len(excluded)} (pool of {len(pool)} sentences)")
    rng = random.Random(seed * 1_000_003 + zlib.crc32(f"{doc_id}\t{sent_idx}".encode()))
    picks = [rng.randrange(allowed) for _ in range(n)]
    return [list(pool[j + len(excluded) if j >= excluded.start else j]) for j in picks]


class DocumentRule(ABC):
    """How a DOCUMENT-mode model reads whole (sub-)documents of tagged source sentences."""

    max_sentences: int

    @abstractmethod
    def collate(self, documents: Sequence[Sequence[Sequence[int]]], doc_index: Sequence[int],
                queries: Sequence[Sequence[int]] | None = None) -> dict[str, torch.Tensor]:
        """``Batch.extra`` entries for N documents (sentences as ids without EOS), the (B,)
        document of each batch row and, when given, each row's own sentence (so that a model
        may encode a sentence that is also in the row's document once)."""


class Phase(str, Enum):
    """Which data stream a training step takes."""

    SENTENCE = "sentence"    # the job's --shards
    DOCUMENT = "document"    # the job's --aux-shards (documents, restoration instances)


def interleaved_schedule(step: int, ratio: float) -> Phase:
    """Phase of training step ``step`` (0-based) when a share ``ratio`` of steps take the aux stream.

    Steps interleave evenly and deterministically (no RNG, so resuming at a step continues the
    same schedule): step s is DOCUMENT iff ``floor((s+1) r) > floor(s r)``, so every prefix of n
    steps has exactly ``floor(n r)`` aux steps; r = 0.5 alternates S, D, S, D, ...
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"schedule: ratio={ratio} must lie in [0, 1]")
    if step < 0:
        raise ValueError(f"schedule: step={step} must be >= 0")
    eps = 1e-9   # 3 * (1/3) must count as 1
    return (Phase.DOCUMENT if math.floor((step + 1) * ratio + eps) > math.floor(step * ratio + eps)
            else Phase.SENTENCE)


@dataclass(frozen=True)
class ModelInputs:
    """What a model reads besides the sentence pair (module docstring)."""

    mode: DataMode = DataMode.SENTENCE
    context: ContextRule | None = None
    documents: DocumentRule | None = None
    tag: int | None = None
    restore_tag: int | None = None
    heads: bool = False
    in_document_order: bool = False
    #: the documents a STREAM or DOCUMENT model reads (``mixed_documents.regroup``): its own
    #: (true), pseudo-documents of other documents' sentences (random), one sentence each (empty)
    documents_from: str = "true"
    dev_bleu_skip: str | None = None
    batch_invariant: bool = True
    schedule: Callable[[int, float], Phase] = field(default=interleaved_schedule)

    def __post_init__(self) -> None:
        if (self.mode is DataMode.CONTEXT) != (self.context is not None):
            raise ValueError(f"inputs: mode {self.mode.value} needs a context rule exactly in "
                             "context mode")
        if (self.mode is DataMode.DOCUMENT) != (self.documents is not None):
            raise ValueError(f"inputs: mode {self.mode.value} needs a document rule exactly in "
                             "document mode")

    @property
    def max_sentences(self) -> int:
        """Sub-document size of a DOCUMENT-mode model."""
        if self.documents is None:
            raise ValueError(f"inputs: mode {self.mode.value} reads no sub-documents")
        return self.documents.max_sentences

    def sentence_batches(self) -> "ModelInputs":
        """The same model fed plain (tagged) sentence batches: the main stream of a
        DOCUMENT-mode job, whose documents come from its aux stream."""
        if self.mode is not DataMode.DOCUMENT:
            return self
        return ModelInputs(tag=self.tag, restore_tag=self.restore_tag, heads=self.heads,
                           schedule=self.schedule)

    @property
    def reads_documents(self) -> bool:
        """Whether the model's context is its document itself (a stream's history, a
        sub-document), so a condition regroups the documents rather than swap a rule."""
        return self.mode in (DataMode.STREAM, DataMode.DOCUMENT) or self.in_document_order

    def ablated(self, condition: str) -> "ModelInputs":
        """The same inputs with the context of ``condition``: ``true`` (the document's),
        ``random`` (:class:`RandomSentences` of other documents, or for a model that reads
        whole documents, documents regrouped from other documents' sentences) or ``empty``
        (:class:`NoContext`, or one sentence a document). A model without either reads no
        context: its inputs are the same under every condition."""
        if condition == "true":
            return self
        if self.context is None:
            if not self.reads_documents:
                return self
            if condition not in ("random", "empty"):
                raise ValueError(f"context condition {condition!r}: true, random or empty")
            return replace(self, documents_from=condition)
        rule = self.context.true_context()
        if condition == "random":
            return replace(self, context=RandomSentences(rule, other_documents=True))
        if condition == "empty":
            return replace(self, context=NoContext(rule))
        raise ValueError(f"context condition {condition!r}: true, random or empty")

    def add_context(self, docs: Sequence[Sequence[dict]], seed: int) -> None:
        """Give every row of ``docs`` its context under ``CTX_KEY`` (CONTEXT mode)."""
        for d, ctxs in zip(docs, self.context.contexts(docs, seed)):
            for r, c in zip(d, ctxs):
                r[CTX_KEY] = c

    def context_tensors(self, rows: Sequence[Mapping]) -> tuple[torch.Tensor | None, dict]:
        """``(ctx_src, extra)`` of a batch of rows that went through :meth:`add_context`."""
        return self.context.collate([r[CTX_KEY] for r in rows])

    def tag_sentence(self, ids: Sequence[int], restore: bool = False) -> list[int]:
        """A sentence as the model reads it: with its leading tag when the model has one."""
        tag = self.restore_tag if restore else self.tag
        return list(ids) if tag is None else tagged(ids, tag)

    def strip_tag(self, tokens: list[int]) -> list[int]:
        """A hypothesis without the leading tag the model writes (others: unchanged)."""
        return tokens[1:] if self.tag is not None and tokens[:1] == [self.tag] else tokens


def with_context(inputs: ModelInputs, context: str, model: str) -> ModelInputs:
    """What ``model`` reads under a context condition (``train.context``, decode ``--context``):
    a random-context twin trains the same model, updates and data with every sentence's context
    drawn from other documents; an ablated decode gives a trained model other documents'
    sentences or none. Refused for a model that reads no context (neither a rule nor whole
    documents): its twin or ablation would be the model itself, and a report would call that a
    context control."""
    if context != "true" and inputs.context is None and not inputs.reads_documents:
        raise ValueError(f"context {context!r}: model {model!r} reads no context, neither a "
                         "per-sentence rule nor whole documents (only the models of "
                         "pipeline_lib.context_conditions.CONTEXT_MODELS do)")
    return inputs.ablated(context)


def within_document(inputs: ModelInputs, docs: Sequence[Sequence[Mapping]]) -> bool:
    """Whether ``inputs``' random context falls back to the document's own sentences outside
    the true context on ``docs`` (one document: no other to draw from), so a manifest can say
    which random context a decode or a twin's dev set read."""
    rule = inputs.context
    if inputs.documents_from == "random":     # mixed_documents.regroup shuffles the one
        return len(docs) < 2
    return isinstance(rule, RandomSentences) and rule.other_documents and len(docs) < 2

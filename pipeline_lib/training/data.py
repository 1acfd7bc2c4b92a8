"""Streaming Parquet shards -> token-budget ``Batch``es, deterministic, shardable and resumable.

Where the parts are: this module is the loader itself (``LoaderConfig``, ``ShardStream``,
``TrainLoader``, ``dev_batches``); reading the shards (files, work units, rows as columns or
documents, a tagged model's tags) is ``shards.py``, and packing rows into token-budget batches
and collating them into ``Batch``es is ``batching.py``.

Why this shape:
- *Streaming*: shards are read one row group (or, for the document modes, one shard) at a time
  and only a chunk of about ``buffer_sents`` sentences is held, so corpus size is bounded by
  disk, not memory.
- *One token budget for every data mode* (fairseq ``--max-tokens``, counted without padding): a
  batch takes rows while the sum of their lengths ``max(len(src)+1, len(tgt)+1)`` stays within
  ``max_tokens``, whatever the data mode. So a context, stream or document model and its matched
  control (the baseline on the same shards) train on the same number of target tokens per update
  (``tests/unit/training/test_data.py`` measures it on the same shards). A row's context (CONTEXT mode)
  is not counted: it is the model's extra input, not more training data (``max_context_tokens``
  caps it for memory, and then makes that model's batches smaller than its control's).
- *Length buckets*: sentence and context rows of a chunk are sorted by length and cut into
  batches, so similar lengths share a batch and little of it is padding; document streams pick,
  among their open lanes, the next sentences closest in length. ``pad_multiple`` rounds the
  padded lengths up and cuts sentence and context batches' rows down to a multiple (8 on CUDA:
  fewer distinct shapes, so fewer first-sight costs and ``torch.compile`` recompilations);
  padding is masked everywhere, so it changes no loss, and the rows cut off start the chunk's
  next batch, so none is dropped.
- *Chunks*: the work units (row groups, or whole shards for the document modes; interleaved
  parts of them when there are fewer than DDP ranks) are shuffled once with ``seed`` and dealt
  round-robin to the ``world_size`` ranks; a rank's units form chunks (consecutive units up to
  ``buffer_sents`` rows; one shard in the document modes), the same chunks every epoch (so the
  same batch shapes: ``ShardStream.epoch_chunks``), in an order shuffled with ``seed + epoch``,
  each batched and its batches shuffled with its own seed (seed, epoch, rank, chunk). The batch order of an epoch is therefore a pure
  function of the configuration and the rank: DataLoader workers (``num_workers``) only compute
  chunks ahead of the trainer (chunk g by worker g mod W, delivered in chunk order), never
  change which batches come or in which order.
- *Alive across epochs*: a loader keeps one stream of chunks over all epochs (its workers and
  their read-ahead survive an epoch boundary); it restarts only on a resume or when DDP ranks
  leave an epoch early together.
- *Resumable*: a checkpoint stores ``DataPosition(epoch, batches)`` and
  ``TrainLoader.iterate(position)`` skips exactly the batches already consumed (it re-reads and
  re-batches them but never trains on them).

Data modes (``LoaderConfig.inputs.mode``, declared by the model: pipeline_lib/models/inputs.py,
which also builds the contexts):

- SENTENCE: rows of row groups, as above (doc shards work too: rows are rows).
- CONTEXT: the work unit is a whole doc shard (documents are never split across shards, so
  every row's previous sentences are in its unit); each row gets its context from the previous
  rows of its document, then rows are bucketed as above (by length, then context length).
- STREAM: per shard, the documents (shuffled with the chunk's seed) are dealt to P parallel
  lanes (about 8 times the rows a batch holds, at most one per document), each lane a queue of
  whole documents. Each batch takes the next sentences of the lanes furthest behind, then of
  the others, those closest in length first, while the budget lasts (``stream_batches``); ``extra["lane"]`` gives each
  row's lane, ``extra["lanes"]`` P and ``extra["doc_start"]`` marks first sentences, so a lane's
  rows in later batches continue its document in order (the cache model keeps one cache per
  lane). Lanes drain together, so few batches at a shard's end run short.
- DOCUMENT: whole sub-documents (``split_document`` into at most ``max_sentences``) of similar
  width packed by tokens (first fit into the last few open batches); every sentence carries the
  model's tag; the model's document rule adds the sub-document tensors to ``extra``.
  Restoration shards (a ``ctx_ids`` column) give restoration batches (the model's restoration
  tag, document input = the ``ctx_ids``).

Collation (``batching.py``) is vectorised (one numpy fill per tensor, not a tensor per row).
"""

from __future__ import annotations

import itertools
import random
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.mixed_documents import regroup
from pipeline_lib.models.inputs import ModelInputs
from pipeline_lib.training.batching import (collate, collate_columns, collate_documents,
                                            collate_stream, pack_by_tokens, pack_columns,
                                            pack_documents, stream_batches, subdocuments, usable)
from pipeline_lib.training.shards import (WorkUnit, prepare, read_columns, read_documents,
                                          shard_files, work_units)

# What SLURM sends before a time limit or on pre-emption: the trainer saves on them
# (train.StopFlag), its loader workers ignore them (ignore_stop_signals).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


@dataclass(frozen=True)
class LoaderConfig:
    """How batches are formed. ``max_len`` drops pairs whose longer side (with BOS/EOS) exceeds
    the model's positions; ``buffer_sents`` trades memory for better length bucketing."""

    max_tokens: int = 4096
    max_context_tokens: int | None = None   # None: contexts do not limit a batch
    seed: int = 1
    buffer_sents: int = 20000
    max_len: int = 1024
    num_workers: int = 0
    pin_memory: bool = False                 # page-locked batches for asynchronous GPU copies
    inputs: ModelInputs = ModelInputs()
    # padded lengths rounded up to a multiple of this, and sentence/context batches' rows cut
    # down to one (batching.rows_cut)
    pad_multiple: int = 1

    @property
    def with_heads(self) -> bool:
        """Read the subword dependency head columns (the model is supervised with them)."""
        return self.inputs.heads


@dataclass(frozen=True)
class DataPosition:
    """Where a training run is in its data: ``batches`` already consumed in ``epoch``."""

    epoch: int = 0
    batches: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches": self.batches}

    @classmethod
    def from_dict(cls, d: dict) -> "DataPosition":
        return cls(epoch=int(d["epoch"]), batches=int(d["batches"]))


def _document_rows(docs: list[list[dict]], cfg: LoaderConfig, key: str) -> list[list[dict]]:
    """Documents with their unusable rows dropped (and context added in CONTEXT mode; the
    context of a row is its previous *usable* rows, which is what decoding sees too). A
    random-context twin of a document reader reads them regrouped (``mixed_documents``), the
    same way every epoch (seeded by the seed and ``key``, the chunk's name), so its batches
    repeat their shapes as its model's do."""
    kept = [[r for r in (prepare(x, cfg.inputs) for x in d) if usable(r, cfg.max_len)]
            for d in docs]
    kept = [d for d in kept if d]
    if cfg.inputs.mode is DataMode.CONTEXT:
        cfg.inputs.add_context(kept, cfg.seed)
    if cfg.inputs.documents_from != "true":
        kept = regroup(kept, cfg.inputs.documents_from, f"{cfg.seed}:{key}")
    return kept


Planned = Any    # a batch before collation: (Columns, row indices), rows, sub-documents or a StreamBatch


class ShardStream(IterableDataset):
    """The chunks of one rank's share of the shards, epoch after epoch, from ``start_epoch``.

    :meth:`chunks` plans them (reads, batches, shuffles; no tensors yet) and :meth:`collate`
    turns a planned batch into a ``Batch``. As a DataLoader's dataset, worker w of W yields
    the chunks g = w, w + W, ... of the stream, collated, as ``(epoch, index in the epoch,
    chunks in the epoch, batches)``; DataLoader takes one item of each worker in turn, which is
    chunk order."""

    def __init__(self, directory: str | Path, cfg: LoaderConfig, rank: int = 0, world_size: int = 1):
        self.files = shard_files(directory)
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.start_epoch = 0
        self._units: list[WorkUnit] | None = None

    def units(self) -> list[WorkUnit]:
        """Every work unit of the shards (their metadata read once)."""
        if self._units is None:
            self._units = work_units(self.files, self.world_size,
                                     self.cfg.inputs.mode is not DataMode.SENTENCE)
        return self._units

    def epoch_chunks(self, epoch: int) -> list[list[WorkUnit]]:
        """This rank's chunks in ``epoch``: the same chunks every epoch, in the epoch's order.

        WHY the same chunks: a chunk's rows decide its batches (length buckets), so chunks cut
        anew each epoch from reshuffled units gave new batch shapes every epoch (on the Bible's
        sentence shards at 16k tokens, 36-61 of 63 batches per epoch had a shape not seen
        before, against none after the first epoch once chunks stay), and on CUDA a new shape
        costs first-sight work (kernel choice, attention graph builds) that a CPU never shows
        (issue 29). The epoch still reorders the chunks, and each chunk's batches (``plan``)."""
        chunks = self.chunks_of_rank()
        order = list(range(len(chunks)))
        random.Random(self.cfg.seed * 1_000_003 + epoch).shuffle(order)
        return [chunks[i] for i in order]

    def chunks_of_rank(self) -> list[list[WorkUnit]]:
        """This rank's units (shuffled once with the seed, dealt round-robin to the ranks), cut
        into runs of at least ``buffer_sents`` rows (sentence and context rows), or one shard
        each (streams and sub-documents)."""
        units = list(self.units())
        random.Random(self.cfg.seed * 1_000_003).shuffle(units)
        mine = units[self.rank :: self.world_size]
        if self.cfg.inputs.mode in (DataMode.STREAM, DataMode.DOCUMENT):
            return [[u] for u in mine]
        chunks: list[list[WorkUnit]] = []
        cur: list[WorkUnit] = []
        rows = 0
        for u in mine:
            cur.append(u)
            rows += u.rows
            if rows >= self.cfg.buffer_sents:
                chunks.append(cur)
                cur, rows = [], 0
        return chunks + ([cur] if cur else [])

    def batches_of(self, chunk: list[WorkUnit], rng: random.Random) -> list[Planned]:
        """The batches of one chunk, in training order."""
        cfg, mode = self.cfg, self.cfg.inputs.mode
        if mode is DataMode.SENTENCE:
            cols = read_columns(chunk, cfg.with_heads, cfg.inputs)
            batches = pack_columns(cols, cfg.max_tokens, cfg.max_len, cfg.pad_multiple)
            rng.shuffle(batches)
            return [(cols, idx) for idx in batches]
        # the chunk's first unit by the shard's name, not its path: a moved run draws the same
        u = chunk[0]
        key = f"{Path(u.path).name}:{u.row_group}:{u.part}"
        docs = [d for u in chunk for d in _document_rows(read_documents(u, cfg.with_heads), cfg,
                                                          key)]
        if mode is DataMode.STREAM:
            # one document order per chunk for every epoch, so the lanes and the batch shapes
            # repeat (on CUDA a new shape costs first-sight work, issue 33 item 6); the epoch
            # still reorders the chunks. A stream's batches keep their order: a lane carries a
            # document's history from batch to batch.
            random.Random(f"{cfg.seed}:{self.rank}:{key}").shuffle(docs)
            return stream_batches(docs, cfg.max_tokens)
        if mode is DataMode.DOCUMENT:
            batches = pack_documents(subdocuments(docs, cfg.inputs.max_sentences), cfg.max_tokens)
        else:
            batches = pack_by_tokens([r for d in docs for r in d], cfg.max_tokens,
                                     cfg.max_context_tokens, cfg.pad_multiple)
        rng.shuffle(batches)
        return batches

    def collate(self, planned: Planned) -> Batch:
        cfg = self.cfg
        pad = {"pad_multiple": cfg.pad_multiple, "max_len": cfg.max_len}
        if cfg.inputs.mode is DataMode.STREAM:
            return collate_stream(planned, **pad)
        if cfg.inputs.mode is DataMode.DOCUMENT:
            return collate_documents(planned, cfg.inputs, **pad)
        if cfg.inputs.mode is DataMode.SENTENCE:
            return collate_columns(*planned, **pad)
        return collate(planned, cfg.inputs, **pad)

    def chunks(self, start_epoch: int, worker: int = 0, workers: int = 1
               ) -> Iterator[tuple[int, int, int, list[Planned]]]:
        """``(epoch, index, chunks in the epoch, planned batches)`` of the stream's chunks g with
        g mod ``workers`` = ``worker``, from ``start_epoch`` on, for ever."""
        if not self.units():
            raise ValueError(f"{self.files[0].parent}: the shards hold no row group")
        g = 0
        for epoch in itertools.count(start_epoch):
            chunks = self.epoch_chunks(epoch)
            for i, chunk in enumerate(chunks):
                if g % workers == worker:
                    rng = random.Random(((self.cfg.seed * 1_000_003 + epoch) * 10_007 + self.rank)
                                        * 100_003 + i)
                    yield epoch, i, len(chunks), self.batches_of(chunk, rng)
                g += 1

    def __iter__(self) -> Iterator[tuple[int, int, int, list[Batch]]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for epoch, i, n, planned in self.chunks(self.start_epoch, worker, workers):
            yield epoch, i, n, [self.collate(p) for p in planned]


class TrainLoader:
    """Resumable iteration over one rank's ``ShardStream``, epoch by epoch, through one stream of
    chunks that lives across epochs (read ahead by ``num_workers`` DataLoader workers, or read
    in the loop with 0). The batch sequence of an epoch is a pure function of the configuration
    and the rank (the module docstring), so resuming skips the first ``position.batches``
    batches of ``position.epoch``."""

    def __init__(self, directory: str | Path, cfg: LoaderConfig, rank: int = 0, world_size: int = 1):
        self.dataset = ShardStream(directory, cfg, rank, world_size)
        self.cfg = cfg
        self._items: Iterator | None = None
        self._next_epoch: int | None = None    # the epoch the live stream starts next

    def _start(self, epoch: int) -> None:
        """A new stream of chunks from the start of ``epoch`` (the old one's workers exit)."""
        self._items = None
        if self.cfg.num_workers > 0:
            self.dataset.start_epoch = epoch
            # A private generator: DataLoader draws a base seed per iterator, which would
            # otherwise come from the global torch RNG and shift dropout masks between a resumed
            # run and an uninterrupted one.
            loader = DataLoader(self.dataset, batch_size=None, num_workers=self.cfg.num_workers,
                                pin_memory=self.cfg.pin_memory, prefetch_factor=1,
                                worker_init_fn=ignore_stop_signals,
                                generator=torch.Generator().manual_seed(self.cfg.seed + epoch))
            # the workers start (fork) with the stop signals blocked, until they ignore them: a
            # signal in between would kill a worker, and the trainer with it, before its save
            # (the trainer's own copy waits, blocked, and is handled right after)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                self._items = iter(loader)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        else:
            self._items = self.dataset.chunks(epoch)
        self._next_epoch = epoch

    def close(self) -> None:
        """Stop the read-ahead workers now. WHY explicit: at interpreter exit DataLoader leaves
        its workers to multiprocessing, which ends them with SIGTERM, and ours ignore SIGTERM
        (:func:`ignore_stop_signals`), so a process that still held a live loader at exit
        waited for its workers for ever (bench/trainer_efficiency.py with workers did)."""
        items, self._items, self._next_epoch = self._items, None, None
        shutdown = getattr(items, "_shutdown_workers", None)   # a DataLoader iterator's
        if shutdown is not None:
            shutdown()

    def iterate(self, position: DataPosition) -> Iterator[tuple[DataPosition, Batch]]:
        """Yield ``(position after this batch, batch)`` for the rest of ``position.epoch``;
        continues the live stream when it stands at the start of that epoch."""
        if self._next_epoch != position.epoch or position.batches:
            self._start(position.epoch)
        self._next_epoch = None          # inside an epoch: a new iterate() must restart
        items, lazy, done = self._items, self.cfg.num_workers == 0, 0
        while True:
            epoch, index, n, batches = next(items)
            for b in batches:
                done += 1
                if done <= position.batches:
                    continue
                if lazy:
                    b = self.dataset.collate(b)
                    if self.cfg.pin_memory:
                        b = b.pin_memory()
                yield DataPosition(epoch, done), b
            if index == n - 1:
                if self._items is items:
                    self._next_epoch = epoch + 1
                return


def ignore_stop_signals(worker_id: int) -> None:
    """A loader worker ignores the trainer's stop signals (SIGTERM, SIGUSR1).

    WHY: SLURM signals every process of the job step (``--signal=TERM@120``, ``scancel
    --signal``), the workers too. A worker killed by it makes DataLoader raise "worker ... is
    killed by signal" in the trainer, which then dies without the save it was signalled to make.
    The trainer alone decides: it saves ``last``, exits, and its exit shuts the workers down.
    A worker starts with them blocked (:meth:`_start`); what came meanwhile is dropped here."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def dev_batches(directory: str | Path, max_tokens: int, max_len: int = 1024,
                inputs: ModelInputs = ModelInputs(), seed: int = 1,
                max_context_tokens: int | None = None, pad_multiple: int = 1) -> list[Batch]:
    """All rows of a dev split, batched the way ``inputs.mode`` trains, in a fixed order (no
    shuffling, nothing dropped except pairs longer than ``max_len``). Dev sets are small enough
    to hold. STREAM: lanes over the documents in file order."""
    cfg = LoaderConfig(max_tokens=max_tokens, max_len=max_len, inputs=inputs, seed=seed,
                       max_context_tokens=max_context_tokens, pad_multiple=pad_multiple)
    pad = {"pad_multiple": pad_multiple, "max_len": max_len}
    if inputs.mode is DataMode.SENTENCE:
        cols = read_columns(work_units(shard_files(directory), 1), False, inputs)
        return [collate_columns(cols, idx, **pad) for idx in pack_columns(cols, max_tokens, max_len)]
    docs: list[list[dict]] = []
    for f in shard_files(directory):
        for d in read_documents(WorkUnit(str(f), -1), False):
            # sent shards (what a rule may hand as dev) can cut a document at a shard boundary
            if docs and docs[-1][-1]["doc_id"] == d[0]["doc_id"]:
                docs[-1].extend(d)
            else:
                docs.append(d)
    docs = _document_rows(docs, cfg, "dev")
    if inputs.mode is DataMode.STREAM:
        return [collate_stream(b, **pad) for b in stream_batches(docs, max_tokens)]
    if inputs.mode is DataMode.DOCUMENT:
        return [collate_documents(b, inputs, **pad) for b in
                pack_documents(subdocuments(docs, inputs.max_sentences), max_tokens)]
    return [collate(b, inputs, **pad) for b in pack_by_tokens([r for d in docs for r in d],
                                                              max_tokens, max_context_tokens)]

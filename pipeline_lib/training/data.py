"""Streaming Parquet shards -> token-budget ``Batch``es, deterministic, shardable and resumable.

Why this shape:
- *Streaming*: shards are read one row group at a time and only a buffer of ``buffer_sents``
  sentences is held, so corpus size is bounded by disk, not memory.
- *Token budget* (fairseq ``--max-tokens``): the buffer is sorted by length and cut into batches
  whose padded size ``rows * max(len(src)+1, len(tgt)+1)`` stays within ``max_tokens``; similar
  lengths waste little padding and every batch costs about the same. A row's context (CONTEXT
  mode) is budgeted apart, ``rows * longest context <= max_context_tokens``, so a context model
  and its matched control see the same sentence pairs per update (counting the context in
  ``max_tokens`` left a two-sentence-context batch ~1,800 target tokens of a 4,096 budget).
- *Disjoint streams*: the work units (row groups, or interleaved parts of row groups when there
  are fewer row groups than readers) are shuffled with ``seed + epoch`` and dealt round-robin to
  ``world_size * num_workers`` streams, so DDP ranks and DataLoader workers never see the same row.
- *Resumable*: the order depends only on (seed, epoch, rank, world size, workers); a checkpoint
  stores ``DataPosition(epoch, batches)`` and ``TrainLoader.iterate(position)`` skips exactly the
  batches already consumed (it re-reads and re-batches them but never trains on them).

Data modes (``LoaderConfig.inputs.mode``, declared by the model: pipeline_lib/models/inputs.py,
which also builds the contexts):

- SENTENCE: rows of row groups, as above (doc shards work too: rows are rows).
- CONTEXT: the work unit is a whole doc shard (documents are never split across shards, so
  every row's previous sentences are in its unit); each row gets its ``ctx_src`` /
  ``ctx_sents`` from the previous rows of its document, then rows are bucketed as above.
- STREAM: per work unit, the documents (shuffled with seed + epoch) are dealt to B lanes, B =
  ``max_tokens`` / the longest padded row of the unit; batch t holds the t-th sentence of
  every lane that has one, ``extra["doc_start"]`` marking first sentences, so row b of
  consecutive batches continues one document. B shrinks only at a unit's tail (the model then
  starts fresh streams). DataLoader workers would interleave lanes of different workers,
  so this mode always reads in the main process (``num_workers`` is ignored).
- DOCUMENT: whole sub-documents (``split_document`` into at most ``max_sentences``) packed by
  tokens; every sentence carries the model's tag; the model's document rule adds the
  sub-document tensors to ``extra``. Restoration shards (a ``ctx_ids`` column) give
  restoration batches (the model's restoration tag, document input = the ``ctx_ids``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode, EXTRA_DOC_START
from pipeline_lib.vocab import BOS_ID, EOS_ID, NO_HEAD, PAD_ID
from pipeline_lib.models.inputs import CTX_KEY, ModelInputs
from pipeline_lib.documents import split_document

SHARD_GLOB = "shard-*.parquet"
_COLUMNS = ("doc_id", "sent_idx", "src_ids", "tgt_ids")
_HEAD_COLUMNS = ("src_heads", "tgt_heads")
_RESTORE_COLUMN = "ctx_ids"    # restoration shards (pipeline_lib.preprocess.noise.RESTORE_SCHEMA)
_DOC_SENT = "doc_sent"         # row key: the row's sentence as it appears in doc_src


@dataclass(frozen=True)
class LoaderConfig:
    """How batches are formed. ``max_len`` drops pairs whose longer side (with BOS/EOS) exceeds
    the model's positions; ``buffer_sents`` trades memory for better length bucketing."""

    max_tokens: int = 4096
    max_context_tokens: int | None = None   # None: 2 x max_tokens (pack_by_tokens)
    seed: int = 1
    buffer_sents: int = 20000
    max_len: int = 1024
    num_workers: int = 0
    pin_memory: bool = False                 # page-locked batches for asynchronous GPU copies
    inputs: ModelInputs = ModelInputs()

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


@dataclass(frozen=True)
class WorkUnit:
    """One row group of one shard, or every ``nparts``-th row of it starting at ``part``;
    ``row_group = -1``: the whole shard, split by documents (every ``nparts``-th document)."""

    path: str
    row_group: int
    part: int = 0
    nparts: int = 1


def shard_files(directory: str | Path) -> list[Path]:
    files = sorted(Path(directory).glob(SHARD_GLOB))
    if not files:
        raise FileNotFoundError(f"no {SHARD_GLOB} in {directory}")
    return files


def work_units(files: list[Path], num_streams: int, whole_files: bool = False) -> list[WorkUnit]:
    """Row groups of all shards (or whole shards, for the document modes); split into
    interleaved parts when there are fewer units than streams, so that no DDP rank or worker is
    left without data."""
    groups = []
    for f in files:
        try:
            n = pq.ParquetFile(f).metadata.num_row_groups
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{f}: cannot read Parquet metadata: {e}") from e
        groups.extend([(str(f), -1)] if whole_files else [(str(f), g) for g in range(n)])
    nparts = max(1, -(-num_streams // max(1, len(groups))))
    return [WorkUnit(p, g, k, nparts) for p, g in groups for k in range(nparts)]


def read_unit(unit: WorkUnit, with_heads: bool) -> list[dict]:
    """Rows of a row-group work unit as dicts (only the columns batching needs)."""
    pf = pq.ParquetFile(unit.path)
    try:
        cols = _columns(pf, with_heads)
    except ValueError as e:
        raise ValueError(f"{unit.path}: {e}") from None
    rows = pf.read_row_group(unit.row_group, columns=cols).to_pylist()
    return rows[unit.part :: unit.nparts]


def _columns(pf: pq.ParquetFile, with_heads: bool) -> list[str]:
    names = set(pf.schema_arrow.names)
    cols = [c for c in _COLUMNS if c in names]
    if with_heads:
        cols += [c for c in _HEAD_COLUMNS if c in names]
    if _RESTORE_COLUMN in names:
        cols.append(_RESTORE_COLUMN)
    missing = {"src_ids", "tgt_ids"} - set(cols)
    if missing:
        raise ValueError(f"missing columns {sorted(missing)}")
    return cols


def read_documents(unit: WorkUnit, with_heads: bool) -> list[list[dict]]:
    """Documents (rows in shard order, grouped by consecutive ``doc_id``) of a whole-shard unit,
    every ``nparts``-th document from ``part``. Doc and restore shards keep a document's rows
    contiguous and in order and never split it across shards."""
    pf = pq.ParquetFile(unit.path)
    try:
        cols = _columns(pf, with_heads)
    except ValueError as e:
        raise ValueError(f"{unit.path}: {e}") from None
    docs: list[list[dict]] = []
    for row in pf.read(columns=cols).to_pylist():
        if docs and docs[-1][0]["doc_id"] == row["doc_id"]:
            docs[-1].append(row)
        else:
            docs.append([row])
    return docs[unit.part :: unit.nparts]


def _row_len(row: dict) -> int:
    """Padded length a sentence pair needs: the longer of src+EOS and BOS+tgt."""
    return max(len(row["src_ids"]), len(row["tgt_ids"])) + 1


def _ctx_len(row: dict) -> int:
    """Padded size of a row's context: its ids, or slots x the longest slot (context given as
    one slot per previous sentence)."""
    ctx = row.get(CTX_KEY)
    if not ctx:
        return 0
    return len(ctx) * max(len(c) for c in ctx) if isinstance(ctx[0], list) else len(ctx)


def prepare(row: dict, inputs: ModelInputs) -> dict:
    """Rows of a model with tags get them (``src_ids``, ``tgt_ids`` and the sentence as the
    document input sees it); other models use rows as read. Restoration rows (``ctx_ids``) take
    the model's restoration tag, translation rows its translation tag."""
    if inputs.tag is None and inputs.restore_tag is None:
        return row
    restore = row.get(_RESTORE_COLUMN) is not None
    row["src_ids"] = inputs.tag_sentence(row["src_ids"], restore)
    row["tgt_ids"] = inputs.tag_sentence(row["tgt_ids"], restore)
    row[_DOC_SENT] = inputs.tag_sentence(row[_RESTORE_COLUMN], True) if restore else row["src_ids"]
    return row


def _usable(row: dict, max_len: int) -> bool:
    """Pairs with an empty side or longer than the model's positions cannot be trained on; the
    shard stage already quarantines them, this only guards a smaller ``max_len``."""
    return bool(row["src_ids"]) and bool(row["tgt_ids"]) and _row_len(row) <= max_len


def pack_by_tokens(rows: list[dict], max_tokens: int,
                   max_context_tokens: int | None = None) -> list[list[dict]]:
    """Sort ``rows`` by length and cut into batches with rows * longest pair <= max_tokens and
    rows * longest context <= ``max_context_tokens`` (None: twice ``max_tokens``).

    A single row longer than a budget forms a batch of its own (the budget cannot be met
    otherwise; ``max_len`` filtering upstream keeps such rows rare)."""
    ctx_budget = 2 * max_tokens if max_context_tokens is None else max_context_tokens
    rows = sorted(rows, key=lambda r: (_row_len(r), _ctx_len(r), len(r["src_ids"])))
    batches: list[list[dict]] = []
    cur: list[dict] = []
    cur_max = ctx_max = 0
    for r in rows:
        n, c = _row_len(r), _ctx_len(r)
        if cur and (max(cur_max, n) * (len(cur) + 1) > max_tokens
                    or max(ctx_max, c) * (len(cur) + 1) > ctx_budget):
            batches.append(cur)
            cur, cur_max, ctx_max = [], 0, 0
        cur.append(r)
        cur_max, ctx_max = max(cur_max, n), max(ctx_max, c)
    if cur:
        batches.append(cur)
    return batches


def _pad(seqs: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def _heads(heads: list[int] | None, n: int) -> list[int]:
    """A row's subword heads, or ``n`` times NO_HEAD for a row without a parse."""
    return list(heads) if heads is not None else [NO_HEAD] * n


def collate(rows: list[dict], inputs: ModelInputs = ModelInputs()) -> Batch:
    """Rows -> ``Batch``: src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS (PAD_ID padded).

    Heads (when read) are padded with -1; ``tgt_heads`` gets a leading -1 for the BOS position so
    it is aligned to ``tgt_in`` (values are the shard's, unchanged). A row without a parse (null
    heads: beyond ``parse.max_sentences_per_split``, or quarantined by the parse stage) gets -1
    everywhere, i.e. no supervision for that row only; the other rows of the batch stay
    supervised. Rows with a context (CONTEXT mode) add what the model's context rule builds."""
    src = _pad([list(r["src_ids"]) + [EOS_ID] for r in rows], PAD_ID)
    tgt_in = _pad([[BOS_ID] + list(r["tgt_ids"]) for r in rows], PAD_ID)
    tgt_out = _pad([list(r["tgt_ids"]) + [EOS_ID] for r in rows], PAD_ID)
    b = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
              doc_id=[r.get("doc_id") for r in rows], sent_idx=[r.get("sent_idx") for r in rows])
    if any(r.get("src_heads") is not None for r in rows):
        b.src_heads = _pad([_heads(r["src_heads"], len(r["src_ids"])) + [NO_HEAD] for r in rows],
                           NO_HEAD)
    if any(r.get("tgt_heads") is not None for r in rows):
        b.tgt_heads = _pad([[NO_HEAD] + _heads(r["tgt_heads"], len(r["tgt_ids"])) for r in rows],
                           NO_HEAD)
    if rows and CTX_KEY in rows[0]:
        b.ctx_src, extra = inputs.context_tensors(rows)
        b.extra.update(extra)
    return b


def collate_documents(subdocs: list[list[dict]], inputs: ModelInputs) -> Batch:
    """Sub-documents -> a document-level ``Batch``: the rows of every sub-document, plus the
    ``extra`` tensors the model's document rule builds from the sub-documents' sentences and
    each row's sub-document."""
    rows = [r for d in subdocs for r in d]
    b = collate(rows)
    b.extra.update(inputs.documents.collate([[r[_DOC_SENT] for r in d] for d in subdocs],
                                            [n for n, d in enumerate(subdocs) for _ in d]))
    return b


def collate_stream(lanes: list[list[tuple[bool, dict]]], t: int) -> Batch:
    """Batch ``t`` of a set of document lanes: the t-th (doc_start, row) of every lane that has
    one, lanes in a fixed order (so row b stays one lane while B is unchanged)."""
    items = [lane[t] for lane in lanes if len(lane) > t]
    b = collate([r for _, r in items])
    b.extra[EXTRA_DOC_START] = torch.tensor([s for s, _ in items], dtype=torch.bool)
    return b


def stream_lanes(docs: list[list[dict]], max_tokens: int) -> list[list[tuple[bool, dict]]]:
    """Deal documents (in the given order) to B lanes, each to the lane with the fewest
    sentences so lanes end together; B = max_tokens / the longest padded row, so that no batch
    (B rows, each at most that long) exceeds the budget. (An average length would let a batch
    of long rows exceed it many times over: the memory blow-up a GPU run cannot afford.)"""
    if not any(docs):
        return []
    longest = max(_row_len(r) for d in docs for r in d)
    B = max(1, min(len(docs), max_tokens // longest))
    lanes: list[list[tuple[bool, dict]]] = [[] for _ in range(B)]
    for d in docs:
        lane = min(lanes, key=len)
        lane.extend((i == 0, r) for i, r in enumerate(d))
    return lanes


def pack_documents(subdocs: list[list[dict]], max_tokens: int) -> list[list[list[dict]]]:
    """Cut sub-documents (kept whole) into batches with rows * max row length <= max_tokens
    (a sub-document over the budget forms a batch of its own), similar sizes together."""
    order = sorted(subdocs, key=lambda d: (max(_row_len(r) for r in d), len(d)))
    batches: list[list[list[dict]]] = []
    cur: list[list[dict]] = []
    rows = width = 0
    for d in order:
        w = max(_row_len(r) for r in d)
        if cur and max(width, w) * (rows + len(d)) > max_tokens:
            batches.append(cur)
            cur, rows, width = [], 0, 0
        cur.append(d)
        rows += len(d)
        width = max(width, w)
    if cur:
        batches.append(cur)
    return batches


def _document_rows(docs: list[list[dict]], cfg: LoaderConfig) -> list[list[dict]]:
    """Documents with their unusable rows dropped (and context added in CONTEXT mode; the
    context of a row is its previous *usable* rows, which is what decoding sees too)."""
    kept = [[r for r in (prepare(x, cfg.inputs) for x in d) if _usable(r, cfg.max_len)]
            for d in docs]
    kept = [d for d in kept if d]
    if cfg.inputs.mode is DataMode.CONTEXT:
        cfg.inputs.add_context(kept, cfg.seed)
    return kept


def _subdocuments(docs: list[list[dict]], max_sentences: int) -> list[list[dict]]:
    return [d[a:b] for d in docs for a, b in split_document(len(d), max_sentences)]


class ShardStream(IterableDataset):
    """Token-budget batches of this (rank, worker)'s share of the shards for one epoch.

    Set ``epoch`` before creating a DataLoader iterator; workers get a copy of the dataset, so
    the epoch travels with it. Yields collated ``Batch`` objects.
    """

    def __init__(self, directory: str | Path, cfg: LoaderConfig, rank: int = 0, world_size: int = 1):
        self.files = shard_files(directory)
        self.cfg = cfg
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0

    def stream_units(self, worker_id: int, num_workers: int) -> list[WorkUnit]:
        """The work units of stream ``rank * num_workers + worker_id`` in this epoch's order."""
        n_streams = self.world_size * num_workers
        units = work_units(self.files, n_streams, self.cfg.inputs.mode is not DataMode.SENTENCE)
        random.Random(self.cfg.seed * 1_000_003 + self.epoch).shuffle(units)
        return units[self.rank * num_workers + worker_id :: n_streams]

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        stream = self.rank * num_workers + worker_id
        rng = random.Random((self.cfg.seed * 1_000_003 + self.epoch) * 10_007 + stream)
        mode = self.cfg.inputs.mode
        units = self.stream_units(worker_id, num_workers)
        if mode is DataMode.STREAM:
            for unit in units:
                docs = _document_rows(read_documents(unit, self.cfg.with_heads), self.cfg)
                rng.shuffle(docs)
                lanes = stream_lanes(docs, self.cfg.max_tokens)
                for t in range(max((len(lane) for lane in lanes), default=0)):
                    yield collate_stream(lanes, t)
            return
        if mode is DataMode.DOCUMENT:
            for unit in units:
                docs = _document_rows(read_documents(unit, self.cfg.with_heads), self.cfg)
                batches = pack_documents(_subdocuments(docs, self.cfg.inputs.max_sentences),
                                         self.cfg.max_tokens)
                rng.shuffle(batches)
                yield from (collate_documents(b, self.cfg.inputs) for b in batches)
            return
        buffer: list[dict] = []
        for unit in units:
            if mode is DataMode.CONTEXT:
                rows = [r for d in _document_rows(read_documents(unit, self.cfg.with_heads), self.cfg)
                        for r in d]
            else:
                rows = [r for r in (prepare(x, self.cfg.inputs)
                                    for x in read_unit(unit, self.cfg.with_heads))
                        if _usable(r, self.cfg.max_len)]
            for row in rows:
                buffer.append(row)
                if len(buffer) >= self.cfg.buffer_sents:
                    yield from self._flush(buffer, rng)
                    buffer = []
        if buffer:
            yield from self._flush(buffer, rng)

    def _flush(self, buffer: list[dict], rng: random.Random) -> Iterator[Batch]:
        batches = pack_by_tokens(buffer, self.cfg.max_tokens, self.cfg.max_context_tokens)
        rng.shuffle(batches)
        for rows in batches:
            yield collate(rows, self.cfg.inputs)


class TrainLoader:
    """Epoch-aware, resumable iteration over a ``ShardStream`` through a DataLoader.

    DataLoader's worker interleaving is deterministic (round-robin in task order), so the global
    batch sequence of an epoch is a pure function of the configuration; resuming therefore skips
    the first ``position.batches`` batches of ``position.epoch``.
    """

    def __init__(self, directory: str | Path, cfg: LoaderConfig, rank: int = 0, world_size: int = 1):
        self.dataset = ShardStream(directory, cfg, rank, world_size)
        self.cfg = cfg

    def iterate(self, position: DataPosition) -> Iterator[tuple[DataPosition, Batch]]:
        """Yield ``(position after this batch, batch)`` for the rest of ``position.epoch``.

        Worker processes read ahead of the trainer (``num_workers``). Document streams cannot be
        split among workers (a lane must stay one document), so that mode reads in one
        background thread instead, ``num_workers`` batches ahead: the order is the same as
        reading in the loop."""
        self.dataset.epoch = position.epoch
        stream = self.cfg.inputs.mode is DataMode.STREAM
        # A private generator: DataLoader draws a base seed per iterator, which would otherwise
        # come from the global torch RNG and shift dropout masks between a resumed run and an
        # uninterrupted one.
        loader = DataLoader(self.dataset, batch_size=None,
                            num_workers=0 if stream else self.cfg.num_workers,
                            pin_memory=self.cfg.pin_memory, persistent_workers=False,
                            worker_init_fn=ignore_stop_signals,
                            generator=torch.Generator().manual_seed(self.cfg.seed + position.epoch))
        batches = read_ahead(iter(loader), self.cfg.num_workers) if stream else iter(loader)
        for i, batch in enumerate(batches):
            if i < position.batches:
                continue
            yield DataPosition(position.epoch, i + 1), batch


def ignore_stop_signals(worker_id: int) -> None:
    """A loader worker ignores the trainer's stop signals (SIGTERM, SIGUSR1).

    WHY: SLURM signals every process of the job step (``--signal=TERM@120``, ``scancel
    --signal``), the workers too. A worker killed by it makes DataLoader raise "worker ... is
    killed by signal" in the trainer, which then dies without the save it was signalled to make.
    The trainer alone decides: it saves ``last``, exits, and its exit shuts the workers down."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)


def read_ahead(items: Iterator, depth: int) -> Iterator:
    """``items`` produced by a background thread up to ``depth`` ahead (0: in this thread). The
    thread mostly waits on Parquet reads and collation outside the GIL-heavy training step."""
    if depth <= 0:
        yield from items
        return
    import queue
    import threading

    done = object()
    q: queue.Queue = queue.Queue(maxsize=depth)

    def produce() -> None:
        try:
            for item in items:
                q.put(item)
            q.put(done)
        except BaseException as e:  # re-raised in the consumer, where it belongs
            q.put(e)

    threading.Thread(target=produce, daemon=True, name="read_ahead").start()
    while (item := q.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


def dev_batches(directory: str | Path, max_tokens: int, max_len: int = 1024,
                inputs: ModelInputs = ModelInputs(), seed: int = 1,
                max_context_tokens: int | None = None) -> list[Batch]:
    """All rows of a dev split, batched the way ``inputs.mode`` trains, in a fixed order (no
    shuffling, nothing dropped except pairs longer than ``max_len``). Dev sets are small enough
    to hold. STREAM: lanes over the documents in file order."""
    cfg = LoaderConfig(max_tokens=max_tokens, max_len=max_len, inputs=inputs, seed=seed,
                       max_context_tokens=max_context_tokens)
    if inputs.mode is DataMode.SENTENCE:
        rows = []
        for f in shard_files(directory):
            pf = pq.ParquetFile(f)
            for g in range(pf.metadata.num_row_groups):
                rows.extend(r for r in (prepare(x, inputs) for x in read_unit(WorkUnit(str(f), g), False))
                            if _usable(r, max_len))
        return [collate(b) for b in pack_by_tokens(rows, max_tokens)]
    docs: list[list[dict]] = []
    for f in shard_files(directory):
        for d in read_documents(WorkUnit(str(f), -1), False):
            # sent shards (what a rule may hand as dev) can cut a document at a shard boundary
            if docs and docs[-1][-1]["doc_id"] == d[0]["doc_id"]:
                docs[-1].extend(d)
            else:
                docs.append(d)
    docs = _document_rows(docs, cfg)
    if inputs.mode is DataMode.STREAM:
        lanes = stream_lanes(docs, max_tokens)
        return [collate_stream(lanes, t) for t in range(max((len(x) for x in lanes), default=0))]
    if inputs.mode is DataMode.DOCUMENT:
        return [collate_documents(b, inputs) for b in
                pack_documents(_subdocuments(docs, inputs.max_sentences), max_tokens)]
    return [collate(b, inputs) for b in pack_by_tokens([r for d in docs for r in d], max_tokens,
                                                      max_context_tokens)]

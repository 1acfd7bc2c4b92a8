"""Streaming Parquet shards -> token-budget ``Batch``es, deterministic, shardable and resumable.

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
  padded lengths up (8 on CUDA: fewer distinct shapes, so fewer first-sight costs and
  ``torch.compile`` recompilations); padding is masked everywhere, so it changes no loss.
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

Collation is vectorised (one numpy fill per tensor, not a tensor per row).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode, EXTRA_DOC_START, EXTRA_LANE, EXTRA_LANES
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
    max_context_tokens: int | None = None   # None: contexts do not limit a batch
    seed: int = 1
    buffer_sents: int = 20000
    max_len: int = 1024
    num_workers: int = 0
    pin_memory: bool = False                 # page-locked batches for asynchronous GPU copies
    inputs: ModelInputs = ModelInputs()
    pad_multiple: int = 1                    # padded lengths rounded up to a multiple of this

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
    rows: int = 0        # rows in the unit (from the Parquet metadata; what chunks are cut by)


def shard_files(directory: str | Path) -> list[Path]:
    files = sorted(Path(directory).glob(SHARD_GLOB))
    if not files:
        raise FileNotFoundError(f"no {SHARD_GLOB} in {directory}")
    return files


def work_units(files: list[Path], num_streams: int, whole_files: bool = False) -> list[WorkUnit]:
    """Row groups of all shards (or whole shards, for the document modes); split into
    interleaved parts when there are fewer units than streams (DDP ranks), so that no rank is
    left without data."""
    groups = []
    for f in files:
        try:
            meta = pq.ParquetFile(f).metadata
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{f}: cannot read Parquet metadata: {e}") from e
        groups.extend([(str(f), -1, meta.num_rows)] if whole_files else
                      [(str(f), g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)])
    nparts = max(1, -(-num_streams // max(1, len(groups))))
    return [WorkUnit(p, g, k, nparts, -(-n // nparts)) for p, g, n in groups for k in range(nparts)]


@dataclass
class Columns:
    """Sentence rows as flat arrays in the Arrow list layout (side ``s`` of row i is
    ``values[offsets[i]:offsets[i + 1]]``), so that bucketing and collation are array
    operations, never a Python object per row (what the loader's time went to: ``to_pylist``
    and a tensor per row). ``tag``: the piece a tagged model puts before row i's sentences."""

    sides: dict[str, tuple[np.ndarray, np.ndarray]]      # src_ids, tgt_ids, [src|tgt]_heads
    valid: dict[str, np.ndarray]                         # heads: False where the row has none
    doc_id: np.ndarray
    sent_idx: np.ndarray
    tag: np.ndarray | None

    def lengths(self, side: str) -> np.ndarray:
        return np.diff(self.sides[side][1])

    def gather(self, side: str, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of rows ``idx`` of ``side`` concatenated, and their lengths."""
        values, offsets = self.sides[side]
        starts, lens = offsets[idx], offsets[idx + 1] - offsets[idx]
        ends = np.cumsum(lens)
        return values[np.arange(int(ends[-1]) if len(ends) else 0)
                      + np.repeat(starts - (ends - lens), lens)], lens


def read_columns(units: Sequence[WorkUnit], with_heads: bool, inputs: ModelInputs) -> Columns:
    """The rows of row-group work units, in order, as :class:`Columns` (only the columns
    batching needs); a tagged model's tag per row (restoration rows take its restoration tag)."""
    import pyarrow as pa

    tables = []
    for unit in units:
        pf = pq.ParquetFile(unit.path)
        try:
            cols = _columns(pf, with_heads)
        except ValueError as e:
            raise ValueError(f"{unit.path}: {e}") from None
        t = pf.read_row_group(unit.row_group, columns=cols)
        tables.append(t.take(np.arange(unit.part, t.num_rows, unit.nparts)) if unit.nparts > 1 else t)
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    sides, valid = {}, {}
    for name in ("src_ids", "tgt_ids", *(_HEAD_COLUMNS if with_heads else ())):
        if name not in table.column_names:
            continue
        arr = table.column(name).combine_chunks()
        if isinstance(arr, pa.ChunkedArray):   # an empty table
            arr = pa.array([], arr.type)
        sides[name] = (arr.values.to_numpy(zero_copy_only=False).astype(np.int64),
                       arr.offsets.to_numpy().astype(np.int64))
        valid[name] = arr.is_valid().to_numpy(zero_copy_only=False)
    n = table.num_rows
    tag = None
    if inputs.tag is not None or inputs.restore_tag is not None:
        restore = (table.column(_RESTORE_COLUMN).is_valid().to_numpy(zero_copy_only=False)
                   if _RESTORE_COLUMN in table.column_names else np.zeros(n, bool))
        tag = np.where(restore, -1 if inputs.restore_tag is None else inputs.restore_tag,
                       -1 if inputs.tag is None else inputs.tag)
    column = lambda c: (table.column(c).to_numpy(zero_copy_only=False)   # noqa: E731
                        if c in table.column_names else np.full(n, None, object))
    return Columns(sides, valid, column("doc_id"), column("sent_idx"), tag)


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
    """Tokens a sentence pair costs the budget: the longer of src+EOS and BOS+tgt."""
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
    """Sort ``rows`` by length (then context length) and cut into batches whose rows' tokens
    (:func:`_row_len`) sum to at most ``max_tokens``; with ``max_context_tokens``, also rows *
    longest context <= that cap.

    A single row over a budget forms a batch of its own (the budget cannot be met otherwise;
    ``max_len`` filtering upstream keeps such rows rare)."""
    rows = sorted(rows, key=lambda r: (_row_len(r), _ctx_len(r), len(r["src_ids"])))
    batches: list[list[dict]] = []
    cur: list[dict] = []
    tokens = ctx_max = 0
    for r in rows:
        n, c = _row_len(r), _ctx_len(r)
        if cur and (tokens + n > max_tokens or (max_context_tokens is not None and
                                                max(ctx_max, c) * (len(cur) + 1) > max_context_tokens)):
            batches.append(cur)
            cur, tokens, ctx_max = [], 0, 0
        cur.append(r)
        tokens, ctx_max = tokens + n, max(ctx_max, c)
    if cur:
        batches.append(cur)
    return batches


def pack_columns(cols: Columns, max_tokens: int, max_len: int) -> list[np.ndarray]:
    """:func:`pack_by_tokens` on :class:`Columns`: the usable rows (as :func:`_usable` says,
    tags included) sorted by (tokens, source length), stably, and cut into batches of row
    indices whose tokens sum to at most ``max_tokens``."""
    tagged = 0 if cols.tag is None else (cols.tag >= 0).astype(np.int64)
    src, tgt = cols.lengths("src_ids") + tagged, cols.lengths("tgt_ids") + tagged
    row = np.maximum(src, tgt) + 1
    usable = np.flatnonzero((src > 0) & (tgt > 0) & (row <= max_len))
    order = usable[np.lexsort((src[usable], row[usable]))]
    batches, first, tokens = [], 0, 0
    for k, n in enumerate(row[order].tolist()):
        if k > first and tokens + n > max_tokens:
            batches.append(order[first:k])
            first, tokens = k, 0
        tokens += n
    if len(order) > first:
        batches.append(order[first:])
    return batches


def collate_columns(cols: Columns, idx: np.ndarray, pad_multiple: int = 1,
                    max_len: int | None = None) -> Batch:
    """Rows ``idx`` of :class:`Columns` -> the ``Batch`` :func:`collate` builds from them as dict
    rows (tags, EOS/BOS, heads aligned, lengths rounded up to ``pad_multiple``)."""
    B = len(idx)
    tag = None if cols.tag is None else cols.tag[idx]
    has = np.zeros(B, np.int64) if tag is None else (tag >= 0).astype(np.int64)
    rows = np.arange(B)
    src_ids, src_len = cols.gather("src_ids", idx)
    tgt_ids, tgt_len = cols.gather("tgt_ids", idx)
    S = _round_up(int((src_len + has).max()) + 1, pad_multiple, max_len)
    T = _round_up(int((tgt_len + has).max()) + 1, pad_multiple, max_len)
    src = _fill(src_ids, src_len, PAD_ID, has, S)
    src[rows, has + src_len] = EOS_ID
    tgt_in = _fill(tgt_ids, tgt_len, PAD_ID, 1 + has, T)
    tgt_in[:, 0] = BOS_ID
    tgt_out = _fill(tgt_ids, tgt_len, PAD_ID, has, T)
    tgt_out[rows, has + tgt_len] = EOS_ID
    if tag is not None:
        tagged = has.astype(bool)
        for x, col in ((src, 0), (tgt_in, 1), (tgt_out, 0)):
            x[tagged, col] = tag[tagged]
    b = Batch(src=torch.from_numpy(src), tgt_in=torch.from_numpy(tgt_in),
              tgt_out=torch.from_numpy(tgt_out), doc_id=cols.doc_id[idx].tolist(),
              sent_idx=cols.sent_idx[idx].tolist())
    for side, width, start in (("src_heads", S, 0), ("tgt_heads", T, 1)):
        if side in cols.sides and cols.valid[side][idx].any():
            heads, n = cols.gather(side, idx)
            setattr(b, side, torch.from_numpy(_fill(heads, n, NO_HEAD, start, width)))
    return b


def _round_up(n: int, multiple: int, limit: int | None) -> int:
    """``n`` rounded up to ``multiple``, but not past ``limit`` (the model's positions)."""
    r = -(-n // multiple) * multiple
    return r if limit is None else max(n, min(r, limit))


def _fill(flat: np.ndarray, lengths: np.ndarray, value: int, start: np.ndarray | int,
          width: int) -> np.ndarray:
    """(B, width) array, row b holding ``lengths[b]`` ids of ``flat`` (rows concatenated) from
    column ``start`` (per row, or one for all) on, ``value`` elsewhere: one numpy fill for the
    whole batch. A tensor per row (``torch.as_tensor`` 3 x B times per batch) was the collate's
    cost on a GPU host, where the loop waits for it."""
    out = np.full((len(lengths), width), value, dtype=np.int64)
    start = np.broadcast_to(np.asarray(start, np.int64), lengths.shape)[:, None]
    cols = np.arange(width)
    out[(cols >= start) & (cols < start + lengths[:, None])] = flat      # row-major order
    return out


def padded(seqs: Sequence[Sequence[int]], value: int = PAD_ID, before: int | None = None,
           after: int | None = None, width: int | None = None, multiple: int = 1,
           limit: int | None = None) -> torch.Tensor:
    """(B, W) long tensor whose row b is ``[before] + seqs[b] + [after]`` right-padded with
    ``value``; W = ``width``, or the longest row rounded up to ``multiple`` (not past ``limit``)."""
    lengths = np.fromiter((len(s) for s in seqs), np.int64, len(seqs))
    flat = np.fromiter(itertools.chain.from_iterable(seqs), np.int64, int(lengths.sum()))
    lead = int(before is not None)
    if width is None:
        width = _round_up(int(lengths.max(initial=0)) + lead + int(after is not None), multiple,
                          limit)
    out = _fill(flat, lengths, value, lead, width)
    if before is not None:
        out[:, 0] = before
    if after is not None:
        out[np.arange(len(seqs)), lead + lengths] = after
    return torch.from_numpy(out)


def _heads(heads: Sequence[int] | None, n: int) -> Sequence[int]:
    """A row's subword heads, or ``n`` times NO_HEAD for a row without a parse."""
    return heads if heads is not None else [NO_HEAD] * n


def collate(rows: list[dict], inputs: ModelInputs = ModelInputs(), pad_multiple: int = 1,
            max_len: int | None = None) -> Batch:
    """Rows -> ``Batch``: src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS (PAD_ID padded,
    lengths rounded up to ``pad_multiple`` within ``max_len``).

    Heads (when read) are padded with -1; ``tgt_heads`` gets a leading -1 for the BOS position so
    it is aligned to ``tgt_in`` (values are the shard's, unchanged). A row without a parse (null
    heads: beyond ``parse.max_sentences_per_split``, or quarantined by the parse stage) gets -1
    everywhere, i.e. no supervision for that row only; the other rows of the batch stay
    supervised. Rows with a context (CONTEXT mode) add what the model's context rule builds."""
    srcs, tgts = [r["src_ids"] for r in rows], [r["tgt_ids"] for r in rows]
    src = padded(srcs, after=EOS_ID, multiple=pad_multiple, limit=max_len)
    tgt_in = padded(tgts, before=BOS_ID, multiple=pad_multiple, limit=max_len)
    tgt_out = padded(tgts, after=EOS_ID, width=tgt_in.size(1))
    b = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
              doc_id=[r.get("doc_id") for r in rows], sent_idx=[r.get("sent_idx") for r in rows])
    if any(r.get("src_heads") is not None for r in rows):
        b.src_heads = padded([_heads(r.get("src_heads"), len(r["src_ids"])) for r in rows],
                             NO_HEAD, after=NO_HEAD, width=src.size(1))
    if any(r.get("tgt_heads") is not None for r in rows):
        b.tgt_heads = padded([_heads(r.get("tgt_heads"), len(r["tgt_ids"])) for r in rows],
                             NO_HEAD, before=NO_HEAD, width=tgt_in.size(1))
    if rows and CTX_KEY in rows[0]:
        b.ctx_src, extra = inputs.context_tensors(rows)
        if b.ctx_src is not None and pad_multiple > 1:
            width = _round_up(b.ctx_src.size(1), pad_multiple, max_len)
            b.ctx_src = F.pad(b.ctx_src, (0, width - b.ctx_src.size(1)), value=PAD_ID)
        b.extra.update(extra)
    return b


def collate_documents(subdocs: list[list[dict]], inputs: ModelInputs, pad_multiple: int = 1,
                      max_len: int | None = None) -> Batch:
    """Sub-documents -> a document-level ``Batch``: the rows of every sub-document, plus the
    ``extra`` tensors the model's document rule builds from the sub-documents' sentences, each
    row's sub-document and each row's own sentence (a row whose sentence is one of its
    sub-document's needs no encoding of its own: the model reuses the document's)."""
    rows = [r for d in subdocs for r in d]
    b = collate(rows, pad_multiple=pad_multiple, max_len=max_len)
    b.extra.update(inputs.documents.collate([[r[_DOC_SENT] for r in d] for d in subdocs],
                                            [n for n, d in enumerate(subdocs) for _ in d],
                                            [r["src_ids"] for r in rows]))
    return b


@dataclass(frozen=True)
class StreamBatch:
    """One batch of document lanes: ``lanes`` in all; per row its lane, whether it starts a
    document, and the row."""

    lanes: int
    items: list[tuple[int, bool, dict]]


def collate_stream(batch: StreamBatch, pad_multiple: int = 1, max_len: int | None = None) -> Batch:
    """A stream batch -> ``Batch`` with ``extra["lane"]`` (B,) long, ``extra["lanes"]`` (int)
    and ``extra["doc_start"]`` (B,) bool."""
    b = collate([r for _, _, r in batch.items], pad_multiple=pad_multiple, max_len=max_len)
    b.extra[EXTRA_DOC_START] = torch.tensor([s for _, s, _ in batch.items], dtype=torch.bool)
    b.extra[EXTRA_LANE] = torch.tensor([lane for lane, _, _ in batch.items], dtype=torch.long)
    b.extra[EXTRA_LANES] = batch.lanes
    return b


#: Parallel lanes of document streams: this many times the rows of an average batch (at most
#: one per document), so that each batch can choose sentences of similar length among them.
LANE_CHOICE = 8
#: Lanes whose sentences left reach this quantile of all lanes' are served first, so that lanes
#: drain together and a shard does not end in a tail of short batches.
BEHIND = 0.9


def stream_batches(docs: list[list[dict]], max_tokens: int) -> list[StreamBatch]:
    """Document streams: ``docs`` (in the given order) dealt to P lanes, each to the lane with
    the fewest sentences; each batch takes the next sentence of the lanes furthest behind (the
    most sentences left: the ``BEHIND`` quantile and up), then of the other lanes, in each group
    those whose next sentence is closest in length to that of the lane with the most left
    first, while their tokens (:func:`_row_len`) fit ``max_tokens``. Every sentence comes after
    its document's previous one, in an earlier batch.

    On the Bible's doc shards (``max_tokens`` 4096) this carries 0.99 of the sentence batches'
    target tokens per update with 55-76 % of the cells real; lanes sized by a shard's longest
    row, the t-th sentences side by side, carried 0.28 at 49 %, and choosing by length alone
    0.87 (long lanes were left for a tail of short batches)."""
    if not any(docs):
        return []
    lengths = [_row_len(r) for d in docs for r in d]
    per_batch = max_tokens / (sum(lengths) / len(lengths))
    P = max(1, min(len(docs), round(LANE_CHOICE * per_batch)))
    lanes: list[list[tuple[bool, dict]]] = [[] for _ in range(P)]
    sizes: list[list[int]] = [[] for _ in range(P)]
    for d in docs:
        k = min(range(P), key=lambda j: (len(lanes[j]), j))
        lanes[k].extend((i == 0, r) for i, r in enumerate(d))
        sizes[k].extend(_row_len(r) for r in d)
    head = np.zeros(P, np.int64)
    left = np.array([len(lane) for lane in lanes], np.int64)          # sentences left per lane
    width = np.array([n[0] if n else 0 for n in sizes], np.int64)     # tokens of each next row
    ids = np.arange(P)
    out: list[StreamBatch] = []
    while left.any():
        anchor = int(np.argmax(left))                 # the most left; the lowest index on ties
        live = ids[left > 0]
        ahead = left[live] < np.quantile(left[live], BEHIND)
        # lanes behind first (the anchor first among them), then by closeness in length
        order = live[np.lexsort((live, -left[live], np.abs(width[live] - width[anchor]), ahead))]
        chosen, tokens = [], 0
        for k, n in zip(order.tolist(), width[order].tolist()):
            if not chosen or tokens + n <= max_tokens:
                chosen.append(k)
                tokens += n
        chosen.sort()
        out.append(StreamBatch(P, [(k, *lanes[k][head[k]]) for k in chosen]))
        for k in chosen:
            head[k] += 1
            left[k] -= 1
            width[k] = sizes[k][head[k]] if left[k] else 0
    return out


#: Open batches a sub-document may join (the last ones: they hold sub-documents of its width).
OPEN_BATCHES = 4


def pack_documents(subdocs: list[list[dict]], max_tokens: int) -> list[list[list[dict]]]:
    """Sub-documents (kept whole) sorted by width (longest row) and packed first-fit into the
    last ``OPEN_BATCHES`` batches whose rows' tokens stay within ``max_tokens``; a sub-document
    over the budget forms a batch of its own. Whole sub-documents cannot be cut at an exact
    budget, so first fit rather than a cut in sorted order (which left a batch short by up to
    a sub-document, a fifth of the budget on the Bible)."""
    order = sorted(subdocs, key=lambda d: (max(_row_len(r) for r in d), len(d)))
    batches: list[list[list[dict]]] = []
    tokens: list[int] = []
    for d in order:
        n = sum(_row_len(r) for r in d)
        for k in range(max(0, len(batches) - OPEN_BATCHES), len(batches)):
            if tokens[k] + n <= max_tokens:
                batches[k].append(d)
                tokens[k] += n
                break
        else:
            batches.append([d])
            tokens.append(n)
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
            batches = pack_columns(cols, cfg.max_tokens, cfg.max_len)
            rng.shuffle(batches)
            return [(cols, idx) for idx in batches]
        docs = [d for u in chunk for d in _document_rows(read_documents(u, cfg.with_heads), cfg)]
        if mode is DataMode.STREAM:
            rng.shuffle(docs)
            return stream_batches(docs, cfg.max_tokens)
        if mode is DataMode.DOCUMENT:
            batches = pack_documents(_subdocuments(docs, cfg.inputs.max_sentences), cfg.max_tokens)
        else:
            batches = pack_by_tokens([r for d in docs for r in d], cfg.max_tokens,
                                     cfg.max_context_tokens)
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
            self._items = iter(loader)
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
    The trainer alone decides: it saves ``last``, exits, and its exit shuts the workers down."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_IGN)


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
    docs = _document_rows(docs, cfg)
    if inputs.mode is DataMode.STREAM:
        return [collate_stream(b, **pad) for b in stream_batches(docs, max_tokens)]
    if inputs.mode is DataMode.DOCUMENT:
        return [collate_documents(b, inputs, **pad) for b in
                pack_documents(_subdocuments(docs, inputs.max_sentences), max_tokens)]
    return [collate(b, inputs, **pad) for b in pack_by_tokens([r for d in docs for r in d],
                                                              max_tokens, max_context_tokens)]

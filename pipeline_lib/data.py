"""Streaming Parquet shards -> token-budget ``Batch``es, deterministic, shardable and resumable.

Why this shape:
- *Streaming*: shards are read one row group at a time and only a buffer of ``buffer_sents``
  sentences is held, so corpus size is bounded by disk, not memory.
- *Token budget* (fairseq ``--max-tokens``): the buffer is sorted by length and cut into batches
  whose padded size ``rows * max(len(src)+1, len(tgt)+1)`` stays within ``max_tokens``; similar
  lengths waste little padding and every batch costs about the same.
- *Disjoint streams*: the work units (row groups, or interleaved parts of row groups when there
  are fewer row groups than readers) are shuffled with ``seed + epoch`` and dealt round-robin to
  ``world_size * num_workers`` streams, so DDP ranks and DataLoader workers never see the same row.
- *Resumable*: the order depends only on (seed, epoch, rank, world size, workers); a checkpoint
  stores ``DataPosition(epoch, batches)`` and ``TrainLoader.iterate(position)`` skips exactly the
  batches already consumed (it re-reads and re-batches them but never trains on them).
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
from pipeline_lib.constants import BOS_ID, EOS_ID, PAD_ID

SHARD_GLOB = "shard-*.parquet"
_COLUMNS = ("doc_id", "sent_idx", "src_ids", "tgt_ids")
_HEAD_COLUMNS = ("src_heads", "tgt_heads")


@dataclass(frozen=True)
class LoaderConfig:
    """How batches are formed. ``max_len`` drops pairs whose longer side (with BOS/EOS) exceeds
    the model's positions; ``buffer_sents`` trades memory for better length bucketing."""

    max_tokens: int = 4096
    seed: int = 1
    buffer_sents: int = 20000
    max_len: int = 1024
    num_workers: int = 0
    with_heads: bool = False


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
    """One row group of one shard, or every ``nparts``-th row of it starting at ``part``."""

    path: str
    row_group: int
    part: int = 0
    nparts: int = 1


def shard_files(directory: str | Path) -> list[Path]:
    files = sorted(Path(directory).glob(SHARD_GLOB))
    if not files:
        raise FileNotFoundError(f"no {SHARD_GLOB} in {directory}")
    return files


def work_units(files: list[Path], num_streams: int) -> list[WorkUnit]:
    """Row groups of all shards; split into interleaved parts when there are fewer row groups
    than streams, so that no DDP rank or worker is left without data."""
    groups = []
    for f in files:
        try:
            n = pq.ParquetFile(f).metadata.num_row_groups
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise ValueError(f"{f}: cannot read Parquet metadata: {e}") from e
        groups.extend((str(f), g) for g in range(n))
    nparts = max(1, -(-num_streams // max(1, len(groups))))
    return [WorkUnit(p, g, k, nparts) for p, g in groups for k in range(nparts)]


def read_unit(unit: WorkUnit, with_heads: bool) -> list[dict]:
    """Rows of a work unit as dicts (only the columns batching needs)."""
    pf = pq.ParquetFile(unit.path)
    names = set(pf.schema_arrow.names)
    cols = [c for c in _COLUMNS if c in names]
    if with_heads:
        cols += [c for c in _HEAD_COLUMNS if c in names]
    missing = {"src_ids", "tgt_ids"} - set(cols)
    if missing:
        raise ValueError(f"{unit.path}: missing columns {sorted(missing)}")
    rows = pf.read_row_group(unit.row_group, columns=cols).to_pylist()
    return rows[unit.part :: unit.nparts]


def _row_len(row: dict) -> int:
    """Padded length a row needs: the longer of src+EOS and BOS+tgt."""
    return max(len(row["src_ids"]), len(row["tgt_ids"])) + 1


def _usable(row: dict, max_len: int) -> bool:
    """Pairs with an empty side or longer than the model's positions cannot be trained on; the
    shard stage already quarantines them, this only guards a smaller ``max_len``."""
    return bool(row["src_ids"]) and bool(row["tgt_ids"]) and _row_len(row) <= max_len


def pack_by_tokens(rows: list[dict], max_tokens: int) -> list[list[dict]]:
    """Sort ``rows`` by length and cut into batches with rows * max_len <= max_tokens.

    A single row longer than the budget forms a batch of its own (the budget cannot be met
    otherwise; ``max_len`` filtering upstream keeps such rows rare)."""
    rows = sorted(rows, key=lambda r: (_row_len(r), len(r["src_ids"])))
    batches: list[list[dict]] = []
    cur: list[dict] = []
    cur_max = 0
    for r in rows:
        n = _row_len(r)
        if cur and max(cur_max, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(r)
        cur_max = max(cur_max, n)
    if cur:
        batches.append(cur)
    return batches


def _pad(seqs: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(seqs), max(len(s) for s in seqs)), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def collate(rows: list[dict]) -> Batch:
    """Rows -> ``Batch``: src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS (PAD_ID padded).

    Heads (when read) are padded with -1; ``tgt_heads`` gets a leading -1 for the BOS position so
    it is aligned to ``tgt_in`` (values are the shard's, unchanged)."""
    src = _pad([list(r["src_ids"]) + [EOS_ID] for r in rows], PAD_ID)
    tgt_in = _pad([[BOS_ID] + list(r["tgt_ids"]) for r in rows], PAD_ID)
    tgt_out = _pad([list(r["tgt_ids"]) + [EOS_ID] for r in rows], PAD_ID)
    b = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
              doc_id=[r.get("doc_id") for r in rows], sent_idx=[r.get("sent_idx") for r in rows])
    if rows and "src_heads" in rows[0] and all(r["src_heads"] is not None for r in rows):
        b.src_heads = _pad([list(r["src_heads"]) + [-1] for r in rows], -1)
    if rows and "tgt_heads" in rows[0] and all(r["tgt_heads"] is not None for r in rows):
        b.tgt_heads = _pad([[-1] + list(r["tgt_heads"]) for r in rows], -1)
    return b


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
        units = work_units(self.files, n_streams)
        random.Random(self.cfg.seed * 1_000_003 + self.epoch).shuffle(units)
        return units[self.rank * num_workers + worker_id :: n_streams]

    def __iter__(self) -> Iterator[Batch]:
        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        stream = self.rank * num_workers + worker_id
        rng = random.Random((self.cfg.seed * 1_000_003 + self.epoch) * 10_007 + stream)
        buffer: list[dict] = []
        for unit in self.stream_units(worker_id, num_workers):
            for row in read_unit(unit, self.cfg.with_heads):
                if not _usable(row, self.cfg.max_len):
                    continue
                buffer.append(row)
                if len(buffer) >= self.cfg.buffer_sents:
                    yield from self._flush(buffer, rng)
                    buffer = []
        if buffer:
            yield from self._flush(buffer, rng)

    def _flush(self, buffer: list[dict], rng: random.Random) -> Iterator[Batch]:
        batches = pack_by_tokens(buffer, self.cfg.max_tokens)
        rng.shuffle(batches)
        for rows in batches:
            yield collate(rows)


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
        """Yield ``(position after this batch, batch)`` for the rest of ``position.epoch``."""
        self.dataset.epoch = position.epoch
        # A private generator: DataLoader draws a base seed per iterator, which would otherwise
        # come from the global torch RNG and shift dropout masks between a resumed run and an
        # uninterrupted one.
        loader = DataLoader(self.dataset, batch_size=None, num_workers=self.cfg.num_workers,
                            persistent_workers=False,
                            generator=torch.Generator().manual_seed(self.cfg.seed + position.epoch))
        for i, batch in enumerate(loader):
            if i < position.batches:
                continue
            yield DataPosition(position.epoch, i + 1), batch


def dev_batches(directory: str | Path, max_tokens: int, max_len: int = 1024) -> list[Batch]:
    """All rows of a dev split, batched by length in a fixed order (no shuffling, nothing
    dropped except pairs longer than ``max_len``). Dev sets are small enough to hold."""
    rows = []
    for f in shard_files(directory):
        pf = pq.ParquetFile(f)
        for g in range(pf.metadata.num_row_groups):
            rows.extend(r for r in read_unit(WorkUnit(str(f), g), False) if _usable(r, max_len))
    return [collate(b) for b in pack_by_tokens(rows, max_tokens)]

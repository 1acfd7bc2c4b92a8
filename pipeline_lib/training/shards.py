"""The training shards as the loader reads them: the ``shard-*.parquet`` files of a split, their
work units (row groups, or whole shards for the document modes; interleaved parts of them when
there are fewer than DDP ranks), their rows as flat :class:`Columns` or grouped into documents,
and the tags a tagged model puts on each row (:func:`prepare`).

WHY its own module: what the shards hold and how they are read (the Parquet layout, which
columns, restoration rows) is one concern; forming batches from the rows read is another
(``batching.py``), and scheduling both over ranks, workers and epochs a third (``data.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline_lib.models.inputs import ModelInputs

SHARD_GLOB = "shard-*.parquet"
_COLUMNS = ("doc_id", "sent_idx", "src_ids", "tgt_ids")
_HEAD_COLUMNS = ("src_heads", "tgt_heads")
_RESTORE_COLUMN = "ctx_ids"    # restoration shards (pipeline_lib.preprocess.noise.RESTORE_SCHEMA)
DOC_SENT = "doc_sent"          # row key: the row's sentence as it appears in doc_src


@dataclass(frozen=True)
class WorkUnit:
    """One row group of one shard, or every ``nparts``-th row of it starting at ``part``;
    ``row_group = -1``: the whole shard, split by documents (every ``nparts``-th document)."""

    path: str
    row_group: int
    part: int = 0
    nparts: int = 1
    rows: int = 0        # rows in the unit (from the Parquet metadata; what chunks are cut by)


class DamagedShard(ValueError):
    """A shard that cannot be read (truncated, a copy cut short, not Parquet): named in one
    line by the trainer, which exits 2 (issue 36), instead of a pyarrow stack."""


def _read(path: str | Path, what: str, read):
    """``read()``, with pyarrow's errors for a damaged file (several types) as DamagedShard."""
    try:
        return read()
    except Exception as e:  # noqa: BLE001 - pyarrow raises OSError, ArrowInvalid, ...
        raise DamagedShard(f"{path}: damaged shard, cannot read {what}: {e} (rebuild it: "
                           "snakemake --forcerun make_shards)") from e


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
        meta = _read(f, "its Parquet metadata", lambda: pq.ParquetFile(f).metadata)
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
        t = _read(unit.path, f"row group {unit.row_group}",
                  lambda: pf.read_row_group(unit.row_group, columns=cols))
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
    for row in _read(unit.path, "its rows", lambda: pf.read(columns=cols)).to_pylist():
        if docs and docs[-1][0]["doc_id"] == row["doc_id"]:
            docs[-1].append(row)
        else:
            docs.append([row])
    return docs[unit.part :: unit.nparts]


def prepare(row: dict, inputs: ModelInputs) -> dict:
    """Rows of a model with tags get them (``src_ids``, ``tgt_ids`` and the sentence as the
    document input sees it); other models use rows as read. Restoration rows (``ctx_ids``) take
    the model's restoration tag, translation rows its translation tag."""
    if inputs.tag is None and inputs.restore_tag is None:
        return row
    restore = row.get(_RESTORE_COLUMN) is not None
    row["src_ids"] = inputs.tag_sentence(row["src_ids"], restore)
    row["tgt_ids"] = inputs.tag_sentence(row["tgt_ids"], restore)
    row[DOC_SENT] = inputs.tag_sentence(row[_RESTORE_COLUMN], True) if restore else row["src_ids"]
    return row

"""The document Parquet schema that every corpus reader writes and every later stage reads.

One row per sentence (segment) of a document:

==============  =====================  ==========================================================
column          type                   meaning
==============  =====================  ==========================================================
corpus          string                 corpus name from config (``bible``, ``iwslt17``, ...)
split           string                 ``train`` / ``dev`` / ``test`` / ``mono``
doc_id          string                 document id, unique within corpus+split
sent_idx        int32                  0-based position of the sentence in its document
src             string                 source sentence (the text itself for monolingual data)
tgt             list<string>           references: one for training data, several where a test
                                       set has them (NIST MT02-08 have four); null for ``mono``
has_context     bool                   false where documents are unknown (sentence-level LDC
                                       releases become one-sentence documents)
origin_file     string                 file the source side was read from (provenance)
origin_line     int64                  1-based line of the record in ``origin_file``
==============  =====================  ==========================================================

Rows are written in document order (``doc_id`` groups contiguous, ``sent_idx`` ascending), so
readers can stream documents without sorting.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pipeline_lib.atomic import commit, discard, discard_stale, partial_name

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

class Split(str, Enum):
    """The ``split`` column's values."""

    TRAIN = "train"
    DEV = "dev"
    TEST = "test"
    MONO = "mono"


# Column name -> pyarrow type name (pyarrow.<name>()); "list" = list of strings. The Arrow schemas
# are built on first use (``DOC_SCHEMA``, ``QUARANTINE_SCHEMA`` through the module's
# ``__getattr__``): the readers import this module, and planning the DAG must not import pyarrow.
_COLUMNS = {
    "DOC_SCHEMA": [("corpus", "string"), ("split", "string"), ("doc_id", "string"),
                   ("sent_idx", "int32"), ("src", "string"), ("tgt", "list"),
                   ("has_context", "bool_"), ("origin_file", "string"), ("origin_line", "int64")],
    "QUARANTINE_SCHEMA": [("stage", "string"), ("corpus", "string"), ("origin_file", "string"),
                          ("origin_line", "int64"), ("doc_id", "string"), ("reason", "string"),
                          ("record", "string")],
}


@functools.cache
def arrow_schema(name: str):
    """The pyarrow schema ``name`` (``DOC_SCHEMA`` or ``QUARANTINE_SCHEMA``)."""
    import pyarrow as pa

    return pa.schema([(col, pa.list_(pa.string()) if kind == "list" else getattr(pa, kind)())
                      for col, kind in _COLUMNS[name]])


def __getattr__(name: str):
    if name in _COLUMNS:
        return arrow_schema(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Sentence:
    """One row of the document schema."""

    corpus: str
    split: str
    doc_id: str
    sent_idx: int
    src: str
    tgt: list[str] | None
    has_context: bool = True
    origin_file: str = ""
    origin_line: int = 0


@dataclass
class Rejected:
    """One quarantined record: kept with its reason so that nothing vanishes silently."""

    stage: str
    corpus: str
    origin_file: str
    origin_line: int
    doc_id: str
    reason: str
    record: str = ""


@dataclass
class RowWriter:
    """Streams dataclass rows into a Parquet file in row groups, never holding the corpus.

    Used as a context manager. Rows go to a hidden partial file (``atomic.partial_name``) that is
    renamed to ``path`` when the block ends normally, so the file then exists (possibly with zero
    rows); when the block raises, the partial file is deleted and ``path`` is left as it was.
    """

    path: Path
    schema: pa.Schema
    row_group_size: int = 50_000
    count: int = 0
    _buffer: list = field(default_factory=list)
    _writer: pq.ParquetWriter | None = None
    _tmp: Path | None = None

    def __enter__(self) -> "RowWriter":
        import pyarrow.parquet as pq

        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        discard_stale(self.path)
        self._tmp = partial_name(self.path)
        self._writer = pq.ParquetWriter(str(self._tmp), self.schema, compression="zstd")
        return self

    def write(self, row) -> None:
        self._buffer.append(row)
        self.count += 1
        if len(self._buffer) >= self.row_group_size:
            self._flush()

    def write_all(self, rows: Iterable) -> None:
        for row in rows:
            self.write(row)

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buffer:
            return
        columns = {name: [getattr(r, name) for r in self._buffer] for name in self.schema.names}
        self._writer.write_table(pa.table(columns, schema=self.schema))
        self._buffer.clear()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            try:
                self._writer.close()
            finally:
                discard(self._tmp)
            return
        try:
            self._flush()
            self._writer.close()
        except BaseException:
            discard(self._tmp)
            raise
        commit(self._tmp, Path(self.path))


def doc_writer(path: Path, **kw) -> RowWriter:
    return RowWriter(Path(path), arrow_schema("DOC_SCHEMA"), **kw)


def quarantine_writer(path: Path, **kw) -> RowWriter:
    return RowWriter(Path(path), arrow_schema("QUARANTINE_SCHEMA"), **kw)

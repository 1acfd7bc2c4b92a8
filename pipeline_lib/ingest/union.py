"""Reader ``union``: one corpus made of several releases that ship in different formats, each
read by its own reader.

Why: a training job reads one corpus, and a paper's training set is often several licensed
releases (Zhang et al. 2018's document-level corpus spans LDC SGML and GALE TDF releases).

Spec keys (``corpora.<name>``)::

    reader: union
    parts:                                # each an entry of another reader, as it would stand
      - reader: ldc_doc                   # on its own (its keys, its splits)
        splits: {train: {src: LDC2002T01/data/source/*.sgm, src_encoding: gb18030,
                         tgt: [LDC2002T01/data/translation/E01/*.sgm]}}
      - reader: gale_tdf
        splits: {train: {src: LDC2009T15/data/source/*.tdf, tgt: LDC2009T15/data/translation/*.tdf}}

The parts are read in order into the one ``docs.parquet``; every part's records keep their own
files and lines. A document id that an earlier part already used in the same split is
quarantined (``duplicate_doc_id``): two releases must not merge into one document. An empty
split is an error only when no part of the union fills it.
"""

from __future__ import annotations

from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.ingest import Limits, SpecError, reader_module
from pipeline_lib.tables import Rejected, Sentence

READER = "union"


def parts(spec: dict) -> list[dict]:
    """The entries the union is made of, checked (a union of unions is refused)."""
    items = spec.get("parts")
    if not isinstance(items, list) or not items or not all(isinstance(p, dict) for p in items):
        raise SpecError("reader union needs `parts`: a non-empty list of corpus entries")
    for p in items:
        if p.get("reader") == READER:
            raise SpecError("a part of a union cannot be a union")
    return items


def input_files(spec: dict) -> list[str]:
    return [f for p in parts(spec) for f in reader_module(p.get("reader")).input_files(p)]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Every part in order; a document id seen in an earlier part is a duplicate."""
    earlier: set[tuple[str, str]] = set()
    for p in parts(spec):
        mine: set[tuple[str, str]] = set()
        for item in reader_module(p.get("reader")).read(corpus, p, limits):
            if isinstance(item, Sentence):
                key = (item.split, item.doc_id)
                if key in earlier:
                    yield Rejected("ingest", corpus, item.origin_file, item.origin_line,
                                   item.doc_id, IngestReason.DUPLICATE_DOC_ID.value,
                                   " ||| ".join([item.src, *(item.tgt or [])]))
                    continue
                mine.add(key)
            yield item
        earlier |= mine

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
files and lines. A document's id is its part's id under the part's number (``part1/XIN0001``,
``part2/train.es#000000``): two releases must not merge into one document, and two that name
their files alike must not collide. A document of a later part with the same content (segments,
in order, both sides) as one of an earlier part in the same split is quarantined
(``duplicate_doc_content``): a release shipped twice, or a document two releases share. An
empty split is an error only when no part of the union fills it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.ingest import Limits, SpecError, reader_module
from pipeline_lib.ingest.identity import document_key, documents, matching_files, quarantined
from pipeline_lib.ingest.lines import as_list
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
    _no_release_twice(items)
    return items


def _no_release_twice(items: list[dict]) -> None:
    """Refuse a file that two parts read: the same release listed twice would quarantine every
    document of the later part as a duplicate, and the mostly-quarantined check would then
    blame that file's bytes."""
    first: dict[str, int] = {}
    for index, p in enumerate(items, 1):
        for pattern in (x for f in reader_module(p.get("reader")).input_files(p)
                        for x in as_list(f)):
            for path in matching_files(pattern):
                real = os.path.realpath(path)
                if first.get(real, index) != index:
                    raise SpecError(f"{path} is read by part {first[real]} and part {index} of "
                                    "the union: a release listed twice? List each release once")
                first[real] = index


def input_files(spec: dict) -> list[str]:
    return [f for p in parts(spec) for f in reader_module(p.get("reader")).input_files(p)]


def part_id(index: int, doc_id: str) -> str:
    """A document id in the union: the part's (1-based ``index``) id under the part's number, so
    that two releases that both name a file ``train.es`` (plaintext's ``train.es#000000``) or a
    document ``XIN0001`` stay two documents, unique by construction."""
    return f"part{index}/{doc_id}"


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Every part in order, its document ids under its number (``part_id``); a document whose
    content an earlier part already holds in the same split is quarantined."""
    earlier: set[tuple[str, str]] = set()
    for index, p in enumerate(parts(spec), 1):
        mine: set[tuple[str, str]] = set()
        rows = (replace(item, doc_id=part_id(index, item.doc_id))
                for item in reader_module(p.get("reader")).read(corpus, p, limits))
        for doc in documents(rows):
            if isinstance(doc, Rejected):   # the quarantine's order is its own
                yield doc
                continue
            key = document_key(doc)
            yield from (quarantined(corpus, doc, IngestReason.DUPLICATE_DOC_CONTENT)
                        if key in earlier else doc)
            mine.add(key)
        earlier |= mine

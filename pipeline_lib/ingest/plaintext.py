"""Reader ``plaintext``: one sentence per line, parallel files, with document boundaries.

Spec keys (``corpora.<name>``)::

    reader: plaintext
    splits:
      train:
        src: ted/train.en                     # one sentence per line
        tgt: ted/train.de                     # the same sentences, same order
        docids: ted/train.docids              # optional: one document id per line of src
      test:
        src: news/test.en
        tgt: news/test.de
        doc_separator: "<d>"                  # without docids: a line equal to this separates
                                              # documents; default "" (a blank line)

With ``docids`` the three files must have the same number of lines (else ``InputError``: no
line can be trusted to pair) and a document is a run of equal ids; an id that comes back after
another document is quarantined (``doc_id_not_contiguous``). With separators (Maruf et al. 2019
put a ``<d>`` line between documents) each side is cut into documents independently; the sides
must have the same number of documents, and a document whose sides differ in line count is
quarantined whole. Separator-delimited documents get ids ``<src file name>#<ordinal>``.
"""

from __future__ import annotations

from itertools import groupby, zip_longest
from typing import Iterator

from pipeline_lib.constants import IngestReason
from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.lines import (Line, Segment, emit_document, file_label, normalize,
                                       read_lines, reject_all, splits)
from pipeline_lib.schema import Rejected, Sentence

KEYS, REQUIRED = {"src", "tgt", "docids", "doc_separator"}, ("src", "tgt")


def input_files(spec: dict) -> list[str]:
    return [sub[k] for _, sub in splits(spec, KEYS, REQUIRED) for k in ("src", "tgt", "docids") if sub.get(k)]


def documents(path: str, separator: str) -> Iterator[list[Line]]:
    """Lines of a file cut at separator lines (separators dropped, empty documents skipped)."""
    doc: list[Line] = []
    for line in read_lines(path):
        if line.text.strip() == separator:
            if doc:
                yield doc
            doc = []
        else:
            doc.append(line)
    if doc:
        yield doc


def segment(line: Line, path: str, tgt: Line | None = None) -> Segment:
    return Segment(normalize(line.text), None if tgt is None else [normalize(tgt.text)],
                   path, line.no, line.bad or (tgt is not None and tgt.bad))


def read_separated(corpus: str, split: str, sub: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Documents cut at separator lines, streamed; ``tgt`` optional (``mono_text`` reuses this)."""
    sep = sub.get("doc_separator", "").strip()
    src_docs = documents(sub["src"], sep)
    pairs = (zip_longest(src_docs, documents(sub["tgt"], sep)) if sub.get("tgt")
             else ((doc, None) for doc in src_docs))
    for k, (src, tgt) in enumerate(pairs):
        if src is None or (sub.get("tgt") and tgt is None):
            short, other = (sub["src"], sub["tgt"]) if src is None else (sub["tgt"], sub["src"])
            raise InputError(short, None, f"has {k} documents but {other} has more: "
                                          "separators do not line up")
        doc_id = f"{file_label(sub['src'])}#{k:06d}"
        if tgt is not None and len(src) != len(tgt):
            yield from reject_all(corpus, [segment(line, sub["src"]) for line in src], doc_id,
                                  IngestReason.SEG_COUNT_MISMATCH)
            continue
        segs = [segment(s, sub["src"], t) for s, t in zip_longest(src, tgt or [])]
        yield from emit_document(corpus, split, doc_id, segs, limits)


def read_aligned(*paths: str) -> Iterator[tuple[Line, ...]]:
    """Line-aligned files read side by side, streamed; a file that ends early breaks pairing."""
    for row in zip_longest(*(read_lines(p) for p in paths)):
        if None in row:
            short = paths[row.index(None)]
            longer, line = next((p, ln) for p, ln in zip(paths, row) if ln is not None)
            raise InputError(short, None, f"ends after line {line.no - 1} but {longer} goes on")
        yield row


def read_docids(corpus: str, split: str, sub: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    seen: set[str] = set()
    rows = read_aligned(sub["src"], sub["tgt"], sub["docids"])
    for doc_id, group in groupby(rows, key=lambda r: r[2].text.strip()):
        segs = [segment(s, sub["src"], t) for s, t, _ in group]
        if doc_id in seen:
            yield from reject_all(corpus, segs, doc_id, IngestReason.DOC_NOT_CONTIGUOUS)
        elif not doc_id:
            yield from reject_all(corpus, segs, doc_id, IngestReason.MISSING_DOC_ID)
        else:
            seen.add(doc_id)
            yield from emit_document(corpus, split, doc_id, segs, limits)


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS, REQUIRED):
        if sub.get("docids"):
            yield from read_docids(corpus, split, sub, limits)
        else:
            yield from read_separated(corpus, split, sub, limits)

"""Readers ``mono_sgml`` and ``mono_text``: source-language monolingual documents (split ``mono``,
text in the ``src`` column), the input of the document-restoration noise (Chen et al. 2021).

Spec keys (``corpora.<name>``)::

    reader: mono_sgml                         # Gigaword-style SGML, plain or .gz
    splits:
      mono:
        src: gigaword/afp_eng/*.gz            # path, glob, or list of them
        doc_types: [story]                    # optional: <DOC type=..> values kept (default story)

    reader: mono_text
    splits:
      mono:
        src: news.2019.en.doc                 # one sentence per line
        doc_separator: ""                     # optional: line that separates documents (blank)

Gigaword (``<DOC id=.. type="story"><HEADLINE>..<TEXT><P>..</P>``) has no sentence split: each
``<P>`` paragraph is one row (whitespace-normalized; sentence splitting belongs to the parse
stage), headlines and datelines are metadata. Paragraphs of documents of another type
(``multi``, ``advis``, ``other``: tables, advisories) are quarantined as ``doc_type_excluded``,
so that the manifest shows how much was set aside; a kept-type document without any ``<P>`` is one
quarantined record (``document_without_segments``). Rows have ``tgt`` null and the text in ``src``.
"""

from __future__ import annotations

from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.tables import Split
from pipeline_lib.ingest import Limits
from pipeline_lib.ingest.lines import (PATH, PATHS, TEXT, TEXTS, Segment, emit_document, expand,
                                       reject_all, splits)
from pipeline_lib.ingest.markup import empty_document, read_docs
from pipeline_lib.ingest.plaintext import read_separated
from pipeline_lib.tables import Rejected, Sentence

KEYS = {"mono_sgml": {"src": PATHS, "doc_types": TEXTS}, "mono_text": {"src": PATH, "doc_separator": TEXT}}


def _splits(spec: dict) -> Iterator[tuple[str, dict]]:
    return splits(spec, KEYS[spec["reader"]], allowed=[Split.MONO])


def input_files(spec: dict) -> list[str]:
    return [f for _, sub in _splits(spec) for f in expand(sub["src"])]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in _splits(spec):
        if spec["reader"] == "mono_text":
            yield from read_separated(corpus, split, sub, limits)
            continue
        kept_types = set(sub.get("doc_types", ["story"]))
        seen: set[str] = set()
        for path in expand(sub["src"]):
            for doc in read_docs(path, seg_tag="p"):
                segs = [Segment(t) for t in doc.texts()]
                doc_id = doc.id or f"{path}:{doc.line}"
                if doc.id is None:
                    yield from reject_all(corpus, segs, doc_id, IngestReason.MISSING_DOC_ID)
                elif doc.id in seen:
                    yield from reject_all(corpus, segs, doc_id, IngestReason.DUPLICATE_DOC_ID)
                elif doc.attrs.get("type", "story") not in kept_types:
                    yield from reject_all(corpus, segs, doc_id, IngestReason.DOC_TYPE_EXCLUDED)
                elif not segs:
                    yield empty_document(corpus, doc)
                else:
                    seen.add(doc.id)
                    yield from emit_document(corpus, split, doc_id, segs, limits)

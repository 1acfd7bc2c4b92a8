"""Readers ``ldc_doc`` and ``ldc_sent``: LDC parallel releases with and without documents.

Spec keys (``corpora.<name>``)::

    reader: ldc_doc                           # LDC2002T01-style: SGML, <DOC docid=..> with <seg>
    splits:
      train:
        src: LDC2002T01/source/*.sgm          # path, glob, or list of them (all one source side)
        tgt: [LDC2002T01/E01/*.sgm,           # one entry per reference (translator); the files
              LDC2002T01/E02/*.sgm]           # an entry matches together form that reference

    reader: ldc_sent                          # LDC2002E18-style sentence-aligned text files
    splits:
      train:
        src: LDC2002E18/data/zh.txt           # one sentence per line
        tgt: LDC2002E18/data/en.txt           # the same number of lines

``ldc_doc`` pairs documents by docid and segments by seg id through ``markup.align`` (the code
of reader ``sgml``). ``ldc_sent`` has no document boundaries: every line pair becomes its own
one-sentence document ``<src file name>:<line>`` with ``has_context = false``, so that
context-aware models and the report can tell missing context from a first sentence.
"""

from __future__ import annotations

from typing import Iterator

from pipeline_lib.ingest import Limits
from pipeline_lib.ingest.lines import PATH, PATHS, REFS, emit_document, expand, file_label, splits
from pipeline_lib.ingest.markup import align, read_docs
from pipeline_lib.ingest.plaintext import read_aligned, segment
from pipeline_lib.schema import Rejected, Sentence

KEYS = {"ldc_doc": {"src": PATHS, "tgt": REFS}, "ldc_sent": {"src": PATH, "tgt": PATH}}
REQUIRED = ("src", "tgt")


def _ref_sets(sub: dict) -> list[list[str]]:
    """Files of each reference; a bare string is a single reference."""
    tgt = sub["tgt"]
    return [expand(tgt)] if isinstance(tgt, str) else [expand(entry) for entry in tgt]


def input_files(spec: dict) -> list[str]:
    if spec["reader"] == "ldc_sent":
        return [sub[k] for _, sub in splits(spec, KEYS["ldc_sent"], REQUIRED) for k in ("src", "tgt")]
    return [f for _, sub in splits(spec, KEYS["ldc_doc"], REQUIRED)
            for f in [*expand(sub["src"]), *(p for ref in _ref_sets(sub) for p in ref)]]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS[spec["reader"]], REQUIRED):
        if spec["reader"] == "ldc_sent":
            label = file_label(sub["src"])
            for src, tgt in read_aligned(sub["src"], sub["tgt"]):
                yield from emit_document(corpus, split, f"{label}:{src.no}",
                                         [segment(src, sub["src"], tgt, sub["tgt"])], limits,
                                         has_context=False)
        else:
            src_docs = [d for path in expand(sub["src"]) for d in read_docs(path)]
            ref_sets = [[d for path in ref for d in read_docs(path)] for ref in _ref_sets(sub)]
            yield from align(corpus, split, src_docs, ref_sets, limits)

"""Readers ``ldc_doc`` and ``ldc_sent``: LDC parallel releases with documents, and
sentence-aligned text without them (LDC sentence-aligned releases, WMT training corpora).

Spec keys (``corpora.<name>``)::

    reader: ldc_doc                           # LDC2002T01-style: SGML, <DOC docid=..> with <seg>
    splits:
      train:
        src: LDC2002T01/source/*.sgm          # path, glob, or list of them (all one source side)
        tgt: [LDC2002T01/E01/*.sgm,           # one entry per reference (translator); the files
              LDC2002T01/E02/*.sgm]           # an entry matches together form that reference
        src_encoding: gb18030                 # optional: the source files' encoding (default
                                              # utf-8; MTC's Chinese is GB2312, read as its
                                              # superset GB18030; Big5 as big5hkscs)

    reader: ldc_sent                          # sentence-aligned text files without documents:
    splits:                                   # LDC2002E18-style releases, WMT training corpora
      train:
        src: [training/europarl-v7.de-en.en,  # a path, or a list of paths read in order;
              commoncrawl.de-en.en]           # one sentence per line
        tgt: [training/europarl-v7.de-en.de,  # as many files as src, paired in order, each
              commoncrawl.de-en.de]           # with the same number of lines as its src file

``ldc_doc`` pairs documents by docid and segments by seg id through ``markup.align`` (the code
of reader ``sgml``). ``ldc_sent`` has no document boundaries: every line pair becomes its own
one-sentence document ``<src file name>:<line>`` with ``has_context = false`` (where two
source files share a name, their paths below the folder holding them: ``identity.relative_names``),
so that
context-aware models and the report can tell missing context from a first sentence. Lists exist
because a sentence-level training set often ships as several corpora (WMT14 En-De: Europarl,
Common Crawl, News Commentary) that one training job reads together; a pair whose files differ
in length is an ``InputError`` naming both files and their counts (``plaintext.read_aligned``).
"""

from __future__ import annotations

from typing import Iterator

from pipeline_lib.ingest import Limits, SpecError
from pipeline_lib.ingest.identity import relative_names, unique_documents
from pipeline_lib.ingest.lines import ENCODING, PATHS, REFS, as_list, emit_document, expand, splits
from pipeline_lib.ingest.markup import align, read_docs
from pipeline_lib.ingest.plaintext import read_aligned, segment
from pipeline_lib.tables import Rejected, Sentence

KEYS = {"ldc_doc": {"src": PATHS, "tgt": REFS, "src_encoding": ENCODING},
        "ldc_sent": {"src": PATHS, "tgt": PATHS}}
REQUIRED = ("src", "tgt")


def _ref_sets(sub: dict) -> list[list[str]]:
    """Files of each reference; a bare string is a single reference."""
    tgt = sub["tgt"]
    return [expand(tgt)] if isinstance(tgt, str) else [expand(entry) for entry in tgt]


def _file_pairs(sub: dict) -> list[tuple[str, str]]:
    """``ldc_sent``: the (source, target) files of a split, paired in order."""
    src, tgt = as_list(sub["src"]), as_list(sub["tgt"])
    if len(src) != len(tgt):
        raise SpecError(f"ldc_sent needs as many `tgt` files as `src` files, got {src} / {tgt}")
    return list(zip(src, tgt))


def input_files(spec: dict) -> list[str]:
    if spec["reader"] == "ldc_sent":
        return [f for _, sub in splits(spec, KEYS["ldc_sent"], REQUIRED)
                for pair in _file_pairs(sub) for f in pair]
    return [f for _, sub in splits(spec, KEYS["ldc_doc"], REQUIRED)
            for f in [*expand(sub["src"]), *(p for ref in _ref_sets(sub) for p in ref)]]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS[spec["reader"]], REQUIRED):
        if spec["reader"] == "ldc_sent":
            pairs = _file_pairs(sub)
            labels = relative_names([s for s, _ in pairs])
            for src_path, tgt_path in pairs:
                label = labels[src_path]
                for src, tgt in read_aligned(src_path, tgt_path):
                    yield from emit_document(corpus, split, f"{label}:{src.no}",
                                             [segment(src, src_path, tgt, tgt_path)], limits,
                                             has_context=False)
        else:
            enc = sub.get("src_encoding", "utf-8")
            src_docs = [d for path in expand(sub["src"]) for d in read_docs(path, encoding=enc)]
            ref_sets = [[d for path in ref for d in read_docs(path)] for ref in _ref_sets(sub)]
            # align finds a docid repeated across files; the same document under another id
            # in another file is found by content
            yield from unique_documents(corpus, align(corpus, split, src_docs, ref_sets, limits))

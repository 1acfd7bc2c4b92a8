"""Reader ``sgml``: NIST / LDC / WMT (up to 2020) SGML test sets with one or more references.

Spec keys (``corpora.<name>``)::

    reader: sgml
    splits:
      test:                                   # any of train / dev / test
        src: mt06/nist06.src.sgm              # file holding the <srcset>
        tgt: [mt06/nist06.ref.sgm]            # path or list of paths; every <refset> in every
                                              # file is one reference, in file order
      dev:
        src: newstest2013-src.de.sgm
        tgt: newstest2013-ref.en.sgm

Segments pair by ``(docid, seg id)`` (by position inside a document whose ids are absent), so
``tgt`` holds all references of a segment: NIST MT02-08 ship four ``<refset>`` s (in one file or
four), and the seed papers score against all of them. Quarantined with a reason: empty, too long
or undecodable segments; documents whose sides differ in segment count or ids, lack a reference,
or repeat a docid; reference documents with no source document.
"""

from __future__ import annotations

from typing import Iterator

from pipeline_lib.ingest import Limits
from pipeline_lib.ingest.lines import PATH, PATHS, as_list, splits
from pipeline_lib.ingest.markup import align, read_docs, sets_of
from pipeline_lib.tables import Rejected, Sentence

KEYS, REQUIRED = {"src": PATH, "tgt": PATHS}, ("src", "tgt")


def input_files(spec: dict) -> list[str]:
    return [f for _, sub in splits(spec, KEYS, REQUIRED) for f in [sub["src"], *as_list(sub.get("tgt"))]]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS, REQUIRED):
        ref_sets = [rs for path in as_list(sub["tgt"])
                    for rs in sets_of(read_docs(path))]
        yield from align(corpus, split, read_docs(sub["src"]), ref_sets, limits)

"""Reader ``aspec``: ASPEC-JE, the Japanese-English part of the Asian Scientific Paper Excerpt
Corpus (Nakazawa et al. 2016; WAT's ASPEC Ja-En task, Deguchi et al. 2019), as released.

Release layout and format (licensed; the release's own files, unchanged)::

    ASPEC/ASPEC-JE/train/train-1.txt  train-2.txt  train-3.txt    (1M, 1M, ~1M pairs, in
                                                                   decreasing alignment score)
    ASPEC/ASPEC-JE/dev/dev.txt  devtest/devtest.txt  test/test.txt

one sentence pair per line, fields separated by `` ||| ``::

    train-N.txt:            SCORE ||| DOC_ID ||| SENT_ID ||| JAPANESE ||| ENGLISH     (5 fields)
    dev, devtest, test:     ID ||| DOC_ID ||| JAPANESE ||| ENGLISH                   (4 fields)

The last two fields are the texts; the ids before them are kept only as provenance (the record
of a quarantined line). A file whose name starts with ``train`` must have 5 fields per line,
every other file 4.

Spec keys (``corpora.<name>``)::

    reader: aspec
    source: ja                    # the source side: ja (Ja->En, the default) or en (En->Ja)
    splits:
      train:
        file: [ASPEC/ASPEC-JE/train/train-1.txt, ASPEC/ASPEC-JE/train/train-2.txt]
        max_pairs: 1500000        # optional: the first N lines of the files, in order
      dev:  {file: ASPEC/ASPEC-JE/dev/dev.txt}
      test: {file: ASPEC/ASPEC-JE/test/test.txt}

ASPEC pairs are sentences extracted from paper abstracts, and the training files are sorted by
alignment score, not by document: every pair is its own one-sentence document
``<file name>:<line>`` (paths where names recur) with ``has_context = false`` (as ``ldc_sent``),
so a context model cannot mistake the previous line for context. ``max_pairs`` counts lines read (kept or quarantined), so
"the first 1.5 million pairs" of Deguchi et al. (Sec. 4.1) is ``max_pairs: 1500000`` over
train-1 and train-2 whatever the quarantine holds. A line with another number of fields than
its file's format (a truncated last line, a stray ``|||``) is quarantined as ``field_count``;
undecodable bytes, control characters, an empty or over-long side as in every reader.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.tables import Split
from pipeline_lib.ingest import Limits, SpecError
from pipeline_lib.ingest.lines import (COUNT, PATHS, Segment, Text, as_list, emit_document,
                                       fault_of, normalize, read_lines, reject, splits)
from pipeline_lib.ingest.identity import relative_names
from pipeline_lib.tables import Rejected, Sentence

KEYS, REQUIRED = {"file": PATHS, "max_pairs": COUNT}, ("file",)
PARALLEL = (Split.TRAIN, Split.DEV, Split.TEST)
SEPARATOR = " ||| "
SOURCES = ("ja", "en")


def fields_of(path: str) -> int:
    """Fields per line of an ASPEC-JE file: 5 in the training files, 4 in dev/devtest/test."""
    return 5 if Path(path).name.startswith("train") else 4


def _source(spec: dict) -> str:
    source = spec.get("source", "ja")
    if source not in SOURCES:
        raise SpecError(f"reader aspec: `source` must be one of {list(SOURCES)}, got {source!r}")
    return source


def _files(sub: dict) -> list[str]:
    return as_list(sub["file"])


def input_files(spec: dict) -> list[str]:
    return [f for _, sub in splits(spec, KEYS, REQUIRED, PARALLEL) for f in _files(sub)]


def _records(path: str, source: str) -> Iterator[tuple[int, Segment, bool]]:
    """(line number, record, whether the line has its file's number of fields) per line."""
    expected = fields_of(path)
    for line in read_lines(path):
        parts = line.text.split(SEPARATOR)
        if len(parts) != expected:
            yield line.no, Segment(Text(normalize(line.text), path, line.no, fault_of(line))), False
            continue
        ja, en = (Text(normalize(t), path, line.no, fault_of(line)) for t in parts[-2:])
        src, tgt = (ja, en) if source == "ja" else (en, ja)
        yield line.no, Segment(src, [tgt]), True


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    source = _source(spec)
    for split, sub in splits(spec, KEYS, REQUIRED, PARALLEL):
        labels = relative_names(_files(sub))
        lines = ((path, *rec) for path in _files(sub) for rec in _records(path, source))
        for path, no, seg, well_formed in islice(lines, sub.get("max_pairs")):
            doc_id = f"{labels[path]}:{no}"
            if not well_formed:
                yield reject(corpus, seg, doc_id, IngestReason.FIELD_COUNT)
            else:
                yield from emit_document(corpus, split, doc_id, [seg], limits, has_context=False)

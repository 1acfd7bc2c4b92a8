"""Reader ``gale_tdf``: GALE parallel text in LDC's Tab Delimited Format (TDF), the format of the
GALE Phase 1 Chinese releases among Zhang et al. (2018)'s document corpora (LDC2009T15 and
LDC2010T03, GALE Phase 1 Chinese Newsgroup Parallel Text Parts 1 and 2).

The format, as docs/TDF_format.txt of the GALE releases describes it (e.g. LDC2008T06, the GALE
Phase 1 Chinese blog release, and LDC2012T18): UTF-8 text; the first line declares the 13 fields
``file;unicode channel;int start;float end;float speaker;unicode speakerType;unicode
speakerDialect;unicode transcript;unicode section;int turn;int segment;int sectionType;unicode
suType;unicode`` (tab-separated); a line starting with ``;;`` is a comment (the optional ``;;MM``
section lines among them); every other line is one segment, 13 tab-separated fields with the
text in ``transcript``. Source files end in ``.tdf``, their translations in ``.eng.tdf`` with
the same stem (the releases' ``data/source/`` and ``data/translation/``).

Spec keys (``corpora.<name>``)::

    reader: gale_tdf
    splits:
      train:
        src: LDC2009T15/data/source/*.tdf          # path, glob, or list of them
        tgt: LDC2009T15/data/translation/*.tdf     # the translations, paired with src by stem

A source file and its translation are one document (paired by stem, and by release where a stem
recurs: see ``pair_files``), its id the stem, or where sources of the split share a stem, the
source's path below the folder holding them, without ``.tdf`` (see ``doc_ids``); a document
whose content an earlier file of the split holds is ``duplicate_doc_content``. Their segments
pair in order and must carry the same ``segment`` ids: a translation with another number of
segments puts the whole document in quarantine (``segment_count_mismatch``), a pair whose ids
differ ``segment_id_mismatch``, a line without 13 fields ``field_count``; a source file without
a translation is ``missing_reference``, a translation without a source
``reference_without_source``.
A file whose first line is not the field declaration is an ``InputError``: it is not TDF.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.tables import Split
from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.identity import relative_names, unique_documents
from pipeline_lib.ingest.lines import (PATHS, Segment, Text, emit_document, expand, fault_of,
                                       normalize, read_lines, reject, reject_all, reject_sides,
                                       splits)
from pipeline_lib.tables import Rejected, Sentence

KEYS, REQUIRED = {"src": PATHS, "tgt": PATHS}, ("src", "tgt")
PARALLEL = (Split.TRAIN, Split.DEV, Split.TEST)
FIELDS = ("file", "channel", "start", "end", "speaker", "speakerType", "speakerDialect",
          "transcript", "section", "turn", "segment", "sectionType", "suType")
TRANSCRIPT, SEGMENT = FIELDS.index("transcript"), FIELDS.index("segment")


def stem(path: str) -> str:
    """The document a file belongs to: its name without ``.eng.tdf`` / ``.tdf``."""
    name = Path(path).name
    for suffix in (".eng.tdf", ".tdf"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def input_files(spec: dict) -> list[str]:
    return [f for _, sub in splits(spec, KEYS, REQUIRED, PARALLEL)
            for key in ("src", "tgt") for f in expand(sub[key])]


def segments(path: str) -> Iterator[tuple[str | None, Text]]:
    """(segment id, text) per record of a TDF file; id None for a line without 13 fields (the
    text is then the whole line, for the quarantine)."""
    lines = read_lines(path)
    header = next(lines, None)
    if header is None or [f.split(";")[0] for f in header.text.split("\t")] != list(FIELDS):
        raise InputError(path, 1, "not a TDF file: the first line must declare the 13 fields "
                                  f"{';'.join(FIELDS[:2])}... (got {header.text[:60] if header else ''!r})")
    for line in lines:
        if line.text.startswith(";;") or not line.text.strip():
            continue
        fields = line.text.split("\t")
        if len(fields) != len(FIELDS):
            yield None, Text(normalize(line.text), path, line.no, fault_of(line))
        else:
            yield fields[SEGMENT].strip(), Text(normalize(fields[TRANSCRIPT]), path, line.no,
                                                fault_of(line))


def read_pair(corpus: str, split: str, src_path: str, tgt_path: str, doc_id: str,
              limits: Limits) -> Iterator[Sentence | Rejected]:
    src, tgt = list(segments(src_path)), list(segments(tgt_path))
    bad = [t for sid, t in src + tgt if sid is None]
    for text in bad:
        yield from reject_sides(corpus, [text], doc_id, IngestReason.FIELD_COUNT)
    src = [(sid, t) for sid, t in src if sid is not None]
    tgt = [(sid, t) for sid, t in tgt if sid is not None]
    if len(src) != len(tgt):
        yield from reject_all(corpus, [Segment(t) for _, t in src], doc_id,
                              IngestReason.SEG_COUNT_MISMATCH)
        yield from reject_sides(corpus, [t for _, t in tgt], doc_id, IngestReason.SEG_COUNT_MISMATCH)
        return
    kept: list[Segment] = []
    for (sid, s), (tid, t) in zip(src, tgt):
        if sid != tid:
            yield reject(corpus, Segment(s, [t]), doc_id, IngestReason.SEG_ID_MISMATCH)
        else:
            kept.append(Segment(s, [t]))
    yield from emit_document(corpus, split, doc_id, kept, limits)


def doc_ids(paths: list[str]) -> dict[str, str]:
    """Document id of each file: its stem, or, where several of ``paths`` share it, its path
    relative to the folder that holds them (``identity.relative_names``), without ``.eng.tdf`` /
    ``.tdf``. Unique by construction, where the stem is not: ``p1/source/CNR_001.tdf`` and
    ``p2/source/CNR_001.tdf`` are two documents."""
    return {p: str(Path(rel).with_name(stem(p))) for p, rel in relative_names(paths, stem).items()}


def pair_files(sources: list[str], translations: list[str]) -> tuple[list[tuple[str, str | None]],
                                                                       list[str]]:
    """``(source, its translation or None)`` in source order, and the translations left over.

    Files pair by stem. Where a stem is not unique (several releases in one split), a source
    pairs with the translation of its own release, the folder two levels up (LDC's
    ``<release>/data/source/X.tdf`` and ``<release>/data/translation/X.eng.tdf``); files that
    still do not pair one to one are left unpaired (quarantined), never overwritten."""
    by_stem: dict[str, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for side, paths in enumerate((sources, translations)):
        for p in paths:
            by_stem[stem(p)][side].append(p)
    release = lambda p: Path(p).resolve().parent.parent
    mate: dict[str, str] = {}
    for srcs, tgts in by_stem.values():
        if len(srcs) == 1 and len(tgts) == 1:
            mate[srcs[0]] = tgts[0]
            continue
        for s in srcs:
            same = [t for t in tgts if release(t) == release(s)]
            if len(same) == 1 and [x for x in srcs if release(x) == release(s)] == [s]:
                mate[s] = same[0]
    used = set(mate.values())
    return [(s, mate.get(s)) for s in sources], [t for t in translations if t not in used]


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Each file pair a document; one whose content an earlier file of the split holds (a file
    shipped twice under two names) is quarantined (``identity.unique_documents``)."""
    yield from unique_documents(corpus, _read(corpus, spec, limits))


def _read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS, REQUIRED, PARALLEL):
        sources, translations = expand(sub["src"]), expand(sub["tgt"])
        src_ids, tgt_ids = doc_ids(sources), doc_ids(translations)
        paired, orphans = pair_files(sources, translations)
        for src_path, tgt_path in paired:
            if tgt_path is not None:
                yield from read_pair(corpus, split, src_path, tgt_path, src_ids[src_path], limits)
            else:
                segs = [Segment(t) for sid, t in segments(src_path)]
                yield from reject_all(corpus, segs, src_ids[src_path], IngestReason.MISSING_REFERENCE)
        for tgt_path in sorted(orphans, key=tgt_ids.get):
            texts = [t for _, t in segments(tgt_path)]
            yield from reject_sides(corpus, texts, tgt_ids[tgt_path],
                                    IngestReason.REFERENCE_WITHOUT_SOURCE)

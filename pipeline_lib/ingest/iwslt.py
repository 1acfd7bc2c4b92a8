"""Reader ``iwslt``: IWSLT / WIT3 TED talks, training ``train.tags`` files and dev/test ``.xml``.

Spec keys (``corpora.<name>``)::

    reader: iwslt
    splits:
      train:
        src: en-de/train.tags.en-de.en
        tgt: en-de/train.tags.en-de.de
      dev:
        src: en-de/IWSLT17.TED.dev2010.en-de.en.xml
        tgt: en-de/IWSLT17.TED.dev2010.en-de.de.xml
      test:
        src: [en-de/IWSLT17.TED.tst2014.en-de.en.xml, en-de/IWSLT17.TED.tst2015.en-de.en.xml]
        tgt: [en-de/IWSLT17.TED.tst2014.en-de.de.xml, en-de/IWSLT17.TED.tst2015.en-de.de.xml]

``src`` / ``tgt`` are a path or equal-length lists of paths paired in order (several test years
make one split). A file whose name ends in ``.xml`` is read as SGML (``<doc docid=..>`` with
``<seg id=..>``, through ``markup``, the same code as reader ``sgml``); any other file as
``train.tags``: one talk is one document, starting at ``<doc ...>`` or ``<url>``; the header
lines (``<url> <keywords> <speaker> <talkid> <title> <description> <reviewer> <translator>``)
are metadata, never segments; every other line is a segment, aligned line by line with the
other language's file. Talks pair by ``<talkid>`` (by position where a file has none); a talk
present on one side only, or whose sides differ in line count, is quarantined whole (both sides,
each line at its own file and line), and so is a later talk repeating an id on either side
(``duplicate_doc_id``: the first one pairs). Character references are decoded as in ``markup``. Document ids are the talk ids (as in the ``.xml`` files'
``docid``), ``<file name>#<ordinal>`` where a file has none (see ``identity.relative_names``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.ingest import InputError, Limits, SpecError
from pipeline_lib.ingest.identity import relative_names, unique_documents
from pipeline_lib.ingest.lines import (PATHS, Segment, Text, as_list, emit_document, fault_of,
                                       normalize, read_lines, reject_all, reject_sides, splits)
from pipeline_lib.ingest.markup import align, read_docs, reference_fault, unescape
from pipeline_lib.tables import Rejected, Sentence

HEADER = re.compile(r"^\s*<(/?)(doc|url|keywords|speaker|talkid|title|description|reviewer|"
                    r"translator)\b[^>]*>(.*?)(?:</\2>)?\s*$", re.IGNORECASE)
TALK_START = {"doc", "url"}
KEYS, REQUIRED = {"src": PATHS, "tgt": PATHS}, ("src", "tgt")


@dataclass
class Talk:
    key: str                  # <talkid>, else "#<ordinal>"; also the document id
    segs: list[Segment] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # header tags met so far


def _pairs(sub: dict) -> list[tuple[str, str]]:
    src, tgt = as_list(sub["src"]), as_list(sub.get("tgt"))
    if len(src) != len(tgt):
        raise SpecError(f"iwslt needs as many `tgt` files as `src` files, got {src} / {tgt}")
    return list(zip(src, tgt))


def input_files(spec: dict) -> list[str]:
    return [f for _, sub in splits(spec, KEYS, REQUIRED) for pair in _pairs(sub) for f in pair]


def read_talks(path: str) -> list[Talk]:
    """Talks of a ``train.tags`` file; a new talk begins at the first header after text lines."""
    talks: list[Talk] = []
    for line in read_lines(path):
        m = HEADER.match(line.text)
        if m is None:
            if not talks:
                raise InputError(path, line.no, "text before the first talk header (<url> or <doc>)")
            fault = fault_of(line) or reference_fault(line.text, line.no)
            talks[-1].segs.append(Segment(Text(normalize(unescape(line.text)), path, line.no,
                                               fault)))
            continue
        closing, tag, value = m.group(1), m.group(2).lower(), m.group(3).strip()
        if closing:
            continue
        starts = not talks or talks[-1].segs or (tag in TALK_START and tag in talks[-1].seen)
        if starts:
            talks.append(Talk(f"#{len(talks)}"))
        talks[-1].seen.add(tag)
        if tag == "talkid" and value:
            talks[-1].key = value
    return talks


def read_tags(corpus: str, split: str, src: str, tgt: str, limits: Limits,
              label: str = "") -> Iterator[Sentence | Rejected]:
    """Talks of one file pair; ``label`` names the source file in the ids of talks without a
    talk id (``<label>#<ordinal>``), so that two files' first talks are two documents."""
    src_talks, tgt_talks = read_talks(src), read_talks(tgt)
    ident = lambda talk: f"{label}{talk.key}" if talk.key.startswith("#") else talk.key
    by_key: dict[str, Talk] = {}
    for t in tgt_talks:  # the first talk of an id pairs; a later one is a duplicate
        by_key.setdefault(t.key, t)
    used: set[str] = set()
    for talk in src_talks:
        doc_id = ident(talk)
        other = by_key.get(talk.key)
        if other is None or talk.key in used:
            reason = IngestReason.MISSING_REFERENCE if other is None else IngestReason.DUPLICATE_DOC_ID
            yield from reject_all(corpus, talk.segs, doc_id, reason)
            continue
        used.add(talk.key)
        if len(other.segs) != len(talk.segs):
            yield from reject_all(corpus, talk.segs, doc_id, IngestReason.SEG_COUNT_MISMATCH)
            yield from reject_sides(corpus, [s.src for s in other.segs], doc_id,
                                    IngestReason.SEG_COUNT_MISMATCH)
            continue
        for seg, ref in zip(talk.segs, other.segs):
            seg.tgt = [ref.src]
        yield from emit_document(corpus, split, doc_id, talk.segs, limits)
    for talk in tgt_talks:
        if talk.key not in used:
            yield from reject_all(corpus, talk.segs, ident(talk),
                                  IngestReason.REFERENCE_WITHOUT_SOURCE)
        elif by_key[talk.key] is not talk:  # a second talk with that id in the target file
            yield from reject_all(corpus, talk.segs, ident(talk), IngestReason.DUPLICATE_DOC_ID)


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Each file pair's documents; a talk that an earlier file pair of the split already holds
    (one talk in two test years, a year listed under two names) is quarantined
    (``identity.unique_documents``): each pair is aligned on its own and cannot see it."""
    yield from unique_documents(corpus, _read(corpus, spec, limits))


def _read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS, REQUIRED):
        pairs = _pairs(sub)
        labels = relative_names([src for src, _ in pairs])
        for src, tgt in pairs:
            if src.endswith(".xml"):
                yield from align(corpus, split, read_docs(src), [read_docs(tgt)], limits)
            else:
                yield from read_tags(corpus, split, src, tgt, limits, labels[src])

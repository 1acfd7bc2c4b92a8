"""Identity across files: a file is read once per corpus entry, and a document id names one
document.

Readers pair documents and number segments within a file, and take a document's id from the
file (its docid, talk id, or name). Listed twice, a file is read twice: its documents come out
twice (an IWSLT test set doubled, so BLEU counts each sentence twice) or a reference set twice
(two identical references per segment), each copy passing every per-file check. So the files of
an entry's splits are compared before anything is read, by their real path (``./a`` and ``a``,
a glob and the file it matches, are one file), and a repeat is a ``SpecError`` naming both
places. The parts of a ``union`` are compared by document content instead (see ``union``): two
releases may ship one document, and that is a quarantined document, not an unusable entry.

Document ids that readers build from files (``ldc_sent``, ``aspec``, ``gale_tdf``) come from
``relative_names``, distinct for distinct files by construction. A document that repeats an
earlier one of its split from another file, by id or by content, is quarantined by
``unique_documents`` (readers of several files per split and of documents: ``iwslt``,
``gale_tdf``, ``ldc_doc``), with ``duplicate_doc_id`` or ``duplicate_doc_content``.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections import defaultdict
from typing import Iterator

from pipeline_lib.ingest import SpecError
from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.tables import Rejected, Sentence

STAGE = "ingest"   # as lines.STAGE (lines imports this module)


def _paths(value: object, place: str) -> list[tuple[str, str]]:
    """``(place, path)`` for each path of a split key's value (a path, a list, a list of lists);
    ``place`` is ``splits.<split>.<key>`` with ``[i]`` per list level."""
    if isinstance(value, str):
        return [(place, value)] if value else []
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths(v, f"{place}[{i}]")]
    return []


def matching_files(pattern: str) -> list[str]:
    """The files a configured path names: itself when it exists (a literal ``[`` or ``*`` in a
    real name, e.g. ``talks[2019].en``, is not read as a glob), else the files it matches as a
    glob, sorted. Empty when nothing matches."""
    if os.path.exists(pattern) or not glob.has_magic(pattern):
        return [pattern]
    return sorted(glob.glob(pattern))


def no_match_reason(pattern: str) -> str:
    """Why a glob matches no file, where the file system can say: its folder is one this user
    may not read (a listing then looks empty), or a ``[...]`` in it was a set, not text."""
    folder = os.path.dirname(pattern) or "."
    if not glob.has_magic(folder) and os.path.isdir(folder) and not os.access(
            folder, os.R_OK | os.X_OK):
        return f"glob matches no file: permission denied reading the folder {folder}"
    if "[" in pattern:
        return ("glob matches no file ([...] matches one character of a set; a literal [ is "
                "written [[])")
    return "glob matches no file"


def distinct_files(split_specs: dict, path_keys: set[str]) -> None:
    """Refuse a file that two places of ``split_specs`` (``spec["splits"]``) name, whether in
    one split or in two; ``path_keys`` are the keys that hold paths. A glob stands for the files
    it matches (one that matches none is left to the reader, which names it)."""
    first: dict[str, str] = {}
    for split, sub in split_specs.items():
        if not isinstance(sub, dict):
            continue
        for key in sorted(k for k in sub if k in path_keys):
            for place, pattern in _paths(sub[key], f"splits.{split}.{key}"):
                for path in matching_files(pattern):
                    real = os.path.realpath(path)
                    where = place if path == pattern else f"{place} ({pattern})"
                    if real in first:
                        raise SpecError(f"{path} is listed twice, at {first[real]} and {where}: "
                                        "a file is read once per corpus (a repeat would double "
                                        "its documents or its references)")
                    first[real] = where


def relative_names(paths: list[str], name=os.path.basename) -> dict[str, str]:
    """A name for each file, for the document ids a reader builds from files: its ``name``
    (default the base name) where no other of ``paths`` has it, else its path relative to the
    folder that holds all files of that name (``p1/source/a.tdf``, ``p2/source/a.tdf``).
    Distinct by construction, unlike base names, and still the plain name in the usual case,
    where it does not depend on where the release lies."""
    groups: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        groups[name(p)].append(p)
    out: dict[str, str] = {}
    for same in groups.values():
        if len(same) == 1:
            out[same[0]] = os.path.basename(same[0])
            continue
        full = [os.path.abspath(p) for p in same]
        root = os.path.commonpath([os.path.dirname(f) for f in full])
        out.update({p: os.path.relpath(f, root) for p, f in zip(same, full)})
    return out


def content_key(split: str, pairs: list[tuple[str, tuple[str, ...]]]) -> tuple[str, str]:
    """What identifies a document's content within its split: a hash of its segments in order
    (source and references), so that a document shipped in two files is found whatever id each
    file gives it."""
    h = hashlib.sha256()
    for src, tgt in pairs:
        h.update("\x1f".join([src, *tgt]).encode() + b"\x1e")
    return split, h.hexdigest()


def documents(items: Iterator[Sentence | Rejected]) -> Iterator[list[Sentence] | Rejected]:
    """A reader's rows as whole documents (the contiguous rows of one split and doc_id: the
    schema's order), one held at a time; quarantined rows pass through as they come."""
    doc: list[Sentence] = []
    for item in items:
        if isinstance(item, Rejected):
            yield item
            continue
        if doc and (item.split, item.doc_id) != (doc[0].split, doc[0].doc_id):
            yield doc
            doc = []
        doc.append(item)
    if doc:
        yield doc


def document_key(doc: list[Sentence]) -> tuple[str, str]:
    """:func:`content_key` of a document's rows."""
    return content_key(doc[0].split, [(s.src, tuple(s.tgt or ())) for s in doc])


def quarantined(corpus: str, doc: list[Sentence], reason: IngestReason) -> Iterator[Rejected]:
    """Every row of ``doc``, quarantined with ``reason``."""
    for s in doc:
        yield Rejected(STAGE, corpus, s.origin_file, s.origin_line, s.doc_id, reason.value,
                       " ||| ".join([s.src, *(s.tgt or [])]))


def unique_documents(corpus: str, items: Iterator[Sentence | Rejected]) -> Iterator[Sentence | Rejected]:
    """A reader's rows, with a document that repeats an earlier one of its split from another
    file quarantined: by id (``duplicate_doc_id``: two IWSLT test years with one talk, which
    each file's own check cannot see) or by content (``duplicate_doc_content``: the same
    document under another name or id). Quarantined rows pass straight through."""
    ids: set[tuple[str, str]] = set()
    contents: dict[tuple[str, str], str] = {}   # content key -> the file that had it first
    for doc in documents(items):
        if isinstance(doc, Rejected):
            yield doc
            continue
        first, key = doc[0], document_key(doc)
        if (first.split, first.doc_id) in ids:
            yield from quarantined(corpus, doc, IngestReason.DUPLICATE_DOC_ID)
        elif contents.get(key, first.origin_file) != first.origin_file:
            yield from quarantined(corpus, doc, IngestReason.DUPLICATE_DOC_CONTENT)
        else:
            ids.add((first.split, first.doc_id))
            contents.setdefault(key, first.origin_file)
            yield from doc

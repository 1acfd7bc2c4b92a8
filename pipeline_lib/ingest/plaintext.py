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

With ``docids`` the three files must have the same number of lines (else ``InputError`` naming
every file and its count: no line can be trusted to pair) and a document is a run of equal ids;
an id that comes back after another document is quarantined (``doc_id_not_contiguous``). With
separators (Maruf et al. 2019 put a ``<d>`` line between documents) each side is cut into
documents independently; the sides must have the same number of documents, and a document whose
sides differ in line count is quarantined whole, the lines of both sides. Files without any
separator are one document each: if their line counts differ nothing can realign them, so that
is an ``InputError`` naming both files and both counts rather than a corpus quarantined whole.
Separator-delimited documents get ids ``<src file name>#<ordinal>``. ``docids`` and
``doc_separator`` exclude each other (the separator would be ignored). A blank line is one that
holds nothing but spaces and tabs: a line of no-break spaces or zero-width characters is a
segment (empty, so quarantined), not a document boundary that would misalign the sides. A line
``<d>`` (Maruf et al.'s separator) in a file read with another separator, or with ``docids``,
is an ``InputError`` saying to set ``doc_separator: "<d>"``: read as text it would pair
separators as sentences.
"""

from __future__ import annotations

from itertools import groupby, zip_longest
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.ingest import InputError, Limits, SpecError
from pipeline_lib.ingest.lines import (PATH, TEXT, Line, Segment, diagnose, emit_document,
                                       file_label, read_lines, reject, reject_all,
                                       reject_sides, splits, text_of)
from pipeline_lib.tables import Rejected, Sentence

KEYS, REQUIRED = {"src": PATH, "tgt": PATH, "docids": PATH, "doc_separator": TEXT}, ("src", "tgt")


def _splits(spec: dict) -> Iterator[tuple[str, dict]]:
    for split, sub in splits(spec, KEYS, REQUIRED):
        if "docids" in sub and "doc_separator" in sub:
            raise SpecError(f"split {split!r}: `docids` and `doc_separator` exclude each other")
        yield split, sub


def input_files(spec: dict) -> list[str]:
    return [sub[k] for _, sub in _splits(spec) for k in ("src", "tgt", "docids") if sub.get(k)]


KNOWN_SEPARATORS = ("<d>",)


def bare(line: Line) -> str:
    """A line as a separator is compared: without the spaces and tabs around it."""
    return line.text.strip(" \t")


def refuse_separator(line: Line, path: str, separator: str | None) -> None:
    """A known document separator read as text (see the module docstring)."""
    if (text := bare(line)) in KNOWN_SEPARATORS and text != separator:
        how = f"doc_separator is {separator!r}" if separator is not None else "docids are given"
        raise InputError(path, line.no, f"the line {text!r} is a document separator (Maruf et "
                                        f"al. 2019), but {how}: set doc_separator: {text!r}")


#: blank lines in a file whose configured separator never occurs that make it an error: the
#: file separates its documents by blank lines (fewer may be stray lines of one document)
BLANK_SEPARATED = 2


def blank_separated(separator: str, seen: bool, blanks: int, text: int) -> bool:
    """Whether a file cut at ``separator`` (seen on some line or not) with ``blanks`` blank and
    ``text`` other lines separates its documents by blank lines instead (ingest and translate
    refuse it alike; a file of blank lines alone separates nothing)."""
    return bool(separator) and not seen and blanks >= BLANK_SEPARATED and text > 0


def documents(path: str, separator: str) -> Iterator[list[Line]]:
    """Lines of a file cut at separator lines (separators dropped, empty documents skipped).
    A separator other than the blank line that occurs nowhere in a file with blank lines
    (``BLANK_SEPARATED`` or more) is an ``InputError`` at the file's end (nothing is written):
    read so, its documents would merge into one and the blank lines be quarantined as empty
    segments, and a context model would train across document boundaries (issue 36)."""
    doc: list[Line] = []
    seen, blanks, text = False, [], 0
    for line in read_lines(path):
        refuse_separator(line, path, separator)
        if bare(line) == separator:
            seen = True
            if doc:
                yield doc
            doc = []
        else:
            if bare(line):
                text += 1
            else:
                blanks.append(line.no)
            doc.append(line)
    if blank_separated(separator, seen, len(blanks), text):
        raise InputError(path, blanks[0], f"doc_separator is {separator!r}, which occurs on no "
                                          f"line, but the file has {len(blanks)} blank lines: "
                                          "its documents are separated by blank lines; set "
                                          "doc_separator: \"\" (a blank line)")
    if doc:
        yield doc


def segment(line: Line, path: str, tgt: Line | None = None, tgt_path: str = "") -> Segment:
    """A record from a source line and, where parallel, its target line (each keeps its file)."""
    return Segment(text_of(line, path), None if tgt is None else [text_of(tgt, tgt_path)])


def read_separated(corpus: str, split: str, sub: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Documents cut at separator lines, streamed; ``tgt`` optional (``mono_text`` reuses this)."""
    sep = sub.get("doc_separator", "").strip()
    src_path, tgt_path = sub["src"], sub.get("tgt")
    src_docs = documents(src_path, sep)
    pairs = (zip_longest(src_docs, documents(tgt_path, sep)) if tgt_path
             else ((doc, None) for doc in src_docs))
    held = None  # a first document whose sides differ, until we know whether another follows
    uneven = None  # where the first document whose sides differ in length starts (both sides)
    k = -1
    for k, (src, tgt) in enumerate(pairs):
        if src is None or (tgt_path and tgt is None):
            short, other = (src_path, tgt_path) if src is None else (tgt_path, src_path)
            where = (f"; the first document whose sides differ in length starts at "
                     f"{src_path}:{uneven[0]} and {tgt_path}:{uneven[1]}" if uneven else "")
            raise InputError(short, uneven[0 if short == src_path else 1] if uneven else None,
                             f"has {k} documents but {other} has more: separators do not line "
                             f"up{where}")
        if held is not None:
            yield from held[0]
            held = None
        doc_id = f"{file_label(src_path)}#{k:06d}"
        if tgt is not None and len(src) != len(tgt):
            uneven = uneven or (src[0].no, tgt[0].no)
            unpaired = _unpaired(corpus, doc_id, src, src_path, tgt, tgt_path)
            if k == 0:
                held = (unpaired, len(src), len(tgt))
            else:
                yield from unpaired
            continue
        segs = [segment(s, src_path, t, tgt_path or "") for s, t in zip_longest(src, tgt or [])]
        yield from emit_document(corpus, split, doc_id, segs, limits)
    if held is not None and k == 0:
        _, n_src, n_tgt = held
        raise InputError(src_path, None, f"has {n_src} lines but {tgt_path} has {n_tgt}, and "
                                         f"neither has a document separator ({sep!r}) to realign "
                                         "them: the files must be line-aligned"
                                         + side_diagnoses(src_path, tgt_path))


def side_diagnoses(*paths: str) -> str:
    """What is wrong with a side whose line count differs, where its bytes tell (compressed,
    zero-filled, another or mixed encodings: ``lines.diagnose``), so a gzip side is called that,
    as it is when read alone; "" when neither side looks wrong."""
    found = [f"{p}: {d}" for p in paths if not (d := diagnose(p)).startswith("its bytes look")]
    return "; " + "; ".join(found) if found else ""


def _unpaired(corpus: str, doc_id: str, src: list[Line], src_path: str, tgt: list[Line],
              tgt_path: str) -> list[Rejected]:
    """A document whose sides differ in length: every line of both sides, quarantined."""
    reason = IngestReason.SEG_COUNT_MISMATCH
    return [*reject_all(corpus, [segment(line, src_path) for line in src], doc_id, reason),
            *reject_sides(corpus, [text_of(line, tgt_path) for line in tgt], doc_id, reason)]


def read_aligned(*paths: str) -> Iterator[tuple[Line, ...]]:
    """Line-aligned files read side by side, streamed; files of different lengths are an error
    naming every file and its line count (counted to the end, since the error stops the run)."""
    last = [0] * len(paths)
    uneven = False
    for row in zip_longest(*(read_lines(p) for p in paths)):
        for i, line in enumerate(row):
            if line is not None:
                last[i] = line.no
                if i < 2:  # the text files (a docids file holds ids)
                    refuse_separator(line, paths[i], None)
        if None in row:
            uneven = True
        elif not uneven:
            yield row
    if uneven:
        counts = ", ".join(f"{p} has {n}" for p, n in zip(paths, last))
        raise InputError(paths[last.index(min(last))], None,
                         f"line counts differ ({counts}): the files must be line-aligned")


def read_docids(corpus: str, split: str, sub: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    seen: set[str] = set()
    rows = read_aligned(sub["src"], sub["tgt"], sub["docids"])
    for doc_id, group in groupby(rows, key=lambda r: r[2].text.strip()):
        group = list(group)
        segs = [segment(s, sub["src"], t, sub["tgt"]) for s, t, _ in group]
        if (fault := group[0][2].fault) is not None:  # the id itself is unreadable
            for seg, (_, _, id_line) in zip(segs, group):
                yield reject(corpus, seg, doc_id, fault, sub["docids"], id_line.no)
        elif doc_id in seen:
            yield from reject_all(corpus, segs, doc_id, IngestReason.DOC_NOT_CONTIGUOUS)
        elif not doc_id:
            yield from reject_all(corpus, segs, doc_id, IngestReason.MISSING_DOC_ID)
        else:
            seen.add(doc_id)
            yield from emit_document(corpus, split, doc_id, segs, limits)


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in _splits(spec):
        if sub.get("docids"):
            yield from read_docids(corpus, split, sub, limits)
        else:
            yield from read_separated(corpus, split, sub, limits)

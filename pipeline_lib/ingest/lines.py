"""What every corpus reader shares: decoding lines, checking segments, emitting rows.

Readers decode line by line rather than whole files so that one undecodable byte costs one
record (quarantined as ``undecodable_bytes`` with its line number), not the whole corpus, and so
that every kept row can name the file and line it came from.
"""

from __future__ import annotations

import glob
import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

from pipeline_lib.constants import IngestReason, Split
from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.schema import Rejected, Sentence

STAGE = "ingest"


@dataclass(frozen=True)
class Line:
    """One decoded line; ``bad`` marks undecodable bytes (replaced by U+FFFD in ``text``)."""

    no: int
    text: str
    bad: bool = False


def _open(path: str) -> IO[bytes]:
    """Binary handle; ``.gz`` files (how Gigaword and LDC ship) are decompressed on the fly."""
    try:
        return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    except OSError as e:
        raise InputError(path, None, f"cannot open: {e.strerror or e}") from None


def read_lines(path: str) -> Iterator[Line]:
    """Lines of a UTF-8 file without their line ends, 1-based numbers, BOM dropped."""
    with _open(path) as f:
        try:
            for no, raw in enumerate(f, 1):
                raw = raw.rstrip(b"\r\n")
                if no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    yield Line(no, raw.decode("utf-8"))
                except UnicodeDecodeError:
                    yield Line(no, raw.decode("utf-8", errors="replace"), bad=True)
        except (OSError, EOFError) as e:  # truncated or corrupt .gz
            raise InputError(path, None, f"cannot read: {e}") from None


def expand(pattern: str | list[str]) -> list[str]:
    """Files named by a path, a glob, or a list of them, in a stable (sorted per glob) order.

    A pattern that matches nothing is an error: a typo in config must not read as an empty corpus.
    """
    files: list[str] = []
    for p in [pattern] if isinstance(pattern, str) else pattern:
        matched = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not matched:
            raise InputError(p, None, "glob matches no file")
        files.extend(matched)
    return files


def as_list(value: str | list | None) -> list:
    """Spec values that may be one item or a list of items."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def splits(spec: dict, keys: set[str], required: tuple[str, ...] = ("src",),
           allowed: Iterable[Split] = tuple(Split)) -> Iterator[tuple[str, dict]]:
    """``(split, split_spec)`` pairs of ``spec["splits"]``, checked before any file is read.

    Unknown split names and keys are refused rather than ignored: a misspelt ``docids`` would
    otherwise silently fall back to blank-line documents.
    """
    names = {s.value for s in allowed}
    reader = spec.get("reader")
    if not spec.get("splits"):
        raise ValueError(f"reader {reader!r} needs a non-empty `splits` mapping")
    for name, sub in spec["splits"].items():
        if name not in names:
            raise ValueError(f"split {name!r} is not one of {sorted(names)} for reader {reader!r}")
        if not isinstance(sub, dict):
            raise ValueError(f"split {name!r} of reader {reader!r} must be a mapping")
        if unknown := sorted(set(sub) - keys):
            raise ValueError(f"split {name!r}: reader {reader!r} has no key(s) {unknown}; "
                             f"known: {sorted(keys)}")
        if missing := [k for k in required if not sub.get(k)]:
            raise ValueError(f"split {name!r}: reader {reader!r} needs {missing}")
        yield name, sub


def normalize(text: str) -> str:
    """Collapse whitespace (segments spanning lines, tabs, padding inside ``<seg>``)."""
    return " ".join(text.split())


def problem(texts: Iterable[str], bad: bool, limits: Limits) -> IngestReason | None:
    """The first reason a segment (source and target sides together) cannot be kept."""
    if bad:
        return IngestReason.UNDECODABLE
    texts = list(texts)
    if any(not t for t in texts):
        return IngestReason.EMPTY
    if any(len(t) > limits.max_line_chars for t in texts):
        return IngestReason.TOO_LONG
    return None


@dataclass
class Segment:
    """One input record before it becomes a row: both sides plus provenance and flags."""

    src: str
    tgt: list[str] | None
    file: str
    line: int
    bad: bool = False


def emit_document(corpus: str, split: str, doc_id: str, segments: list[Segment], limits: Limits,
                  has_context: bool = True) -> Iterator[Sentence | Rejected]:
    """Rows of one document: bad segments quarantined, the rest numbered 0.. in order.

    ``sent_idx`` counts kept sentences only, so later stages see a gap-free document; the gap is
    still visible through ``origin_line`` and the quarantine file.
    """
    idx = 0
    for seg in segments:
        reason = problem([seg.src, *(seg.tgt or [])], seg.bad, limits)
        if reason is not None:
            yield reject(corpus, seg, doc_id, reason)
            continue
        yield Sentence(corpus, split, doc_id, idx, seg.src, seg.tgt, has_context, seg.file, seg.line)
        idx += 1


def reject(corpus: str, seg: Segment, doc_id: str, reason: IngestReason) -> Rejected:
    record = seg.src if not seg.tgt else seg.src + " ||| " + " ||| ".join(seg.tgt)
    return Rejected(STAGE, corpus, seg.file, seg.line, doc_id, reason.value, record)


def reject_all(corpus: str, segments: Iterable[Segment], doc_id: str,
               reason: IngestReason) -> Iterator[Rejected]:
    """Quarantine a whole document, one row per record so that counts still add up."""
    for seg in segments:
        yield reject(corpus, seg, doc_id, reason)


def file_label(path: str) -> str:
    """Stable short name used in synthesized document ids."""
    return Path(path).name

"""What every corpus reader shares: decoding lines, checking segments, emitting rows.

Readers decode line by line rather than whole files so that one undecodable byte costs one
record (quarantined as ``undecodable_bytes`` with its line number), not the whole corpus, and so
that every kept row can name the file and line it came from. What decoding checks:

* a file in UTF-16 or UTF-32 (a byte-order mark, or NUL bytes in a UTF-16/32 pattern) is an
  ``InputError`` naming the encoding it looks like: read as UTF-8 it would give NUL-interleaved
  text that no check below would catch;
* a UTF-8 byte-order mark opening the file is dropped; one after that (two files concatenated)
  is removed too and counted (``IngestRepair.STRAY_BOM``, manifest ``repaired``);
* a line with bytes that are not UTF-8 is ``undecodable_bytes``; a line with a control
  character (C0 other than tab: NUL, ESC, a CR that is not part of the line end; DEL; C1, e.g.
  U+009B, the trace of text decoded twice) is ``control_character``. Both are quarantined with
  the file and line where the bytes are, even when that is the target side of a pair;
* a file whose first bytes hold a CR and no line feed has classic Mac line ends: read as one
  line it could not pair, so it is an ``InputError`` saying how to convert it;
* a line longer than ``MAX_LINE_BYTES`` is never held whole (a small ``.gz`` can expand to one
  line of gigabytes): its start is kept for the quarantine record (``too_long``), the rest is
  skipped.

A file that is mostly quarantined is not a corpus with some bad lines but the wrong file, or the
right one read wrongly (an ``.xz`` given as text, UTF-8 read as GB18030): its few "good" lines are
fragments of binary or mojibake. ``read_lines`` counts the non-blank lines of each file and
``check_files`` (called by ``python -m pipeline_lib.ingest`` after each read) makes a file whose
quarantined share passes ``ingest.max_quarantined_share``, or, keeping fewer than
``MIN_GOOD_LINES`` lines, loses more than it keeps, an ``InputError`` saying what the bytes look
like (``diagnose``); so does a file read as one sentence per line with a tab between text in
most lines (a TSV release given as one side: it loses no line, every source keeps the other
language). A file of NUL bytes (preallocated, never written) is said to be that, not UTF-32.

Invisible characters that carry no text (zero-width space, word joiner, bidi embeddings,
overrides, isolates and marks) are removed when a side is normalised and counted
(``IngestRepair.INVISIBLE``); a line holding nothing else is then empty. Zero-width (non-)joiners
stay: Persian and Indic spelling needs them.
"""

from __future__ import annotations

import codecs
import gzip
import logging
import os
import re
import stat
import zlib
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

from pipeline_lib.ingest.reasons import IngestReason, IngestRepair
from pipeline_lib.tables import Split
from pipeline_lib.ingest import InputError, Limits, SpecError
from pipeline_lib.ingest.identity import distinct_files, matching_files, no_match_reason
from pipeline_lib.tables import Rejected, Sentence

STAGE = "ingest"
log = logging.getLogger("ingest")

UTF8_BOM = b"\xef\xbb\xbf"
# C0 controls except tab and line feed (line feed only reaches a text through &#10;, as
# whitespace), DEL and the C1 controls
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# zero-width space, word joiner, zero-width no-break space, LRM/RLM/ALM, bidi embeddings and
# overrides (U+202A-E), isolates (U+2066-9)
INVISIBLE = dict.fromkeys([0x200B, 0x2060, 0xFEFF, 0x200E, 0x200F, 0x061C,
                           *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
SNIFF_BYTES = 4096
MAX_LINE_BYTES = 1 << 20   # longer lines are too_long whatever ingest.max_line_chars says
RECORD_CHARS = 500         # what a quarantine record keeps of an overlong line
_WIDE_BOMS = [(b"\x00\x00\xfe\xff", "UTF-32-BE"), (b"\xff\xfe\x00\x00", "UTF-32-LE"),
              (b"\xfe\xff", "UTF-16-BE"), (b"\xff\xfe", "UTF-16-LE")]


@dataclass(frozen=True)
class Line:
    """One decoded line; ``fault`` says why its bytes cannot be trusted (``text`` then holds
    U+FFFD for undecodable bytes)."""

    no: int
    text: str
    fault: IngestReason | None = None


def wide_encoding(head: bytes) -> str | None:
    """The UTF-16/32 variant a file's first bytes look like, with the evidence; None for UTF-8.

    A NUL byte in UTF-8 text is a fault of one line; NULs in an eighth of the bytes are not text
    at all. Their position then tells the encoding: ASCII in UTF-16-LE is ``A\\0``, in
    UTF-32-BE ``\\0\\0\\0A``.
    """
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom):
            return f"{name} (byte-order mark {bom.hex(' ').upper()})"
    n = len(head) - len(head) % 4
    if n == 0 or head.count(0, 0, n) * 8 < n:
        return None
    share = round(100 * head.count(0, 0, n) / n)
    zero = [head[i:n:4].count(0) / (n // 4) for i in range(4)]  # NUL share at each offset mod 4
    if zero[2] > 0.9 and zero[3] > 0.9:
        name = "UTF-32-LE"
    elif zero[0] > 0.9 and zero[1] > 0.9:
        name = "UTF-32-BE"
    elif zero[1] + zero[3] > 2 * (zero[0] + zero[2]):
        name = "UTF-16-LE"
    elif zero[0] + zero[2] > 2 * (zero[1] + zero[3]):
        name = "UTF-16-BE"
    else:
        return f"binary data ({share}% of the first {n} bytes are NUL)"
    return f"{name} ({share}% of the first {n} bytes are NUL)"


def check_encoding(path: str, head: bytes) -> None:
    """Refuse a file whose first bytes say it is not UTF-8 (see ``wide_encoding``); a file of
    NUL bytes only (preallocated, never written) is said to be that: it is not UTF-32 text."""
    if head and not head.strip(b"\0"):
        raise InputError(path, None, f"is zero-filled (the first {len(head)} bytes are all NUL): "
                                     "a preallocated or interrupted download? Fetch it again")
    if (looks := wide_encoding(head)) is not None:
        name = looks.split()[0]
        hint = f", e.g. iconv -f {name} -t UTF-8" if name.startswith("UTF") else ""
        raise InputError(path, None, f"looks like {looks}, not UTF-8: convert it first{hint}")


_repairs: ContextVar[Counter | None] = ContextVar("ingest_repairs", default=None)


@contextmanager
def counting_repairs() -> Iterator[Counter]:
    """Count what readers fix while the block runs (``IngestRepair`` values), for the manifest.

    A context variable rather than a return value because the fixes happen deep inside line
    decoding, which every reader shares and whose results are rows, not counts.
    """
    counter: Counter = Counter()
    token = _repairs.set(counter)
    try:
        yield counter
    finally:
        _repairs.reset(token)


def note_repair(repair: IngestRepair, n: int = 1) -> None:
    counter = _repairs.get()
    if counter is not None:
        counter[repair.value] += n


# below this many kept lines a share means little (1 bad line of 4 is 25 %): such a file stops
# only when it loses more lines than it keeps (an .xz read as text keeps a handful of fragments)
MIN_GOOD_LINES = 50
DIAGNOSE_BYTES = 1 << 16  # what ``diagnose`` looks at
# quarantined by choice (config), not for what the file holds: not counted by check_files
SET_ASIDE = {IngestReason.DOC_TYPE_EXCLUDED.value}
_MAGIC = [(re.compile(rb"\x1f\x8b"), "gzip", "gzip -d"),
          (re.compile(rb"\xfd7zXZ\x00"), "xz", "xz -d"),
          (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2", "bunzip2"),
          (re.compile(rb"\x28\xb5\x2f\xfd"), "zstd", "zstd -d"),
          (re.compile(rb"PK\x03\x04"), "zip", "unzip")]
# tried in this order when the bytes do not decode as the encoding read (ASCII-compatible only:
# UTF-16/32 are refused before, by check_encoding)
COMMON_ENCODINGS = ("utf-8", "gb18030", "big5", "shift_jis", "euc-kr", "cp1252")
_TSV = re.compile(r"\S\t+\S")
_TAG_LINE = re.compile(r"\s*</?[A-Za-z!?][^>]*>")


@dataclass
class _FileCount:
    encoding: str
    lines: int = 0     # non-blank lines read
    tabbed: int = 0    # lines without a fault in which a tab separates text


_files: ContextVar[dict[str, _FileCount] | None] = ContextVar("ingest_files", default=None)


@contextmanager
def counting_files() -> Iterator[dict[str, _FileCount]]:
    """Count the non-blank lines of each file ``read_lines`` reads while the block runs, for
    ``check_files``; a context variable for the reason ``counting_repairs`` gives."""
    counts: dict[str, _FileCount] = {}
    token = _files.set(counts)
    try:
        yield counts
    finally:
        _files.reset(token)


def _share(lines: list, match) -> float:
    return sum(1 for ln in lines if match(ln)) / max(len(lines), 1)


def _mixed_encodings(text: bytes, encoding: str) -> str | None:
    """Advice for text whose lines are partly ``encoding`` beyond ASCII and partly not (two
    sources concatenated): converting the whole file would corrupt the good lines, so the advice
    is to convert the others only. None when the lines are not of both kinds."""
    good = bad = 0
    other: str | None = None
    for line in text.splitlines():
        if line.isascii():
            continue
        try:
            line.decode(encoding)
            good += 1
        except UnicodeDecodeError:
            bad += 1
            other = other or next((e for e in COMMON_ENCODINGS if codecs.lookup(e).name
                                   != encoding and _decodes(line, e)), None)
    if not (good and bad):
        return None
    other_name = other or "another encoding"
    return (f"mixed encodings: of the lines of its first {len(text)} bytes beyond ASCII, {good} "
            f"are {encoding} and {bad} are not (they decode as {other_name}): converting the "
            "whole file would corrupt the good lines; convert only the others (keep each line "
            f"that decodes as {encoding}, re-encode the rest from {other_name}), or fix the "
            "source that added them")


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
        return True
    except UnicodeDecodeError:
        return False


def diagnose(path: str, encoding: str = "utf-8") -> str:
    """What a mostly quarantined file's first bytes look like: compressed (magic bytes), zero-
    filled, text in another encoding (the common ones that decode it), tab-separated columns, or
    markup; else that they look like none of these."""
    try:
        with open_input(path) as f:
            head = f.read(DIAGNOSE_BYTES)
    except (OSError, EOFError, zlib.error) as e:
        return f"cannot read it again: {e}"
    for magic, name, tool in _MAGIC:
        if m := magic.match(head):
            shown = head[:min(m.end(), 6)].hex(" ").upper()
            return (f"it is {name}-compressed (magic bytes {shown}): decompress it first, e.g. "
                    f"{tool} (only .gz files are read compressed)")
    if head.count(0) >= 0.9 * len(head):
        return (f"it is zero-filled ({head.count(0)} of its first {len(head)} bytes are NUL): a "
                "preallocated or interrupted download? Fetch it again")
    text = head[:head.rfind(b"\n") + 1] or head   # whole lines: no character cut in two
    read_as = codecs.lookup(encoding).name
    if mixed := _mixed_encodings(text, read_as):
        return mixed
    try:
        text.decode(read_as)
    except UnicodeDecodeError:   # stray bad bytes are not another encoding: name one that fits all
        fits = []
        for name in COMMON_ENCODINGS:
            if codecs.lookup(name).name == read_as:
                continue
            try:
                decoded = text.decode(name)
            except UnicodeDecodeError:
                continue
            if not CONTROL.search(decoded.replace("\r\n", "\n")):
                fits.append(name)
        if fits[:1] == ["utf-8"]:
            return (f"it is not {encoding} text but decodes as utf-8: read it as UTF-8 (leave "
                    "out its encoding key, e.g. src_encoding)")
        if fits:
            return (f"it is not {encoding} text but decodes as {fits[0]}: give the reader its "
                    f"encoding (e.g. src_encoding) or convert it, e.g. iconv -f {fits[0]} -t "
                    "UTF-8")
    decoded = text.decode(read_as, errors="replace")
    if decoded.count("\ufffd") + len(CONTROL.findall(decoded)) > 0.05 * len(decoded):
        return (f"it is not text in {encoding} nor in any of {', '.join(COMMON_ENCODINGS)}: "
                "binary data?")
    lines = [ln for ln in decoded.splitlines() if ln.strip()]
    if _share(lines, _TSV.search) > 0.5:
        return ("a tab separates text in most lines: columns of a tab-separated release? Give "
                "each column its own file (e.g. cut -f1 FILE, cut -f2 FILE)")
    if _share(lines, _TAG_LINE.match) > 0.5:
        return ("most lines are markup (<tag ...>): a reader for that format (sgml, wmt_xml, "
                "iwslt, mono_sgml)?")
    return "its bytes look like none of: compressed, zero-filled, another encoding, TSV, markup"


def check_files(quarantined: dict[str, Counter], max_share: float,
                sentence_files: Iterable[str] = ()) -> None:
    """Stop at a file read by ``read_lines`` (while ``counting_files`` runs) of which more than
    ``max_share`` of the non-blank lines were quarantined (``quarantined``: file -> reasons,
    ``SET_ASIDE`` left out), or which, keeping fewer than ``MIN_GOOD_LINES``, loses more lines
    than it keeps: kept, its few "good" lines would be fragments of binary or mojibake (module
    docstring). Of ``sentence_files`` (one sentence per line: plaintext, ldc_sent, mono_text),
    one with a tab between text in most lines is refused too: a TSV release given as one side
    loses no line, it keeps the other language inside every sentence."""
    sentence_files = set(sentence_files)
    counts = _files.get() or {}
    for path, count in counts.items():
        reasons = quarantined.get(path)
        bad = min(sum(reasons.values()), count.lines) if reasons else 0
        good = count.lines - bad
        if bad > (max_share * count.lines if good >= MIN_GOOD_LINES else good):
            why = (f"more than ingest.max_quarantined_share ({max_share:g})"
                   if good >= MIN_GOOD_LINES else f"more than the {good} kept")
            raise InputError(path, None, f"{bad} of its {count.lines} lines were quarantined "
                                         f"({dict(reasons.most_common(3))}), {why}: "
                                         f"{diagnose(path, count.encoding)}")
    for path, count in counts.items():
        if path in sentence_files and count.tabbed > count.lines / 2:
            raise InputError(path, None, f"{count.tabbed} of its {count.lines} lines hold a tab "
                                         f"between text, but it is read as one sentence per "
                                         f"line: {diagnose(path, count.encoding)}")


_KINDS = [(stat.S_ISFIFO, "a named pipe (FIFO): reading it would wait for a writer for ever"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device")]


def check_input(path: str, folders: bool = True) -> None:
    """Refuse an input that is not a readable regular file (or folder, where ``folders``) before
    anything opens it: opening a named pipe blocks until a writer comes, and an unreadable file
    must be named, not end the run in a traceback."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(path, None, "cannot open: No such file or directory") from None
    except OSError as e:
        raise InputError(path, None, f"cannot open: {e.strerror or e}") from None
    for kind, what in _KINDS:
        if kind(mode):
            raise InputError(path, None, f"is {what}; give a regular file")
    if stat.S_ISDIR(mode) and not folders:
        raise InputError(path, None, "is a directory; give a file")
    if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(mode) else 0)):
        raise InputError(path, None, "cannot read: Permission denied")


def open_input(path: str) -> IO[bytes]:
    """Binary handle on a checked input; ``.gz`` files (how Gigaword and LDC ship) are
    decompressed on the fly."""
    check_input(path, folders=False)
    try:
        return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    except OSError as e:
        raise InputError(path, None, f"cannot open: {e.strerror or e}") from None


def decode(raw: bytes, no: int, path: str, encoding: str = "utf-8") -> Line:
    """One line's bytes (line end removed) as a ``Line``; see the module docstring."""
    if no == 1 and raw.startswith(UTF8_BOM) and encoding == "utf-8":
        raw = raw[len(UTF8_BOM):]
    fault = None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        text, fault = raw.decode(encoding, errors="replace"), IngestReason.UNDECODABLE
    if "\ufeff" in text:
        log.warning("%s:%d: byte-order mark inside the file removed (files concatenated?)", path, no)
        note_repair(IngestRepair.STRAY_BOM, text.count("\ufeff"))
        text = text.replace("\ufeff", "")
    if fault is None and CONTROL.search(text):
        fault = IngestReason.CONTROL_CHARACTER
    return Line(no, text, fault)


def _raw_lines(f: IO[bytes]) -> Iterator[tuple[bytes, bool]]:
    """``(bytes, overlong)`` per line; an overlong line's bytes are only its first
    ``MAX_LINE_BYTES`` (the rest is read and dropped piece by piece)."""
    while raw := f.readline(MAX_LINE_BYTES):
        if len(raw) < MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, False
            continue
        while (more := f.readline(MAX_LINE_BYTES)) and not more.endswith(b"\n"):
            pass
        yield raw, True


def read_lines(path: str, encoding: str = "utf-8") -> Iterator[Line]:
    """Lines of a UTF-8 file (or of ``encoding``, an ASCII-compatible one such as the GB18030 and
    Big5 of older LDC Chinese releases, whose bytes never contain a line feed inside a
    character) without their line ends (LF or CRLF), 1-based numbers. Its non-blank lines are
    counted for ``check_files`` while ``counting_files`` runs."""
    counts = _files.get()
    if counts is not None:
        counts[path] = _FileCount(encoding)
    with open_input(path) as f:
        try:
            head = f.read(SNIFF_BYTES)
            check_encoding(path, head)
            if b"\r" in head and b"\n" not in head:
                raise InputError(path, 1, "has CR line ends (classic Mac) and no line feed, so "
                                          "it reads as one line: convert it first, e.g. "
                                          "dos2unix -c mac FILE")
            f.seek(0)
            for no, (raw, overlong) in enumerate(_raw_lines(f), 1):
                if overlong:
                    text = raw[:RECORD_CHARS].decode(encoding, errors="replace")
                    line = Line(no, f"{text} ...", IngestReason.TOO_LONG)
                else:
                    line = decode(raw.rstrip(b"\r\n"), no, path, encoding)
                if counts is not None and raw.strip():
                    counts[path].lines += 1
                    counts[path].tabbed += line.fault is None and bool(_TSV.search(line.text))
                yield line
        except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt .gz
            raise InputError(path, None, f"cannot read: {e}") from None


def expand(pattern: str | list[str]) -> list[str]:
    """Files named by a path, a glob, or a list of them, in a stable (sorted per glob) order.

    A pattern that matches nothing is an error: a typo in config must not read as an empty corpus.
    """
    files: list[str] = []
    for p in [pattern] if isinstance(pattern, str) else pattern:
        matched = matching_files(p)
        if not matched:
            raise InputError(p, None, no_match_reason(p))
        files.extend(matched)
    return files


def as_list(value: str | list | None) -> list:
    """Spec values that may be one item or a list of items."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


# What a split key may hold (``splits`` checks it; the config schema says the same, so that a
# wrong value is refused before Snakemake builds the DAG and again when ingest runs on its own).
PATH = "a path"
PATHS = "a path or a list of paths"
REFS = "a path or a list of references, each a path or a list of paths"
TEXT = "a string"
TEXTS = "a non-empty list of strings"
FLAG = "true or false"
COUNT = "a positive integer"
ENCODING = "the name of an ASCII-compatible Python codec (e.g. gb18030, big5hkscs)"


def _ascii_compatible(name: str) -> bool:
    """A codec that reads ASCII as ASCII (and so LF as the line end): UTF-16/32 are not."""
    try:
        return codecs.lookup(name) and "\n<>".encode(name) == b"\n<>"
    except (LookupError, UnicodeError):
        return False


def _is_path(v: object) -> bool:
    return isinstance(v, str) and v != ""


def _is_paths(v: object) -> bool:
    return _is_path(v) or (isinstance(v, list) and bool(v) and all(map(_is_path, v)))


_KIND_CHECK = {
    PATH: _is_path,
    PATHS: _is_paths,
    REFS: lambda v: _is_path(v) or (isinstance(v, list) and bool(v) and all(map(_is_paths, v))),
    TEXT: lambda v: isinstance(v, str),
    TEXTS: lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v),
    FLAG: lambda v: isinstance(v, bool),
    COUNT: lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    ENCODING: lambda v: isinstance(v, str) and _ascii_compatible(v),
}
# every split may say that it is allowed to yield nothing (see ingest.__main__)
ALLOW_EMPTY = "allow_empty"


def splits(spec: dict, keys: dict[str, str], required: tuple[str, ...] = ("src",),
           allowed: Iterable[Split] = tuple(Split)) -> Iterator[tuple[str, dict]]:
    """``(split, split_spec)`` pairs of ``spec["splits"]``, checked before any file is read.

    ``keys`` maps each key a reader takes to what it may hold (``PATH``, ``TEXT``...). Unknown
    split names and keys and values of the wrong kind are refused rather than ignored: a
    misspelt ``docids`` would otherwise silently fall back to blank-line documents. A file that
    two places name, in one split or two, is refused too (``identity.distinct_files``).
    """
    names = {s.value for s in allowed}
    keys = {**keys, ALLOW_EMPTY: FLAG}
    reader = spec.get("reader")
    if not isinstance(spec.get("splits"), dict) or not spec["splits"]:
        raise SpecError(f"reader {reader!r} needs a non-empty `splits` mapping")
    distinct_files(spec["splits"], {k for k, kind in keys.items() if kind in (PATH, PATHS, REFS)})
    for name, sub in spec["splits"].items():
        if name not in names:
            raise SpecError(f"split {name!r} is not one of {sorted(names)} for reader {reader!r}")
        if not isinstance(sub, dict):
            raise SpecError(f"split {name!r} of reader {reader!r} must be a mapping")
        if unknown := sorted(set(sub) - set(keys)):
            raise SpecError(f"split {name!r}: reader {reader!r} has no key(s) {unknown}; "
                            f"known: {sorted(keys)}")
        if missing := [k for k in required if k not in sub]:
            raise SpecError(f"split {name!r}: reader {reader!r} needs {missing}")
        for key, value in sub.items():
            if not _KIND_CHECK[keys[key]](value):
                raise SpecError(f"splits.{name}.{key}: reader {reader!r} needs {keys[key]}, "
                                f"got {value!r}")
        yield name, sub


def normalize(text: str) -> str:
    """Collapse whitespace (segments spanning lines, tabs, padding inside ``<seg>``) and remove
    invisible characters (``INVISIBLE``, counted as a repair)."""
    visible = text.translate(INVISIBLE)
    if len(visible) != len(text):
        note_repair(IngestRepair.INVISIBLE, len(text) - len(visible))
    return " ".join(visible.split())


@dataclass(frozen=True)
class Fault:
    """Bytes that cannot be trusted, and the line they are on (a segment may span lines)."""

    reason: IngestReason
    line: int


@dataclass
class Text:
    """One side of a record as read: its text, the file and line it starts at, and a fault
    found in its bytes. Each side keeps its own provenance so that a rejection names the file
    and line where the problem is, target side included."""

    text: str
    file: str
    line: int
    fault: Fault | None = None


def fault_of(line: Line) -> Fault | None:
    return Fault(line.fault, line.no) if line.fault else None


def text_of(line: Line, path: str) -> Text:
    """A whole line as one side of a record (line-oriented formats)."""
    return Text(normalize(line.text), path, line.no, fault_of(line))


@dataclass
class Segment:
    """One input record before it becomes a row: the source side and, where parallel, the
    references (one per translator)."""

    src: Text
    tgt: list[Text] | None = None

    @property
    def sides(self) -> list[Text]:
        return [self.src, *(self.tgt or [])]


def problem(seg: Segment, limits: Limits) -> tuple[IngestReason, Text, int] | None:
    """The first reason a record cannot be kept, with the side and line where it lies."""
    sides = seg.sides
    for side in sides:
        if side.fault is not None:
            return side.fault.reason, side, side.fault.line
    for side in sides:
        if not side.text:
            return IngestReason.EMPTY, side, side.line
    for side in sides:
        if len(side.text) > limits.max_line_chars:
            return IngestReason.TOO_LONG, side, side.line
    return None


def emit_document(corpus: str, split: str, doc_id: str, segments: list[Segment], limits: Limits,
                  has_context: bool = True) -> Iterator[Sentence | Rejected]:
    """Rows of one document: bad segments quarantined, the rest numbered 0.. in order.

    ``sent_idx`` counts kept sentences only, so later stages see a gap-free document; the gap is
    still visible through ``origin_line`` and the quarantine file.
    """
    idx = 0
    for seg in segments:
        found = problem(seg, limits)
        if found is not None:
            reason, side, line = found
            yield reject(corpus, seg, doc_id, reason, side.file, line)
            continue
        tgt = None if seg.tgt is None else [t.text for t in seg.tgt]
        yield Sentence(corpus, split, doc_id, idx, seg.src.text, tgt, has_context, seg.src.file,
                       seg.src.line)
        idx += 1


def reject(corpus: str, seg: Segment, doc_id: str, reason: IngestReason,
           file: str | None = None, line: int | None = None) -> Rejected:
    """A quarantined record, located at ``file:line`` (default: where its source side starts)."""
    record = " ||| ".join(t.text for t in seg.sides)
    return Rejected(STAGE, corpus, seg.src.file if file is None else file,
                    seg.src.line if line is None else line, doc_id, reason.value, record)


def reject_all(corpus: str, segments: Iterable[Segment], doc_id: str,
               reason: IngestReason) -> Iterator[Rejected]:
    """Quarantine a whole document, one row per record so that counts still add up."""
    for seg in segments:
        yield reject(corpus, seg, doc_id, reason)


def reject_sides(corpus: str, texts: Iterable[Text], doc_id: str,
                 reason: IngestReason) -> Iterator[Rejected]:
    """Quarantine the unpaired segments of one side of a document (e.g. the target lines of a
    document whose sides differ in length), each at its own file and line, so that what was
    read and not kept is in the quarantine whichever side it came from."""
    return reject_all(corpus, (Segment(t) for t in texts), doc_id, reason)


def file_label(path: str) -> str:
    """Stable short name used in synthesized document ids."""
    return Path(path).name

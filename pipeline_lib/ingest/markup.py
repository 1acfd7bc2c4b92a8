"""Tolerant, line-oriented reading of SGML test sets and aligning their documents.

NIST/LDC/WMT SGML and the IWSLT ``.xml`` files are often not well-formed XML (bare ``&``,
unquoted attributes, ``<seg>`` or ``</p>`` left open, upper-case ``<DOC>``), so an XML parser
would refuse files every MT toolkit reads. Like those tools (sacrebleu, mteval) we match tags with
regular expressions, close an open segment implicitly at the next segment/paragraph/document
boundary, skip comments (``<!-- <seg>..</seg> -->`` is no segment), and decode only the five XML
entities and numeric character references. A reference to a code point that is no character (a
surrogate half, beyond U+10FFFF) stays as written and its segment is quarantined
(``invalid_character_reference``); ``&#0;`` and other controls are ``control_character``. What
cannot be repaired raises ``InputError`` with file and line: a ``<seg>`` outside any document, a
half-written ``<seg`` tag, a file with no documents, a line over ``lines.MAX_LINE_BYTES``, and a
file that ends inside a ``<seg>``, ``<doc>``, set, comment or tag. Releases always close these,
so an open one at the end of the file means the file was cut short, and closing it implicitly
would keep half a segment (or pair a half document) as if it were whole; the error names the
line where the open element began.

A segment is never cut. A paragraph or headline tag (``<p>``, ``</p>``, ``<hl>``...) met inside an
open ``<seg>`` ends it only if the segment was left open, i.e. only tags and spaces follow it up
to the next segment or document. Where the segment's own ``</seg>`` or more text follows, the tag
was inside it (a raw ``<p>`` in the text, an escape the release forgot), and the whole segment,
tag included, is quarantined (``markup_in_segment``) rather than kept as two halves, the first
paired with a whole reference and the rest dropped. Other tags inside a segment are inline
markup: dropped, their text kept.

Document ids must be unique within a set: where a source or a reference repeats one, its first
document is the one paired and the later ones are quarantined (``duplicate_doc_id``).

A file may hold several sets (``<srcset>``, ``<refset>``, ``<tstset>``): NIST MT02-08 reference
files carry four ``<refset>`` s, each of which becomes one reference of the ``tgt`` list.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

from pipeline_lib.ingest.reasons import IngestReason
from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.lines import (CONTROL, MAX_LINE_BYTES, STAGE, Fault, Line, Segment, Text,
                                       emit_document, fault_of, normalize, read_lines, reject_all,
                                       reject_sides)
from pipeline_lib.tables import Rejected, Sentence

TAG = re.compile(r"<(/?)([A-Za-z][\w.:-]*)((?:\s[^<>]*)?)/?>")
ATTR = re.compile(r"""([\w.:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""")
# a tag of ours that TAG could not match: unterminated or broken, so the line cannot be trusted
BROKEN = re.compile(r"</?(seg|doc|p)\b(?![^<]*>)", re.IGNORECASE)
# the last line of a file ending in the middle of a tag (``</refse``, ``<DO``)
CUT_TAG = re.compile(r"<[/!?]?(?:[A-Za-z][^<>]*)?$")
ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
SETS = {"srcset", "refset", "tstset"}
# closing one of these also closes a segment left open inside it
BLOCKS = {"p", "hl", "text", "body", "headline", "dateline", "doc", *SETS}
# ... unless the segment's own </seg> follows: then the tag was inside it (module docstring)
IN_SEG_BLOCKS = BLOCKS - {"doc", *SETS}


def _code(name: str) -> int:
    return int(name[2:], 16) if name[1] in "xX" else int(name[1:])


def _is_char(code: int) -> bool:
    """A code point that is a character (UTF-8 can encode it): not a surrogate half."""
    return code < 0x110000 and not 0xD800 <= code <= 0xDFFF


def unescape(text: str) -> str:
    """Decode XML entities only; a bare ``&`` (``AT&T``) or an HTML name stays as written, and
    so does a reference to a code point that is no character (see ``invalid_reference``)."""

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name[0] != "#":
            return _NAMED[name]
        code = _code(name)
        return chr(code) if _is_char(code) else m.group(0)

    return ENTITY.sub(sub, text)


def invalid_reference(raw: str) -> bool:
    """``raw`` (before ``unescape``) refers to a code point that is no character."""
    return any(m.group(1)[0] == "#" and not _is_char(_code(m.group(1)))
               for m in ENTITY.finditer(raw))


def control_reference(text: str) -> bool:
    """A control character reached the text through a character reference (``&#27;``,
    ``&#0;``); line ends (``&#10;``, ``&#13;``) are whitespace there, as in XML, and collapse
    with the rest."""
    return CONTROL.search(text.replace("\n", " ").replace("\r", " ")) is not None


def reference_fault(raw: str, line: int) -> Fault | None:
    """The fault character references put into a segment's text (``raw``: before ``unescape``)."""
    if invalid_reference(raw):
        return Fault(IngestReason.INVALID_REFERENCE, line)
    if control_reference(unescape(raw)):
        return Fault(IngestReason.CONTROL_CHARACTER, line)
    return None


def uncomment(text: str, inside: bool) -> tuple[str, bool]:
    """``text`` without its comments, and whether a comment is still open at its end (comments
    may span lines: ``inside`` says one was open when the line began)."""
    out, pos = [], 0
    while True:
        if inside:
            end = text.find("-->", pos)
            if end < 0:
                return "".join(out), True
            pos, inside = end + 3, False
        start = text.find("<!--", pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out), False
        out.append(text[pos:start])
        pos, inside = start + 4, True


def attributes(raw: str) -> dict[str, str]:
    return {m.group(1).lower(): unescape(next(g for g in m.groups()[1:] if g is not None))
            for m in ATTR.finditer(raw)}


@dataclass
class Seg:
    id: str | None
    text: str
    line: int
    fault: Fault | None = None


@dataclass
class Doc:
    """One ``<doc>`` of one set of one file, its segments in file order."""

    file: str
    line: int
    set_index: int           # 0-based index of the enclosing set in its file
    attrs: dict[str, str]
    segs: list[Seg] = field(default_factory=list)

    @property
    def id(self) -> str | None:
        return self.attrs.get("docid") or self.attrs.get("id")

    def texts(self) -> list[Text]:
        return [Text(s.text, self.file, s.line, s.fault) for s in self.segs]


@dataclass
class _Cut:
    """A block tag (``IN_SEG_BLOCKS``) met inside an open segment: it ends a segment left open,
    unless the segment's ``</seg>`` follows or text does (see the module docstring), so what
    comes after it is held apart until that is known."""

    line: int
    tail: list[str] = field(default_factory=list)   # raw text and tags after it
    fault: Fault | None = None                       # the first fault of a line after it
    text: bool = False                               # text, not only tags and spaces, after it


def read_docs(path: str, seg_tag: str = "seg", encoding: str = "utf-8") -> list[Doc]:
    """All documents of a file; text outside ``seg_tag`` elements (headers, titles) is skipped.
    ``encoding``: the file's (UTF-8 unless a release says otherwise, see ``lines.read_lines``)."""
    docs: list[Doc] = []
    set_index = -1
    open_set: tuple[str, int] | None = None    # (tag, line) of the set being read
    doc: Doc | None = None
    seg: Seg | None = None
    parts: list[str] = []
    cut: _Cut | None = None      # a block tag met inside the open segment
    last: Line | None = None
    comment: int | None = None   # line where a comment still open began

    def close_seg(whole: bool = False) -> None:
        """End the open segment: at the block tag that interrupted it (it was left open), or,
        where its ``</seg>`` came (``whole``) or text followed the tag, with the tag and what
        follows it, quarantined as markup: never cut in two."""
        nonlocal seg, cut
        if seg is not None:
            if cut is not None and (whole or cut.text):
                parts.extend(cut.tail)
                seg.fault = seg.fault or cut.fault or Fault(IngestReason.MARKUP_IN_SEGMENT, cut.line)
            raw = "".join(parts)
            seg.fault = seg.fault or reference_fault(raw, seg.line)
            seg.text = normalize(unescape(raw))
            doc.segs.append(seg)
            seg = None
        parts.clear()
        cut = None

    def add(text: str, fault: Fault | None = None, tag: bool = False) -> None:
        """Text of the open segment (after a block tag met in it: held apart, see ``_Cut``);
        past MAX_LINE_BYTES it is too long and no longer kept."""
        held = parts if cut is None else cut.tail
        if cut is not None:
            cut.fault = cut.fault or fault
            cut.text = cut.text or (not tag and not text.isspace() and text != "")
        elif fault is not None:
            seg.fault = seg.fault or fault
        if sum(map(len, held)) < MAX_LINE_BYTES:
            held.append(text)
        elif seg.fault is None and cut is None:
            seg.fault = Fault(IngestReason.TOO_LONG, seg.line)

    for line in read_lines(path, encoding):
        last = line
        if line.fault is IngestReason.TOO_LONG:
            raise InputError(path, line.no, f"a line longer than {MAX_LINE_BYTES} bytes: markup "
                                            "files have line breaks; is this the right file?")
        text, inside = uncomment(line.text, comment is not None)
        comment = (comment or line.no) if inside else None
        if BROKEN.search(TAG.sub("", text)):
            raise InputError(path, line.no, f"malformed tag in {line.text[:80]!r}")
        fault = fault_of(line)
        pos = 0
        for m in TAG.finditer(text):
            if seg is not None:
                add(text[pos:m.start()], fault)
            pos = m.end()
            closing, name = m.group(1) == "/", m.group(2).lower()
            if seg is not None and name in IN_SEG_BLOCKS and name != seg_tag:
                if cut is None:   # see the module docstring
                    cut = _Cut(line.no)
                add(m.group(0), fault, tag=True)
            elif name == seg_tag and closing:
                close_seg(whole=True)
            elif name == seg_tag and not closing:
                if doc is None:
                    raise InputError(path, line.no, f"<{seg_tag}> outside any <doc>")
                close_seg()
                seg = Seg(attributes(m.group(3)).get("id"), "", line.no, fault)
            elif name == "doc" and not closing:  # also ends a previous <doc> left open
                close_seg()
                doc = Doc(path, line.no, max(set_index, 0), attributes(m.group(3)))
                docs.append(doc)
            elif name in SETS and not closing:
                close_seg()
                doc = None
                set_index += 1
                open_set = (m.group(2), line.no)
            elif name == seg_tag or name in BLOCKS:
                close_seg()
                if closing and name in ("doc", *SETS):  # the end of a set ends a <doc> left open
                    doc = None
                if closing and name in SETS:
                    open_set = None
            # any other tag inside a segment is inline markup: dropped, its text kept
        if seg is not None:
            add(text[pos:] + " ", fault)
    if comment is not None:
        raise InputError(path, comment, "a comment (<!--) opened here is never closed; the file "
                                        "ends inside it: truncated?")
    if cut is not None:   # a segment left open before a paragraph end, and the file ends
        close_seg()
    _check_complete(path, last, seg, seg_tag, doc, open_set)
    close_seg()
    if not docs:
        raise InputError(path, None, "no <doc> element found")
    return docs


def _check_complete(path: str, last: Line | None, seg: Seg | None, seg_tag: str, doc: Doc | None,
                    open_set: tuple[str, int] | None) -> None:
    """Refuse a file that ends inside an element or a tag (see the module docstring)."""
    cut = "the file ends inside it: truncated? (releases close every one)"
    if seg is not None:
        raise InputError(path, seg.line, f"<{seg_tag}> opened here is never closed; {cut}")
    if doc is not None:
        raise InputError(path, doc.line, f"<doc> opened here is never closed; {cut}")
    if open_set is not None:
        raise InputError(path, open_set[1], f"<{open_set[0]}> opened here is never closed; {cut}")
    if last is not None and CUT_TAG.search(last.text):
        raise InputError(path, last.no, f"the file ends inside a tag: {last.text[-40:]!r} (truncated?)")


def align(corpus: str, split: str, src_docs: list[Doc], ref_sets: list[list[Doc]],
          limits: Limits) -> Iterator[Sentence | Rejected]:
    """Pair each source document with its document in every reference set, segment by segment.

    Segments pair by ``id`` where both sides number them uniquely, by position otherwise; a
    document whose sides differ in length or ids is quarantined whole, since any pairing would be
    a guess, and so are its reference documents (each segment at its own file and line).
    Reference documents without a source document, or repeating a docid within one reference,
    are quarantined too, so that every ``<seg>`` read is accounted for.
    """
    refs: list[dict[str, Doc]] = [first_by_id(rs) for rs in ref_sets]
    seen: set[str] = set()
    for doc in src_docs:
        segs = [Segment(t) for t in doc.texts()]
        doc_id = doc.id or f"{doc.file}:{doc.line}"
        if doc.id is None:
            yield from reject_all(corpus, segs, doc_id, IngestReason.MISSING_DOC_ID)
            continue
        if doc.id in seen:
            yield from reject_all(corpus, segs, doc_id, IngestReason.DUPLICATE_DOC_ID)
            continue
        seen.add(doc.id)
        ref_docs = [r.get(doc.id) for r in refs]
        reason, targets = _pair(doc, ref_docs)
        if reason is not None or not doc.segs:
            if doc.segs:
                yield from reject_all(corpus, segs, doc_id, reason)
            else:
                yield empty_document(corpus, doc)
            for ref in ref_docs:  # what the references hold for it is unused too
                if ref is not None:
                    yield from reject_sides(corpus, ref.texts(), doc_id, reason)
            continue
        for seg, tgt in zip(segs, targets):
            seg.tgt = [Text(t.text, ref.file, t.line, t.fault) for t, ref in zip(tgt, ref_docs)]
        yield from emit_document(corpus, split, doc_id, segs, limits)
    for rs, by_id in zip(ref_sets, refs):
        for doc in rs:
            if doc.id not in seen:
                yield from reject_sides(corpus, doc.texts(), doc.id or "",
                                        IngestReason.REFERENCE_WITHOUT_SOURCE)
            elif by_id[doc.id] is not doc:  # a second document with that id in one reference
                yield from reject_sides(corpus, doc.texts(), doc.id, IngestReason.DUPLICATE_DOC_ID)


def first_by_id(docs: list[Doc]) -> dict[str, Doc]:
    """Documents by id, the first of each id (a later one repeating it is quarantined)."""
    by_id: dict[str, Doc] = {}
    for d in docs:
        if d.id:
            by_id.setdefault(d.id, d)
    return by_id


def empty_document(corpus: str, doc: Doc) -> Rejected:
    """A document with no segment at all is one quarantined record, so that it still counts."""
    return Rejected(STAGE, corpus, doc.file, doc.line, doc.id or "", IngestReason.NO_SEGMENTS.value)


def _pair(doc: Doc, ref_docs: list[Doc | None]) -> tuple[IngestReason | None, list[list[Seg]]]:
    """``(reason, per-segment reference lists)``; reason is set when the document cannot pair."""
    ids = [s.id for s in doc.segs]
    by_id = None not in ids and len(set(ids)) == len(ids)
    if None not in ids and not by_id:
        return IngestReason.DUPLICATE_SEG_ID, []
    columns: list[list[Seg]] = []
    for ref in ref_docs:
        if ref is None:
            return IngestReason.MISSING_REFERENCE, []
        if len(ref.segs) != len(doc.segs):
            return IngestReason.SEG_COUNT_MISMATCH, []
        ref_ids = {s.id: s for s in ref.segs}
        if by_id and len(ref_ids) == len(ref.segs) and None not in ref_ids:
            if set(ref_ids) != set(ids):
                return IngestReason.SEG_ID_MISMATCH, []
            columns.append([ref_ids[i] for i in ids])
        else:
            columns.append(ref.segs)
    return None, [list(row) for row in zip(*columns)] if columns else [[] for _ in doc.segs]


def sets_of(docs: list[Doc]) -> list[list[Doc]]:
    """Split one file's documents into its sets (one reference per ``<refset>``)."""
    grouped: dict[int, list[Doc]] = defaultdict(list)
    for d in docs:
        grouped[d.set_index].append(d)
    return [grouped[k] for k in sorted(grouped)]

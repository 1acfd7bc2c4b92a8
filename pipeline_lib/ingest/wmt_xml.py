"""Reader ``wmt_xml``: WMT test sets in the XML format used since 2021.

Spec keys (``corpora.<name>``)::

    reader: wmt_xml
    splits:
      test:
        src: wmttest2022.en-de.all.xml        # one file holds source and references
        translators: [A, B]                   # optional: which <ref translator=...> form ``tgt``,
                                              # in this order; default all found, sorted by name

Layout: ``<dataset><collection><doc id=...><src lang=..><p><seg id=..>`` and one
``<ref lang=.. translator=..>`` per reference with the same ``<p><seg>`` structure (``<hyp>``
system outputs are ignored). Unlike the older SGML these files are well-formed XML, so they are
parsed strictly with the standard library's expat (which gives line numbers); a file expat
refuses raises ``InputError``: undecodable bytes and control characters (XML forbids C0 controls
other than tab and line ends), and a file that ends inside an element (truncated), reported at
the line where the innermost open element began. A file in UTF-16/32 is refused before parsing
(``lines.check_encoding``), as for every reader; a byte-order mark inside a segment is removed
and counted. An entity expat does not expand (declared external, ``<!ENTITY xxe SYSTEM ..>``,
or skipped under an external DTD) is never fetched: the segment that refers to it is quarantined
(``unresolved_entity``) rather than kept with a hole where the entity was. Segments pair by ``seg id`` within a document; the document-level checks are those
of ``markup.align`` (shared with ``sgml``).
"""

from __future__ import annotations

from typing import Iterator
from xml.parsers import expat

from pipeline_lib.ingest.reasons import IngestReason, IngestRepair
from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.lines import (MAX_LINE_BYTES, PATH, SNIFF_BYTES, TEXTS, Fault,
                                       check_encoding, normalize, note_repair, open_input, splits)
from pipeline_lib.ingest.markup import Doc, Seg, align, control_reference
from pipeline_lib.tables import Rejected, Sentence

KEYS = {"src": PATH, "translators": TEXTS}
# expat errors that mean the input stopped before the document did
_CUT = {expat.errors.codes[m] for m in (expat.errors.XML_ERROR_NO_ELEMENTS,
                                        expat.errors.XML_ERROR_UNCLOSED_TOKEN,
                                        expat.errors.XML_ERROR_PARTIAL_CHAR,
                                        expat.errors.XML_ERROR_UNCLOSED_CDATA_SECTION)}


def input_files(spec: dict) -> list[str]:
    return [sub["src"] for _, sub in splits(spec, KEYS)]


class _Collector:
    """expat handlers: each <src>/<ref> of a <doc> becomes a ``markup.Doc`` with that doc's id."""

    def __init__(self, path: str, parser: expat.XMLParserType):
        self.path, self.parser = path, parser
        self.src: list[Doc] = []
        self.refs: dict[str, list[Doc]] = {}     # translator -> its reference documents
        self.doc_id: str | None = None
        self.side: Doc | None = None              # the <src> or <ref> being read; None in <hyp>
        self.seg: Seg | None = None
        self.parts: list[str] = []
        self.open: list[tuple[str, int]] = []    # (element, line) not closed yet
        self.chars = 0                            # text of the open segment so far

    def start(self, name: str, attrs: dict[str, str]) -> None:
        line = self.parser.CurrentLineNumber
        self.open.append((name, line))
        if name == "doc":
            self.doc_id = attrs.get("id")
        elif name in ("src", "ref"):
            self.side = Doc(self.path, line, 0, {"docid": self.doc_id} if self.doc_id else {})
            if name == "src":
                self.src.append(self.side)
            else:
                self.refs.setdefault(attrs.get("translator", ""), []).append(self.side)
        elif name == "seg" and self.side is not None:
            self.seg, self.parts, self.chars = Seg(attrs.get("id"), "", line), [], 0

    def end(self, name: str) -> None:
        self.open.pop()
        if name == "seg" and self.seg is not None:
            raw = "".join(self.parts)
            if "\ufeff" in raw:
                note_repair(IngestRepair.STRAY_BOM, raw.count("\ufeff"))
                raw = raw.replace("\ufeff", "")
            if self.seg.fault is None and control_reference(raw):
                self.seg.fault = Fault(IngestReason.CONTROL_CHARACTER, self.seg.line)
            self.seg.text = normalize(raw)
            self.side.segs.append(self.seg)
            self.seg = None
        elif name in ("src", "ref"):
            self.side = None

    def text(self, data: str) -> None:
        if self.seg is None:
            return
        self.chars += len(data)
        if self.chars <= MAX_LINE_BYTES:
            self.parts.append(data)
        elif self.seg.fault is None:
            self.seg.fault = Fault(IngestReason.TOO_LONG, self.seg.line)

    def unexpanded(self, *_: object) -> int:
        """An entity expat skips (external or undefined under an external DTD): its text is not
        in the segment, so the segment is not the translation's text."""
        if self.seg is not None and self.seg.fault is None:
            self.seg.fault = Fault(IngestReason.UNRESOLVED_ENTITY, self.parser.CurrentLineNumber)
        return 1


def parse(path: str) -> tuple[list[Doc], dict[str, list[Doc]]]:
    """``(source documents, translator -> reference documents)`` of one WMT XML file."""
    parser = expat.ParserCreate("utf-8")
    c = _Collector(path, parser)
    parser.StartElementHandler, parser.EndElementHandler = c.start, c.end
    parser.CharacterDataHandler = c.text
    parser.ExternalEntityRefHandler = c.unexpanded
    parser.SkippedEntityHandler = c.unexpanded
    try:
        with open_input(path) as f:
            check_encoding(path, f.read(SNIFF_BYTES))
            f.seek(0)
            parser.ParseFile(f)
    except expat.ExpatError as e:
        if e.code in _CUT and c.open:
            name, line = c.open[-1]
            raise InputError(path, line, f"<{name}> opened here is never closed; the file ends "
                                         f"inside it (line {e.lineno}): truncated?") from None
        raise InputError(path, e.lineno, f"malformed XML: {expat.ErrorString(e.code)}") from None
    except OSError as e:
        raise InputError(path, None, f"cannot open: {e.strerror or e}") from None
    return c.src, c.refs


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    for split, sub in splits(spec, KEYS):
        src, refs = parse(sub["src"])
        translators = sub.get("translators") or sorted(refs)
        unknown = [t for t in translators if t not in refs]
        if unknown or not translators:
            raise InputError(sub["src"], None, f"no <ref> by translator(s) {unknown or 'any'}; "
                                               f"found {sorted(refs)}")
        yield from align(corpus, split, src, [refs[t] for t in translators], limits)

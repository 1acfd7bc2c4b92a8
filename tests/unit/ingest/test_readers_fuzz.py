"""Property-based tests: every reader fed mutated copies of its fixture files.

Whatever the mutation, a reader either raises ``InputError`` naming the mutated file, or reads
it, and then keeps only text that is in the input (no control character, no U+FFFD, no U+FEFF)
and accounts for every segment of every input file exactly once (``sides_out``). Mutations:

* truncation at every byte offset of every markup file (exhaustive, not sampled): the result is
  an error, or for files wrapped in a set / root element exactly the whole file's result, or for
  unwrapped files (Gigaword, LDC documents) only sentences the whole file also keeps;
* one byte of segment text replaced, or a C0 control character inserted into it: the segment
  structure is unchanged, so the accounting must equal the unmutated file's (which the
  per-reader tests check against independent counts); strict XML (wmt_xml) may refuse instead;
* one byte replaced anywhere (markup included): an error naming the file, or a clean read;
* the file re-encoded: UTF-16/32 (with or without byte-order mark) must be refused naming the
  encoding; Latin-1 / cp1252 must read, with the non-ASCII lines quarantined.

Hypothesis runs derandomized with a fixed example budget so CI is deterministic; the whole
module takes ~15 s on one CPU core (the truncation sweeps most of it).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_readers_common import DATA, sides_out

from pipeline_lib.ingest import InputError, Limits, reader_module
from pipeline_lib.ingest.markup import unescape
from pipeline_lib.tables import Rejected, Sentence

LIMITS = Limits(max_line_chars=2000)
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
STRUCTURE = b"<>&\n\r"  # bytes a text mutation never writes (they could change the markup)
CONTROLS = [c for c in range(32) if c not in (9, 10)]


@dataclass(frozen=True)
class Case:
    """One reader on its fixture files; ``files`` maps the spec key to the fixture."""

    name: str
    reader: str
    split: str
    files: dict[str, Path]
    extra: dict = field(default_factory=dict)
    text: bytes = b""         # regex whose group 1 spans segment text (markup formats)
    wrapped: bool = False     # a set / root element encloses the documents
    strict: bool = False      # strict XML: a bad byte may make the whole file an error

    def spec(self, paths: dict[str, Path]) -> dict:
        split = {role: str(paths[role]) for role in self.files}
        return {"reader": self.reader, "splits": {self.split: {**split, **self.extra}}}


SEG_TEXT = rb"<seg[^>]*>([^<]*)"
CASES = [
    Case("sgml", "sgml", "test", {"src": DATA / "sgml/mt06.src.sgm", "tgt": DATA / "sgml/mt06.ref.sgm"},
         text=SEG_TEXT, wrapped=True),
    Case("iwslt_xml", "iwslt", "dev", {"src": DATA / "iwslt/IWSLT17.TED.dev2010.en-de.en.xml",
                                       "tgt": DATA / "iwslt/IWSLT17.TED.dev2010.en-de.de.xml"},
         text=SEG_TEXT, wrapped=True),
    Case("wmt_xml", "wmt_xml", "test", {"src": DATA / "wmt/wmttest2022.en-de.xml"},
         text=SEG_TEXT, wrapped=True, strict=True),
    Case("ldc_doc", "ldc_doc", "train", {"src": DATA / "ldc/src/AFC20000102.sgm",
                                         "tgt": DATA / "ldc/E01/AFC20000102.sgm"}, text=SEG_TEXT),
    Case("mono_sgml", "mono_sgml", "mono", {"src": DATA / "mono/afp_eng_199405.sgml"},
         text=rb"<P>([^<]*)"),
    Case("iwslt_tags", "iwslt", "train", {"src": DATA / "iwslt/train.tags.en-de.en",
                                          "tgt": DATA / "iwslt/train.tags.en-de.de"}),
    Case("plaintext_separators", "plaintext", "train", {"src": DATA / "plaintext/ted.en",
                                                        "tgt": DATA / "plaintext/ted.de"},
         extra={"doc_separator": "<d>"}),
    Case("plaintext_docids", "plaintext", "test", {"src": DATA / "plaintext/news.en",
                                                   "tgt": DATA / "plaintext/news.de",
                                                   "docids": DATA / "plaintext/news.docids"}),
    Case("ldc_sent", "ldc_sent", "train", {"src": DATA / "ldc/sent.zh", "tgt": DATA / "ldc/sent.en"}),
    Case("mono_text", "mono_text", "mono", {"src": DATA / "mono/news.en"}),
]
MARKUP = [c for c in CASES if c.text]
ROLES = [(c, role) for c in CASES for role in c.files]


def text_positions(case: Case, role: str) -> list[int]:
    """Offsets of segment text bytes: markup between a segment's opening tag and the next tag,
    in line formats every byte of a text line (not headers, separators, line ends)."""
    data = case.files[role].read_bytes()
    if case.text:
        spans = [range(*m.span(1)) for m in re.finditer(case.text, data)]
        return [i for span in spans for i in span if data[i] not in b"\r\n"]
    positions, start = [], 0
    for line in data.split(b"\n"):
        header = case.name == "iwslt_tags" and line.startswith(b"<")
        separator = line.strip() == case.extra.get("doc_separator", "").encode()
        if not header and not (separator and role != "docids"):
            positions.extend(range(start, start + len(line)))
        start += len(line) + 1
    return positions


class Workspace:
    """A copy of a case's files in one folder; ``read`` runs the reader with one file replaced."""

    def __init__(self, case: Case, root: Path):
        self.case, self.paths = case, {}
        for role, src in case.files.items():
            self.paths[role] = root / role / src.name
            self.paths[role].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, self.paths[role])
        self.whole = self.read()

    def read(self, role: str | None = None, data: bytes | None = None):
        """``InputError`` or ``(kept, rejected)``; any other exception fails the test."""
        if role is not None:
            self.paths[role].write_bytes(data)
        try:
            items = list(reader_module(self.case.reader).read("c", self.case.spec(self.paths), LIMITS))
        except InputError as e:
            return e
        finally:
            if role is not None:
                shutil.copyfile(self.case.files[role], self.paths[role])
        assert all(isinstance(i, (Sentence, Rejected)) for i in items)
        return ([i for i in items if isinstance(i, Sentence)],
                [i for i in items if isinstance(i, Rejected)])

    def check(self, role: str, data: bytes, result) -> None:
        """The properties every outcome must have (see the module docstring)."""
        if isinstance(result, InputError):
            assert str(self.paths[role]) in str(result), result
            return
        kept, _ = result
        for s in kept:
            for text, files in [(s.src, ["src"])] + [(t, [r for r in self.paths if r != "src"])
                                                     for t in (s.tgt or [])]:
                assert not re.search(r"[\x00-\x08\x0b-\x1f\ufffd\ufeff]", text), text
                haystacks = [self.text_of(r, data if r == role else None) for r in files or ["src"]]
                assert any(text in h for hs in haystacks for h in hs), (text, role)

    def text_of(self, role: str, data: bytes | None) -> list[str]:
        """The input's text as kept texts can appear in it: whitespace collapsed, with and
        without tags removed and entities decoded."""
        raw = (self.case.files[role].read_bytes() if data is None else data).decode("utf-8", "replace")
        stripped = re.sub(r"</?[A-Za-z][^<>]*>", "", raw)
        return [" ".join(t.split()) for t in (raw, stripped, unescape(raw), unescape(stripped))]


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory) -> dict[str, Workspace]:
    return {c.name: Workspace(c, tmp_path_factory.mktemp(c.name)) for c in CASES}


@pytest.mark.parametrize("case, role", [(c, r) for c in MARKUP for r in c.files],
                         ids=lambda v: v.name if isinstance(v, Case) else v)
def test_truncation_at_every_offset_is_an_error_or_loses_nothing_silently(workspaces, case, role):
    ws = workspaces[case.name]
    data = case.files[role].read_bytes()
    errors = 0
    for k in range(len(data)):
        result = ws.read(role, data[:k])
        ws.check(role, data[:k], result)
        if isinstance(result, InputError):
            errors += 1
        elif not case.wrapped:  # cut between documents: a shorter valid file, no half segment
            _kept_by_whole_file(result[0], ws.whole[0], k)
        elif not SET_END.search(data[:k]):  # (after a set: fewer references, checked above)
            assert result == ws.whole, f"cut at byte {k} read without error but not as the whole file"
    assert errors > len(data) * 0.8  # most cuts land inside an element


# a cut right after a set leaves a valid file with fewer sets (NIST: one <refset> per
# reference), which no reader can tell from a whole one; its texts are checked like any other
SET_END = re.compile(rb"</(?:src|ref|tst)set>\s*$", re.IGNORECASE)


def _kept_by_whole_file(kept: list[Sentence], whole: list[Sentence], k: int) -> None:
    """Every sentence kept from a file cut between documents is kept from the whole file too."""
    whole_kept = {(s.doc_id, s.src, tuple(s.tgt or ())) for s in whole}
    for s in kept:
        assert (s.doc_id, s.src, tuple(s.tgt or ())) in whole_kept, (k, s)


@FUZZ
@given(data=st.data())
def test_replacing_a_text_byte_keeps_every_segment_accounted_for(workspaces, data):
    case, role = data.draw(st.sampled_from(ROLES), label="case, role")
    ws = workspaces[case.name]
    original = case.files[role].read_bytes()
    at = data.draw(st.sampled_from(text_positions(case, role)), label="offset")
    byte = data.draw(st.integers(0, 255).filter(lambda b: b not in STRUCTURE), label="byte")
    mutated = original[:at] + bytes([byte]) + original[at + 1:]
    _same_structure(ws, role, mutated)


@FUZZ
@given(data=st.data())
def test_inserted_control_characters_are_quarantined_not_kept(workspaces, data):
    case, role = data.draw(st.sampled_from(ROLES), label="case, role")
    ws = workspaces[case.name]
    original = case.files[role].read_bytes()
    at = data.draw(st.sampled_from(text_positions(case, role)), label="offset")
    control = data.draw(st.sampled_from(CONTROLS), label="control")
    _same_structure(ws, role, original[:at] + bytes([control]) + original[at:])


def _same_structure(ws: Workspace, role: str, mutated: bytes) -> None:
    result = ws.read(role, mutated)
    ws.check(role, mutated, result)
    if isinstance(result, InputError):
        assert ws.case.strict, f"{ws.case.name}: a text byte made the file unreadable: {result}"
        return
    assert sides_out(*result) == sides_out(*ws.whole)


@FUZZ
@given(data=st.data())
def test_replacing_any_byte_is_an_error_naming_the_file_or_a_clean_read(workspaces, data):
    case, role = data.draw(st.sampled_from(ROLES), label="case, role")
    ws = workspaces[case.name]
    original = case.files[role].read_bytes()
    at = data.draw(st.integers(0, len(original) - 1), label="offset")
    byte = data.draw(st.integers(0, 255), label="byte")
    mutated = original[:at] + bytes([byte]) + original[at + 1:]
    ws.check(role, mutated, ws.read(role, mutated))


@pytest.mark.parametrize("case, role", ROLES, ids=lambda v: v.name if isinstance(v, Case) else v)
@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                                   "utf-32-be", "latin-1", "cp1252"])
def test_swapped_encodings(workspaces, case, role, codec):
    ws = workspaces[case.name]
    text = case.files[role].read_bytes().decode("utf-8", "replace")
    mutated = text.encode(codec, errors="replace")
    result = ws.read(role, mutated)
    ws.check(role, mutated, result)
    if codec.startswith("utf-"):
        assert isinstance(result, InputError) and "looks like UTF-" in str(result)
        return
    if isinstance(result, InputError):
        assert case.strict  # XML declared UTF-8 whose bytes are not
        return
    assert sides_out(*result) == sides_out(*ws.whole)
    if any(b > 127 for b in mutated):  # those lines are now undecodable
        assert any(r.reason == "undecodable_bytes" and r.origin_file == str(ws.paths[role])
                   for r in result[1])

"""Shared reader machinery (lines.py, markup.py), the ingest CLI end to end, and the helpers the
per-reader tests use to check that every input record is either kept or quarantined."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline_lib.ingest import InputError, Limits, reader_module
from pipeline_lib.ingest.lines import expand, read_lines
from pipeline_lib.ingest.markup import read_docs, unescape
from pipeline_lib.tables import Rejected, Sentence

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "corpora"
# small enough that the fixtures' one deliberately long segment trips it
LIMITS = Limits(max_line_chars=60)


def run(spec: dict, limits: Limits = LIMITS) -> tuple[list[Sentence], list[Rejected]]:
    items = list(reader_module(spec["reader"]).read("c", spec, limits))
    assert all(isinstance(i, (Sentence, Rejected)) for i in items)
    return ([i for i in items if isinstance(i, Sentence)], [i for i in items if isinstance(i, Rejected)])


def reasons(rejected: list[Rejected]) -> Counter:
    return Counter(r.reason for r in rejected)


def sides_out(kept: list[Sentence], rejected: list[Rejected]) -> int:
    """Input segments the output accounts for: both sides of a kept pair, each side a quarantined
    record holds (a document without segments is a record holding none). Readers must account
    for every segment of every input file exactly once, so this equals an independent count of
    the segments in all input files."""
    return (sum(1 + len(s.tgt or []) for s in kept)
            + sum(r.record.count(" ||| ") + 1 for r in rejected
                  if r.reason != "document_without_segments"))


def count_matches(path: Path, pattern: bytes) -> int:
    """Independent record count: a byte regex over the raw file, no reader code involved."""
    return len(re.findall(pattern, path.read_bytes()))


def assert_document_order(kept: list[Sentence]) -> None:
    """Documents contiguous and numbered 0.. (the schema's streaming guarantee)."""
    finished, current, expected = set(), None, 0
    for s in kept:
        key = (s.split, s.doc_id)
        if key != current:
            assert key not in finished, f"document {key} is not contiguous"
            if current is not None:
                finished.add(current)
            current, expected = key, 0
        assert s.sent_idx == expected
        expected += 1


def test_unescape_decodes_xml_entities_only():
    # &#0; is decoded, so that the segment check quarantines it as a control character; a
    # surrogate half is no character and stays as written (its segment is quarantined too)
    assert unescape("AT&T &amp; R&D &lt;b&gt; &#65;&#x42; &copy; &#0; &#xD800;") == \
        "AT&T & R&D <b> AB &copy; \x00 &#xD800;"


def test_read_lines_flags_undecodable_bytes_and_reads_gzip(tmp_path: Path):
    raw = "zeile eins\n".encode() + b"caf\xe9\n" + "fin\r\n".encode()
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbf" + raw)
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(raw)
    for name in ("a.txt", "a.txt.gz"):
        lines = list(read_lines(str(tmp_path / name)))
        assert [(ln.no, ln.fault) for ln in lines] == [(1, None), (2, "undecodable_bytes"), (3, None)]
        assert lines[0].text == "zeile eins" and lines[2].text == "fin"


def test_missing_file_and_empty_glob_are_input_errors(tmp_path: Path):
    with pytest.raises(InputError, match="cannot open"):
        list(read_lines(str(tmp_path / "nope.txt")))
    with pytest.raises(InputError, match="matches no file"):
        expand(str(tmp_path / "*.sgm"))


def test_markup_errors_name_file_and_line(tmp_path: Path):
    with pytest.raises(InputError, match=r"broken\.sgm:4: malformed tag"):
        read_docs(str(DATA / "sgml" / "broken.sgm"))
    stray = tmp_path / "stray.sgm"
    stray.write_text('<refset>\n<seg id="1">no doc</seg>\n')
    with pytest.raises(InputError, match=r"stray\.sgm:2: <seg> outside any <doc>"):
        read_docs(str(stray))
    nodoc = tmp_path / "nodoc.sgm"
    nodoc.write_text("just text\n")
    with pytest.raises(InputError, match="no <doc> element"):
        read_docs(str(nodoc))


def test_unknown_split_names_keys_and_missing_keys_are_refused():
    with pytest.raises(ValueError, match="split 'training'"):
        run({"reader": "plaintext", "splits": {"training": {"src": "a", "tgt": "b"}}})
    with pytest.raises(ValueError, match=r"no key\(s\) \['docid'\]"):
        run({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "docid": "c"}}})
    with pytest.raises(ValueError, match=r"needs \['tgt'\]"):
        run({"reader": "sgml", "splits": {"test": {"src": "a"}}})


def test_cli_writes_docs_quarantine_and_manifest(tmp_path: Path):
    """``python -m pipeline_lib.ingest`` end to end on the NIST-style SGML fixture."""
    spec = {"reader": "sgml", "splits": {"test": {"src": str(DATA / "sgml" / "mt06.src.sgm"),
                                                  "tgt": str(DATA / "sgml" / "mt06.ref.sgm")}}}
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline_lib.ingest", "--corpus", "mt06", "--spec", json.dumps(spec),
         "--max-line-chars", "60", "--out-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    docs = pq.read_table(out / "docs.parquet").to_pylist()
    bad = pq.read_table(out / "quarantine.parquet").to_pylist()
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(docs) == manifest["counts"]["kept"] == 6
    assert len(bad) == manifest["counts"]["quarantined"] == manifest["rejected_total"] == 13
    assert manifest["counts"]["documents"] == {"test": 3}
    assert set(manifest["inputs"]) == {spec["splits"]["test"]["src"], spec["splits"]["test"]["tgt"]}
    assert all(len(r["tgt"]) == 2 for r in docs)
    assert {r["stage"] for r in bad} == {"ingest"}
    assert manifest["rejected"]["segment_count_mismatch"] == 2 + 5  # source and reference sides
    assert manifest["repaired"] == {}


def test_cli_reports_unreadable_input_with_exit_code(tmp_path: Path):
    ref = tmp_path / "ref" / "broken.sgm"   # a file is read once per corpus: a copy as reference
    ref.parent.mkdir()
    ref.write_bytes((DATA / "sgml" / "broken.sgm").read_bytes())
    spec = {"reader": "sgml", "splits": {"test": {"src": str(DATA / "sgml" / "broken.sgm"),
                                                  "tgt": str(ref)}}}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline_lib.ingest", "--corpus", "x", "--spec", json.dumps(spec),
         "--out-dir", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "broken.sgm:4: malformed tag" in proc.stderr

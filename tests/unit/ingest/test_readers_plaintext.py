"""Reader ``plaintext``: Maruf et al. (2019)-style ``<d>`` separators and doc-id files."""

from __future__ import annotations

import pytest
from test_readers_common import DATA, assert_document_order, reasons, run, sides_out

from pipeline_lib.ingest import InputError

D = DATA / "plaintext"


def lines(name: str) -> list[bytes]:
    return (D / name).read_bytes().splitlines()


def test_separated_documents_count_and_reasons():
    spec = {"reader": "plaintext", "splits": {"train": {
        "src": str(D / "ted.en"), "tgt": str(D / "ted.de"), "doc_separator": "<d>"}}}
    kept, bad = run(spec)
    text = {f: sum(ln != b"<d>" for ln in lines(f)) for f in ("ted.en", "ted.de")}
    assert sides_out(kept, bad) == text["ted.en"] + text["ted.de"] == 7 + 6
    # the second document does not pair: its 2 English and 1 German lines are quarantined
    assert len(kept) + len(bad) == text["ted.en"] + 1
    assert reasons(bad) == {"segment_count_mismatch": 2 + 1, "empty_segment": 1}
    assert_document_order(kept)
    assert [(s.doc_id, s.sent_idx, s.origin_line) for s in kept] == [
        ("ted.en#000000", 0, 2), ("ted.en#000000", 1, 3), ("ted.en#000002", 0, 8), ("ted.en#000002", 1, 10)]
    assert kept[-1].tgt == ["Nach einer leeren Zeile."]


def test_docid_file_groups_runs_and_quarantines_revisits():
    spec = {"reader": "plaintext", "splits": {"test": {
        "src": str(D / "news.en"), "tgt": str(D / "news.de"), "docids": str(D / "news.docids")}}}
    kept, bad = run(spec)
    assert len(kept) + len(bad) == len(lines("news.en")) == 6
    assert reasons(bad) == {"undecodable_bytes": 1, "doc_id_not_contiguous": 1}
    assert_document_order(kept)
    assert [s.doc_id for s in kept] == ["docA", "docA", "docB", "docC"]


def test_misaligned_files_are_input_errors():
    with pytest.raises(InputError, match=r"short\.de: line counts differ \(.*news\.en has 6, .*short\.de has 2, .*news\.docids has 6\)"):
        run({"reader": "plaintext", "splits": {"test": {
            "src": str(D / "news.en"), "tgt": str(D / "short.de"), "docids": str(D / "news.docids")}}})
    with pytest.raises(InputError, match="separators do not line up"):
        run({"reader": "plaintext", "splits": {"train": {
            "src": str(D / "ted.en"), "tgt": str(D / "short.de"), "doc_separator": "<d>"}}})

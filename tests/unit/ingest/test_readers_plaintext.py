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


def test_a_path_with_brackets_is_read_as_the_file_it_names(tmp_path):
    """Issue 36 item 6: ``talks[2019].en`` exists, so it is that file, not a glob (which would
    match ``talks2.en``...); a glob with brackets that matches nothing says how to write one."""
    from pipeline_lib.ingest.lines import expand

    named = tmp_path / "talks[2019].en"
    named.write_text("Hello .\n")
    assert expand(str(named)) == [str(named)]
    with pytest.raises(InputError, match=r"a literal \[ is written \[\[\]"):
        expand(str(tmp_path / "talks[2020].en*"))


def test_a_glob_in_a_folder_one_may_not_read_says_permission_denied(tmp_path, monkeypatch):
    """An unreadable folder lists as empty, so its glob matched "no file"; the reason names the
    folder. (os.access is stood in for: the tests may run as root, who reads every folder.)"""
    import os

    from pipeline_lib.ingest.identity import no_match_reason

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(locked)
                        else real(p, mode))
    assert no_match_reason(str(locked / "*.en")) == (
        f"glob matches no file: permission denied reading the folder {locked}")
    assert no_match_reason(str(tmp_path / "*.en")) == "glob matches no file"


@pytest.mark.parametrize("damage, says", [
    # beside the line counts, as it is called when read alone as mono_text
    (lambda text: __import__("gzip").compress(text),
     r"has \d+ lines but .*train\.de: [^;]*gzip-compressed"),
    # read_lines names it first
    (lambda text: text.replace(b"\n", b"\r"), r"train\.de:1: has CR line ends"),
])
def test_a_damaged_side_of_a_pair_is_diagnosed_by_name(tmp_path, damage, says):
    """Issue 36 item 6: a gzip (not named .gz) or CR-only file as one side of a pair is called
    that, not only "has 52 lines but ... has 2000"."""
    good = "".join(f"Sentence number {i} of the talk .\n" for i in range(200)).encode()
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_bytes(good)
    tgt.write_bytes(damage(good.replace(b"Sentence", b"Satz")))
    with pytest.raises(InputError, match=says):
        run({"reader": "plaintext", "splits": {"train": {"src": str(src), "tgt": str(tgt)}}})


def test_mixed_encodings_are_advised_to_convert_only_the_bad_lines(tmp_path):
    """Issue 36 item 6: 70 % UTF-8 lines and 30 % cp1252: converting the whole file (the old
    advice) would corrupt the good 70 %."""
    from pipeline_lib.ingest.lines import diagnose

    path = tmp_path / "mixed.es"
    path.write_bytes("Café con leche .\n".encode() * 70 + "Café solo .\n".encode("cp1252") * 30)
    said = diagnose(str(path))
    assert said.startswith("mixed encodings") and "70 are utf-8 and 30 are not" in said
    assert "decode as cp1252" in said and "convert only the others" in said

"""Readers ``ldc_doc`` (per-document SGML, one glob per translator) and ``ldc_sent``."""

from __future__ import annotations

import pytest
from test_readers_common import DATA, assert_document_order, count_matches, reasons, run, sides_out

from pipeline_lib.ingest import InputError, SpecError, reader_module

D = DATA / "ldc"
DOC_SPEC = {"reader": "ldc_doc", "splits": {"train": {
    "src": str(D / "src" / "*.sgm"), "tgt": [str(D / "E01" / "*.sgm"), str(D / "E02" / "*.sgm")]}}}


def test_ldc_doc_pairs_documents_across_files_and_translators():
    kept, bad = run(DOC_SPEC)
    n = {d: sum(count_matches(p, rb"<seg[\s>]") for p in (D / d).glob("*.sgm")) for d in ("src", "E01", "E02")}
    assert sides_out(kept, bad) == n["src"] + n["E01"] + n["E02"] == 6 * 3
    # AFC20000102.0002 does not pair (E02 numbers its segment 7): source, E01 and E02 quarantined
    assert len(kept) + len(bad) == n["src"] + 2
    assert reasons(bad) == {"segment_id_mismatch": 3}
    assert_document_order(kept)
    assert kept[0].src == "新华社 北京 一月 一日 电"  # headline segments are translated too
    assert kept[2].tgt == ["Second paragraph, second sentence & others (E01)",
                           "Second paragraph, second sentence & others (E02)"]
    assert kept[2].src == "第二段 第二句 & 其他"
    assert len(reader_module("ldc_doc").input_files(DOC_SPEC)) == 6


def test_ldc_sent_lines_become_one_sentence_documents_without_context():
    spec = {"reader": "ldc_sent", "splits": {"train": {"src": str(D / "sent.zh"), "tgt": str(D / "sent.en")}}}
    kept, bad = run(spec)
    assert len(kept) + len(bad) == len((D / "sent.zh").read_bytes().splitlines()) == 4
    assert reasons(bad) == {"undecodable_bytes": 1, "empty_segment": 1}
    assert [(s.doc_id, s.sent_idx, s.has_context, s.tgt) for s in kept] == [
        ("sent.zh:1", 0, False, ["First sentence."]), ("sent.zh:4", 0, False, ["Fourth sentence."])]


def test_ldc_sent_reads_several_corpora_in_order(tmp_path):
    """A sentence-level training set that ships as several corpora (WMT14: Europarl, Common
    Crawl, News Commentary) is one split: file pairs read in order, ids unique per file."""
    (tmp_path / "cc.en").write_text("Hello.\nGood night.\n")
    (tmp_path / "cc.de").write_text("Hallo.\nGute Nacht.\n")
    spec = {"reader": "ldc_sent", "splits": {"train": {
        "src": [str(D / "sent.zh"), str(tmp_path / "cc.en")],
        "tgt": [str(D / "sent.en"), str(tmp_path / "cc.de")]}}}
    kept, bad = run(spec)
    assert [(s.doc_id, s.src, s.tgt) for s in kept[2:]] == [
        ("cc.en:1", "Hello.", ["Hallo."]), ("cc.en:2", "Good night.", ["Gute Nacht."])]
    assert [s.doc_id for s in kept[:2]] == ["sent.zh:1", "sent.zh:4"] and len(bad) == 2
    assert all(not s.has_context for s in kept)
    assert reader_module("ldc_sent").input_files(spec) == [
        str(D / "sent.zh"), str(D / "sent.en"), str(tmp_path / "cc.en"), str(tmp_path / "cc.de")]


@pytest.mark.parametrize("src, tgt, says", [
    (["a.en", "b.en"], ["a.de"], "as many `tgt` files as `src` files"),
])
def test_ldc_sent_file_lists_that_cannot_pair_are_refused(src, tgt, says):
    spec = {"reader": "ldc_sent", "splits": {"train": {"src": src, "tgt": tgt}}}
    with pytest.raises(SpecError, match=says):
        reader_module("ldc_sent").input_files(spec)


def test_ldc_sent_pair_of_uneven_files_names_both(tmp_path):
    (tmp_path / "a.en").write_text("One.\nTwo.\n")
    (tmp_path / "a.de").write_text("Eins.\n")
    spec = {"reader": "ldc_sent", "splits": {"train": {
        "src": [str(D / "sent.zh"), str(tmp_path / "a.en")],
        "tgt": [str(D / "sent.en"), str(tmp_path / "a.de")]}}}
    with pytest.raises(InputError, match=r"line counts differ .*a\.en has 2, .*a\.de has 1"):
        run(spec)


def test_ldc_glob_without_match_is_an_input_error():
    spec = {"reader": "ldc_doc", "splits": {"train": {"src": str(D / "missing" / "*.sgm"), "tgt": str(D / "E01")}}}
    with pytest.raises(InputError, match="matches no file"):
        run(spec)

"""Reader ``iwslt`` on WIT3-style ``train.tags`` files and IWSLT ``.xml`` dev files."""

from __future__ import annotations

import pytest
from test_readers_common import DATA, assert_document_order, count_matches, reasons, run, sides_out

from pipeline_lib.ingest import InputError, Limits

D = DATA / "iwslt"
TAGS = {"src": str(D / "train.tags.en-de.en"), "tgt": str(D / "train.tags.en-de.de")}
XML = {"src": str(D / "IWSLT17.TED.dev2010.en-de.en.xml"), "tgt": str(D / "IWSLT17.TED.dev2010.en-de.de.xml")}


def test_train_tags_talks_are_documents_and_headers_are_not_segments():
    kept, bad = run({"reader": "iwslt", "splits": {"train": TAGS}})
    text_lines = {side: [ln for ln in (D / f"train.tags.en-de.{side}").read_text().splitlines()
                         if not ln.startswith("<")] for side in ("en", "de")}
    assert sides_out(kept, bad) == len(text_lines["en"]) + len(text_lines["de"]) == 7 + 5
    # talk 102 does not pair: its English and German lines are quarantined, each on its own
    assert len(kept) + len(bad) == 7 + 1
    assert reasons(bad) == {"empty_segment": 1, "segment_count_mismatch": 2 + 1, "missing_reference": 1}
    assert_document_order(kept)
    assert [(s.doc_id, s.sent_idx, s.src, s.tgt) for s in kept] == [
        ("101", 0, "Thank you so much.", ["Vielen Dank."]),
        ("101", 1, "It's been great.", ["Es war großartig."]),
        ("101", 2, "And it was a pleasure.", ["Und es war mir ein Vergnügen."]),
    ]
    assert [s.origin_line for s in kept] == [8, 9, 11]


def test_xml_dev_set_reads_like_sgml_with_bare_ampersands():
    kept, bad = run({"reader": "iwslt", "splits": {"dev": XML}})
    assert len(kept) + len(bad) == count_matches(D / "IWSLT17.TED.dev2010.en-de.en.xml", rb"<seg[\s>]") == 3
    assert not bad
    assert [(s.doc_id, s.src, s.tgt) for s in kept][1:] == [
        ("535", "R&D & more.", ["F&E & mehr."]), ("531", "Hello.", ["Hallo."])]


def test_unequal_file_lists_and_text_before_any_talk_are_refused(tmp_path):
    with pytest.raises(ValueError, match="as many `tgt`"):
        run({"reader": "iwslt", "splits": {"train": {"src": [TAGS["src"]],
                                                     "tgt": [TAGS["tgt"], str(tmp_path / "x.de")]}}})
    headless = tmp_path / "train.tags.x.en"
    headless.write_text("a line before any header\n")
    with pytest.raises(InputError) as e:
        run({"reader": "iwslt", "splits": {"train": {"src": str(headless), "tgt": TAGS["tgt"]}}})
    assert e.value.line == 1


def test_long_and_undecodable_lines_are_quarantined_without_breaking_alignment(tmp_path):
    src = tmp_path / "train.tags.en-de.en"
    src.write_bytes((D / "train.tags.en-de.en").read_bytes().replace(b"It's been great.", b"It\xff been great."))
    kept, bad = run({"reader": "iwslt", "splits": {"train": {"src": str(src), "tgt": TAGS["tgt"]}}},
                    limits=Limits(max_line_chars=20))
    assert len(kept) + len(bad) == 8
    assert reasons(bad) == {"empty_segment": 1, "segment_count_mismatch": 3, "missing_reference": 1,
                            "undecodable_bytes": 1, "too_long": 1}
    assert [(s.src, s.tgt) for s in kept] == [("Thank you so much.", ["Vielen Dank."])]

"""Reader ``wmt_xml`` on a WMT 2022-style file with two translators and a <hyp>."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from test_readers_common import DATA, assert_document_order, reasons, run, sides_out

from pipeline_lib.ingest import InputError, Limits

FILE = DATA / "wmt" / "wmttest2022.en-de.xml"


def spec(**extra) -> dict:
    return {"reader": "wmt_xml", "splits": {"test": {"src": str(FILE), **extra}}}


def test_every_source_and_reference_segment_is_kept_or_quarantined():
    kept, bad = run(spec())
    root = ET.parse(FILE).getroot()  # independent counts
    n_src, n_ref = len(root.findall(".//doc/src//seg")), len(root.findall(".//doc/ref//seg"))
    assert sides_out(kept, bad) == n_src + n_ref == 8 + 15
    # news_2 does not pair: its 2 source and 1 + 2 reference segments are quarantined
    assert len(kept) + len(bad) == n_src + 3 == 11
    assert reasons(bad) == {"segment_count_mismatch": 2 + 3, "empty_segment": 1}
    assert_document_order(kept)
    assert [s.doc_id for s in kept] == ["news_1"] * 3 + ["news_3"] * 2


def test_translators_default_to_sorted_names_and_can_be_chosen():
    kept, _ = run(spec())
    assert kept[0].tgt == ["Der erste Satz & mehr.", "Der erste Satz (B)."]
    assert kept[0].src == "The first sentence & more."
    kept_b, bad_b = run(spec(translators=["B"]))
    assert kept_b[0].tgt == ["Der erste Satz (B)."]
    # with translator B alone, news_2 pairs: only A's reference was short
    assert [s.src for s in kept_b if s.doc_id == "news_2"] == ["Only two references agree on length.", "Here."]
    assert reasons(bad_b) == {"empty_segment": 1}
    with pytest.raises(InputError, match="translator"):
        run(spec(translators=["C"]))


def test_malformed_xml_is_an_input_error_with_line():
    with pytest.raises(InputError) as e:
        run({"reader": "wmt_xml", "splits": {"test": {"src": str(DATA / "wmt" / "broken.xml")}}})
    assert e.value.line == 5 and "malformed XML" in str(e.value)


def test_long_segments_are_quarantined_and_undecodable_files_refused(tmp_path):
    kept, bad = run(spec(), limits=Limits(max_line_chars=20))
    assert len(kept) + len(bad) == 11
    assert reasons(bad) == {"segment_count_mismatch": 5, "empty_segment": 1, "too_long": 2}
    latin1 = tmp_path / "latin1.xml"
    latin1.write_bytes(FILE.read_bytes().replace(b"The second sentence.", b"Caf\xe9."))
    with pytest.raises(InputError, match="malformed XML") as e:
        run({"reader": "wmt_xml", "splits": {"test": {"src": str(latin1)}}})
    assert e.value.line == 8

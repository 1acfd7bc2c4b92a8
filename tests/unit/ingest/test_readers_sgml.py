"""Reader ``sgml`` on a NIST MT06-style fixture: two <refset>s, bare '&', segments left open,
a segment over two lines, and one instance of every kind of bad input."""

from __future__ import annotations

import re

import pytest
from test_readers_common import DATA, assert_document_order, count_matches, reasons, run, sides_out

from pipeline_lib.ingest import InputError

SRC, REF = DATA / "sgml" / "mt06.src.sgm", DATA / "sgml" / "mt06.ref.sgm"


def spec(tgt) -> dict:
    return {"reader": "sgml", "splits": {"test": {"src": str(SRC), "tgt": tgt}}}


def orphan_ref_segments() -> int:
    """<seg>s of reference documents whose docid the source file does not have."""
    src_ids = set(re.findall(rb'<doc docid="([^"]+)"', SRC.read_bytes()))
    docs = re.findall(rb'<doc docid="([^"]+)"(.*?)</doc>', REF.read_bytes(), re.S)
    return sum(body.count(b"<seg") for docid, body in docs if docid not in src_ids)


def test_every_segment_is_kept_or_quarantined_with_its_reason():
    kept, bad = run(spec(str(REF)))
    # records: every source segment, plus the reference segments of documents that do not pair
    # (AFP.0003: 2 + 3) and of the reference document without a source (AFP.0099)
    assert len(kept) + len(bad) == count_matches(SRC, rb"<seg[\s>]") + 5 + orphan_ref_segments() == 19
    seg = rb"<seg[\s>]"
    assert sides_out(kept, bad) == count_matches(SRC, seg) + count_matches(REF, seg) == 13 + 24
    assert reasons(bad) == {"empty_segment": 1, "segment_count_mismatch": 2 + 5, "too_long": 1,
                            "undecodable_bytes": 1, "missing_reference": 2,
                            "reference_without_source": 1}
    assert {r.origin_file for r in bad if r.reason == "segment_count_mismatch"} == {str(SRC), str(REF)}
    assert_document_order(kept)
    by_reason = {r.reason: r for r in bad}
    assert (by_reason["undecodable_bytes"].doc_id, by_reason["undecodable_bytes"].origin_line) == ("AFP.0005", 26)
    assert by_reason["reference_without_source"].origin_file == str(REF)


def test_references_pair_by_docid_and_seg_id_across_refsets():
    kept, _ = run(spec(str(REF)))
    first = [s for s in kept if s.doc_id == "AFP.0001"]
    assert [s.src for s in first] == ["法新社 AT&T 报道 & 分析", "第二句 跨越 两行", "第三句 没有结束标签"]
    # refset 2 lists the segments as 3, 1, 2: pairing is by id, not position
    assert first[0].tgt == ["AFP reports on AT&T & analysis", "AFP report, second translator"]
    assert first[2].tgt == ["third sentence without end tag", "third sentence, second translator"]
    assert [(s.origin_line, s.has_context) for s in first] == [(4, True), (7, True), (9, True)]
    # the empty segment is quarantined and the kept ones renumbered without a gap
    second = [s for s in kept if s.doc_id == "AFP.0002"]
    assert [(s.sent_idx, s.origin_line, s.tgt[0]) for s in second] == [
        (0, 13, "first sentence"), (1, 15, "third sentence 中")]


def test_several_reference_files_each_add_their_refsets(tmp_path):
    copy = tmp_path / "mt06.ref2.sgm"   # a file is read once per corpus
    copy.write_bytes(REF.read_bytes())
    kept, _ = run(spec([str(REF), str(copy)]))
    assert {len(s.tgt) for s in kept} == {4}


def test_malformed_source_is_an_input_error_with_line():
    bad = {"reader": "sgml", "splits": {"test": {"src": str(DATA / "sgml" / "broken.sgm"),
                                                 "tgt": str(REF)}}}
    with pytest.raises(InputError) as e:
        run(bad)
    assert e.value.line == 4

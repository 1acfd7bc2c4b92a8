"""Reader ``gale_tdf`` (GALE Tab Delimited Format, source .tdf + translation .eng.tdf) and the
``src_encoding`` of ``ldc_doc`` (GB2312 MTC sources), on fixtures in the releases' layouts under
tests/data/presets/data/ldc/, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_readers_common import reasons, run, sides_out

from pipeline_lib.ingest import InputError, Limits, SpecError, reader_module
from pipeline_lib.ingest.tdf import FIELDS, stem

ROOT = Path(__file__).resolve().parents[3]
LDC = ROOT / "tests" / "data" / "presets" / "data" / "ldc"
WIDE = Limits(max_line_chars=2000)
HEADER = "\t".join(f"{f};{'int' if f in ('channel', 'section', 'turn', 'segment') else 'unicode'}"
                   for f in FIELDS)


def tdf(*records: tuple[int, str] | str) -> str:
    """A TDF file: the field declaration, a comment, then one line per (segment id, text), or a
    raw line given as a string."""
    lines = [HEADER, ";;MM sectionTypes\t[None]"]
    for r in records:
        lines.append(r if isinstance(r, str) else
                     "\t".join(["f", "0", "0.0", "0.0", "a", "b", "c", r[1], "0", "0", str(r[0]),
                                "d", "e"]))
    return "\n".join(lines) + "\n"


def spec(src, tgt) -> dict:
    return {"reader": "gale_tdf", "splits": {"train": {"src": src, "tgt": tgt}}}


def test_the_release_layout_pairs_files_by_stem_and_segments_in_order():
    rel = LDC / "LDC2009T15" / "data"
    kept, bad = run(spec(str(rel / "source" / "*.tdf"), str(rel / "translation" / "*.eng.tdf")), WIDE)
    assert not bad and len(kept) == 7
    docs = sorted({s.doc_id for s in kept})
    assert docs == ["cmn-ng-alt.chinese.text-20050201-1001", "cmn-ng-alt.chinese.text-20050203-2002"]
    first = [s for s in kept if s.doc_id == docs[0]]
    assert [s.sent_idx for s in first] == [0, 1, 2, 3] and all(s.has_context for s in first)
    assert (first[0].src, first[0].tgt) == ("我觉得这个问题很重要。", ["I think this question is very important."])
    assert first[0].origin_line == 4          # after the declaration and two ;;MM lines
    assert stem("x/a.b.eng.tdf") == stem("y/a.b.tdf") == "a.b"
    files = reader_module("gale_tdf").input_files(spec(str(rel / "source" / "*.tdf"),
                                                       str(rel / "translation" / "*.tdf")))
    assert len(files) == 4


def test_documents_that_do_not_pair_are_quarantined(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "tgt").mkdir()
    w = lambda d, name, text: (tmp_path / d / name).write_text(text, encoding="utf-8")
    w("src", "a.tdf", tdf((0, "一"), (1, "二"), "too\tfew\tfields", (2, "三")))
    w("tgt", "a.eng.tdf", tdf((0, "One"), (1, "Two"), (3, "Three")))             # id 3 != 2
    w("src", "b.tdf", tdf((0, "一"), (1, "二")))
    w("tgt", "b.eng.tdf", tdf((0, "One")))                                         # one short
    w("src", "c.tdf", tdf((0, "孤")))                                              # no translation
    w("tgt", "d.eng.tdf", tdf((0, "Orphan")))                                      # no source
    w("src", "e.tdf", tdf((0, ""), (1, "好")))
    w("tgt", "e.eng.tdf", tdf((0, "Empty source"), (1, "Good")))
    kept, bad = run(spec(str(tmp_path / "src" / "*.tdf"), str(tmp_path / "tgt" / "*.tdf")), WIDE)
    assert [(s.doc_id, s.src, s.tgt) for s in kept] == [
        ("a", "一", ["One"]), ("a", "二", ["Two"]), ("e", "好", ["Good"])]
    assert reasons(bad) == {"field_count": 1, "segment_id_mismatch": 1,
                            "segment_count_mismatch": 3, "missing_reference": 1,
                            "reference_without_source": 1, "empty_segment": 1}
    assert next(r for r in bad if r.reason == "field_count").origin_line == 5
    # every record line of every file is in a kept pair or in the quarantine
    assert sides_out(kept, bad) == 4 + 3 + 2 + 1 + 1 + 1 + 2 + 2


def test_a_file_that_is_not_tdf_is_an_input_error(tmp_path):
    (tmp_path / "a.tdf").write_text("just text\n")
    (tmp_path / "a.eng.tdf").write_text(tdf((0, "x")))
    with pytest.raises(InputError, match="not a TDF file"):
        run(spec(str(tmp_path / "a.tdf"), str(tmp_path / "a.eng.tdf")))
    with pytest.raises(SpecError, match="has no key"):
        run({"reader": "gale_tdf", "splits": {"train": {"src": "a", "tgt": "b", "docids": "c"}}})


def test_ldc_doc_reads_gb_encoded_mtc_sources_with_src_encoding():
    """MTC (LDC2002T01) ships GB2312 Chinese with one directory of translations per team."""
    rel = LDC / "LDC2002T01" / "data"
    entry = {"reader": "ldc_doc", "splits": {"train": {
        "src": str(rel / "source" / "*.sgm"), "src_encoding": "gb18030",
        "tgt": [str(rel / "translation" / "E01" / "*.sgm"), str(rel / "translation" / "E02" / "*.sgm")]}}}
    kept, bad = run(entry, WIDE)
    assert not bad and len(kept) == 5
    assert (kept[1].src, kept[1].tgt[0]) == ("中国经济继续稳定增长。", "China's economy continues to grow steadily.")
    assert len(kept[0].tgt) == 2
    # read as UTF-8 (no src_encoding) every GB line is undecodable bytes, quarantined
    del entry["splits"]["train"]["src_encoding"]
    kept, bad = run(entry, WIDE)
    assert not kept and set(reasons(bad)) == {"undecodable_bytes"}
    entry["splits"]["train"]["src_encoding"] = "utf-16"
    with pytest.raises(SpecError, match="ASCII-compatible"):
        run(entry, WIDE)

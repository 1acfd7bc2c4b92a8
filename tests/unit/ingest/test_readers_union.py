"""Reader ``union``: one corpus from releases in different formats (GB-encoded LDC SGML and GALE
TDF, the fixtures of tests/data/presets/data/ldc), through the ingest CLI's own path."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_readers_common import reasons, run

from pipeline_lib.ingest import InputError, Limits, SpecError, reader_module
from pipeline_lib.ingest.__main__ import ingest

LDC = Path(__file__).resolve().parents[3] / "tests" / "data" / "presets" / "data" / "ldc"
MTC = {"reader": "ldc_doc", "splits": {"train": {
    "src": str(LDC / "LDC2002T01" / "data" / "source" / "*.sgm"), "src_encoding": "gb18030",
    "tgt": [str(LDC / "LDC2002T01" / "data" / "translation" / "E01" / "*.sgm")]}}}
GALE = {"reader": "gale_tdf", "splits": {"train": {
    "src": [str(LDC / r / "data" / "source" / "*.tdf") for r in ("LDC2009T15", "LDC2010T03")],
    "tgt": [str(LDC / r / "data" / "translation" / "*.tdf") for r in ("LDC2009T15", "LDC2010T03")]}}}
WIDE = Limits(max_line_chars=2000)


def test_parts_are_read_in_order_into_one_corpus(tmp_path):
    entry = {"reader": "union", "parts": [MTC, GALE]}
    manifest = ingest("docs", entry, WIDE, tmp_path)
    rows = pq.read_table(tmp_path / "docs.parquet").to_pylist()
    assert manifest["counts"]["sentences"] == {"train": 5 + 10}
    assert manifest["counts"]["documents"] == {"train": 2 + 3}
    assert [r["doc_id"] for r in rows][:2] == ["part1/XIN19990101.0001"] * 2   # MTC first, in order
    assert rows[-1]["doc_id"] == "part2/cmn-ng-tw.bbs.20050310-3003"
    assert len(manifest["inputs"]) == len(reader_module("ldc_doc").input_files(MTC)) + \
        len(reader_module("gale_tdf").input_files(GALE))
    assert json.loads((tmp_path / "manifest.json").read_text())["counts"]["kept"] == 15


def test_a_document_of_an_earlier_part_is_a_duplicate(tmp_path):
    """Ids are the parts' own (``part1/...``, ``part2/...``), so the repeat is found by content:
    here a copy of the GALE releases in another folder."""
    import shutil

    for r in ("LDC2009T15", "LDC2010T03"):
        shutil.copytree(LDC / r, tmp_path / r)
    copy = {"reader": "gale_tdf", "splits": {"train": {
        "src": [str(tmp_path / r / "data" / "source" / "*.tdf") for r in ("LDC2009T15", "LDC2010T03")],
        "tgt": [str(tmp_path / r / "data" / "translation" / "*.tdf")
                for r in ("LDC2009T15", "LDC2010T03")]}}}
    kept, bad = run({"reader": "union", "parts": [GALE, copy]}, WIDE)
    assert len(kept) == 10 and reasons(bad) == {"duplicate_doc_content": 10}
    assert {r.doc_id.split("/")[0] for r in bad} == {"part2"}


def test_the_same_release_listed_twice_is_refused_by_name():
    """Issue 36 item 6: the same files in two parts are a listing mistake, said as one (they used
    to be quarantined whole, and the mostly-quarantined check blamed the file's bytes)."""
    with pytest.raises(SpecError, match=r"LDC2009T15/data/source/\S+\.tdf is read by part 1 and "
                                        r"part 2 of the union: a release listed twice"):
        run({"reader": "union", "parts": [GALE, GALE]}, WIDE)


def test_an_empty_split_is_an_error_only_if_no_part_fills_it(tmp_path):
    empty = tmp_path / "e"
    (empty / "source").mkdir(parents=True)
    (empty / "translation").mkdir()
    (empty / "source" / "x.tdf").write_text("\t".join(
        f"{f};unicode" for f in ("file", "channel", "start", "end", "speaker", "speakerType",
                                 "speakerDialect", "transcript", "section", "turn", "segment",
                                 "sectionType", "suType")) + "\n")
    (empty / "translation" / "x.eng.tdf").write_text((empty / "source" / "x.tdf").read_text())
    nothing = {"reader": "gale_tdf", "splits": {"train": {
        "src": str(empty / "source" / "x.tdf"), "tgt": str(empty / "translation" / "x.eng.tdf")}}}
    ingest("ok", {"reader": "union", "parts": [nothing, GALE]}, WIDE, tmp_path / "ok")
    with pytest.raises(InputError, match="keeps no sentence"):
        ingest("empty", {"reader": "union", "parts": [nothing]}, WIDE, tmp_path / "empty")


@pytest.mark.parametrize("entry, says", [
    ({"reader": "union", "parts": []}, "non-empty list"),
    ({"reader": "union", "parts": [{"reader": "union", "parts": [GALE]}]}, "cannot be a union"),
])
def test_unusable_unions_are_refused(entry, says):
    with pytest.raises(SpecError, match=says):
        run(entry)

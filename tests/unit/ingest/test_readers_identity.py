"""Identity across files and markup inside segments (issue 27, items 1 and 3): each test is a
failure's reproduction on fixtures in the formats' shapes, and failed before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_readers_common import DATA, reasons, run, sides_out

from pipeline_lib.ingest import Limits, SpecError
from pipeline_lib.ingest.__main__ import ingest

WIDE = Limits(max_line_chars=2000)
IWSLT = DATA / "iwslt"
DEV_EN, DEV_DE = (str(IWSLT / f"IWSLT17.TED.dev2010.en-de.{lang}.xml") for lang in ("en", "de"))
SGML = DATA / "sgml"


# --- 1. a file listed twice ------------------------------------------------------------------

def test_the_same_test_file_listed_twice_in_a_split_is_refused_naming_both_places():
    entry = {"reader": "iwslt", "splits": {"test": {"src": [DEV_EN, DEV_EN], "tgt": [DEV_DE, DEV_DE]}}}
    with pytest.raises(SpecError, match=r"splits\.test\.src\[0\] and splits\.test\.src\[1\]"):
        run(entry)


def test_a_reference_file_listed_twice_is_refused():
    ref = str(SGML / "mt06.ref.sgm")
    entry = {"reader": "sgml", "splits": {"test": {"src": str(SGML / "mt06.src.sgm"),
                                                   "tgt": [ref, ref]}}}
    with pytest.raises(SpecError, match=r"listed twice.*splits\.test\.tgt\[0\] and "
                                        r"splits\.test\.tgt\[1\]"):
        run(entry)


def test_a_file_in_two_splits_is_refused_also_through_another_spelling_or_a_glob(tmp_path):
    de = tmp_path / Path(DEV_DE).name   # a distinct file: only the source is repeated
    de.write_bytes(Path(DEV_DE).read_bytes())
    entry = {"reader": "iwslt", "splits": {"dev": {"src": DEV_EN, "tgt": DEV_DE},
                                           "test": {"src": str(IWSLT / "." / Path(DEV_EN).name),
                                                    "tgt": str(de)}}}
    with pytest.raises(SpecError, match=r"splits\.dev\.src and splits\.test\.src"):
        run(entry)
    root = DATA / "gale_tdf"
    entry = {"reader": "gale_tdf", "splits": {
        "train": {"src": str(root / "p*" / "source" / "*.tdf"),
                  "tgt": str(root / "p*" / "translation" / "*.tdf")},
        "dev": {"src": str(root / "p1" / "source" / "CNR_001.tdf"),
                "tgt": str(root / "p1" / "translation" / "CNR_001.eng.tdf")}}}
    with pytest.raises(SpecError, match=r"splits\.train\.src \(\S*p\*/source/\*\.tdf\) and "
                                        r"splits\.dev\.src:"):
        run(entry)


# --- 1. document ids from the path, not the base name ----------------------------------------

def test_gale_tdf_files_with_one_stem_in_two_folders_are_two_documents():
    root = DATA / "gale_tdf"
    entry = {"reader": "gale_tdf", "splits": {"train": {
        "src": str(root / "p*" / "source" / "*.tdf"), "tgt": str(root / "p*" / "translation" / "*.tdf")}}}
    kept, bad = run(entry, WIDE)
    assert not bad and sides_out(kept, bad) == 2 * (1 + 2)
    assert [(s.doc_id, s.src, s.tgt) for s in kept] == [
        ("p1/source/CNR_001", "第一部分的文件。", ["A file of part one."]),
        ("p2/source/CNR_001", "第二部分的文件。", ["A file of part two."]),
        ("p2/source/CNR_001", "同名不同文。", ["Same name, other text."])]


def test_a_union_of_two_releases_with_the_same_file_names_keeps_both(tmp_path):
    part = lambda rel: {"reader": "plaintext", "splits": {"train": {
        "src": str(DATA / "plaintext" / rel / "train.es"), "tgt": str(DATA / "plaintext" / rel / "train.en")}}}
    kept, bad = run({"reader": "union", "parts": [part("rel1"), part("rel2")]}, WIDE)
    assert not bad and len(kept) == 4
    assert len({s.doc_id for s in kept if s.src.startswith("Primera")}
               & {s.doc_id for s in kept if s.src.startswith("Otra")}) == 0
    manifest = ingest("u", {"reader": "union", "parts": [part("rel1"), part("rel2")]}, WIDE, tmp_path)
    assert manifest["counts"]["sentences"] == {"train": 4} and manifest["counts"]["quarantined"] == 0


def test_a_document_repeated_in_a_later_part_of_a_union_is_quarantined_and_counted(tmp_path):
    part = {"reader": "plaintext", "splits": {"train": {
        "src": str(DATA / "plaintext" / "rel1" / "train.es"),
        "tgt": str(DATA / "plaintext" / "rel1" / "train.en")}}}
    copy = tmp_path / "copy"   # a later release that ships rel1's document again, then its own
    copy.mkdir()
    for lang, word in (("es", "Frase"), ("en", "Sentence")):
        own = "".join(f"{word} {i} de la otra versión.\n" for i in range(10))
        (copy / f"train.{lang}").write_text(
            (DATA / "plaintext" / "rel1" / f"train.{lang}").read_text(encoding="utf-8") + "\n" + own,
            encoding="utf-8")
    again = {"reader": "plaintext", "splits": {"train": {
        "src": str(copy / "train.es"), "tgt": str(copy / "train.en")}}}
    kept, bad = run({"reader": "union", "parts": [part, again]}, WIDE)
    assert len(kept) == 2 + 10 and reasons(bad) == {"duplicate_doc_content": 2}
    assert {r.origin_file for r in bad} == {str(copy / "train.es")}
    manifest = ingest("u", {"reader": "union", "parts": [part, again]}, WIDE, tmp_path / "out")
    assert manifest["rejected"] == {"duplicate_doc_content": 2}


def test_a_talk_or_file_repeated_under_another_name_in_a_split_is_quarantined(tmp_path):
    """Each IWSLT file pair is aligned on its own, and a GALE file pair is a document: a test year
    or a file shipped twice under two names passed every per-file check."""
    for lang, path in (("en", DEV_EN), ("de", DEV_DE)):   # tst2010 = dev2010 renamed
        (tmp_path / f"IWSLT17.TED.tst2010.en-de.{lang}.xml").write_bytes(Path(path).read_bytes())
    test = {"src": [DEV_EN, str(tmp_path / "IWSLT17.TED.tst2010.en-de.en.xml")],
            "tgt": [DEV_DE, str(tmp_path / "IWSLT17.TED.tst2010.en-de.de.xml")]}
    kept, bad = run({"reader": "iwslt", "splits": {"test": test}}, WIDE)
    assert len(kept) == len(bad) == 3 and reasons(bad) == {"duplicate_doc_id": 3}
    assert {r.origin_file for r in bad} == {test["src"][1]}
    root = DATA / "gale_tdf" / "p1"
    (tmp_path / "source").mkdir()
    (tmp_path / "translation").mkdir()
    (tmp_path / "source" / "CNR_002.tdf").write_bytes((root / "source" / "CNR_001.tdf").read_bytes())
    (tmp_path / "translation" / "CNR_002.eng.tdf").write_bytes(
        (root / "translation" / "CNR_001.eng.tdf").read_bytes())
    kept, bad = run({"reader": "gale_tdf", "splits": {"test": {
        "src": [str(root / "source" / "CNR_001.tdf"), str(tmp_path / "source" / "CNR_002.tdf")],
        "tgt": [str(root / "translation" / "CNR_001.eng.tdf"),
                str(tmp_path / "translation" / "CNR_002.eng.tdf")]}}}, WIDE)
    assert [s.doc_id for s in kept] == ["CNR_001"]
    assert [(r.doc_id, r.reason) for r in bad] == [("CNR_002", "duplicate_doc_content")]


def test_talks_without_talk_ids_in_two_train_tags_files_are_two_documents(tmp_path):
    """Ids ``#<ordinal>`` restarted in each file: two files' first talks were one document."""
    files = {}
    for year, (en, de) in {"2016": ("Hello there.", "Hallo."), "2017": ("Good night.", "Gute Nacht.")}.items():
        for lang, text in (("en", en), ("de", de)):
            path = tmp_path / year / f"train.tags.en-de.{lang}"
            path.parent.mkdir(exist_ok=True)
            path.write_text(f"<url>http://www.ted.com/talks/{year}</url>\n<title>T</title>\n{text}\n",
                            encoding="utf-8")
            files.setdefault(lang, []).append(str(path))
    kept, bad = run({"reader": "iwslt", "splits": {"train": {"src": files["en"], "tgt": files["de"]}}})
    assert not bad
    assert [(s.doc_id, s.sent_idx) for s in kept] == [("2016/train.tags.en-de.en#0", 0),
                                                      ("2017/train.tags.en-de.en#0", 0)]


def test_sentence_readers_name_files_of_one_name_apart(tmp_path):
    """ldc_sent and aspec refused two files of one name (ids ``<file name>:<line>``); ids are
    now the path below the split's common folder, and both files are read."""
    for part in ("x", "y"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "train.zh").write_text(f"{part} 第一句\n", encoding="utf-8")
        (tmp_path / part / "train.en").write_text(f"{part} first sentence.\n", encoding="utf-8")
        (tmp_path / part / "train-1.txt").write_text(
            f"0.9 ||| A-{part}-1 ||| 1 ||| {part} 本研究。 ||| {part} This study.\n", encoding="utf-8")
    kept, bad = run({"reader": "ldc_sent", "splits": {"train": {
        "src": [str(tmp_path / p / "train.zh") for p in "xy"],
        "tgt": [str(tmp_path / p / "train.en") for p in "xy"]}}}, WIDE)
    assert not bad and [s.doc_id for s in kept] == ["x/train.zh:1", "y/train.zh:1"]
    kept, bad = run({"reader": "aspec", "splits": {"train": {
        "file": [str(tmp_path / p / "train-1.txt") for p in "xy"]}}}, WIDE)
    assert not bad and [s.doc_id for s in kept] == ["x/train-1.txt:1", "y/train-1.txt:1"]


# --- 3. markup inside a segment --------------------------------------------------------------

def test_a_raw_paragraph_tag_inside_a_segment_never_cuts_it():
    entry = {"reader": "sgml", "splits": {"test": {"src": str(SGML / "markup_in_seg.src.sgm"),
                                                   "tgt": str(SGML / "markup_in_seg.ref.sgm")}}}
    kept, bad = run(entry, WIDE)
    # a segment left open still ends at its paragraph's end (XIN.0002, 2)
    assert [(s.doc_id, s.src, s.tgt) for s in kept] == [
        ("XIN.0001", "A second sentence.", ["Ein zweiter Satz."]),
        ("XIN.0002", "Left open before its paragraph ends.", ["Offen gelassen vor dem Absatzende."]),
        ("XIN.0002", "Closed.", ["Geschlossen."])]
    # ... but one whose </seg> or text follows the tag is quarantined whole, tag included
    assert [(r.doc_id, r.reason, r.origin_line) for r in bad] == [
        ("XIN.0001", "markup_in_segment", 4), ("XIN.0002", "markup_in_segment", 10)]
    assert [r.record for r in bad] == [
        "The tag <p> stands for a paragraph in HTML. ||| Die Marke <p> steht in HTML für einen Absatz.",
        "Left open, and cut by a raw </p> in its text ||| Offen gelassen, und ein rohes </p> im Text"]
    assert sides_out(kept, bad) == 2 * 5

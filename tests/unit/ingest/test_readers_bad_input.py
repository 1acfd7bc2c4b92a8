"""Bad corpus input never passes silently (issue 11, items 1-6): truncated markup, control
characters and wrong encodings, empty splits, unpairable files, where a fault is reported, and
what a failed run leaves behind. Each test plants one fault in a copy of a real fixture."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_readers_common import DATA, reasons, run

from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.__main__ import main as ingest_main

IWSLT_EN = DATA / "iwslt" / "IWSLT17.TED.dev2010.en-de.en.xml"
IWSLT_DE = DATA / "iwslt" / "IWSLT17.TED.dev2010.en-de.de.xml"
NIST_SRC, NIST_REF = DATA / "sgml" / "mt06.src.sgm", DATA / "sgml" / "mt06.ref.sgm"
WMT = DATA / "wmt" / "wmttest2022.en-de.xml"
GIGA = DATA / "mono" / "afp_eng_199405.sgml"


def cut(path: Path, tmp: Path, after: bytes) -> Path:
    """A copy of ``path`` that ends right after the first occurrence of ``after``."""
    data = path.read_bytes()
    end = data.index(after) + len(after)
    out = tmp / path.name
    out.write_bytes(data[:end])
    return out


def iwslt(src: Path, tgt: Path) -> dict:
    return {"reader": "iwslt", "splits": {"dev": {"src": str(src), "tgt": str(tgt)}}}


def plaintext(tmp: Path, src: bytes, tgt: bytes, **extra) -> dict:
    (tmp / "a.es").write_bytes(src)
    (tmp / "a.en").write_bytes(tgt)
    return {"reader": "plaintext",
            "splits": {"train": {"src": str(tmp / "a.es"), "tgt": str(tmp / "a.en"), **extra}}}


def cli(spec: dict, out: Path, caplog) -> tuple[int, str]:
    """``python -m pipeline_lib.ingest`` in this process (an exception would fail the test)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ingest"):
        rc = ingest_main(["--corpus", "c", "--spec", json.dumps(spec), "--out-dir", str(out)])
    return rc, caplog.text


# --- 1. truncated XML / SGML ---------------------------------------------------------------

def test_1_iwslt_xml_cut_after_a_seg_line_names_the_open_doc(tmp_path):
    src = cut(IWSLT_EN, tmp_path, b"two slides. </seg>\n")
    with pytest.raises(InputError, match="<doc> opened here is never closed") as e:
        run(iwslt(src, IWSLT_DE))
    assert (e.value.path, e.value.line) == (str(src), 4)  # <doc docid="535"> is on line 4


def test_1_cut_inside_a_segment_is_not_kept_as_half_a_segment(tmp_path):
    tgt = cut(IWSLT_DE, tmp_path, b"Letztes Jahr zei")
    with pytest.raises(InputError, match=r"<seg> opened here is never closed; the file ends") as e:
        run(iwslt(IWSLT_EN, tgt))
    assert (e.value.path, e.value.line) == (str(tgt), 8)


def test_1_nist_reference_cut_between_documents_names_the_open_refset(tmp_path):
    ref = cut(NIST_REF, tmp_path, b"<seg id=\"1\">one, second translator</seg>\n")
    with pytest.raises(InputError, match="<doc> opened here") as e:
        run({"reader": "sgml", "splits": {"test": {"src": str(NIST_SRC), "tgt": str(ref)}}})
    assert e.value.path == str(ref) and e.value.line == 38
    whole_docs = cut(NIST_REF, tmp_path, b"translator</seg>\n</doc>\n")
    with pytest.raises(InputError, match="<refset> opened here") as e:
        run({"reader": "sgml", "splits": {"test": {"src": str(NIST_SRC), "tgt": str(whole_docs)}}})
    assert e.value.line == 27  # the second <refset>


def test_1_cut_inside_a_closing_tag_and_gigaword_cut_are_errors(tmp_path):
    ref = cut(NIST_REF, tmp_path, b"</refse")
    with pytest.raises(InputError, match="<refset> opened here"):
        run({"reader": "sgml", "splits": {"test": {"src": str(NIST_SRC), "tgt": str(ref)}}})
    giga = cut(GIGA, tmp_path, b"</DOC>\n<DO")  # after a whole document, inside the next tag
    with pytest.raises(InputError, match="the file ends inside a tag"):
        run({"reader": "mono_sgml", "splits": {"mono": {"src": str(giga)}}})
    giga.write_bytes(GIGA.read_bytes()[:GIGA.read_bytes().index(b"paragraph.") + 3])
    with pytest.raises(InputError, match=r"<p> opened here") as e:
        run({"reader": "mono_sgml", "splits": {"mono": {"src": str(giga)}}})
    assert e.value.line == 13


def test_1_wmt_xml_cut_names_the_innermost_open_element(tmp_path):
    xml = cut(WMT, tmp_path, b"Der zweite Satz (B")
    with pytest.raises(InputError, match="<seg> opened here is never closed") as e:
        run({"reader": "wmt_xml", "splits": {"test": {"src": str(xml)}}})
    assert (e.value.path, e.value.line) == (str(xml), 17)


def test_1_real_world_sgml_variations_are_still_read(tmp_path):
    """CRLF, a leading BOM, upper-case tags, unquoted and reordered attributes, trailing blanks,
    a segment closed by the next one or by </p>, a <p> closed by </doc>."""
    src = tmp_path / "src.sgm"
    src.write_bytes(b"\xef\xbb\xbf" + (
        '<SRCSET setid=x srclang=any>  \r\n'
        '<DOC genre=nw docid=D1 sysid="src">\r\n'
        '<p>\r\n'
        '<SEG id=1>Erster Satz.   \r\n'
        '<seg id="2" >Zweiter &amp; letzter.</seg >\t\r\n'
        '</p>\r\n'
        '</DOC>\r\n'
        '</SRCSET>').encode())
    ref = tmp_path / "ref.sgm"
    ref.write_text('<refset trglang=en setid=x>\n<doc docid="D1">\n<p>\n<seg id=1>First.</seg>\n'
                   '<seg id=2>Second &amp; last.\n</doc>\n</refset>\n')
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": str(src), "tgt": str(ref)}}})
    assert not bad
    assert [(s.src, s.tgt) for s in kept] == [("Erster Satz.", ["First."]),
                                              ("Zweiter & letzter.", ["Second & last."])]


# --- 2. control characters and wrong encodings ---------------------------------------------

def test_2_nul_and_other_c0_controls_are_quarantined_with_their_own_reason(tmp_path):
    spec = plaintext(tmp_path, "Hola mundo.\nHola\x00 mundo.\nTab\tes bueno.\n".encode(),
                     "Hello world.\nHello world.\nTab is\x1b fine.\n".encode())
    kept, bad = run(spec)
    assert [s.src for s in kept] == ["Hola mundo."]
    assert reasons(bad) == {"control_character": 2}
    assert [(Path(r.origin_file).name, r.origin_line) for r in bad] == [("a.es", 2), ("a.en", 3)]
    entity = tmp_path / "ent.sgm"
    entity.write_bytes(NIST_SRC.read_bytes().replace("第二句 跨越".encode(), "第二句&#27; 跨越".encode()))
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": str(entity), "tgt": str(NIST_REF)}}})
    assert reasons(bad)["control_character"] == 1
    assert not any("\x1b" in s.src for s in kept)


@pytest.mark.parametrize("codec, named", [("utf-16", "UTF-16-LE (byte-order mark"),
                                          ("utf-16-le", "UTF-16-LE (5"),
                                          ("utf-16-be", "UTF-16-BE"),
                                          ("utf-32", "UTF-32-LE (byte-order mark"),
                                          ("utf-32-be", "UTF-32-BE")])
def test_2_utf16_and_utf32_files_are_errors_naming_the_encoding(tmp_path, codec, named):
    text = "Hola mundo.\nAdiós.\n"
    spec = plaintext(tmp_path, text.encode(codec), text.encode())
    with pytest.raises(InputError, match=rf"a\.es: looks like {re.escape(named)}.*not UTF-8") as e:
        run(spec)
    assert e.value.path.endswith("a.es")
    for reader, path in (("sgml", NIST_SRC), ("wmt_xml", WMT)):
        wide = tmp_path / path.name
        wide.write_bytes(path.read_bytes().decode("utf-8", "replace").encode(codec))
        split = {"src": str(wide), "tgt": str(NIST_REF)} if reader == "sgml" else {"src": str(wide)}
        with pytest.raises(InputError, match=rf"{path.name}: looks like UTF-"):
            run({"reader": reader, "splits": {"test": split}})


def test_2_bom_after_line_1_is_removed_and_counted(tmp_path, caplog):
    """Two files concatenated: the second one's BOM starts line 3."""
    bom = b"\xef\xbb\xbf"
    spec = plaintext(tmp_path, bom + b"Uno.\nDos.\n" + bom + b"Tres.\n",
                     bom + b"One.\nTwo.\n" + bom + b"Three.\n")
    rc, log = cli(spec, tmp_path / "out", caplog)
    assert rc == 0, log
    rows = pq.read_table(tmp_path / "out" / "docs.parquet").to_pylist()
    assert [(r["src"], r["tgt"]) for r in rows] == [("Uno.", ["One."]), ("Dos.", ["Two."]),
                                                     ("Tres.", ["Three."])]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["repaired"] == {"stray_bom_removed": 2}
    assert "a.es:3: byte-order mark inside the file removed" in log


# --- 3. empty input ------------------------------------------------------------------------

def test_3_empty_split_is_an_error_naming_split_and_files(tmp_path, caplog):
    spec = plaintext(tmp_path, b"", b"")
    rc, log = cli(spec, tmp_path / "out", caplog)
    assert rc == 2
    assert "a.es, " in log and "a.en: split 'train' of corpus 'c' keeps no sentence: no record was read" in log
    assert not (tmp_path / "out" / "docs.parquet").exists()
    spec["splits"]["train"]["allow_empty"] = True
    rc, log = cli(spec, tmp_path / "out", caplog)
    assert rc == 0, log
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["kept"] == 0


def test_3_split_quarantined_whole_is_an_error_too(tmp_path, caplog):
    rc, log = cli(plaintext(tmp_path, b"\n\n", b"a\nb\n", doc_separator="<d>"), tmp_path / "out", caplog)
    assert rc == 2
    assert "keeps no sentence: all 2 records were quarantined ({'empty_segment': 2})" in log


# --- 4. line counts that nothing can realign -----------------------------------------------

def test_4_whole_file_line_count_mismatch_is_an_error_naming_both_files_and_counts(tmp_path):
    spec = plaintext(tmp_path, b"Uno.\nDos.\nTres.\n", b"One.\nTwo.\n")
    with pytest.raises(InputError, match=r"a\.es: has 3 lines but .*a\.en has 2, and neither has a "
                                         r"document separator"):
        run(spec)
    sent = {"reader": "ldc_sent", "splits": {"train": {"src": spec["splits"]["train"]["src"],
                                                       "tgt": spec["splits"]["train"]["tgt"]}}}
    with pytest.raises(InputError, match=r"line counts differ \(.*a\.es has 3, .*a\.en has 2\)"):
        run(sent)


def test_4_separated_documents_that_do_not_pair_quarantine_both_sides(tmp_path):
    spec = plaintext(tmp_path, b"<d>\nA.\nB.\n<d>\nC.\n", b"<d>\nA'.\n<d>\nC'.\n", doc_separator="<d>")
    kept, bad = run(spec)
    assert [s.src for s in kept] == ["C."]
    assert sorted((Path(r.origin_file).name, r.origin_line, r.reason) for r in bad) == [
        ("a.en", 2, "segment_count_mismatch"), ("a.es", 2, "segment_count_mismatch"),
        ("a.es", 3, "segment_count_mismatch")]


# --- 5. a fault is reported where it is ----------------------------------------------------

def test_5_undecodable_target_line_is_reported_against_the_target_file(tmp_path):
    spec = plaintext(tmp_path, b"Uno.\nDos.\n", b"One.\nTw\xff.\n")
    kept, bad = run(spec)
    assert [(Path(r.origin_file).name, r.origin_line, r.reason) for r in bad] == [
        ("a.en", 2, "undecodable_bytes")]
    ref = tmp_path / "ref.sgm"
    ref.write_bytes(NIST_REF.read_bytes().replace(b"first sentence</seg>", b"first sent\xe9nce</seg>"))
    _, bad = run({"reader": "sgml", "splits": {"test": {"src": str(NIST_SRC), "tgt": str(ref)}}})
    undecodable = [(r.origin_file, r.origin_line) for r in bad if r.reason == "undecodable_bytes"]
    assert (str(ref), 8) in undecodable


def test_5_fault_on_a_later_line_of_a_segment_names_that_line(tmp_path):
    src = tmp_path / "src.sgm"
    src.write_bytes(NIST_SRC.read_bytes().replace("两行".encode(), b"\x00"))
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": str(src), "tgt": str(NIST_REF)}}},
                    Limits(2000))
    assert [(r.origin_line, r.reason) for r in bad if r.doc_id == "AFP.0001"] == [(8, "control_character")]


# --- 6. a failed run leaves no output ------------------------------------------------------

def test_6_error_in_the_middle_of_ingestion_leaves_no_partial_output(tmp_path, caplog):
    good = {"src": str(IWSLT_EN), "tgt": str(IWSLT_DE)}
    de = tmp_path / "test.de.xml"   # a file is read once per corpus: test's own copy
    de.write_bytes(IWSLT_DE.read_bytes())
    broken = {"src": str(cut(IWSLT_EN, tmp_path, b"two slides. </seg>\n")), "tgt": str(de)}
    out = tmp_path / "out"
    rc, log = cli({"reader": "iwslt", "splits": {"dev": good, "test": broken}}, out, caplog)
    assert rc == 2 and "never closed" in log
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []
    # a complete earlier output is left as it was, not mixed with the failed run's rows
    assert cli({"reader": "iwslt", "splits": {"dev": good}}, out, caplog)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert cli({"reader": "iwslt", "splits": {"dev": good, "test": broken}}, out, caplog)[0] == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# --- 7. an entry the reader cannot use, run without the config schema ------------------------

@pytest.mark.parametrize("spec, says", [
    ({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "doc_separator": 0}}},
     "splits.train.doc_separator: reader 'plaintext' needs a string, got 0"),
    ({"reader": "plaintext", "splits": {"train": {"src": ["a.es"], "tgt": "b"}}},
     "splits.train.src: reader 'plaintext' needs a path, got ['a.es']"),
    ({"reader": "mono_sgml", "splits": {"mono": {"src": "g.gz", "doc_types": "story"}}},
     "splits.mono.doc_types: reader 'mono_sgml' needs a non-empty list of strings, got 'story'"),
    ({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "docids": "c",
                                                  "doc_separator": "<d>"}}},
     "split 'train': `docids` and `doc_separator` exclude each other"),
    ({"reader": "nope"}, "unknown reader 'nope'"),
])
def test_7_cli_refuses_an_unusable_entry_without_a_traceback(tmp_path, caplog, spec, says):
    rc, log = cli(spec, tmp_path / "out", caplog)
    assert rc == 2 and f"corpus c: {says}" in log


def test_8_cli_refuses_a_corpus_name_that_cannot_name_files(tmp_path, caplog):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ingest"):
        rc = ingest_main(["--corpus", "my corpus", "--spec", json.dumps({"reader": "sgml"}),
                          "--out-dir", str(tmp_path)])
    assert rc == 2 and "corpus name 'my corpus' must match" in caplog.text

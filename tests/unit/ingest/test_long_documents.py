"""Issue 36, item 3: a split whose documents are implausibly long for any corpus (one file read
whole where docids or separators were expected) is flagged in the manifest, in the log and on
the console; translate warns by the same rule."""

from __future__ import annotations

import logging

from pipeline_lib import translate
from pipeline_lib.ingest import Limits, long_documents
from pipeline_lib.ingest.__main__ import ingest
from pipeline_lib.ingest.hygiene import HygieneConfig


def test_the_rule_flags_one_whole_file_and_documents_over_the_limit_only():
    assert long_documents.finding({}) is None
    assert long_documents.finding({"talk1": 199}) is None
    assert long_documents.finding({f"d{i}": 150 for i in range(40)}) is None   # 6,000 in all
    one = long_documents.finding({"d0": 200})
    assert one["finding"] == "all 200 sentences are one document ('d0')"
    many = long_documents.finding({"a": 1001, "b": 30, "c": 1000})
    assert many["longest"] == {"doc_id": "a", "sentences": 1001}
    assert many["finding"].startswith("1 of 3 documents hold more than 1000 sentences")


def _pair(tmp_path, n: int, every: int | None):
    """n distinct pairs; a blank line (the default separator) after every `every` lines."""
    src, tgt = [], []
    for i in range(n):
        src.append(f"frase numero {i} de la prueba .")
        tgt.append(f"test sentence number {i} .")
        if every and (i + 1) % every == 0 and i + 1 < n:
            src.append("")
            tgt.append("")
    (tmp_path / "a.es").write_text("\n".join(src) + "\n")
    (tmp_path / "a.en").write_text("\n".join(tgt) + "\n")
    return {"reader": "plaintext", "splits": {"train": {"src": str(tmp_path / "a.es"),
                                                        "tgt": str(tmp_path / "a.en")}}}


def test_a_file_read_as_one_document_is_in_the_manifest_and_warned(tmp_path, caplog):
    spec = _pair(tmp_path, 400, None)   # no blank line: the whole file is one document
    with caplog.at_level(logging.WARNING):
        record = ingest("c", spec, Limits(), tmp_path / "out", HygieneConfig(enabled=False))
    flagged = record["long_documents"]["train"]
    assert flagged["documents"] == 1 and flagged["sentences"] == 400
    assert flagged["files"] == [str(tmp_path / "a.es")]
    assert "all 400 sentences are one document" in caplog.text
    assert "give docids or a doc_separator" in caplog.text


def test_a_file_cut_into_documents_is_not_flagged(tmp_path, caplog):
    spec = _pair(tmp_path, 400, 20)
    with caplog.at_level(logging.WARNING):
        record = ingest("c", spec, Limits(), tmp_path / "out", HygieneConfig(enabled=False))
    assert record["counts"]["documents"] == {"train": 20}
    assert record["long_documents"] == {} and "one document" not in caplog.text


def test_translate_warns_by_the_same_rule(capsys):
    lines = [f"frase {i} ." for i in range(250)]
    translate.warn_long_documents(translate.layout_from_lines(lines, "<d>", name="mine.es"),
                                  "mine.es")
    err = capsys.readouterr().err
    assert "translate: warning: mine.es: all 250 sentences are one document" in err
    lines[100:100] = ["<d>"]
    translate.warn_long_documents(translate.layout_from_lines(lines, "<d>", name="mine.es"),
                                  "mine.es")
    assert capsys.readouterr().err == ""

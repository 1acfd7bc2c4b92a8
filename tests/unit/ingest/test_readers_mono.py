"""Readers ``mono_sgml`` (Gigaword-style, plain and gzipped) and ``mono_text``."""

from __future__ import annotations

import gzip
import re
import shutil

import pytest
from test_readers_common import DATA, assert_document_order, count_matches, reasons, run

from pipeline_lib.ingest import Limits

D = DATA / "mono"
GIGA = D / "afp_eng_199405.sgml"


def test_mono_sgml_paragraphs_of_stories_gzip_too(tmp_path):
    gz = tmp_path / "afp_eng_199405.gz"
    with open(GIGA, "rb") as f, gzip.open(gz, "wb") as g:
        shutil.copyfileobj(f, g)
    for src in (str(GIGA), str(tmp_path / "*.gz")):
        kept, bad = run({"reader": "mono_sgml", "splits": {"mono": {"src": src}}})
        # records: every <P>, plus each document that has none
        docs_without_p = sum(b"<P>" not in body for body in re.findall(rb"<DOC .*?</DOC>", GIGA.read_bytes(), re.S))
        assert len(kept) + len(bad) == count_matches(GIGA, rb"<P>") + docs_without_p == 8
        assert reasons(bad) == {"too_long": 1, "doc_type_excluded": 2, "empty_segment": 1,
                                "document_without_segments": 1}
        assert_document_order(kept)
        assert [(s.split, s.doc_id, s.src, s.tgt) for s in kept] == [
            ("mono", "AFP_ENG_19940512.0001", "The second paragraph.", None),
            ("mono", "AFP_ENG_19940512.0003", "A third story with an unclosed paragraph.", None),
            ("mono", "AFP_ENG_19940512.0003", "Its last paragraph.", None)]
    kept, _ = run({"reader": "mono_sgml", "splits": {"mono": {"src": str(GIGA), "doc_types": ["story", "multi"]}}},
                  limits=Limits(2000))
    assert kept[0].src == "The first paragraph is wrapped over two lines & has an entity."
    assert sum(s.doc_id == "AFP_ENG_19940512.0002" for s in kept) == 2


def test_mono_text_blank_lines_separate_documents():
    kept, bad = run({"reader": "mono_text", "splits": {"mono": {"src": str(D / "news.en")}}})
    assert len(kept) + len(bad) == sum(bool(ln.strip()) for ln in (D / "news.en").read_bytes().splitlines()) == 5
    assert reasons(bad) == {"undecodable_bytes": 1}
    assert [(s.doc_id, s.sent_idx) for s in kept] == [
        ("news.en#000000", 0), ("news.en#000000", 1), ("news.en#000001", 0), ("news.en#000002", 0)]


def test_mono_readers_only_fill_the_mono_split():
    with pytest.raises(ValueError, match="split 'train'"):
        run({"reader": "mono_text", "splits": {"train": {"src": str(D / "news.en")}}})

"""The embedded default corpus end to end on the real installed SWORD modules (RV1909, WEB).

The exact numbers are those of Debian's sword-text-sparv / sword-text-web (2022-12 modules);
if a newer module changes them, re-measure and update the README together with this test.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pyarrow.parquet as pq
import pytest

from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.__main__ import ingest
from pipeline_lib.ingest.bible import BibleSpec, align, read_module
from pipeline_lib.tables import Rejected, Sentence

SPEC = {
    "reader": "bible",
    "src_module": "spaRV1909eb",
    "tgt_module": "engWEB2015eb",
    "dev_books": ["Ruth", "Jonah", "Philippians", "1 John"],
    "test_books": ["Esther", "Micah", "Galatians", "James"],
}


@pytest.fixture(scope="module")
def modules():
    return read_module(SPEC["src_module"]), read_module(SPEC["tgt_module"])


@pytest.fixture(scope="module")
def items(modules):
    return list(align("bible", *modules, BibleSpec.from_dict(SPEC)))


def _refs(module) -> set[tuple[str, int, int]]:
    return {(b, c, v) for b, chapters in module.verses.items() for c, verses in chapters.items() for v in verses}


def test_modules_read_as_measured(modules):
    src, tgt = modules
    s, t = _refs(src), _refs(tgt)
    assert len(src.book_order) == 66 and len(tgt.book_order) == 80
    assert sum(len(ch) for ch in src.verses.values()) == 1189
    assert (len(s), len(t), len(s & t)) == (31084, 37457, 31077)
    deutero = set(tgt.book_order) - set(src.book_order)
    assert len(deutero) == 14 and sum(1 for r in t if r[0] in deutero) == 6362
    assert sorted(s - t) == [("Acts", 8, 37), ("Acts", 15, 34), ("Acts", 24, 7), ("Luke", 17, 36),
                             ("Rom", 16, 25), ("Rom", 16, 26), ("Rom", 16, 27)]
    assert len({r for r in t - s if r[0] not in deutero}) == 18


def test_every_verse_record_is_kept_or_quarantined(modules, items):
    src, tgt = modules
    kept = [i for i in items if isinstance(i, Sentence)]
    bad = [i for i in items if isinstance(i, Rejected)]
    assert len(kept) + len(bad) == len(_refs(src) | _refs(tgt)) == 37464
    reasons = Counter(r.reason for r in bad)
    assert reasons["tgt_only_book"] == 6362 and reasons["src_only_verse"] == 4
    assert set(reasons) <= {"tgt_only_book", "versification_shift", "src_only_verse", "tgt_only_verse",
                            "length_ratio"}
    # every quarantined reference appears once, and never also as a kept sentence
    bad_refs = [r.record.split("\t")[0] for r in bad]
    assert len(bad_refs) == len(set(bad_refs))
    assert 30_000 < len(kept) <= 31077
    assert len({k.doc_id.split(".")[0] for k in kept}) == 66


def test_documented_problem_verses_are_quarantined(items):
    reason = {r.record.split("\t")[0]: r.reason for r in items if isinstance(r, Rejected)}
    for ref in ("Luke.17.36", "Acts.8.37", "Acts.15.34", "Acts.24.7"):
        assert reason[ref] == "src_only_verse", ref
    for ref in ("Rom.16.25", "Rom.16.27", "Job.39.30", "Job.40.5", "Num.12.16", "Num.13.1",
                "Jonah.1.17", "Jonah.2.1"):
        assert reason[ref] == "versification_shift", ref
    assert reason["Rom.14.23"] == "length_ratio"  # WEB merges Rom 14:24-26 into 14:23
    assert reason["Tob.1.1"] == "tgt_only_book"
    # a merge at the end of Acts 19 does not shift Acts 20: it is kept
    kept_docs = {i.doc_id for i in items if isinstance(i, Sentence)}
    assert "Acts.20" in kept_docs and "Acts.19" not in kept_docs


def test_splits_are_whole_books_and_documents_are_well_formed(items):
    kept = [i for i in items if isinstance(i, Sentence)]
    splits_of_doc: dict[str, set[str]] = defaultdict(set)
    for k in kept:
        splits_of_doc[k.doc_id].add(k.split)
    assert all(len(s) == 1 for s in splits_of_doc.values())
    books_of = defaultdict(set)
    for doc, (split,) in splits_of_doc.items():
        books_of[split].add(doc.split(".")[0])
    assert books_of["dev"] == {"Ruth", "Jonah", "Phil", "1John"}
    assert books_of["test"] == {"Esth", "Mic", "Gal", "Jas"}
    assert len(books_of["train"]) == 58
    # documents contiguous, sent_idx 0..n-1 in order
    seen, prev, expected = set(), None, 0
    for k in kept:
        if k.doc_id != prev:
            assert k.doc_id not in seen
            seen.add(k.doc_id)
            prev, expected = k.doc_id, 0
        assert k.sent_idx == expected
        expected += 1
    gen = [k for k in kept if k.doc_id == "Gen.1"]
    assert gen[0].src == "En el principio crió Dios los cielos y la tierra."
    assert gen[0].tgt == ["In the beginning, God created the heavens and the earth."]
    assert gen[0].origin_file.endswith("spaRV1909eb/ot.bzv") and gen[0].origin_line > 0


def test_max_chapters_limits_training_only(modules):
    spec = BibleSpec.from_dict({**SPEC, "max_chapters": 3})
    kept = [i for i in align("bible", *modules, spec) if isinstance(i, Sentence)]
    docs = defaultdict(set)
    for k in kept:
        docs[k.split].add(k.doc_id)
    assert docs["train"] == {"Gen.1", "Gen.2", "Gen.3"}
    assert len(docs["dev"]) == 15 and len(docs["test"]) == 28


def test_too_long_verses_are_quarantined(modules):
    items = list(align("bible", *modules, BibleSpec.from_dict({**SPEC, "max_chapters": 1}), Limits(60)))
    reasons = Counter(i.reason for i in items if isinstance(i, Rejected))
    assert reasons["too_long"] > 0
    assert all(len(i.src) <= 60 for i in items if isinstance(i, Sentence))


def test_config_errors_are_clear(modules):
    with pytest.raises(ValueError, match="unknown book names"):
        list(align("bible", *modules, BibleSpec.from_dict({**SPEC, "dev_books": ["Hezekiah"]})))
    with pytest.raises(InputError, match="noSuchModule.*--ensure"):
        read_module("noSuchModule")


def test_ingest_stage_writes_parquet_and_manifest(tmp_path):
    record = ingest("bible", {**SPEC, "max_chapters": 20}, Limits(), tmp_path)
    docs = pq.read_table(tmp_path / "docs.parquet")
    bad = pq.read_table(tmp_path / "quarantine.parquet")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["counts"] == record["counts"]
    assert docs.num_rows == manifest["counts"]["kept"] and bad.num_rows == manifest["rejected_total"]
    assert manifest["counts"]["documents"]["train"] == 20
    assert any(path.endswith("spaRV1909eb.conf") for path in manifest["inputs"])

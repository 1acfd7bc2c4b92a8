"""Corpus hygiene (pipeline_lib/ingest/hygiene.py) through the ingest stage: each filter with its
quarantine reason and manifest count, what it does to documents, overlap between splits, repeats
found across buckets, the language check, and splits built from overlapping files (hypothesis)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_lib.ingest import InputError, Limits, SpecError
from pipeline_lib.ingest import hygiene as hygiene_module
from pipeline_lib.ingest.__main__ import ingest
from pipeline_lib.ingest.hygiene import HygieneConfig, Repeats, normalise

NO_LID = HygieneConfig(langid=False)


def corpus(tmp: Path, splits: dict[str, list[tuple[str, str, str]]]) -> dict:
    """A plaintext entry: split -> (docid, source, target) rows."""
    spec: dict = {"reader": "plaintext", "splits": {}}
    for split, rows in splits.items():
        files = {}
        for key, col in (("src", 1), ("tgt", 2), ("docids", 0)):
            files[key] = str(tmp / f"{split}.{key}")
            Path(files[key]).write_text("".join(f"{r[col]}\n" for r in rows))
        spec["splits"][split] = files
    return spec


def run(tmp: Path, spec: dict, cfg: HygieneConfig = NO_LID, langs=None) -> tuple[dict, list, list]:
    out = tmp / "out"
    record = ingest("c", spec, Limits(), out, cfg, langs)
    return (record, pq.read_table(out / "docs.parquet").to_pylist(),
            pq.read_table(out / "quarantine.parquet").to_pylist())


def S(i: int) -> tuple[str, str]:
    """A distinct, plausible pair."""
    words = ["uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve", "diez"]
    return (f"La frase {words[i % 10]} {i // 10} habla de casas.",
            f"Sentence {i} talks about houses number {i % 10}.")


def test_normalise_keeps_letters_and_digits_only():
    assert normalise("¡Hola,  MUNDO! 42") == normalise("hola mundo 42") == "holamundo42"
    assert normalise("Ｆｕｌｌ") == "full"   # NFKC


def test_repeated_pairs_inside_documents_are_kept_and_counted_alone_ones_removed(tmp_path):
    a, b, c = S(1), S(2), S(3)
    rows = {"train": [("d1", *a), ("d1", *b), ("d2", *c), ("d2", *a),      # a again, in a doc
                      ("d3", a[0].upper(), a[1]),                          # a normalised, alone
                      ("d4", *b)]}                                          # b exactly, alone
    record, kept, bad = run(tmp_path, corpus(tmp_path, rows))
    assert [(r["doc_id"], r["sent_idx"]) for r in kept] == [("d1", 0), ("d1", 1), ("d2", 0),
                                                          ("d2", 1)]
    assert [(r["origin_line"], r["reason"], r["stage"]) for r in bad] == [
        (5, "duplicate_pair_normalised", "hygiene"), (6, "duplicate_pair", "hygiene")]
    h = record["hygiene"]
    assert h["removed"] == {"duplicate_pair": {"train": 1}, "duplicate_pair_normalised": {"train": 1}}
    assert h["kept_in_documents"] == {"duplicate_pair": {"train": 1}}
    assert record["rejected"] == {"duplicate_pair": 1, "duplicate_pair_normalised": 1}
    assert record["counts"]["read"] == {"train": 6} and record["counts"]["sentences"] == {"train": 4}
    # `pairs` removes repeats inside documents too; the document closes up (sent_idx renumbered)
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(langid=False,
                                                                          duplicates="pairs"))
    assert [(r["doc_id"], r["sent_idx"], r["src"]) for r in kept] == [
        ("d1", 0, a[0]), ("d1", 1, b[0]), ("d2", 0, c[0])]
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(langid=False,
                                                                          duplicates="none"))
    assert len(kept) == 6


def test_a_repeated_document_goes_whole(tmp_path):
    rows = {"train": [("d1", *S(1)), ("d1", *S(2)), ("d2", *S(3)), ("d3", *S(1)), ("d3", *S(2))]}
    record, kept, bad = run(tmp_path, corpus(tmp_path, rows))
    assert [r["doc_id"] for r in kept] == ["d1", "d1", "d2"]
    assert [r["reason"] for r in bad] == ["duplicate_document"] * 2
    assert record["counts"]["documents"] == {"train": 2}


def test_dev_and_test_are_never_filtered_but_what_is_found_there_is_counted(tmp_path):
    copy = ("Una frase sin traducir.", "Una frase sin traducir.")
    rows = {"train": [("t", *S(i)) for i in range(4)],
            "test": [("x", *S(10)), ("x", *copy), ("x", *S(10))]}
    record, kept, bad = run(tmp_path, corpus(tmp_path, rows))
    assert len([r for r in kept if r["split"] == "test"]) == 3 and not bad
    assert record["hygiene"]["flagged"] == {"source_copy": {"test": 1}}


def test_overlap_keep_only_counts_and_removing_everything_is_an_error(tmp_path):
    rows = {"train": [("t", *S(i)) for i in range(4)], "dev": [("v", *S(1)), ("v", *S(9))]}
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(langid=False,
                                                                          overlap="keep"))
    assert len(kept) == 6 and record["hygiene"]["overlap"] == {"train-dev": {"pairs": 1}}
    # a split whose every pair is a copy keeps no sentence: an error naming it (allow_empty lifts it)
    spec = corpus(tmp_path, {"train": [("t", "Igual.", "Igual.")], "dev": [("v", *S(1))]})
    with pytest.raises(InputError, match=r"split 'train' of corpus 'c' keeps no sentence: hygiene "
                                         r"removed all 1 pairs \(\{'source_copy': 1\}\)"):
        run(tmp_path, spec)
    spec["splits"]["train"]["allow_empty"] = True
    assert run(tmp_path, spec)[0]["counts"]["sentences"] == {"dev": 1}


def test_monolingual_documents_repeated_are_removed(tmp_path):
    """Restoration data (mono) is filtered too: a repeated document or lone line goes."""
    doc = f"{S(1)[1]}\n{S(2)[1]}\n"
    (tmp_path / "mono.txt").write_text(f"{doc}\n{S(3)[1]}\n\n{doc}\n{S(3)[1]}\n")
    record, kept, bad = run(tmp_path, {"reader": "mono_text",
                                       "splits": {"mono": {"src": str(tmp_path / "mono.txt")}}})
    assert [r["src"] for r in kept] == [S(1)[1], S(2)[1], S(3)[1]]
    assert [r["reason"] for r in bad] == ["duplicate_document"] * 2 + ["duplicate_pair"]
    assert record["hygiene"]["removed"] == {"duplicate_document": {"mono": 2},
                                            "duplicate_pair": {"mono": 1}}


def test_per_corpus_settings_override_the_section_and_unknown_keys_are_refused(tmp_path):
    rows = {"train": [("t", "Igual.", "Igual."), ("t", *S(1))]}
    spec = {**corpus(tmp_path, rows), "hygiene": {"copies": False}}
    record, kept, _ = run(tmp_path, spec)
    assert len(kept) == 2 and record["hygiene"]["settings"]["copies"] is False
    with pytest.raises(SpecError, match=r"hygiene has no key\(s\) \['copy'\]"):
        run(tmp_path, {**spec, "hygiene": {"copy": False}})
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(enabled=False))
    assert len(kept) == 2 and record["hygiene"]["removed"] == {}


def test_length_ratio_counts_bytes_for_chinese(tmp_path):
    rows = {"train": [("t", "我们今天去北京。", "We go to Beijing today."),      # 24 bytes : 23
                      ("t", "好。", "This is a much longer sentence than the source.")]}
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), NO_LID, ("zh", "en"))
    assert [r["src"] for r in kept] == ["我们今天去北京。"]
    assert record["hygiene"]["removed"] == {"length_ratio": {"train": 1}}


def test_language_check_removes_swapped_sides_and_leaves_short_lines(tmp_path, caplog):
    es = "El año pasado mostré estas dos diapositivas para demostrar que el hielo se reduce."
    en = "Last year I showed these two slides to demonstrate that the ice is shrinking."
    es2 = "Quiero empezar con una pregunta que nos hacemos todos los días en la escuela."
    en2 = "I want to start with a question that we all ask ourselves every day at school."
    rows = {"train": [("t", es, en), ("t", en2, es2), ("t", "Sí.", "Yes.")]}
    record, kept, bad = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(), ("es", "en"))
    assert [r["src"] for r in kept] == [es, "Sí."]
    assert [r["reason"] for r in bad] == ["wrong_language_src"]
    lid = record["hygiene"]["langid"]
    assert lid["library"].startswith("py3langid ") and lid["checked"] == 3 and lid["too_short"] == 2
    record, kept, _ = run(tmp_path, corpus(tmp_path, rows), HygieneConfig(), ("es", "xx"))
    assert len(kept) == 3 and "not among the model's languages" in record["hygiene"]["langid"]["note"]
    # said on the console too, not only in the manifest (issue 36)
    assert "language identification skipped: ['xx'] not among" in caplog.text


def test_repeats_across_many_buckets_find_exactly_the_later_occurrences(tmp_path, monkeypatch):
    monkeypatch.setattr(hygiene_module, "BUCKET_ROWS", 64)
    monkeypatch.setattr(hygiene_module, "BATCH_ROWS", 50)
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 300, size=1000).tolist()
    r = Repeats(tmp_path, "k", len(keys))
    assert r.n_buckets == 16
    for row, key in enumerate(keys):
        r.add(hash(("k", key)), row)
    bits = r.bitmap()
    seen: set = set()
    expected = []
    for key in keys:
        expected.append(key in seen)
        seen.add(key)
    got = [bool((bits[i >> 3] >> (i & 7)) & 1) for i in range(len(keys))]
    assert got == expected and not list(tmp_path.iterdir())


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool=st.integers(4, 12), data=st.data())
def test_splits_built_from_overlapping_files(tmp_path_factory, pool, data):
    """Train, dev and test drawn (with repeats) from one pool of pairs: whatever the overlap,
    no kept train pair is in dev or test, dev and test keep every row, each removal is counted
    under its split pair, and a held-out split found whole in train (or dev = test) is an
    error."""
    tmp = tmp_path_factory.mktemp("overlap")
    draw = st.lists(st.integers(0, pool - 1), min_size=1, max_size=8)
    picks = {split: data.draw(draw, label=split) for split in ("train", "dev", "test")}
    rows = {split: [(f"{split}{k}", *S(i)) for k, i in enumerate(idx)]   # one-pair documents
            for split, idx in picks.items()}
    held = {split: set(picks[split]) for split in ("dev", "test")}
    whole = [s for s in ("dev", "test") if held[s] <= set(picks["train"])]
    nothing_left = set(picks["train"]) <= held["dev"] | held["test"]
    try:
        record, kept, bad = run(tmp, corpus(tmp, rows), HygieneConfig(langid=False,
                                                                      duplicates="none"))
    except InputError as e:
        assert whole or held["dev"] == held["test"] or nothing_left, e
        return
    assert not (whole or held["dev"] == held["test"] or nothing_left)
    train = [r for r in kept if r["split"] == "train"]
    assert {r["src"] for r in train}.isdisjoint({S(i)[0] for s in held.values() for i in s})
    assert Counter(r["split"] for r in kept if r["split"] != "train") == Counter(
        {s: len(picks[s]) for s in ("dev", "test")})
    expected = Counter("overlap_test" if i in held["test"] else "overlap_dev"
                       for i in picks["train"] if i in held["test"] | held["dev"])
    assert Counter(r["reason"] for r in bad) == expected
    removed = record["hygiene"]["removed"]
    assert {k: v["train"] for k, v in removed.items()} == dict(expected)
    overlap = record["hygiene"]["overlap"]
    assert overlap.get("train-test", {}).get("pairs", 0) == expected["overlap_test"]
    assert overlap.get("dev-test", {}).get("pairs", 0) == len(held["dev"] & held["test"])
    assert json.dumps(record)   # the manifest is plain JSON


def test_the_report_funnel_shows_sizes_before_and_after_hygiene(tmp_path):
    from pipeline_lib.evaluate.report.tables import funnel_table

    rows = {"train": [("d1", *S(1)), ("d1", *S(2)), ("d2", "Igual.", "Igual."), ("d3", *S(5)),
                      ("d4", *S(5)), ("d5", "Mal\x1b.", "Bad.")],
            "test": [("x", *S(9)), ("x", "Copia.", "Copia.")]}
    record, _, _ = run(tmp_path, corpus(tmp_path, rows))
    table = funnel_table({"c": record}, {"c": None})
    steps = {r[1]: r[2:] for r in table.rows}
    assert table.header == ["Corpus", "Step", "Records", "train", "test"]
    assert steps["read at ingest"] == ["8", "", ""]
    assert steps["quarantined at ingest: control_character"] == ["1", "", ""]
    assert steps["read: sentence pairs"] == ["7", "5", "2"]
    assert steps["removed by hygiene: source_copy"] == ["1", "1", ""]
    assert steps["removed by hygiene: duplicate_pair"] == ["1", "1", ""]
    assert steps["found by hygiene, kept (split not filtered): source_copy"] == ["1", "", "1"]
    assert steps["kept: sentence pairs"] == ["5", "3", "2"]

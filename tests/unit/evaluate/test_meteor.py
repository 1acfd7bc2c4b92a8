"""Corpus METEOR (pipeline_lib.evaluate.meteor) by hand, against NLTK's own meteor_score, and as
score_test writes it to scores.json and the report shows it beside BLEU."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from nltk.translate.meteor_score import meteor_score

from pipeline_lib.evaluate import score
from pipeline_lib.evaluate.report import document, results
from pipeline_lib.evaluate.meteor import Meteor, NoWordNet
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import DOC_SCHEMA

from test_report import build_results, md_rows, run_report, section  # the report fixtures


def _meteor(hyps, refs, lang="en"):
    return Meteor(lang).corpus(hyps, refs)["meteor"]


def test_an_identical_sentence_scores_one_less_nltks_fragmentation_penalty():
    # 4 matches in 1 chunk: penalty 0.5 * (1/4)^3 = 0.0078125, METEOR 0.9921875
    assert _meteor(["a cat sat down"], [["a cat sat down"]]) == 99.22
    # case and 13a tokenisation: "Down." and "down ." are the same tokens, lowercased
    assert _meteor(["A cat sat Down."], [["a cat sat down ."]]) == pytest.approx(
        100 * (1 - 0.5 * (1 / 5) ** 3), abs=0.01)


def test_a_stem_match_counts_and_a_synonym_does_not():
    # "cats"/"cat" match by Porter stem: 3 of 3 words, one chunk
    assert _meteor(["the cats sat"], [["the cat sat"]]) == pytest.approx(
        100 * (1 - 0.5 * (1 / 3) ** 3), abs=0.01)
    # without a target language there is no stemmer: 2 of 3 words, 2 chunks
    exact = Meteor(None).corpus(["the cats sat"], [["the cat sat"]])["meteor"]
    assert exact == pytest.approx(100 * (2 / 3) * (1 - 0.5 * 1.0 ** 3), abs=0.01)
    # "big"/"large" are WordNet synonyms: not matched (no synonym module), as 2 words of 3
    assert _meteor(["the big house"], [["the large house"]]) == pytest.approx(33.33, abs=0.01)


def test_german_is_stemmed_by_snowball_and_chinese_gets_no_meteor():
    de = Meteor("de")
    assert de.stemmer_name == "snowball-german" and de.modules == ["exact", "stem"]
    # Häuser / Haus share the Snowball stem "haus"; Porter (English) would not match them
    assert de.corpus(["die Häuser"], [["die Haus"]])["meteor"] == pytest.approx(
        100 * (1 - 0.5 * 0.5 ** 3), abs=0.01)
    assert Meteor("en").corpus(["die Häuser"], [["die Haus"]])["meteor"] < 50
    zh = Meteor("zh")
    assert zh.corpus(["我们"], [["我们"]]) is None and not zh.describe()["meaningful"]
    assert Meteor("cs").modules == ["exact"]


def test_sentence_scores_are_nltks_meteor_score_with_wordnet_off():
    hyp = ("It is a guide to action which ensures that the military always obeys the "
           "commands of the party")
    refs = ["It is a guide to action that ensures that the military will forever heed "
            "Party commands",
            "It is the guiding principle which guarantees the military forces always being "
            "under the command of the Party"]
    theirs = meteor_score([r.split() for r in refs], hyp.split(), wordnet=NoWordNet())
    assert Meteor("en").corpus([hyp], [refs])["meteor"] == pytest.approx(100 * theirs, abs=0.005)


def test_several_references_take_the_best_one_per_sentence():
    m = Meteor("en")
    one = m.corpus(["the cat sat on the mat"], [["a dog ran"]])["meteor"]
    both = m.corpus(["the cat sat on the mat"], [["a dog ran", "the cat sat on the mat"]])
    assert one == 0.0 and both["meteor"] == m.corpus(["the cat sat on the mat"],
                                                     [["the cat sat on the mat"]])["meteor"]
    # order does not matter
    assert m.corpus(["the cat sat on the mat"],
                    [["the cat sat on the mat", "a dog ran"]]) == both


def test_corpus_meteor_sums_statistics_rather_than_averaging_sentences():
    # sentence 1: 4 of 4 words in one chunk; sentence 2: no match in 1 word against 1 word
    out = Meteor("en").corpus(["a b c d", "x"], [["a b c d"], ["y"]])
    # sums: M 4, H 5, R 5, C 1 -> P = R = 0.8, Fmean 0.8, penalty 0.5 (1/4)^3
    assert out["meteor"] == pytest.approx(100 * 0.8 * (1 - 0.5 / 64), abs=0.01)
    assert out["meteor_sentence_mean"] == pytest.approx(100 * (1 - 0.5 / 64) / 2, abs=0.01)
    assert out["meteor"] != out["meteor_sentence_mean"]


def test_scores_json_has_meteor_per_system_and_test_set(tmp_path):
    rows = [dict(corpus="c", split="test", doc_id="d0", sent_idx=i, src="x", tgt=[ref],
                 has_context=True, origin_file="f", origin_line=1)
            for i, ref in enumerate(["the cat sat on the mat", "the dogs ran home"])]
    pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), tmp_path / "docs.parquet")
    for name, hyps in (("base", ["the cat sat on the mat", "the dog ran home"]),
                       ("other", ["a cat sat on a mat", "dogs ran"])):
        pq.write_table(pa.Table.from_pylist(
            [dict(doc_id="d0", sent_idx=i, hyp=h) for i, h in enumerate(hyps)]),
            tmp_path / f"{name}.parquet")
    out_file = tmp_path / "scores.json"
    assert score.main(["--refs", "c", str(tmp_path / "docs.parquet"),
                       "--hyp", "base", "c", "test", str(tmp_path / "base.parquet"),
                       "--hyp", "other", "c", "test", str(tmp_path / "other.parquet"),
                       "--baseline", "base", "--tgt-lang", "en", "--bootstrap-samples", "50",
                       "--output", str(out_file)]) == 0
    out = json.loads(out_file.read_text())
    assert out["meteor"]["modules"] == ["exact", "stem"] and out["meteor"]["stemmer"] == "porter"
    assert out["meteor"]["aggregation"] == "corpus statistics"
    rows_out = out["results"]["c/test"]["models"]
    m = Meteor("en")
    for name, hyps in (("base", ["the cat sat on the mat", "the dog ran home"]),
                       ("other", ["a cat sat on a mat", "dogs ran"])):
        expected = m.corpus(hyps, [[r["tgt"][0]] for r in rows])
        assert rows_out[name]["meteor"] == expected["meteor"]
        assert rows_out[name]["meteor_sentence_mean"] == expected["meteor_sentence_mean"]
        assert rows_out[name]["meteor_signature"].startswith("nltk:")
    assert rows_out["base"]["meteor"] > rows_out["other"]["meteor"] > 0


def test_meteor_is_beside_bleu_in_the_reports_results_table(tmp_path):
    paths = build_results(tmp_path, ["transformer", "doct"])
    out = run_report(paths)
    md = (out / "report.md").read_text()
    table = md_rows(section(md, "All metrics"))
    header = table[0]
    i = header.index("bible/test METEOR")
    assert header[i - 1] == "bible/test BLEU"
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]["models"]
    base = scores["transformer"]["meteor"]
    assert table[1][i] == f"{base:.2f}"
    assert table[2][i] == f"{scores['doct']['meteor']:.2f} ({scores['doct']['meteor'] - base:+.2f})"
    assert "Not METEOR 1.5" in md and "METEOR signature: nltk:" in md


def test_the_report_says_where_meteor_is_not_meaningful():
    scores = {"baseline": "a", "models": ["a"], "test_sets": ["t"], "controls": {},
              "config": {"significance_level": 0.05, "bootstrap_samples": 10},
              "meteor": Meteor("ja").describe(),
              "results": {"t": {"sentences": 1, "documents": 1, "references": 1,
                                "models": {"a": {"bleu": 1.0, "meteor": None, "dbleu": 1.0,
                                                 "chrf": 1.0, "ter": 1.0}}}}}
    t = results.results_table(scores)
    assert t.rows[0][t.header.index("t METEOR")] == document.NA
    assert any("METEOR not meaningful for the target language (ja)" in n for n in t.notes)


def test_scoring_without_a_target_language_matches_exactly_only(tmp_path):
    rows = [dict(corpus="c", split="test", doc_id="d0", sent_idx=0, src="x",
                 tgt=["the cat sat"], has_context=True, origin_file="f", origin_line=1)]
    pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), tmp_path / "docs.parquet")
    pq.write_table(pa.Table.from_pylist([dict(doc_id="d0", sent_idx=0, hyp="the cats sat")]),
                   tmp_path / "h.parquet")
    out = score.score_all({"c": tmp_path / "docs.parquet"},
                          [("h", "c", "test", tmp_path / "h.parquet")], "h",
                          score.ScoreConfig(), Manifest("t"))
    assert out["meteor"]["modules"] == ["exact"] and "not given" in out["meteor"]["note"]
    assert out["results"]["c/test"]["models"]["h"]["meteor"] == pytest.approx(33.33, abs=0.01)

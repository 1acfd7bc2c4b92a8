"""Issue 37 item 2: BLEU as the papers computed it, multi-bleu.perl on Moses tokens, beside
sacreBLEU's; checked against a case computed by hand, through the CLI into scores.json and into
the report's table."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_lib.evaluate import score
from pipeline_lib.evaluate.report.results import results_table
from pipeline_lib.evaluate.tokenized_bleu import TokenizedBleu
from pipeline_lib.tables import DOC_SCHEMA

HYP, REF = "The cat sat on the mat.", "the cat sat on a mat."
# by hand, lowercased Moses tokens: hyp "the cat sat on the mat ." / ref "the cat sat on a mat ."
# (7 tokens each, brevity penalty 1); clipped matches 1-gram 6/7 (one "the" of two), 2-gram 4/6
# (the cat, cat sat, sat on, mat .), 3-gram 2/5 (the cat sat, cat sat on), 4-gram 1/4
BY_HAND = 100 * (6 / 7 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25     # 48.89


def test_a_hand_computed_case():
    lc = TokenizedBleu("en", True, "test")
    assert lc.tokenize([HYP]) == ["The cat sat on the mat ."]
    value, signature = lc.score([HYP], [[REF]])
    assert value == pytest.approx(BY_HAND, abs=0.005) and round(BY_HAND, 2) == 48.89
    assert "multi-bleu.perl -lc on sacremoses" in signature and "tok:none" in signature
    assert "smooth:none" in signature and "case:lc" in signature
    # cased, "The cat" matches no bigram of the reference: 6/7, 3/6, 1/5, 0/4; multi-bleu.perl
    # gives 0 when an order has no match (sacreBLEU's default smoothing would not)
    assert TokenizedBleu("en", False, "test").score([HYP], [[REF]])[0] == 0.0


def test_only_moses_is_known():
    with pytest.raises(ValueError, match="tokenizer 'kytea'"):
        TokenizedBleu("en", True, "test", tokenizer="kytea")


def test_scores_json_and_the_report_name_it(tmp_path, capsys):
    rows = [dict(corpus="c", split="test", doc_id="d", sent_idx=i, src="x", tgt=[REF],
                 has_context=True, origin_file="f", origin_line=1) for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), tmp_path / "docs.parquet")
    pq.write_table(pa.Table.from_pylist([dict(doc_id="d", sent_idx=i, hyp=HYP)
                                         for i in range(3)]), tmp_path / "m.parquet")
    spec = {"tokenizer": "moses", "lowercase": True, "as": "Sec. 9: case-insensitive multi-bleu"}
    assert score.main(["--refs", "c", str(tmp_path / "docs.parquet"), "--hyp", "m", "c", "test",
                       str(tmp_path / "m.parquet"), "--baseline", "m", "--tgt-lang", "en",
                       "--bootstrap-samples", "10", "--tokenized-bleu", json.dumps(spec),
                       "--output", str(tmp_path / "scores.json")]) == 0
    assert "tokenized BLEU 48.89" in capsys.readouterr().out
    scores = json.loads((tmp_path / "scores.json").read_text())
    row = scores["results"]["c/test"]["models"]["m"]
    assert row["tokenized_bleu"] == 48.89 and row["bleu"] != 48.89   # sacreBLEU's: 13a, cased
    assert scores["config"]["tokenized_bleu"] == spec
    table = results_table(scores)
    assert "c/test tok. BLEU" in table.header
    assert table.rows[0][table.header.index("c/test tok. BLEU")] == "48.89"
    assert any("Sec. 9: case-insensitive multi-bleu" in n for n in table.notes)


def test_without_a_target_language_it_is_refused(tmp_path):
    with pytest.raises(ValueError, match="needs the target language"):
        score.score_all({}, [("m", "c", "test", tmp_path / "m.parquet")], "m",
                        score.ScoreConfig(tokenized_bleu={"tokenizer": "moses",
                                                          "lowercase": True, "as": "x"}),
                        None)


def test_the_paper_comparison_puts_ours_beside_the_papers_figure_in_its_metric():
    from pipeline_lib.evaluate.report.document import NA
    from pipeline_lib.evaluate.report.paper_comparison import paper_table

    scores = {"results": {"All": {"models": {
        "transformer": {"bleu": 30.0, "tokenized_bleu": 31.5,
                        "tokenized_bleu_signature": "multi-bleu.perl -lc on ..."}}}}}
    paper = {"score": "tokenized_bleu", "test_set": "All",
             "figures": {"transformer": {"value": 45.97, "source": "Tab. 3"},
                         "doct": {"value": 47.93, "source": "Tab. 3"}}}
    t = paper_table(scores, paper)
    assert t.rows == [["transformer", "45.97", "31.50", "-14.47", "Tab. 3"],
                      ["doct", "47.93", NA, NA, "Tab. 3"]]      # doct not scored in this run
    assert "multi-bleu.perl -lc on ..." in t.notes[0] and "budget, not a replication" in t.notes[1]
    assert paper_table(scores, None) is None and paper_table(None, paper) is None

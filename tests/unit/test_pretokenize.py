"""Issue 37 item 1: the papers' segmentation and casing before BPE (pipeline_lib/preprocess/
pretokenize.py) with the real sacremoses, jieba and fugashi/unidic-lite, its inverse after
decoding, the stage's CLI on document Parquet, and the plan that routes BPE, parsing and shards
through it only where config `tokenize` sets steps."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_lib.preprocess.pretokenize import main
from pipeline_lib.tokenization import Pretokenizer, check_steps, detokenizer
from pipeline_lib.tables import DOC_SCHEMA


@pytest.mark.parametrize("steps, says", [
    (["moses", "jieba"], "at most one segmenter"), (["lowercase", "moses"], "at most one"),
    (["moses", "truecase", "lowercase"], "at most one"), (["truecase"], "needs moses tokens"),
    (["jieba", "truecase"], "needs moses tokens"), (["kytea"], "unknown step")])
def test_step_lists_that_make_no_sense_are_refused(steps, says):
    with pytest.raises(ValueError, match=says):
        check_steps("xx", steps)


def test_moses_and_lowercase_and_their_inverse():
    en = Pretokenizer("en", ("moses", "lowercase"))
    assert en("Don't stop, it's 3.5% more.") == "don 't stop , it 's 3.5 % more ."
    # lowercasing cannot be undone: the text comes back lowercased, its spacing restored
    assert detokenizer("en", ["moses", "lowercase"])("don 't stop , it 's 3.5 % more .") == \
        "don't stop, it's 3.5% more."
    assert Pretokenizer("en", ())("  kept   as is ") == "  kept   as is "


def test_jieba_segments_chinese_and_detokenizing_joins_it_again():
    zh = Pretokenizer("zh", ("jieba",))
    assert zh("我们在北京大学学习中文。") == "我们 在 北京大学 学习 中文 。"
    assert detokenizer("zh", ["jieba"])("我们 在 北京大学 学习 中文 。") == "我们在北京大学学习中文。"


def test_mecab_segments_japanese_with_unidic_lite():
    ja = Pretokenizer("ja", ("mecab",))
    assert ja("新しい論文を書きました。") == "新しい 論文 を 書き まし た 。"
    assert detokenizer("ja", ["mecab"])(ja("新しい論文を書きました。")) == "新しい論文を書きました。"


def _docs(path, rows):
    pq.write_table(pa.Table.from_pylist([
        dict(corpus="c", split=split, doc_id="d", sent_idx=i, src=src, tgt=tgt, has_context=True,
             origin_file="f", origin_line=i + 1) for i, (split, src, tgt) in enumerate(rows)],
        schema=DOC_SCHEMA), path)


def test_the_truecaser_learns_from_the_train_split_and_the_stage_tokenizes_both_sides(tmp_path):
    """truecase.perl's rule: a word takes its most frequent casing outside sentence starts; the
    truecaser trains on train (and mono) text only, then `apply` tokenizes every split."""
    _docs(tmp_path / "docs.parquet", [
        ("train", "la casa de Paris", ["The house in Paris is big."]),
        ("train", "la casa", ["the house of Paris, the house."]),
        ("train", "una casa", ["A house in Paris."]),
        ("test", "La casa", ["The House in Paris."])])
    model = tmp_path / "tc" / "truecase.model"
    assert main(["train", "--docs", str(tmp_path / "docs.parquet"), "--side", "tgt", "--lang", "en",
                 "--steps", '["moses", "truecase"]', "--out", str(model)]) == 0
    assert json.loads((model.parent / "manifest.json").read_text())["counts"]["sentences"] == 3
    spec = json.dumps({"es": ["moses", "lowercase"], "en": ["moses", "truecase"]})
    assert main(["apply", "--docs", str(tmp_path / "docs.parquet"), "--langs", "es", "en",
                 "--tokenize", spec, "--truecaser", "en", str(model),
                 "--out-dir", str(tmp_path / "out")]) == 0
    rows = pq.read_table(tmp_path / "out" / "docs.parquet").to_pylist()
    assert [r["src"] for r in rows] == ["la casa de paris", "la casa", "una casa", "la casa"]
    assert rows[3]["tgt"] == ["the house in Paris ."]        # "The House" truecased
    assert rows[0]["tgt"] == ["the house in Paris is big ."]
    assert detokenizer("en", ["moses", "truecase"])(rows[3]["tgt"][0]) == "The house in Paris."
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"] == {"rows": 4, "references": 4}


def test_a_missing_segmenter_is_one_line_naming_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "jieba", None)     # import jieba raises ImportError
    with pytest.raises(ValueError, match=r"tokenize.zh: jieba needs the package jieba, not "
                                         r"installed: pip install -e '.\[tokenize\]'"):
        Pretokenizer("zh", ("jieba",))("中文")


def test_the_plan_routes_text_through_the_stage_only_where_steps_are_set():
    from pipeline_lib.plan import Plan
    from pipeline_lib.run_config import load_config

    raw = Plan(load_config())
    assert raw.tokenize == {} and raw.pretokenize() is None and raw.detokenize is None
    assert raw.text_docs("bible") == raw.results.ingest_corpus("bible").docs
    # the default run's trainer config carries no pretokenize key: adding the stage reran nothing
    assert "pretokenize" not in raw.jobs["transformer"].config_json(raw.pretokenize())

    plan = Plan(load_config(overrides={"tokenize": {"es": ["moses"], "en": ["moses", "truecase"],
                                                    "de": ["moses"]}}))
    assert plan.tokenize == {"es": ["moses"], "en": ["moses", "truecase"]}   # the run's pair only
    assert plan.truecased == ["en"]
    assert plan.text_docs("bible") == plan.results.tokenize_corpus("bible").docs
    assert plan.detokenize == {"lang": "en", "steps": ["moses", "truecase"]}
    assert json.loads(plan.options("decode_test", model="transformer"))["detokenize"] == \
        plan.detokenize
    assert json.loads(plan.jobs["transformer"].config_json(plan.pretokenize()))["pretokenize"] == {
        "langs": ["es", "en"], "tokenize": plan.tokenize,
        "truecasers": {"en": plan.results.train_truecaser("en").model}}
    with pytest.raises(ValueError, match="needs moses tokens"):
        Plan(load_config(overrides={"tokenize": {"en": ["truecase"]}})).tokenize


def test_a_checkpoint_carries_its_steps_and_truecaser_and_translate_applies_them(tmp_path):
    """translate tokenizes a user's raw text as training did and detokenizes the output, from
    the checkpoint alone (its record and its copy of the truecaser)."""
    from pipeline_lib.checkpoint import save_checkpoint, truecaser_file, verify
    from pipeline_lib.translate import pretokenized

    _docs(tmp_path / "docs.parquet", [("train", s, ["x"]) for s in (
        "Vimos la casa de Paris.", "Es la casa.", "Una casa en Paris.")])
    model = tmp_path / "truecase.model"
    assert main(["train", "--docs", str(tmp_path / "docs.parquet"), "--side", "src", "--lang",
                 "es", "--steps", '["moses", "truecase"]', "--out", str(model)]) == 0
    record = {"pretokenize": {"langs": ["es", "en"],
                              "tokenize": {"es": ["moses", "truecase"], "en": ["moses"]}}}
    ckpt = save_checkpoint(tmp_path / "best", {}, {}, record,
                           extra_files={truecaser_file("es"): model})
    verify(ckpt, [truecaser_file("es")])      # recorded with its sha256 like every file
    model.unlink()                            # the checkpoint's own copy is what is read
    tokenize, detokenize = pretokenized(ckpt)
    assert tokenize("La Casa de Paris.") == "la casa de Paris ."
    assert detokenize("the house , in Paris .") == "the house, in Paris."
    plain = save_checkpoint(tmp_path / "raw", {}, {}, {})
    tokenize, detokenize = pretokenized(plain)
    assert tokenize("La Casa .") == "La Casa ." and detokenize("a , b") == "a , b"

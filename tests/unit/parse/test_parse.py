"""parse: the pretokenizer, tree checks, quarantine, and the CLI (shard + merge) on a tiny
docs.parquet with a real (tiny) stanza model trained from the shared UD Spanish-GSD files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline_lib.parse import dependencies as P
from pipeline_lib.parse import stanza_models as sm
from pipeline_lib.parse.dependencies import ParseReason
from pipeline_lib.tables import Sentence, doc_writer

TINY = {"tagger_steps": 5, "parser_steps": 5, "hidden_dim": 16, "deep_biaff_hidden_dim": 16,
        "word_emb_dim": 8, "tag_emb_dim": 8, "transformed_dim": 8, "parser_layers": 1}


@pytest.fixture(scope="module")
def model(tmp_path_factory, shared_dir) -> Path:
    """A tiny es model (a few training steps: the parse logic is under test, not its accuracy)."""
    if not (shared_dir / "ud" / "UD_Spanish-GSD").is_dir():
        pytest.skip(f"no UD treebank under {shared_dir}/ud")
    store = tmp_path_factory.mktemp("stanza_tiny")
    cfg = sm.StanzaConfig.from_dict({"download": False, "training": TINY,
                                     "treebanks": {"es": {"name": "UD_Spanish-GSD", "prefix": "es_gsd"}}})
    desc = sm.provide("es", cfg, shared_dir, store / "stanza")
    path = store / "model.json"
    path.write_text(json.dumps(desc))
    return path


def test_tokenize():
    assert P.tokenize("Don't stop, John's dog.") == ["Do", "n't", "stop", ",", "John", "'s", "dog", "."]
    assert P.tokenize("¿Dónde está el niño?") == ["¿", "Dónde", "está", "el", "niño", "?"]
    assert P.tokenize("  \t ") == []


def test_tokenize_cuts_japanese_where_the_script_changes():
    """No spaces in Japanese: a word run is cut between Han, Hiragana and Katakana (and the rest),
    which gives UD Japanese GSD's units for noun + particle + Sino-Japanese verb + する."""
    assert P.tokenize("本研究では、新しい手法を提案する。") == \
        ["本研究", "では", "、", "新", "しい", "手法", "を", "提案", "する", "。"]
    assert P.tokenize("パラメータUPが大きい") == ["パラメータ", "UP", "が", "大", "きい"]
    # a run of one script stays whole: two Han words in a row are one token (a segmenter's job)
    assert P.tokenize("人々はデータを2回測定した") == ["人々", "は", "データ", "を", "2", "回測定", "した"]


def test_valid_tree():
    assert P.valid_tree([2, 0, 2])
    assert not P.valid_tree([0, 0])        # two roots
    assert not P.valid_tree([2, 3, 1])     # no root
    assert not P.valid_tree([0, 4])        # head out of range
    assert not P.valid_tree([])


def _docs(path: Path) -> Path:
    rows = [
        ("train", "d1", 0, "Y dijo Dios: Sea la luz; y fue la luz.", "And God said, Let there be light."),
        ("train", "d1", 1, "   ", "And there was light."),                           # empty src
        ("train", "d1", 2, "Y vio Dios que la luz era buena.", "God saw the light was good."),
        ("train", "d2", 0, " ".join(["palabra"] * 30), "Too long on the source side only."),
        ("dev", "d3", 0, "En el principio creó Dios los cielos.", "In the beginning God created."),
        ("test", "d4", 0, "No se parsea el test.", "The test split is not parsed."),
    ]
    with doc_writer(path) as w:
        for i, (split, doc, idx, src, tgt) in enumerate(rows):
            w.write(Sentence("bible", split, doc, idx, src, [tgt], origin_file="x.osis", origin_line=i + 1))
    return path


@pytest.mark.slow
def test_cli_shards_and_merge(model, tmp_path):
    docs = _docs(tmp_path / "docs.parquet")
    dirs = {"src": [], "tgt": []}
    for side in ("src", "tgt"):
        for shard in range(2):
            out = tmp_path / "shards" / side / str(shard)
            rc = P.main(["shard", "--docs", str(docs), "--side", side, "--model", str(model),
                         "--shard", str(shard), "--num-shards", "2", "--splits", "train", "dev",
                         "--max-sentences-per-split", "0", "--max-words", "20", "--threads", "1",
                         "--out-dir", str(out)])
            assert rc == 0
            dirs[side].append(out)
    final = tmp_path / "parse_corpus"
    assert P.main(["merge", "--src-shards", *map(str, dirs["src"]), "--tgt-shards",
                   *map(str, dirs["tgt"]), "--out-dir", str(final)]) == 0

    src = pq.read_table(final / "src.parquet")
    assert src.schema.equals(P.PARSE_SCHEMA)
    keys = list(zip(src.column("split").to_pylist(), src.column("doc_id").to_pylist(),
                    src.column("sent_idx").to_pylist()))
    assert keys == [("train", "d1", 0), ("train", "d1", 2), ("dev", "d3", 0)]   # docs order kept
    for row in src.to_pylist():
        assert len(row["words"]) == len(row["upos"]) == len(row["heads"]) == len(row["deprels"])
        assert P.valid_tree(row["heads"])
    assert src.to_pylist()[0]["words"][:3] == ["Y", "dijo", "Dios"]
    tgt = pq.read_table(final / "tgt.parquet")
    assert tgt.num_rows == 5 and tgt.to_pylist()[1]["words"][:3] == ["And", "there", "was"]

    bad = pq.read_table(final / "quarantine.parquet").to_pylist()
    assert sorted((b["doc_id"], b["reason"]) for b in bad) == [
        ("d1", ParseReason.EMPTY.value), ("d2", ParseReason.TOO_LONG.value)]
    assert all(b["stage"] == "parse_corpus" and b["origin_file"] == "src:x.osis" for b in bad)
    manifest = json.loads((final / "manifest.json").read_text())
    assert manifest["rejected"] == {"src:empty_sentence": 1, "src:too_long": 1}
    assert manifest["counts"]["parsed"] == {"src": {"train": 2, "dev": 1}, "tgt": {"train": 4, "dev": 1}}


@pytest.mark.slow
def test_cap_per_split_and_unparsable_sentence(model, tmp_path):
    """The first N rows per split only; a sentence stanza raises on goes to quarantine alone."""
    docs = _docs(tmp_path / "docs.parquet")
    real = sm.load_pipeline(model)

    def nlp(batch):  # the real pipeline, failing on one sentence as a corrupt input would
        if any("vio" in words for words in batch):
            raise RuntimeError("simulated stanza failure")
        return real(batch)

    settings = P.ParseSettings(splits=("train",), max_sentences_per_split=3)
    P.parse_shard(docs, "src", model, 0, 1, settings, tmp_path / "out", nlp=nlp)
    out = pq.read_table(tmp_path / "out" / P.PARSE_FILE).to_pylist()
    assert [(r["doc_id"], r["sent_idx"]) for r in out] == [("d1", 0)]
    reasons = sorted(r["reason"] for r in pq.read_table(tmp_path / "out" / "quarantine.parquet").to_pylist())
    assert reasons == [ParseReason.EMPTY.value, ParseReason.PARSE_FAILED.value]


def test_unreadable_docs_is_a_clear_error(tmp_path, caplog):
    bad = tmp_path / "docs.parquet"
    bad.write_text("not parquet")
    rc = P.main(["shard", "--docs", str(bad), "--side", "src", "--model", str(tmp_path / "model.json"),
                 "--out-dir", str(tmp_path / "o")])
    assert rc == 2
    assert f"{bad}: cannot read document Parquet" in caplog.text


def test_stanza_trainer_progress_gives_the_time_left():
    """Issue 35 item 6: stanza's trainers log steps and seconds per batch, not an ETA; the job's
    log gets one from their own step lines (the line format of stanza's tagger.py/parser.py)."""
    from pipeline_lib.parse.stanza_models import time_left

    line = ("2026-11-29 15:00:01 INFO: Finished STEP 40/500, loss = 1.234567 (0.200 sec/batch), "
            "lr: 0.003000")
    assert time_left(line) == "step 40/500, about 92 s left"
    assert time_left("Evaluating on dev set...") is None

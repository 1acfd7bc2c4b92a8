"""sentencepiece BPE on small real text (UD sentences from the shared folder): ids, special
symbols as single pieces, train-split-only training, encoding with subword heads from a parse
Parquet built here from the UD gold trees."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline_lib.preprocess import bpe
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipeline_lib.tables import Sentence, doc_writer

DOC_LEN = 8
N_SENTS = 800
DEV_WORD = "Zyxwvqueta"          # only in dev documents: must not shape the vocabulary

PARSE_SCHEMA = pa.schema([
    ("corpus", pa.string()), ("split", pa.string()), ("doc_id", pa.string()),
    ("sent_idx", pa.int32()), ("words", pa.list_(pa.string())), ("upos", pa.list_(pa.string())),
    ("heads", pa.list_(pa.int32())), ("deprels", pa.list_(pa.string())),
])


def read_conllu(path: Path, limit: int) -> list[tuple[str, list[str], list[int]]]:
    """(text, words, heads) of the first ``limit`` sentences; multi-word token lines skipped."""
    out, text, words, heads = [], None, [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# text = "):
            text = line[len("# text = "):]
        elif not line.strip():
            if text and words:
                out.append((text, words, heads))
                if len(out) == limit:
                    break
            text, words, heads = None, [], []
        elif not line.startswith("#"):
            cols = line.split("\t")
            if "-" in cols[0] or "." in cols[0]:
                continue
            words.append(cols[1])
            heads.append(int(cols[6]))
    return out


@pytest.fixture(scope="module")
def corpus(shared_dir: Path, tmp_path_factory) -> dict:
    es = read_conllu(shared_dir / "ud/UD_Spanish-GSD/es_gsd-ud-dev.conllu", N_SENTS)
    en = read_conllu(shared_dir / "ud/UD_English-EWT/en_ewt-ud-dev.conllu", N_SENTS)
    assert len(es) == len(en) == N_SENTS
    tmp = tmp_path_factory.mktemp("bpe")
    rows, src_parse, tgt_parse = [], [], []
    for i, ((s_text, s_words, s_heads), (t_text, t_words, t_heads)) in enumerate(zip(es, en)):
        split = "dev" if i >= N_SENTS - 5 * DOC_LEN else "train"
        if split == "dev":
            s_text = f"{DEV_WORD} {s_text}"
            s_words = [DEV_WORD] + s_words
            s_heads = [0] + [h + 1 if h else 1 for h in s_heads]  # DEV_WORD heads the tree
        doc, idx = f"d{i // DOC_LEN}", i % DOC_LEN
        rows.append(Sentence("ud", split, doc, idx, s_text, [t_text], True, "ud", i + 1))
        key = {"corpus": "ud", "split": split, "doc_id": doc, "sent_idx": idx}
        if i % 7:                                   # every 7th sentence has no parse
            src_parse.append({**key, "words": s_words, "upos": ["X"] * len(s_words),
                              "heads": s_heads, "deprels": ["dep"] * len(s_words)})
        tgt_parse.append({**key, "words": t_words, "upos": ["X"] * len(t_words),
                          "heads": t_heads, "deprels": ["dep"] * len(t_words)})
    with doc_writer(tmp / "docs.parquet", row_group_size=300) as w:
        w.write_all(rows)
    pq.write_table(pa.Table.from_pylist(src_parse, schema=PARSE_SCHEMA), tmp / "src.parquet")
    pq.write_table(pa.Table.from_pylist(tgt_parse, schema=PARSE_SCHEMA), tmp / "tgt.parquet")
    record = bpe.train([tmp / "docs.parquet"], tmp / "model", bpe.BpeConfig(vocab_size=1500),
                       "es", "en")
    return {"dir": tmp, "record": record, "rows": rows, "model": tmp / "model" / "spm.model"}


def test_ids_and_user_symbols_are_single_pieces(corpus):
    sp = spm.SentencePieceProcessor(model_file=str(corpus["model"]))
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    symbols = bpe.user_symbols("es", "en")
    assert set(symbols) == {"<mask1>", "<mask2>", "<2es>", "<2en>", "####", "<doc>"}
    for sym in symbols:
        sid = sp.piece_to_id(sym)
        assert sid > EOS_ID and sp.id_to_piece(sid) == sym
        ids = sp.encode(f"la casa{sym}grande {sym} end")
        assert ids.count(sid) == 2, sym
    assert corpus["record"]["user_symbols"] == {s: sp.piece_to_id(s) for s in symbols}


def test_trained_on_train_split_only(corpus):
    n_train = sum(r.split == "train" for r in corpus["rows"])
    assert corpus["record"]["counts"]["training_lines"] == 2 * n_train
    sp = spm.SentencePieceProcessor(model_file=str(corpus["model"]))
    vocab = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    assert "▁" + DEV_WORD not in vocab and DEV_WORD not in vocab
    assert sp.get_piece_size() == 1500


def test_retraining_writes_a_byte_identical_model(corpus):
    """The same input and settings give the same spm.model bytes, so its checksum (an input of
    every later stage's manifest) repeats from run to run; sentencepiece records the paths it
    was trained from, which used to be a random temporary folder."""
    out = corpus["dir"] / "again"
    first = bpe.train([corpus["dir"] / "docs.parquet"], out, bpe.BpeConfig(vocab_size=1500),
                      "es", "en")
    second = bpe.train([corpus["dir"] / "docs.parquet"], out, bpe.BpeConfig(vocab_size=1500),
                       "es", "en")
    assert first["model_sha256"] == second["model_sha256"]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "spm.model", "spm.vocab"]


def test_encode_with_heads(corpus):
    out = corpus["dir"] / "enc"
    record = bpe.encode_corpus(corpus["dir"] / "docs.parquet", corpus["model"], out,
                               corpus["dir"] / "src.parquet", corpus["dir"] / "tgt.parquet")
    table = pq.read_table(out / bpe.ENCODED_FILE)
    assert table.schema == bpe.ENCODED_SCHEMA
    got = table.to_pylist()
    assert len(got) == N_SENTS
    sp = spm.SentencePieceProcessor(model_file=str(corpus["model"]))
    for i, (row, src) in enumerate(zip(got, corpus["rows"])):
        assert (row["doc_id"], row["sent_idx"], row["src_text"]) == (src.doc_id, src.sent_idx, src.src)
        assert row["tgt_text"] == src.tgt[0]
        assert row["src_ids"] == sp.encode(src.src)                 # no BOS/EOS
        if UNK_ID not in row["tgt_ids"]:                            # detokenisable
            want = sp.normalize(src.tgt[0]).replace("▁", " ").strip()
            assert sp.decode(row["tgt_ids"]) == want
        if i % 7 == 0:
            assert row["src_heads"] is None                         # no parse -> null
        else:
            heads = row["src_heads"]
            assert len(heads) == len(row["src_ids"])
            assert all(0 <= h < len(heads) for h in heads)
            assert sum(h == p for p, h in enumerate(heads)) == 1    # one root piece
        assert len(row["tgt_heads"]) == len(row["tgt_ids"])
    assert record["counts"]["src_heads"] == N_SENTS - len(range(0, N_SENTS, 7))
    assert record["counts"]["tgt_heads"] == N_SENTS
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rejected_total"] == 0


def test_parse_out_of_order_is_an_error(corpus, tmp_path):
    t = pq.read_table(corpus["dir"] / "tgt.parquet")
    pq.write_table(t.take(list(range(t.num_rows - 1, -1, -1))), tmp_path / "rev.parquet")
    with pytest.raises(ValueError, match="order"):
        bpe.encode_corpus(corpus["dir"] / "docs.parquet", corpus["model"], tmp_path / "enc",
                          None, tmp_path / "rev.parquet")


def test_cli_reports_missing_input(tmp_path):
    assert bpe.main(["encode", "--docs", str(tmp_path / "nope.parquet"), "--model",
                     str(tmp_path / "m.model"), "--out-dir", str(tmp_path)]) == 2


def test_stream_batches_holds_one_row_group_at_a_time(tmp_path):
    """Reading the first batch must not buffer the rest of the file (pyarrow pre-buffers every
    row group by default, which made peak RSS grow with the corpus)."""
    path = tmp_path / "big.parquet"
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(str(path), pa.schema([("b", pa.binary())])) as w:
        for _ in range(40):                     # 40 row groups of 64 KiB, incompressible
            w.write_table(pa.table({"b": [rng.bytes(1024) for _ in range(64)]}))
    before = pa.total_allocated_bytes()
    batches = bpe.stream_batches(path, batch_size=64)
    assert next(batches).num_rows == 64
    assert pa.total_allocated_bytes() - before < path.stat().st_size / 4
    assert sum(b.num_rows for b in batches) == 39 * 64

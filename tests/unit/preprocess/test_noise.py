"""Document restoration noise (Chen et al. 2021): gap rules on many random documents, BERT-style
mask rates, instance layout, determinism and the manifest's achieved rates."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline_lib.documents import split_document
from pipeline_lib.preprocess import noise
from pipeline_lib.preprocess.bpe import ENCODED_SCHEMA, user_symbols

VOCAB = noise.Vocab(gap_id=4, mask_id=5, regular_lo=10, size=1000)


@pytest.mark.parametrize("ratio", [0.1, 0.2, 0.3, 0.5])
def test_gap_rules_on_random_documents(ratio):
    rng = np.random.default_rng(7)
    for n in list(range(0, 40)) * 25:
        gaps = noise.choose_gaps(n, ratio, rng)
        assert gaps == sorted(set(gaps))
        assert len(gaps) == noise.gap_count(n, ratio)
        if n >= 3 and ratio * n <= math.ceil((n - 2) / 2):
            assert len(gaps) == math.floor(ratio * n + 1e-9)
        assert all(0 < g < n - 1 for g in gaps)                  # never first or last
        assert all(b - a >= 2 for a, b in zip(gaps, gaps[1:]))   # never adjacent


def test_gap_choice_covers_every_interior_position():
    """Uniform over valid sets: every interior position of a 10-sentence document is picked."""
    rng = np.random.default_rng(0)
    hits = np.zeros(10)
    for _ in range(4000):
        hits[noise.choose_gaps(10, 0.2, rng)] += 1
    assert hits[0] == hits[9] == 0 and (hits[1:9] > 0).all()


def test_split_document_is_balanced():
    assert split_document(0, 30) == []
    assert split_document(30, 30) == [(0, 30)]
    assert split_document(31, 30) == [(0, 16), (16, 31)]
    for n in range(1, 200):
        b = split_document(n, 30)
        sizes = [e - s for s, e in b]
        assert sum(sizes) == n and max(sizes) <= 30 and max(sizes) - min(sizes) <= 1
        assert all(b[i][1] == b[i + 1][0] for i in range(len(b) - 1))


def test_mask_rates_match_config():
    cfg = noise.NoiseConfig()
    rng = np.random.default_rng(3)
    stats = noise.MaskStats()
    pyrng = random.Random(3)
    for _ in range(4000):
        ids = [pyrng.randrange(VOCAB.regular_lo, VOCAB.size) for _ in range(pyrng.randint(1, 40))]
        out = noise.mask_tokens(ids, cfg, VOCAB, rng, stats)
        assert len(out) == len(ids)
        assert all(o == i or o == VOCAB.mask_id or VOCAB.regular_lo <= o < VOCAB.size
                   for o, i in zip(out, ids))
    n, k = stats.tokens, stats.chosen
    assert abs(k / n - cfg.mask_rate) < 4 * math.sqrt(cfg.mask_rate * (1 - cfg.mask_rate) / n)
    for share, p in ((stats.to_mask, 0.8), (stats.to_random, 0.1), (stats.kept, 0.1)):
        assert abs(share / k - p) < 4 * math.sqrt(p * (1 - p) / k)


@pytest.mark.parametrize("gap_input", noise.GAP_DOCUMENT_INPUTS)
def test_subdocument_instances(gap_input):
    cfg = noise.NoiseConfig(gap_ratio=0.3, gap_document_input=gap_input)
    sents = [[100 + 10 * i + j for j in range(4)] for i in range(10)]   # disjoint ids
    rows = noise.noise_subdocument(sents, cfg, VOCAB, np.random.default_rng(1), noise.MaskStats())
    gaps = [i for i, r in enumerate(rows) if r["task"] == noise.TASK_GSR]
    assert len(gaps) == 3
    doc_input = [t for r in rows for t in r["ctx_ids"]]
    for i, r in enumerate(rows):
        assert r["tgt_ids"] == sents[i]                                   # output = original
        if i in gaps:
            assert r["src_ids"] == sents[i - 1] + [VOCAB.gap_id] + sents[i + 1]
            # the document holds the noised sentences: at a gap its input, or <mask1> alone
            want = r["src_ids"] if gap_input == "sentence" else [VOCAB.gap_id]
            assert r["ctx_ids"] == want
            assert not set(sents[i]) & set(doc_input)                     # gap never in input
        else:
            assert r["src_ids"] == r["ctx_ids"] and len(r["src_ids"]) == len(sents[i])
    with pytest.raises(ValueError, match="gap_document_input"):
        noise.NoiseConfig(gap_document_input="left")


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    """A real sentencepiece model and an encoded Parquet of random-length documents."""
    tmp = tmp_path_factory.mktemp("noise")
    pyrng = random.Random(5)
    words = ["casa", "perro", "grande", "el", "la", "verde", "come", "mucho", "hoy", "dijo"]
    text = [" ".join(pyrng.choice(words) for _ in range(pyrng.randint(3, 15))) for _ in range(3000)]
    (tmp / "t.txt").write_text("\n".join(text) + "\n")
    spm.SentencePieceTrainer.train(input=str(tmp / "t.txt"), model_prefix=str(tmp / "spm"),
                                   model_type="bpe", vocab_size=80, pad_id=0, unk_id=1, bos_id=2,
                                   eos_id=3, user_defined_symbols=user_symbols("es", "en"),
                                   hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp / "spm.model"))
    rows, k = [], 0
    for d in range(120):
        split = "dev" if d % 10 == 0 else "train"
        for i in range(pyrng.randint(1, 75)):
            ids = sp.encode(text[k % len(text)])
            k += 1
            rows.append({"corpus": "c", "split": split, "doc_id": f"doc{d}", "sent_idx": i,
                         "src_ids": ids, "tgt_ids": ids, "src_heads": None, "tgt_heads": None,
                         "src_text": "", "tgt_text": "", "has_context": True})
    pq.write_table(pa.Table.from_pylist(rows, schema=ENCODED_SCHEMA), tmp / "enc.parquet",
                   row_group_size=500)
    return tmp, rows


def test_make_restore_manifest_and_determinism(encoded, tmp_path):
    tmp, rows = encoded
    cfg = noise.NoiseConfig()
    rec = noise.make_restore(tmp / "enc.parquet", tmp / "spm.model", tmp_path / "a", cfg)
    a = pq.read_table(tmp_path / "a" / noise.RESTORE_FILE)
    assert a.schema == noise.RESTORE_SCHEMA
    train = [r for r in rows if r["split"] == "train"]
    assert a.num_rows == len(train) and rec["counts"]["source_split"] == "train"
    assert set(a["split"].to_pylist()) == {"train"}
    achieved = json.loads((tmp_path / "a" / "manifest.json").read_text())["achieved"]
    # Gaps are floor(ratio * N) per sub-document: exact count, at most 1/N_min below the ratio.
    assert achieved["gap_ratio"] == achieved["gap_ratio_floor_expected"]
    assert cfg.gap_ratio - 1 / 3 < achieved["gap_ratio"] <= cfg.gap_ratio
    n = rec["counts"]["msr_tokens"]
    assert abs(achieved["mask_rate"] - cfg.mask_rate) < 4 * math.sqrt(0.15 * 0.85 / n)
    assert abs(achieved["mask_token_share"] - 0.8) < 0.03
    # Sub-documents: at most 30 sentences, rows contiguous, targets are the original sentences.
    subs = {}
    for r in a.to_pylist():
        subs.setdefault(r["doc_id"], []).append(r)
    assert max(len(v) for v in subs.values()) <= cfg.max_sentences
    assert [r["tgt_ids"] for r in a.to_pylist()] == [r["src_ids"] for r in train]
    # Same seed -> identical file; another seed -> different noise.
    noise.make_restore(tmp / "enc.parquet", tmp / "spm.model", tmp_path / "b", cfg)
    assert pq.read_table(tmp_path / "b" / noise.RESTORE_FILE).equals(a)
    noise.make_restore(tmp / "enc.parquet", tmp / "spm.model", tmp_path / "c",
                       noise.NoiseConfig(seed=2))
    assert not pq.read_table(tmp_path / "c" / noise.RESTORE_FILE).equals(a)


def test_mono_split_is_preferred(encoded, tmp_path):
    tmp, rows = encoded
    mono = [dict(r, split="mono", tgt_ids=None, doc_id="m" + r["doc_id"]) for r in rows[:200]]
    pq.write_table(pa.Table.from_pylist(rows + mono, schema=ENCODED_SCHEMA), tmp_path / "e.parquet")
    rec = noise.make_restore(tmp_path / "e.parquet", tmp / "spm.model", tmp_path / "o",
                             noise.NoiseConfig())
    assert rec["counts"]["source_split"] == "mono" and rec["counts"]["sentences"] == 200


def test_iter_units_streams_row_groups(tmp_path):
    """The first document must come back without the rest of the file in memory (noise and
    shards read the whole encoded corpus through iter_units)."""
    path = tmp_path / "big.parquet"
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(str(path), pa.schema([("doc_id", pa.string()),
                                                 ("b", pa.binary())])) as w:
        for g in range(40):                     # one 64 KiB document per row group
            w.write_table(pa.table({"doc_id": [f"d{g}"] * 64,
                                    "b": [rng.bytes(1024) for _ in range(64)]}))
    before = pa.total_allocated_bytes()
    units = noise.iter_units(path, ("doc_id",), batch_rows=64)
    assert [r["doc_id"] for r in next(units)] == ["d0"] * 64
    assert pa.total_allocated_bytes() - before < path.stat().st_size / 4
    assert sum(1 for _ in units) == 39

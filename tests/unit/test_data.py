"""Streaming token-budget loader on real Parquet shards encoded by a real sentencepiece model."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch

from pipeline_lib.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipeline_lib.data import DataPosition, LoaderConfig, ShardStream, TrainLoader, dev_batches

WORDS = ("casa perro gato libro agua tierra cielo mar sol luna rio monte arbol flor camino "
         "pueblo noche dia fuego viento piedra campo barco puerta mesa").split()


def write_corpus(root: Path, n_rows: int = 600, n_shards: int = 3, row_group: int = 50,
                 seed: int = 0, spm_model: Path | None = None) -> tuple[Path, Path]:
    """Shards of copy pairs (x, x) in the make_shards layout, encoded with ``spm_model`` or with
    a real sentencepiece model trained here on the same text."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))) for _ in range(n_rows)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "text.txt").write_text("\n".join(lines) + "\n")
    if spm_model is None:
        spm.SentencePieceTrainer.train(
            input=str(root / "text.txt"), model_prefix=str(root / "spm"), model_type="bpe",
            vocab_size=80, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            hard_vocab_limit=False, minloglevel=2, num_threads=1)
        spm_model = root / "spm.model"
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    shards = root / "shards"
    shards.mkdir()
    per = -(-n_rows // n_shards)
    index = []
    for k in range(n_shards):
        chunk = lines[k * per:(k + 1) * per]
        ids = [sp.encode(t) for t in chunk]
        table = pa.table({
            "corpus": ["toy"] * len(chunk), "split": ["train"] * len(chunk),
            "doc_id": [f"d{(k * per + i) // 10}" for i in range(len(chunk))],
            "sent_idx": [(k * per + i) % 10 for i in range(len(chunk))],
            "src_ids": pa.array(ids, pa.list_(pa.int32())),
            "tgt_ids": pa.array(ids, pa.list_(pa.int32())),
            "src_heads": pa.array([[-1] * len(x) for x in ids], pa.list_(pa.int32())),
            "tgt_heads": pa.array([None] * len(chunk), pa.list_(pa.int32())),
            "src_text": chunk, "tgt_text": chunk})
        name = f"shard-{k:05d}.parquet"
        pq.write_table(table, shards / name, row_group_size=row_group)
        index.append({"file": name, "rows": len(chunk), "src_tokens": sum(map(len, ids)),
                      "tgt_tokens": sum(map(len, ids))})
    pq.write_table(pa.Table.from_pylist(index), shards / "index.parquet")
    return shards, spm_model


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return write_corpus(tmp_path_factory.mktemp("data"))


def _keys(batch) -> list[tuple[str, int]]:
    return list(zip(batch.doc_id, batch.sent_idx))


def _epoch(shards: Path, cfg: LoaderConfig, rank: int = 0, world: int = 1, epoch: int = 0):
    return [b for _, b in TrainLoader(shards, cfg, rank, world).iterate(DataPosition(epoch, 0))]


def test_budget_and_layout(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=200, seed=3, buffer_sents=120)
    batches = _epoch(shards, cfg)
    for b in batches:
        assert b.src.numel() <= 200 and b.tgt_in.numel() <= 200
        assert (b.src.gather(1, (b.src != PAD_ID).sum(1, keepdim=True) - 1) == EOS_ID).all()
        assert (b.tgt_in[:, 0] == BOS_ID).all()
        assert torch.equal(b.tgt_in != PAD_ID, b.tgt_out != PAD_ID)  # same lengths
        shifted = b.tgt_out[:, :-1]
        keep = shifted != EOS_ID
        assert torch.equal(b.tgt_in[:, 1:][keep], shifted[keep])  # tgt_in = BOS + y
        # tgt_out = y + EOS: the copy pair's y is src without its EOS
        assert torch.equal(b.tgt_out, b.src)
    # length bucketing keeps padding low: at least 70 % of cells are real tokens
    real = sum(int((b.src != PAD_ID).sum()) for b in batches)
    assert real / sum(b.src.numel() for b in batches) > 0.7


def test_every_row_once_and_deterministic(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=256, seed=5, buffer_sents=100)
    keys = [k for b in _epoch(shards, cfg) for k in _keys(b)]
    assert len(keys) == 600 == len(set(keys))
    again = [k for b in _epoch(shards, cfg) for k in _keys(b)]
    assert keys == again
    other_epoch = [k for b in _epoch(shards, cfg, epoch=1) for k in _keys(b)]
    assert sorted(other_epoch) == sorted(keys) and other_epoch != keys
    other_seed = [k for b in _epoch(shards, LoaderConfig(max_tokens=256, seed=6, buffer_sents=100))
                  for k in _keys(b)]
    assert other_seed != keys


def test_disjoint_across_ranks_and_workers(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=256, seed=1, buffer_sents=100, num_workers=2)
    seen = []
    for rank in range(2):
        keys = [k for b in _epoch(shards, cfg, rank, 2) for k in _keys(b)]
        assert keys, f"rank {rank} got no data"
        seen.append(set(keys))
        # the 2 DataLoader workers of this rank read disjoint units
        ds = ShardStream(shards, cfg, rank, 2)
        u0, u1 = ds.stream_units(0, 2), ds.stream_units(1, 2)
        assert u0 and u1 and not set(u0) & set(u1)
        # with workers, the epoch is still deterministic
        assert keys == [k for b in _epoch(shards, cfg, rank, 2) for k in _keys(b)]
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 600


def test_more_streams_than_row_groups_splits_rows(tmp_path):
    shards, _ = write_corpus(tmp_path, n_rows=40, n_shards=1, row_group=100)
    cfg = LoaderConfig(max_tokens=256, seed=1)
    parts = [{k for b in _epoch(shards, cfg, r, 4) for k in _keys(b)} for r in range(4)]
    assert all(parts) and sum(map(len, parts)) == 40 == len(set().union(*parts))


def test_resume_skips_exactly_consumed(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=256, seed=2, buffer_sents=100, num_workers=2)
    full = list(TrainLoader(shards, cfg).iterate(DataPosition(1, 0)))
    rest = list(TrainLoader(shards, cfg).iterate(DataPosition(1, 7)))
    assert [p for p, _ in rest] == [p for p, _ in full[7:]]
    assert [_keys(b) for _, b in rest] == [_keys(b) for _, b in full[7:]]
    assert full[6][0] == DataPosition(1, 7)


def test_dev_batches_fixed_and_complete(corpus):
    shards, _ = corpus
    a, b = dev_batches(shards, 300), dev_batches(shards, 300)
    assert [_keys(x) for x in a] == [_keys(x) for x in b]
    assert sum(len(x.doc_id) for x in a) == 600


def test_heads_padded_and_aligned(corpus):
    shards, _ = corpus
    b = _epoch(shards, LoaderConfig(max_tokens=256, with_heads=True))[0]
    assert b.src_heads is not None and b.src_heads.shape == b.src.shape
    assert b.tgt_heads is None  # the shard's tgt_heads are null


def test_unreadable_shard_names_file(tmp_path):
    (tmp_path / "shard-00000.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="shard-00000.parquet"):
        _epoch(tmp_path, LoaderConfig())

"""Parquet shards: round trip (write, read, same rows), documents never split, indexes, row
groups, quarantine, and the verifier catching a wrong index."""

from __future__ import annotations

import random
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_lib.preprocess import shards
from pipeline_lib.preprocess.bpe import ENCODED_SCHEMA
from pipeline_lib.preprocess.noise import RESTORE_SCHEMA

CFG = shards.ShardConfig(rows_per_shard=17, row_group_rows=5, max_len=30)


def _rows() -> list[dict]:
    rng = random.Random(11)
    rows = []
    for d in range(40):
        split = ("dev", "test", "train", "train", "train", "mono")[d % 6]
        for i in range(rng.randint(1, 12)):
            src = [rng.randrange(4, 500) for _ in range(rng.randint(1, 20))]
            tgt = (None if split == "mono"
                   else [rng.randrange(4, 500) for _ in range(rng.randint(1, 20))])
            heads = ([min(j + 1, len(src) - 1) for j in range(len(src))]
                     if rng.random() < 0.5 else None)
            rows.append({"corpus": "c", "split": split, "doc_id": f"d{d}", "sent_idx": i,
                         "src_ids": src, "tgt_ids": tgt, "src_heads": heads,
                         "tgt_heads": None, "src_text": f"s{d}.{i}",
                         "tgt_text": None if tgt is None else f"t{d}.{i}", "has_context": True})
    rows[3]["tgt_ids"] = []                                  # empty side -> quarantine
    rows[5]["src_ids"] = list(range(4, 40))                  # 36 > max_len -> quarantine
    rows[5]["src_heads"] = None
    return rows


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    rows = _rows()
    pq.write_table(pa.Table.from_pylist(rows, schema=ENCODED_SCHEMA), tmp / "enc.parquet",
                   row_group_size=30)
    restore = [{"corpus": "c", "split": "train", "doc_id": f"d{d}#0", "sent_idx": i,
                "orig_sent_idx": i, "task": "msr", "src_ids": [5, 6], "tgt_ids": [7, 8, 9],
                "ctx_ids": [5, 6]} for d in range(12) for i in range(d % 5 + 1)]
    pq.write_table(pa.Table.from_pylist(restore, schema=RESTORE_SCHEMA), tmp / "restore.parquet")
    rec = shards.make_shards(tmp / "enc.parquet", tmp / "restore.parquet", tmp / "out", CFG)
    return tmp / "out", rows, restore, rec


def _read_dir(d):
    index = pq.read_table(d / shards.INDEX_FILE).to_pylist()
    return index, [pq.read_table(d / e["file"]) for e in index]


def test_column_names_are_the_trainers():
    assert shards.SHARD_SCHEMA.names == [
        "corpus", "split", "doc_id", "sent_idx", "src_ids", "tgt_ids", "src_heads", "tgt_heads",
        "src_text", "tgt_text"]
    assert shards.SHARD_SCHEMA.field("src_ids").type == pa.list_(pa.int32())
    assert shards.INDEX_SCHEMA.names == ["file", "rows", "src_tokens", "tgt_tokens"]


@pytest.mark.parametrize("task", [shards.TASK_SENT, shards.TASK_DOC])
def test_round_trip_same_rows(written, task):
    out, rows, _, _ = written
    for split in ("train", "dev", "test"):
        index, tables = _read_dir(out / task / split)
        got = [r for t in tables for r in t.to_pylist()]
        want = [{k: r[k] for k in shards.SHARD_SCHEMA.names} for i, r in enumerate(rows)
                if r["split"] == split and i not in (3, 5)]
        assert got == want
        assert [e["rows"] for e in index] == [t.num_rows for t in tables]
        assert [e["file"] for e in index] == [f"shard-{i:05d}.parquet" for i in range(len(index))]
        for e, t in zip(index, tables):
            assert e["src_tokens"] == sum(len(x) for x in t["src_ids"].to_pylist())
            assert e["tgt_tokens"] == sum(len(x) for x in t["tgt_ids"].to_pylist())
    assert not (out / task / "mono").exists()


def test_sent_shards_have_fixed_size_and_row_groups(written):
    out = written[0]
    index, _ = _read_dir(out / "sent" / "train")
    assert len(index) > 2 and all(e["rows"] == CFG.rows_per_shard for e in index[:-1])
    for e in index:
        meta = pq.ParquetFile(out / "sent" / "train" / e["file"]).metadata
        assert all(meta.row_group(i).num_rows <= CFG.row_group_rows
                   for i in range(meta.num_row_groups))
        assert meta.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("task", [shards.TASK_DOC, shards.TASK_RESTORE])
def test_documents_never_split(written, task):
    out = written[0]
    _, tables = _read_dir(out / task / "train")
    assert len(tables) > 1
    owners = {}
    for k, t in enumerate(tables):
        for doc in set(t["doc_id"].to_pylist()):
            assert owners.setdefault(doc, k) == k
        assert t.num_rows < CFG.rows_per_shard + 12                # closes after one document


def test_restore_round_trip_and_quarantine(written):
    out, _, restore, rec = written
    _, tables = _read_dir(out / "restore" / "train")
    assert [r for t in tables for r in t.to_pylist()] == restore
    assert rec["rejected"] == {"empty_side": 1, "too_long": 1}
    q = pq.read_table(out / "quarantine.parquet").to_pylist()
    assert sorted(r["reason"] for r in q) == ["empty_side", "too_long"]
    assert sorted(r["origin_line"] for r in q) == [4, 6]


def test_verify_accepts_and_catches_bad_index(written, tmp_path):
    out = written[0]
    report = shards.verify(out)
    assert set(report) >= {"sent/train", "doc/train", "restore/train", "sent/dev"}
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    idx = pq.read_table(bad / "doc/train" / shards.INDEX_FILE).to_pylist()
    idx[0]["rows"] += 1
    pq.write_table(pa.Table.from_pylist(idx, schema=shards.INDEX_SCHEMA),
                   bad / "doc/train" / shards.INDEX_FILE)
    with pytest.raises(ValueError, match="index says rows"):
        shards.verify(bad)


def test_failed_run_leaves_no_shard_directory(written, tmp_path, monkeypatch):
    """make_shards builds the tree under a partial name: a failure halfway leaves nothing."""
    out, *_ = written
    calls = []

    def fail_on_the_50th_row(row, max_len, require_heads=False):
        calls.append(row)
        if len(calls) == 50:
            raise OSError("disk full")
        return None

    monkeypatch.setattr(shards, "_unusable", fail_on_the_50th_row)
    with pytest.raises(OSError, match="disk full"):
        shards.make_shards(out.parent / "enc.parquet", None, tmp_path / "shards", CFG)
    assert list(tmp_path.iterdir()) == []


def test_head_shards_hold_only_the_parsed_pairs(written, tmp_path):
    """make_head_shards: the sent task alone, every pair with heads on both sides; the others
    quarantined as no_parse and counted, so nothing is lost and every kept pair is supervised."""
    out, rows, _, _ = written
    rows = [{**r, "tgt_heads": [0] * len(r["tgt_ids"]) if r["tgt_ids"] and r["src_heads"]
             else None} for r in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=ENCODED_SCHEMA), tmp_path / "enc.parquet")
    rec = shards.make_shards(tmp_path / "enc.parquet", None, tmp_path / "heads", CFG,
                             tasks=("sent",), require_heads=True)
    assert {p.name for p in (tmp_path / "heads").iterdir() if p.is_dir()} == {"sent"}
    kept = [r for d in ("train", "dev", "test") for t in _read_dir(tmp_path / "heads" / "sent" / d)[1]
            for r in t.to_pylist()]
    assert kept and all(r["src_heads"] is not None and r["tgt_heads"] is not None for r in kept)
    pairs = [r for r in rows if r["split"] != "mono"]
    no_parse = sum(1 for r in pairs if r["src_heads"] is None and r["tgt_ids"]
                   and len(r["src_ids"]) <= 30 and len(r["tgt_ids"]) <= 30)
    assert rec["rejected"]["no_parse"] == no_parse > 0
    assert len(kept) + rec["rejected_total"] == len(pairs)

"""Streaming token-budget loader on real Parquet shards encoded by a real sentencepiece model."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch

from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader, dev_batches

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


def _row_tokens(b) -> list[int]:
    """What each row of a batch costs the budget: the longer of src+EOS and BOS+tgt."""
    return torch.maximum(b.src.ne(PAD_ID).sum(1), b.tgt_in.ne(PAD_ID).sum(1)).tolist()


def test_budget_and_layout(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=200, seed=3, buffer_sents=120)
    batches = _epoch(shards, cfg)
    for b in batches:
        assert sum(_row_tokens(b)) <= 200   # the rows' tokens, padding not counted
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


def test_the_same_batch_shapes_every_epoch_in_a_new_order(corpus):
    """Chunks keep their rows across epochs (ShardStream.epoch_chunks), so every epoch has the
    first epoch's batch shapes (a CUDA first-sight cost is paid once, issue 29) and rows, in
    another order; chunks cut anew each epoch gave new shapes every epoch."""
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=256, seed=5, buffer_sents=100)
    epochs = [_epoch(shards, cfg, epoch=e) for e in range(3)]
    shapes = [sorted((tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in ep) for ep in epochs]
    assert shapes[0] == shapes[1] == shapes[2]
    rows = [sorted(tuple(sorted(_keys(b))) for b in ep) for ep in epochs]
    assert rows[0] == rows[1] == rows[2]          # the same batches ...
    order = [[_keys(b) for b in ep] for ep in epochs]
    assert order[0] != order[1] != order[2]       # ... in another order


def test_disjoint_across_ranks_and_workers_change_nothing(corpus):
    shards, _ = corpus
    cfg = LoaderConfig(max_tokens=256, seed=1, buffer_sents=100, num_workers=2)
    seen = []
    for rank in range(2):
        keys = [k for b in _epoch(shards, cfg, rank, 2) for k in _keys(b)]
        assert keys, f"rank {rank} got no data"
        seen.append(set(keys))
        # the batch order is the rank's, whatever the number of workers computing it
        for workers in (0, 1, 2):
            assert keys == [k for b in _epoch(shards, replace(cfg, num_workers=workers), rank, 2)
                            for k in _keys(b)]
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
    from pipeline_lib.models.inputs import ModelInputs

    b = _epoch(shards, LoaderConfig(max_tokens=256, inputs=ModelInputs(heads=True)))[0]
    assert b.src_heads is not None and b.src_heads.shape == b.src.shape
    assert b.tgt_heads is None  # the shard's tgt_heads are null


def test_unreadable_shard_names_file(tmp_path):
    (tmp_path / "shard-00000.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="shard-00000.parquet"):
        _epoch(tmp_path, LoaderConfig())


# --------------------------------------------------------------------------- document modes


def write_doc_corpus(root: Path, n_docs: int = 30, n_shards: int = 2, row_group: int = 7,
                     seed: int = 0, spm_model: Path | None = None) -> tuple[Path, Path, Path]:
    """Doc shards (documents of 1-8 copy pairs, contiguous, never split across shards; small row
    groups so row groups do split documents) and restoration shards (RESTORE_SCHEMA, one
    sub-document per document), encoded with a real sentencepiece model that has the project's
    user symbols (``####``, language tags). Returns (doc dir, restore dir, spm model)."""
    from pipeline_lib.preprocess.bpe import user_symbols
    from pipeline_lib.preprocess.noise import RESTORE_SCHEMA

    rng = random.Random(seed)
    docs = [[" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))
             for _ in range(rng.randint(1, 8))] for _ in range(n_docs)]
    root.mkdir(parents=True, exist_ok=True)
    if spm_model is None:
        (root / "text.txt").write_text("\n".join(s for d in docs for s in d) + "\n")
        spm.SentencePieceTrainer.train(
            input=str(root / "text.txt"), model_prefix=str(root / "spm"), model_type="bpe",
            vocab_size=90, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            user_defined_symbols=user_symbols("es", "en"), hard_vocab_limit=False,
            minloglevel=2, num_threads=1)
        spm_model = root / "spm.model"
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    mask = sp.piece_to_id("<mask2>")
    out = {}
    for task in ("doc", "restore"):
        d = root / task
        d.mkdir()
        index = []
        per = -(-n_docs // n_shards)
        for k in range(n_shards):
            rows = []
            for di in range(k * per, min(n_docs, (k + 1) * per)):
                for si, text in enumerate(docs[di]):
                    ids = sp.encode(text)
                    if task == "doc":
                        rows.append({"corpus": "toy", "split": "train", "doc_id": f"d{di}",
                                     "sent_idx": si, "src_ids": ids, "tgt_ids": ids,
                                     "src_heads": [-1] * len(ids), "tgt_heads": None,
                                     "src_text": text, "tgt_text": text})
                    else:
                        noised = [mask] + ids[1:]
                        rows.append({"corpus": "toy", "split": "train", "doc_id": f"d{di}#0",
                                     "sent_idx": si, "orig_sent_idx": si, "task": "msr",
                                     "src_ids": noised, "tgt_ids": ids, "ctx_ids": noised})
            if task == "doc":
                table = pa.Table.from_pylist(rows).cast(pa.schema([
                    ("corpus", pa.string()), ("split", pa.string()), ("doc_id", pa.string()),
                    ("sent_idx", pa.int32()), ("src_ids", pa.list_(pa.int32())),
                    ("tgt_ids", pa.list_(pa.int32())), ("src_heads", pa.list_(pa.int32())),
                    ("tgt_heads", pa.list_(pa.int32())), ("src_text", pa.string()),
                    ("tgt_text", pa.string())]))
            else:
                table = pa.Table.from_pylist(rows, schema=RESTORE_SCHEMA)
            name = f"shard-{k:05d}.parquet"
            pq.write_table(table, d / name, row_group_size=row_group)
            index.append({"file": name, "rows": len(rows),
                          "src_tokens": sum(len(r["src_ids"]) for r in rows),
                          "tgt_tokens": sum(len(r["tgt_ids"]) for r in rows)})
        pq.write_table(pa.Table.from_pylist(index), d / "index.parquet")
        out[task] = d
    return out["doc"], out["restore"], spm_model


@pytest.fixture(scope="module")
def doc_corpus(tmp_path_factory) -> tuple[Path, Path, Path]:
    return write_doc_corpus(tmp_path_factory.mktemp("docdata"))


def _doc_rows(doc_dir: Path) -> dict[tuple[str, int], list[int]]:
    return {(r["doc_id"], r["sent_idx"]): r["src_ids"] for f in sorted(doc_dir.glob("shard-*"))
            for r in pq.read_table(f, columns=["doc_id", "sent_idx", "src_ids"]).to_pylist()}


def _inputs(name, spm_model, **extras):
    """The inputs a registered model declares (the protocol), for a tiny model of that kind."""
    from pipeline_lib.models import ModelConfig, build_model
    from pipeline_lib.models.inputs import inputs_for

    model = build_model(ModelConfig(vocab_size=100, d_model=8, n_heads=2, d_ff=8, enc_layers=1,
                                    dec_layers=1, max_len=1024, name=name, extras=extras))
    return inputs_for(model, spm_model)


def test_context_mode_every_row_once_with_true_context(doc_corpus):
    from pipeline_lib.batch import DataMode

    doc_dir, _, spm_model = doc_corpus
    spec = _inputs("doct", spm_model, context_sentences=2)
    assert spec.mode is DataMode.CONTEXT
    cfg = LoaderConfig(max_tokens=120, seed=4, buffer_sents=40, inputs=spec)
    rows = _doc_rows(doc_dir)
    batches = _epoch(doc_dir, cfg)
    keys = [k for b in batches for k in _keys(b)]
    assert len(keys) == len(rows) == len(set(keys))
    assert keys == [k for b in _epoch(doc_dir, cfg) for k in _keys(b)]
    brk = spec.context.sent_break
    for b in batches:
        assert b.ctx_src is not None and b.ctx_src.size(0) == b.src.size(0)
        for (doc, i), ctx in zip(_keys(b), b.ctx_src.tolist()):
            ctx = [t for t in ctx if t != PAD_ID]
            prev = [rows[(doc, j)] for j in range(max(0, i - 2), i)]
            want = [BOS_ID] if not prev else (prev[0] + [brk] + prev[1] if len(prev) == 2 else prev[0]) + [EOS_ID]
            assert ctx == want
    # resume skips exactly the consumed batches
    rest = list(TrainLoader(doc_dir, cfg).iterate(DataPosition(0, 3)))
    assert [_keys(b) for _, b in rest] == [_keys(b) for b in batches[3:]]
    # DDP ranks read disjoint documents that together cover the split
    parts = [{k for b in _epoch(doc_dir, cfg, r, 3) for k in _keys(b)} for r in range(3)]
    assert all(parts) and sum(map(len, parts)) == len(rows) == len(set().union(*parts))
    dev = dev_batches(doc_dir, 120, inputs=spec)
    assert sorted(k for b in dev for k in _keys(b)) == sorted(rows)


def test_context_mode_weighted_and_random(doc_corpus):
    from pipeline_lib.batch import DataMode

    doc_dir, _, spm_model = doc_corpus
    spec = _inputs("camn", spm_model, memory_sentences=2, memory_mode="weighted", random_context=True)
    assert spec.mode is DataMode.CONTEXT
    rows = _doc_rows(doc_dir)
    a = _epoch(doc_dir, LoaderConfig(max_tokens=150, seed=4, inputs=spec))
    b = _epoch(doc_dir, LoaderConfig(max_tokens=150, seed=4, inputs=spec))
    for x, y in zip(a, b):
        assert torch.equal(x.extra["ctx_sents"], y.extra["ctx_sents"])
    real_prev = 0
    for x in a:
        assert x.ctx_src is None and x.extra["ctx_sents"].shape[:2] == (x.src.size(0), 2)
        for (doc, i), slots in zip(_keys(x), x.extra["ctx_sents"].tolist()):
            got = [[t for t in s if t != PAD_ID][:-1] for s in slots]
            real_prev += any(i > j >= 0 and g == rows[(doc, j)] for g in got for j in (i - 1, i - 2))
            assert all(g != rows[(doc, i)] for g in got)
    assert real_prev < 5   # random, not the true previous sentences (duplicates may collide)


def _assert_lanes_continue_documents(batches) -> None:
    """Each lane's rows, batch after batch, are its documents' sentences in order; a lane
    appears at most once in a batch; the lane count changes only with a new set of streams."""
    from pipeline_lib.batch import EXTRA_DOC_START, EXTRA_LANE, EXTRA_LANES

    last: dict[int, tuple[str, int]] = {}
    lanes = None
    for b in batches:
        if b.extra[EXTRA_LANES] != lanes:
            lanes, last = b.extra[EXTRA_LANES], {}
        ids = b.extra[EXTRA_LANE].tolist()
        assert len(set(ids)) == len(ids) and all(0 <= k < lanes for k in ids)
        for k, (doc, i), start in zip(ids, _keys(b), b.extra[EXTRA_DOC_START].tolist()):
            if start:
                assert i == 0
            else:
                assert last[k] == (doc, i - 1)
            last[k] = (doc, i)


def test_stream_mode_lanes_continue_documents(doc_corpus):
    from pipeline_lib.batch import DataMode

    doc_dir, _, _ = doc_corpus
    cfg = LoaderConfig(max_tokens=60, seed=2, num_workers=2, inputs=_inputs("cache", doc_corpus[2]))
    assert cfg.inputs.mode is DataMode.STREAM
    rows = _doc_rows(doc_dir)
    batches = _epoch(doc_dir, cfg)
    keys = [k for b in batches for k in _keys(b)]
    assert len(keys) == len(rows) == len(set(keys))
    assert keys == [k for b in _epoch(doc_dir, replace(cfg, num_workers=0)) for k in _keys(b)]
    # the same lanes every epoch (one chunk here; the epoch reorders chunks: issue 33 item 6)
    assert keys == [k for b in _epoch(doc_dir, cfg, epoch=1) for k in _keys(b)]
    assert keys != [k for b in _epoch(doc_dir, replace(cfg, seed=3)) for k in _keys(b)]
    assert max(b.src.size(0) for b in batches) > 1
    _assert_lanes_continue_documents(batches)
    rest = list(TrainLoader(doc_dir, cfg).iterate(DataPosition(0, 5)))
    assert [_keys(b) for _, b in rest] == [_keys(b) for b in batches[5:]]
    dev = dev_batches(doc_dir, 60, inputs=cfg.inputs)
    assert sorted(k for b in dev for k in _keys(b)) == sorted(rows)
    _assert_lanes_continue_documents(dev)


def test_document_mode_subdocuments_and_restoration(doc_corpus):
    from pipeline_lib.batch import DataMode

    doc_dir, restore_dir, spm_model = doc_corpus
    spec = _inputs("crosstask", spm_model, max_sentences=3)
    assert spec.mode is DataMode.DOCUMENT
    tgt_tag, src_tag = spec.tag, spec.restore_tag
    rows = _doc_rows(doc_dir)
    cfg = LoaderConfig(max_tokens=200, seed=3, inputs=spec)
    batches = _epoch(doc_dir, cfg)
    keys = [k for b in batches for k in _keys(b)]
    assert len(keys) == len(rows) == len(set(keys))
    assert keys == [k for b in _epoch(doc_dir, cfg) for k in _keys(b)]
    for b in batches:
        doc_src, index = b.extra["doc_src"], b.extra["doc_index"]
        assert doc_src.size(1) <= 3 and index.shape == (b.src.size(0),)
        assert (b.src[:, 0] == tgt_tag).all() and (b.tgt_out[:, 0] == tgt_tag).all()
        assert (b.tgt_in[:, :2] == torch.tensor([BOS_ID, tgt_tag])).all()
        for r, (doc, i) in enumerate(_keys(b)):   # the row's own sentence is in its document
            own = [tgt_tag] + rows[(doc, i)] + [EOS_ID]
            sents = [[t for t in s if t != PAD_ID] for s in doc_src[index[r]].tolist()]
            assert own in sents
    rest = list(TrainLoader(doc_dir, cfg).iterate(DataPosition(0, 2)))
    assert [_keys(b) for _, b in rest] == [_keys(b) for b in batches[2:]]
    restore = _epoch(restore_dir, cfg)
    assert sum(len(b.doc_id) for b in restore) == len(rows)
    for b in restore:
        assert (b.src[:, 0] == src_tag).all() and (b.extra["doc_src"][:, 0, 0] == src_tag).all()
    # sentence batches of the same model: tagged, no document tensors
    sent = _epoch(doc_dir, LoaderConfig(max_tokens=200, inputs=spec.sentence_batches()))
    assert all((b.src[:, 0] == tgt_tag).all() and "doc_src" not in b.extra for b in sent)
    assert sum(len(b.doc_id) for b in sent) == len(rows)


def test_a_tagged_transformer_reads_restoration_as_tagged_sentence_pairs(doc_corpus):
    """Chen et al. (2021) Table 1 #4 (fn. 12, Sec. 2.3): the Transformer with ``lang_tags``
    reads restoration instances as sentence pairs (each noised sentence-level input -> the
    original, no document) with the source tag, translation pairs with the target tag; the
    plain Transformer reads neither tag."""
    from pipeline_lib.batch import DataMode

    doc_dir, restore_dir, spm_model = doc_corpus
    spec = _inputs("transformer", spm_model, lang_tags=True)
    crosstask = _inputs("crosstask", spm_model)
    assert spec.mode is DataMode.SENTENCE
    assert (spec.tag, spec.restore_tag) == (crosstask.tag, crosstask.restore_tag)
    assert None not in (spec.tag, spec.restore_tag) and spec.tag != spec.restore_tag
    assert (_inputs("transformer", spm_model).tag, _inputs("transformer", spm_model).restore_tag) \
        == (None, None)
    cfg = LoaderConfig(max_tokens=200, seed=3, inputs=spec)
    restore_rows = {(r["doc_id"], r["sent_idx"]): (r["src_ids"], r["tgt_ids"])
                    for f in sorted(restore_dir.glob("shard-*"))
                    for r in pq.read_table(f, columns=["doc_id", "sent_idx", "src_ids",
                                                       "tgt_ids"]).to_pylist()}
    restore = _epoch(restore_dir, cfg)
    assert sum(len(b.doc_id) for b in restore) == len(restore_rows)
    for b in restore:
        assert not b.extra and b.ctx_src is None
        for r, key in enumerate(_keys(b)):
            src, tgt = restore_rows[key]
            assert [t for t in b.src[r].tolist() if t != PAD_ID] == [spec.restore_tag, *src, EOS_ID]
            assert [t for t in b.tgt_out[r].tolist() if t != PAD_ID] == \
                [spec.restore_tag, *tgt, EOS_ID]
    for b in _epoch(doc_dir, cfg):
        assert (b.src[:, 0] == spec.tag).all() and (b.tgt_out[:, 0] == spec.tag).all()


def test_rows_without_a_parse_are_unsupervised_but_their_batch_keeps_the_others(tmp_path):
    """Issue: the parse stage parses a prefix of the rows; a batch mixing parsed and unparsed rows
    used to drop every head. Now only the unparsed rows carry -1."""
    from pipeline_lib.models.inputs import ModelInputs

    rows, rng = [], random.Random(3)
    for i in range(300):
        n, m = rng.randint(2, 9), rng.randint(2, 9)
        parsed = i % 3 == 0
        rows.append({"doc_id": f"d{i // 10}", "sent_idx": i % 10,
                     "src_ids": [rng.randint(5, 60) for _ in range(n)],
                     "tgt_ids": [rng.randint(5, 60) for _ in range(m)],
                     "src_heads": list(range(n)) if parsed else None,
                     "tgt_heads": list(range(m)) if parsed else None})
    path = tmp_path / "shard-00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=100)
    batches = _epoch(tmp_path, LoaderConfig(max_tokens=150, inputs=ModelInputs(heads=True)))
    assert batches and all(b.src_heads is not None and b.tgt_heads is not None for b in batches)
    by_key = {(r["doc_id"], r["sent_idx"]): r for r in rows}
    for b in batches:
        for k, key in enumerate(_keys(b)):
            row, n, m = by_key[key], len(by_key[key]["src_ids"]), len(by_key[key]["tgt_ids"])
            src, tgt = b.src_heads[k].tolist(), b.tgt_heads[k].tolist()
            if row["src_heads"] is None:
                assert set(src) == {-1} and set(tgt) == {-1}
            else:
                assert src[:n] == row["src_heads"] and tgt[1:m + 1] == row["tgt_heads"]
            assert src[n] == -1 and tgt[0] == -1        # EOS and BOS carry no head


def test_stream_batches_keep_the_budget_and_choose_similar_lengths():
    """Document streams take rows while their tokens fit the budget, from lanes whose next
    sentences are alike in length, so few cells are padding (fixed lanes, the t-th sentences
    side by side, filled about half of them); lanes drain together, so every lane's documents
    come out whole and in order."""
    from pipeline_lib.training.batching import stream_batches

    rng = random.Random(1)
    docs = [[{"doc_id": f"d{k}", "sent_idx": i,
              "src_ids": [5] * rng.randint(3, 40), "tgt_ids": [6] * rng.randint(3, 40)}
             for i in range(rng.randint(1, 30))] for k in range(300)]
    batches = stream_batches(docs, 600)
    cells = real = 0
    for b in batches:
        lengths = [max(len(r["src_ids"]), len(r["tgt_ids"])) + 1 for _, _, r in b.items]
        assert sum(lengths) <= 600
        cells, real = cells + len(lengths) * max(lengths), real + sum(lengths)
    assert real / cells > 0.8
    assert sorted((r["doc_id"], r["sent_idx"]) for b in batches for _, _, r in b.items) == sorted(
        (r["doc_id"], r["sent_idx"]) for d in docs for r in d)
    full = [sum(max(len(r["src_ids"]), len(r["tgt_ids"])) + 1 for _, _, r in b.items)
            for b in batches]
    assert sum(t < 300 for t in full) <= 0.05 * len(full)    # few short batches at the end


def test_context_is_not_counted_in_the_budget(doc_corpus):
    """DocT's context does not eat the pair budget: its batches are the sentence batches of the
    same rows; ``max_context_tokens`` caps the context (and then cuts batches smaller)."""
    doc_dir, _, spm_model = doc_corpus
    spec = _inputs("doct", spm_model, context_sentences=2)
    ctx = _epoch(doc_dir, LoaderConfig(max_tokens=120, seed=4, inputs=spec))
    for b in ctx:
        assert sum(_row_tokens(b)) <= 120 or b.src.size(0) == 1
    tight = _epoch(doc_dir, LoaderConfig(max_tokens=120, max_context_tokens=60, seed=4, inputs=spec))
    assert len(tight) > len(ctx) and all(b.ctx_src.numel() <= 60 or b.src.size(0) == 1 for b in tight)
    from pipeline_lib.models.inputs import CTX_KEY
    from pipeline_lib.training.batching import pack_by_tokens

    rows = [{"src_ids": [5] * n, "tgt_ids": [6] * n, "i": i}
            for i, n in enumerate(random.Random(2).choices(range(3, 30), k=200))]
    plain = [[r["i"] for r in b] for b in pack_by_tokens(rows, 300)]
    with_ctx = [{**r, CTX_KEY: [7] * (2 * len(r["src_ids"]))} for r in rows]
    assert [[r["i"] for r in b] for b in pack_by_tokens(with_ctx, 300)] == plain
    assert len(pack_by_tokens(with_ctx, 300, max_context_tokens=300)) > len(plain)


MODES = {"sentence": ("transformer", {}), "context": ("doct", {"context_sentences": 2}),
         "camn": ("camn", {}), "stream": ("cache", {}), "document": ("crosstask", {"max_sentences": 3})}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_workers_and_epochs_change_no_batch(doc_corpus, mode):
    """Every data mode: the batches of an epoch are the same with 0, 1 or 2 workers, and the
    loader's stream lives across epochs (its next epoch is a fresh loader's)."""
    doc_dir, _, spm_model = doc_corpus
    spec = _inputs(MODES[mode][0], spm_model, **MODES[mode][1])
    cfg = LoaderConfig(max_tokens=90, seed=7, buffer_sents=30, inputs=spec)
    want = [[_keys(b) for b in _epoch(doc_dir, cfg, epoch=e)] for e in (0, 1)]
    for workers in (1, 2):
        loader = TrainLoader(doc_dir, replace(cfg, num_workers=workers))
        got = [[_keys(b) for _, b in loader.iterate(DataPosition(e, 0))] for e in (0, 1)]
        assert got == want
        stream = loader._items
        list(loader.iterate(DataPosition(2, 0)))
        assert loader._items is stream             # the same workers, epoch after epoch
    # another order each epoch; a stream's batches repeat with their chunk (issue 33 item 6),
    # and this corpus is one chunk of documents
    assert (want[0] == want[1]) == (mode == "stream")


def test_every_data_mode_carries_the_same_target_tokens_per_update(tmp_path):
    """Issue 22 item 6: the cache's streams carried 1,263 target tokens per update against its
    control's 3,869 (lanes sized by a shard's longest row), DocT 0.75x and CAMN 0.92x (their
    contexts cut batches). On the same shards every data mode now fills the same budget."""
    import statistics

    doc_dir, _, spm_model = write_doc_corpus(tmp_path, n_docs=400, n_shards=2,
                                                       row_group=50, seed=5)
    per_update = {}
    for mode, (name, extras) in MODES.items():
        spec = _inputs(name, spm_model, **extras)
        cfg = LoaderConfig(max_tokens=400, seed=3, inputs=spec)
        batches = _epoch(doc_dir, cfg)
        # target tokens as the model reads them (cross-task's language tag is one)
        tokens = [int(b.tgt_out.ne(PAD_ID).sum()) for b in batches]
        per_update[mode] = statistics.mean(tokens[:-3])   # a shard's last batches may run short
    base = per_update["sentence"]
    for mode, t in per_update.items():
        assert abs(t / base - 1) < 0.03, per_update


def test_vectorised_collate_is_the_row_by_row_layout():
    """The one-fill collate builds what the row-by-row one built (tensor per row)."""
    from pipeline_lib.training.batching import collate

    rng = random.Random(4)
    rows = [{"doc_id": f"d{i}", "sent_idx": i, "src_ids": [rng.randint(4, 90) for _ in range(n)],
             "tgt_ids": [rng.randint(4, 90) for _ in range(m)],
             "src_heads": list(range(n)) if i % 2 else None, "tgt_heads": None}
            for i, (n, m) in enumerate((rng.randint(1, 20), rng.randint(1, 20)) for _ in range(30))]

    def pad(seqs, value):
        out = torch.full((len(seqs), max(map(len, seqs))), value, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = torch.as_tensor(s, dtype=torch.long)
        return out

    b = collate(rows)
    assert torch.equal(b.src, pad([r["src_ids"] + [EOS_ID] for r in rows], PAD_ID))
    assert torch.equal(b.tgt_in, pad([[BOS_ID] + r["tgt_ids"] for r in rows], PAD_ID))
    assert torch.equal(b.tgt_out, pad([r["tgt_ids"] + [EOS_ID] for r in rows], PAD_ID))
    assert torch.equal(b.src_heads, pad([(r["src_heads"] or [-1] * len(r["src_ids"])) + [-1]
                                         for r in rows], -1))
    # lengths rounded up to a multiple of 8: the same tensors, more padding, within max_len
    r8 = collate(rows, pad_multiple=8, max_len=1024)
    assert r8.src.size(1) % 8 == 0 and r8.tgt_in.size(1) % 8 == 0
    assert torch.equal(r8.src[:, :b.src.size(1)], b.src) and not r8.src[:, b.src.size(1):].any()
    assert r8.src_heads.shape == r8.src.shape and r8.tgt_out.shape == r8.tgt_in.shape
    assert collate(rows, pad_multiple=8, max_len=b.src.size(1)).src.size(1) == b.src.size(1)


def test_columnar_sentence_batches_are_the_row_by_row_ones(corpus, doc_corpus):
    """Sentence batches are built from Arrow's flat arrays (no dict or tensor per row): the
    same batches, row for row and tensor for tensor, as tagging, filtering, sorting and
    collating dict rows, with heads (some rows without a parse) and with tags (restoration rows
    take the restoration tag)."""
    from pipeline_lib.training.batching import (collate, collate_columns, pack_by_tokens,
                                                pack_columns, usable)
    from pipeline_lib.training.shards import prepare, read_columns, shard_files, work_units
    from pipeline_lib.models.inputs import ModelInputs

    doc_dir, restore_dir, spm_model = doc_corpus
    tagged = _inputs("crosstask", spm_model, max_sentences=3).sentence_batches()
    for shards, inputs, heads in ((corpus[0], ModelInputs(heads=True), True),
                                  (doc_dir, tagged, False), (restore_dir, tagged, False)):
        cols = read_columns(work_units(shard_files(shards), 1), heads, inputs)
        names = set(pq.read_schema(shard_files(shards)[0]).names)
        wanted = [c for c in ("doc_id", "sent_idx", "src_ids", "tgt_ids", "ctx_ids") if c in names]
        wanted += ["src_heads", "tgt_heads"] if heads else []
        rows = [prepare(r, inputs) for f in shard_files(shards)
                for r in pq.read_table(f, columns=wanted).to_pylist()]
        want = [collate([r for r in b], inputs) for b in
                pack_by_tokens([r for r in rows if usable(r, 40)], 150)]
        got = [collate_columns(cols, idx) for idx in pack_columns(cols, 150, 40)]
        assert len(got) == len(want) > 3
        for g, w in zip(got, want):
            assert g.doc_id == w.doc_id and g.sent_idx == w.sent_idx
            for f in ("src", "tgt_in", "tgt_out", "src_heads", "tgt_heads"):
                x, y = getattr(g, f), getattr(w, f)
                assert (x is None and y is None) or torch.equal(x, y), f


def _mode_inputs(mode: str):
    """The inputs of a context, stream or document model, as the models declare them."""
    from pipeline_lib.models import ModelConfig, build_model
    from pipeline_lib.models.inputs import SpecialIds

    name = {"context": "doct", "stream": "cache", "document": "crosstask"}[mode]
    cfg = ModelConfig(vocab_size=90, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                      max_len=64, name=name, extras={"max_sentences": 4} if mode == "document"
                      else {})
    return build_model(cfg).inputs(SpecialIds(sent_break=80, src_tag=81, tgt_tag=82))


@pytest.mark.parametrize("mode", ["sentence", "context", "stream", "document"])
def test_every_data_mode_repeats_its_first_epochs_batch_shapes(corpus, mode):
    """Issue 33 item 6: over three epochs, every data mode trains on the shapes of its first
    epoch only (a bound of one epoch's batches: on CUDA each new (rows, lengths) costs
    first-sight work). Stream batches used to be re-dealt every epoch."""
    from pipeline_lib.models.inputs import ModelInputs

    shards, _ = corpus
    inputs = ModelInputs() if mode == "sentence" else _mode_inputs(mode)
    cfg = LoaderConfig(max_tokens=256, seed=5, buffer_sents=100, inputs=inputs)
    epochs = [_epoch(shards, cfg, epoch=e) for e in range(3)]
    shapes = [{(tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in ep} for ep in epochs]
    assert shapes[1] <= shapes[0] and shapes[2] <= shapes[0], mode
    assert len(shapes[0]) <= len(epochs[0])
    assert sorted(k for b in epochs[0] for k in _keys(b)) == \
        sorted(k for b in epochs[2] for k in _keys(b))         # every row, each epoch
    print(f"{mode}: {len(epochs[0])} batches, {len(shapes[0])} shapes in epoch 1, "
          f"{len(set.union(*shapes))} in three epochs")


@pytest.mark.parametrize("mode", ["sentence", "context"])
def test_rows_cut_to_the_pad_multiple_leave_fewer_shapes(corpus, mode):
    """Issue 33 item 6: with ``pad_multiple`` 8 (CUDA's default) a sentence or context batch's
    rows are a multiple of 8, but a chunk's last batch (a budget that holds 8 rows); the budget still holds, every row still
    trains once an epoch, and epoch 1 has fewer distinct (rows, lengths) shapes than with rows
    left to the budget alone."""
    from pipeline_lib.models.inputs import ModelInputs

    shards, _ = corpus
    inputs = ModelInputs() if mode == "sentence" else _mode_inputs(mode)
    shapes, rows = {}, {}
    for m in (1, 8):
        cfg = LoaderConfig(max_tokens=1024, seed=5, buffer_sents=100, inputs=inputs,
                           pad_multiple=m)
        ep = _epoch(shards, cfg)
        shapes[m] = {(tuple(b.src.shape), tuple(b.tgt_in.shape)) for b in ep}
        rows[m] = sorted(k for b in ep for k in _keys(b))
        for b in ep:
            assert sum(_row_tokens(b)) <= 1024
        off = [len(b.doc_id) for b in ep if len(b.doc_id) % m]
        chunks = len(TrainLoader(shards, cfg).dataset.epoch_chunks(0))
        assert len(off) <= chunks, (m, off)        # at most one short batch per chunk
    assert rows[8] == rows[1]
    assert len(shapes[8]) < len(shapes[1]), (len(shapes[8]), len(shapes[1]))
    print(f"{mode}: {len(shapes[1])} shapes in epoch 1 with rows by budget, {len(shapes[8])} "
          f"with rows and lengths to multiples of 8")


def test_rows_cut_carries_the_rows_it_cuts_off():
    """The rows past the last multiple start the next batch, and a budget too small for 8 rows
    leaves batches as the budget cuts them."""
    from pipeline_lib.training.batching import pack_by_tokens, rows_cut

    assert rows_cut(0, 13, 8) == 8 and rows_cut(8, 13, 8) == 13 and rows_cut(0, 13, 1) == 13
    rows = [{"src_ids": [1] * 4, "tgt_ids": [1] * 4, "i": i} for i in range(30)]   # 5 tokens a row
    got = pack_by_tokens(rows, 65, rows_multiple=8)                              # 13 rows fit
    assert [len(b) for b in got] == [8, 8, 8, 6]
    assert sorted(r["i"] for b in got for r in b) == list(range(30))
    assert [len(b) for b in pack_by_tokens(rows, 30, rows_multiple=8)] == [6] * 5


@pytest.mark.parametrize("mode", ["stream", "document"])
def test_a_document_readers_twin_trains_on_regrouped_documents(corpus, mode):
    """Issue 34 item 2: a random-context twin of the cache (stream) or cross-task (document)
    reads every row once an epoch, as its model does, but in documents regrouped from other
    documents' sentences (the same sizes, no two neighbours from one document), the same way
    every epoch."""
    from pipeline_lib.training.data import _document_rows
    from pipeline_lib.training.shards import read_documents

    shards, _ = corpus
    inputs = _mode_inputs(mode)
    cfg = LoaderConfig(max_tokens=256, seed=5, buffer_sents=100, inputs=inputs)
    twin = replace(cfg, inputs=inputs.ablated("random"))
    rows = lambda docs: sorted((r["doc_id"], r["sent_idx"]) for d in docs for r in d)  # noqa: E731
    mixed = 0
    for u in TrainLoader(shards, cfg).dataset.units():
        true = _document_rows(read_documents(u, False), cfg, "k")
        rand = _document_rows(read_documents(u, False), twin, "k")
        assert [len(d) for d in rand] == [len(d) for d in true] and rows(rand) == rows(true)
        assert rand == _document_rows(read_documents(u, False), twin, "k")
        if len(true) > 1:
            flat = [r["doc_id"] for d in rand for r in d]
            assert all(a != b for a, b in zip(flat, flat[1:])), flat
            mixed += 1
    assert mixed
    model_epoch = sorted(k for b in _epoch(shards, cfg) for k in _keys(b))
    assert sorted(k for b in _epoch(shards, twin) for k in _keys(b)) == model_epoch

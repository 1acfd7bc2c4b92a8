"""Beam/greedy search, document-order decoding and the hypothesis Parquet, on real tiny models."""

from __future__ import annotations

import math
import random

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch
import torch.nn.functional as F

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.evaluate.decode import decode_file, translate_documents, translate_sentences
from pipeline_lib.models.search import (BeamConfig, beam_search, greedy_search, length_penalty,
                                        source_batch)
from pipeline_lib.models import ModelConfig, Transformer, build_model
from pipeline_lib.models.inputs import ModelInputs

torch.set_num_threads(1)
SRCS = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15], [16], [17, 18, 19, 5]]


def random_model(seed: int = 0, vocab: int = 24) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=2,
                      dropout=0.0, max_len=64)
    return build_model(cfg).eval()


def sequence_logprob(model: Transformer, src: list[int], tokens: list[int]) -> float:
    """log P(tokens + EOS | src) by full teacher-forced recomputation."""
    y = torch.tensor([tokens + [EOS_ID]])
    b = source_batch([src])
    b.tgt_in = torch.tensor([[BOS_ID] + tokens])
    lp = F.log_softmax(model(b).logits, -1)
    return float(lp.gather(-1, y[..., None]).sum().detach())


def test_length_penalty_hand_values():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2 ** 0.6)
    assert length_penalty(13, 1.0) == pytest.approx(3.0)
    assert length_penalty(20, 0.0) == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_one_equals_greedy(seed):
    model = random_model(seed)
    batch = source_batch(SRCS)
    beam = beam_search(model, batch, BeamConfig(beam=1))
    greedy = greedy_search(model, batch, BeamConfig(beam=1, greedy=True))
    assert [h[0].tokens for h in beam] == [h[0].tokens for h in greedy]
    for b, g in zip(beam, greedy):
        assert b[0].score == pytest.approx(g[0].score, abs=1e-4)


@pytest.mark.parametrize("seed", [0, 3])
def test_beam_nbest_sorted_scored_and_bounded(seed):
    model = random_model(seed)
    cfg = BeamConfig(beam=4, nbest=4, max_len_a=0.0, max_len_b=5, lenpen=0.6)
    hyps = beam_search(model, source_batch(SRCS), cfg)
    assert len(hyps) == len(SRCS)
    for src, nbest in zip(SRCS, hyps):
        assert len(nbest) == 4
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 4             # distinct hypotheses
        for h in nbest:
            assert len(h.tokens) <= 5
            assert not {PAD_ID, BOS_ID, EOS_ID} & set(h.tokens)
            # bookkeeping through beam reordering and row dropping: the score is the model's
            assert h.logprob == pytest.approx(sequence_logprob(model, src, h.tokens), abs=1e-4)
            assert h.score == pytest.approx(h.logprob / length_penalty(len(h.tokens) + 1, 0.6), abs=1e-6)


def test_beam_finds_at_least_greedy_score_and_lenpen_favours_length():
    model = random_model(4)
    batch = source_batch(SRCS)
    greedy = greedy_search(model, batch, BeamConfig(greedy=True, lenpen=0.0))
    beam = beam_search(model, batch, BeamConfig(beam=8, lenpen=0.0))
    for g, b in zip(greedy, beam):
        assert b[0].score >= g[0].score - 1e-5
    long = beam_search(model, batch, BeamConfig(beam=4, lenpen=2.0))
    short = beam_search(model, batch, BeamConfig(beam=4, lenpen=0.0))
    assert sum(len(h[0].tokens) for h in long) >= sum(len(h[0].tokens) for h in short)


def test_batching_does_not_change_results():
    model = random_model(5)
    one = translate_sentences(model, SRCS, BeamConfig(batch_size=1))
    many = translate_sentences(model, SRCS, BeamConfig(batch_size=64))
    assert [h[0].tokens for h in one] == [h[0].tokens for h in many]


class HistoryRecorder(Transformer):
    """A document model stand-in: records the hook calls that a cache model would use."""

    def inputs(self, special):
        return ModelInputs(mode=DataMode.STREAM, in_document_order=True)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.events: list[tuple] = []

    def start_documents(self, n: int) -> None:
        self.events.append(("start", n))

    def encode(self, batch: Batch):
        self.events.append(("encode", batch.extra["doc_slot"].tolist(), batch.sent_idx))
        return super().encode(batch)

    def finish_sentences(self, hyp_tokens: list[list[int]], slots: list[int]) -> None:
        self.events.append(("finish", slots, hyp_tokens))


def test_translate_documents_steps_sentences_in_order_and_calls_hooks():
    base = random_model(6)
    model = HistoryRecorder(base.cfg).eval()
    model.load_state_dict(base.state_dict())
    docs = [SRCS[:2], SRCS[2:], [SRCS[0]]]                 # 2, 3 and 1 sentences
    cfg = BeamConfig(beam=2, batch_size=2)
    out = translate_documents(model, docs, cfg)
    sent = translate_sentences(base, [s for d in docs for s in d], cfg)
    it = iter(sent)
    assert [[h[0].tokens for h in d] for d in out] == [[next(it)[0].tokens for _ in d] for d in docs]
    # one group of DOC_LANES x batch_size documents, longest first: slots 0, 1, 2 = docs 1, 0, 2
    ev = model.events
    assert ev[0] == ("start", 3) and [e for e in ev if e[0] == "start"] == [("start", 3)]
    searches = [e[1:] for e in ev if e[0] == "encode"]
    assert all(len(slots) <= 2 and len(set(slots)) == len(slots) for slots, _ in searches)
    # every document's sentences in order, one search after another
    for slot, doc in enumerate((docs[1], docs[0], docs[2])):
        assert [i for slots, idx in searches for s, i in zip(slots, idx) if s == slot] == \
            list(range(len(doc)))
    # each search starts from the document with the most sentences left
    left = {0: 3, 1: 2, 2: 1}
    for slots, _ in searches:
        most = max(left.values())
        assert any(left[s] == most for s in slots)
        for s in slots:
            left[s] -= 1
    finishes = [e for e in ev if e[0] == "finish"]
    slot_doc = {0: 1, 1: 0, 2: 2}
    for (_, slots, idx), (_, tokens, fslots) in zip(
            [e for e in ev if e[0] == "encode"], [(f[0], f[2], f[1]) for f in finishes]):
        assert fslots == slots and tokens == [out[slot_doc[s]][i][0].tokens
                                              for s, i in zip(slots, idx)]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A real sentencepiece model with the project's special ids, trained on a few hundred lines."""
    d = tmp_path_factory.mktemp("spm")
    rng = random.Random(0)
    words = ["casa", "perro", "gato", "verde", "rojo", "grande", "house", "dog", "cat", "green", "red"]
    (d / "text.txt").write_text("\n".join(" ".join(rng.choices(words, k=6)) for _ in range(300)) + "\n")
    spm.SentencePieceTrainer.train(input=str(d / "text.txt"), model_prefix=str(d / "m"), vocab_size=28,
                                   pad_id=PAD_ID, unk_id=1, bos_id=BOS_ID, eos_id=EOS_ID,
                                   minloglevel=2)
    return d / "m.model"


@pytest.mark.parametrize("document_mode", [False, True])
def test_decode_file_writes_detokenised_hypotheses(tmp_path, spm_model, document_mode):
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    model = random_model(7, vocab=sp.get_piece_size())
    lines = [("d1", 0, "casa verde"), ("d1", 1, "perro rojo grande"), ("d2", 0, "gato")]
    rows = [{"doc_id": d, "sent_idx": i, "src_ids": sp.encode(t)} for d, i, t in lines]
    out = tmp_path / "test.parquet"
    cfg = BeamConfig(beam=3, nbest=2)
    rec = decode_file(model, rows, cfg, spm_model, out, "cpu", document_mode)
    table = pq.read_table(out).to_pylist()
    assert [(r["doc_id"], r["sent_idx"]) for r in table] == [(d, i) for d, i, _ in lines]
    hyps = translate_sentences(model, [r["src_ids"] for r in rows], cfg)
    assert [r["hyp"] for r in table] == [sp.decode(h[0].tokens) for h in hyps]
    assert all(len(r["nbest"]) == 2 and r["nbest"][0] == r["hyp"] for r in table)
    assert rec["sentences"] == 3 and rec["documents"] == 2 and rec["sentences_per_s"] > 0
    assert rec["mode"] == ("document" if document_mode else "sentence")


@pytest.mark.slow
def test_tiny_model_learns_copy_task_and_decodes_it():
    """~300 Adam steps on a toy copy task; beam search then reproduces unseen sequences."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    cfg = ModelConfig(vocab_size=16, d_model=64, n_heads=4, d_ff=128, enc_layers=2, dec_layers=2,
                      dropout=0.0, max_len=32)
    model = build_model(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def sample(n: int) -> list[list[int]]:
        lengths = torch.randint(3, 8, (n,), generator=gen).tolist()
        return [torch.randint(4, 16, (n_,), generator=gen).tolist() for n_ in lengths]

    steps = 300
    for step in range(steps):
        seqs = sample(32)
        batch = source_batch(seqs)
        T = max(map(len, seqs)) + 1
        batch.tgt_in = torch.full((len(seqs), T), PAD_ID)
        batch.tgt_out = torch.full((len(seqs), T), PAD_ID)
        for i, s in enumerate(seqs):
            batch.tgt_in[i, :len(s) + 1] = torch.tensor([BOS_ID] + s)
            batch.tgt_out[i, :len(s) + 1] = torch.tensor(s + [EOS_ID])
        for group in opt.param_groups:                      # 30 warm-up steps, then linear decay
            group["lr"] = 3e-3 * min(1.0, (step + 1) / 30) * (1 - step / steps)
        loss = F.cross_entropy(model(batch).logits.transpose(1, 2), batch.tgt_out, ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert math.isfinite(loss.item()) and loss.item() < 0.1
    model.eval()
    test = sample(20)
    hyps = translate_sentences(model, test, BeamConfig(beam=4))
    assert sum(h[0].tokens == s for h, s in zip(hyps, test)) >= 19
    greedy = translate_sentences(model, test, BeamConfig(greedy=True))
    assert sum(h[0].tokens == s for h, s in zip(greedy, test)) >= 18


def test_cli_decodes_checkpoint_and_shards(tmp_path, spm_model):
    """`python -m pipeline_lib.evaluate.decode` on a saved checkpoint directory and a shard directory."""
    import json

    import pyarrow as pa

    from pipeline_lib.checkpoint import save_checkpoint
    from pipeline_lib.evaluate.decode import main

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    model = random_model(8, vocab=sp.get_piece_size())
    ckpt = save_checkpoint(tmp_path / "best", model.state_dict(), model.cfg.to_dict(), spm_model=spm_model)
    shard_dir = tmp_path / "doc" / "test"
    shard_dir.mkdir(parents=True)
    lines = [("a", 0, "casa verde"), ("a", 1, "gato"), ("b", 0, "perro rojo"), ("b", 1, "casa"),
             ("b", 2, "verde verde")]
    ids = [sp.encode(t) for *_, t in lines]
    pq.write_table(pa.table({"doc_id": [d for d, *_ in lines], "sent_idx": pa.array([i for _, i, _ in lines], pa.int32()),
                             "src_ids": pa.array(ids, pa.list_(pa.int32()))}), shard_dir / "shard-00000.parquet")
    pq.write_table(pa.table({"file": ["shard-00000.parquet"], "rows": [len(lines)],
                             "src_tokens": [sum(map(len, ids))], "tgt_tokens": [0]}), shard_dir / "index.parquet")
    out = tmp_path / "out" / "test.parquet"
    main(["--checkpoint", str(ckpt), "--shards", str(shard_dir), "--spm", str(spm_model),
          "--output", str(out), "--beam", "2", "--batch-size", "2", "--device", "cpu"])
    table = pq.read_table(out).to_pylist()
    assert [(r["doc_id"], r["sent_idx"]) for r in table] == [(d, i) for d, i, _ in lines]
    expected = translate_sentences(model, ids, BeamConfig(beam=2))
    assert [r["hyp"] for r in table] == [sp.decode(h[0].tokens) for h in expected]
    manifest = json.loads((tmp_path / "out" / "test.manifest.json").read_text())
    assert manifest["counts"]["sentences"] == 5 and manifest["counts"]["mode"] == "sentence"
    assert manifest["params"]["beam"] == 2 and str(ckpt) in manifest["inputs"]


# --------------------------------------------------------------------- every registered model

MODEL_EXTRAS = {"doct": {"context_sentences": 2}, "camn": {"memory_sentences": 2, "memory_mode": "weighted"},
                "cache": {"cache_size": 5}, "crosstask": {"max_sentences": 3}}


@pytest.fixture(scope="module")
def doc_corpus(tmp_path_factory):
    from test_data import write_doc_corpus

    return write_doc_corpus(tmp_path_factory.mktemp("decode_docs"), n_docs=6, n_shards=1)


def _registry():
    from pipeline_lib.models.registry import MODELS

    return sorted(MODELS)


def _tiny(name: str, vocab: int) -> torch.nn.Module:
    """A registered model at the smallest size, seeded, in eval mode (no dropout)."""
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=vocab, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                   dec_layers=1, dropout=0.0, max_len=64, name=name,
                                   extras=MODEL_EXTRAS.get(name, {}))).eval()


@pytest.mark.parametrize("name", _registry())
def test_decode_file_every_registered_model(tmp_path, doc_corpus, name):
    """One hypothesis per input row, with the context the model's inputs ask for; document-level
    models in both units, their tag stripped."""
    from pipeline_lib.evaluate.decode import read_shards
    from pipeline_lib.models.inputs import SpecialIds, inputs_for

    doc_dir, _, spm_model = doc_corpus
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    model = _tiny(name, sp.get_piece_size())
    rows = read_shards(doc_dir)
    inputs = inputs_for(model, spm_model)
    units = ["document", "sentence"] if inputs.mode is DataMode.DOCUMENT else ["document"]
    tag = sp.id_to_piece(SpecialIds.from_spm(spm_model).tgt_tag)
    scores = {}
    for unit in units:
        out = tmp_path / f"{unit}.parquet"
        rec = decode_file(model, rows, BeamConfig(beam=2, max_len_b=4, batch_size=5), spm_model, out,
                          "cpu", inputs.in_document_order, unit)
        table = pq.read_table(out).to_pylist()
        assert sorted((r["doc_id"], r["sent_idx"]) for r in table) == \
            sorted((r["doc_id"], r["sent_idx"]) for r in rows)
        assert rec["sentences"] == len(rows) and rec["data_mode"] == inputs.mode.value
        assert all(math.isfinite(r["score"]) and not r["hyp"].startswith(tag) for r in table)
        scores[unit] = [r["score"] for r in table]
    if len(units) == 2:   # the sub-document changes the encoder output (global context + gate)
        assert scores["document"] != scores["sentence"]


@pytest.mark.parametrize("name", ["cache", "crosstask"])
def test_an_ablated_document_reader_decodes_regrouped_documents(tmp_path, doc_corpus, name,
                                                                monkeypatch):
    """Issue 34 item 3: under ``--context random`` the cache and cross-task translate documents
    regrouped from other documents' sentences (no two neighbours from one document), under
    ``empty`` one sentence a document, and every hypothesis comes back to its own sentence."""
    import pipeline_lib.evaluate.decode as dec
    from pipeline_lib.evaluate.decode import read_shards, translate_rows

    doc_dir, _, spm_model = doc_corpus
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    model = _tiny(name, sp.get_piece_size())
    rows = read_shards(doc_dir)
    by_ids = {tuple(r["src_ids"]): r["doc_id"] for r in rows}
    seen = {}
    for fn in ("translate_documents", "translate_subdocuments"):
        real = getattr(dec, fn)

        def spy(model_, docs, *args, _real=real, **kw):
            seen["docs"] = docs
            return _real(model_, docs, *args, **kw)
        monkeypatch.setattr(dec, fn, spy)
    cfg = BeamConfig(beam=2, max_len_b=4, batch_size=5)
    document_mode = name == "cache"
    true, _ = translate_rows(model, rows, cfg, spm_model, "cpu", document_mode)
    for condition in ("random", "empty"):
        out, rec = translate_rows(model, rows, cfg, spm_model, "cpu", document_mode,
                                  context=condition)
        assert rec["context"] == condition
        assert [(t.doc_id, t.sent_idx) for t in out] == [(t.doc_id, t.sent_idx) for t in true]
        docs = seen["docs"]
        strip = (lambda s: tuple(s[1:])) if name == "crosstask" else tuple   # its tag
        owners = [[by_ids[strip(s)] for s in d] for d in docs]
        if condition == "empty":
            assert all(len(d) == 1 for d in docs) and len(docs) == len(rows)
        else:
            flat = [o for d in owners for o in d]
            assert all(a != b for a, b in zip(flat, flat[1:]))
            assert sorted(len(d) for d in docs) == sorted(
                sum(1 for r in rows if r["doc_id"] == d) for d in {r["doc_id"] for r in rows})

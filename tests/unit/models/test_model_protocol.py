"""Proof of the model protocol (pipeline_lib/models/inputs.py): a model with a kind of context no
seed model reads -- the NEXT source sentence of the document -- is written here, in the test
file, registered with one line, and then trains, decodes and scores through the pipeline's own
code (the loader, ``train``, ``decode_file``, ``CheckpointScorer``) with no change anywhere else.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.evaluate.decode import decode_file, read_shards
from pipeline_lib.evaluate.discourse import CheckpointScorer
from pipeline_lib.models import MODELS, ModelConfig, Transformer
from pipeline_lib.models.inputs import ContextRule, ModelInputs, SpecialIds, inputs_for, pad_2d
from pipeline_lib.models.layers import Attention, AttnKind, Memory, SubLayer
from pipeline_lib.models.search import BeamConfig, search
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.batching import collate
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader, dev_batches
from pipeline_lib.training.train_config import TrainConfig
from pipeline_lib.training.train import train
from test_data import write_doc_corpus  # tests/unit: the shared doc-shard builder

NEXT_SRC = "next_src"       # Batch.extra key: (B, L) the next source sentence of each row
NEXT_MEMORY = "next"        # the memory the inserted cross-attention reads
NEXT_ATTN = "next_attn"     # block name of that cross-attention in every decoder layer


# --------------------------------------------------------------------------- the new model


@dataclass(frozen=True)
class NextSentence(ContextRule):
    """``extra["next_src"]``: the source sentence after the row's, ending in EOS (its last
    ``max_len - 1`` ids); a lone BOS for the last sentence of a document."""

    max_len: int

    def context(self, doc: Sequence[Mapping], i: int) -> list[int]:
        if i + 1 == len(doc):
            return [BOS_ID]
        return list(doc[i + 1]["src_ids"])[-(self.max_len - 1):] + [EOS_ID]

    def collate(self, contexts: Sequence[Any]) -> tuple[None, dict[str, torch.Tensor]]:
        return None, {NEXT_SRC: pad_2d(contexts)}


class NextSentenceTransformer(Transformer):
    """The sentence Transformer plus, in every decoder layer after the encoder-decoder attention,
    a cross-attention over the embedded next source sentence."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        d, h, drop = cfg.d_model, cfg.n_heads, cfg.dropout
        for layer in self.decoder:
            attn = Attention(d, h, drop, AttnKind.CROSS, memory=NEXT_MEMORY)
            layer.insert(NEXT_ATTN, SubLayer(attn, d, drop, cfg.norm_first), after="cross_attn")
        self.reset_parameters()

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        return ModelInputs(mode=DataMode.CONTEXT, context=NextSentence(self.cfg.max_len))

    def extra_memories(self, batch: Batch) -> dict[str, Memory]:
        """(B, L) next-sentence ids -> the (B, L, d) memory of their scaled embeddings."""
        ids = batch.extra[NEXT_SRC]
        return {NEXT_MEMORY: Memory(self.embed_tokens(self.embed, ids), ids.ne(PAD_ID))}


# --------------------------------------------------------------------------- fixtures

TINY = {"name": "nextsent", "d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1,
        "dec_layers": 1, "dropout": 0.1, "max_len": 64}


@pytest.fixture(scope="module")
def registered():
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(MODELS, "nextsent", NextSentenceTransformer)   # the one line a new model needs
        yield
    assert "nextsent" not in MODELS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("nextsent")
    doc, _, spm_model = write_doc_corpus(root / "train", n_docs=16)
    dev, _, _ = write_doc_corpus(root / "dev", n_docs=4, n_shards=1, seed=3, spm_model=spm_model)
    return doc, dev, spm_model


@pytest.fixture(scope="module")
def trained(registered, corpus, tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    doc, dev, spm_model = corpus
    out = tmp_path_factory.mktemp("nextsent_run")
    cfg = TrainConfig(max_steps=4, warmup=2, validate_every=4, save_every=4, log_every=1,
                      max_tokens=200, device="cpu")
    assert train(TINY, cfg, doc, dev, spm_model, out) == 0
    return out


def _source(shards: Path) -> dict[tuple[str, int], list[int]]:
    return {(r["doc_id"], r["sent_idx"]): r["src_ids"] for f in sorted(shards.glob("shard-*"))
            for r in pq.read_table(f, columns=["doc_id", "sent_idx", "src_ids"]).to_pylist()}


def _next(source: dict[tuple[str, int], list[int]], doc: str, i: int) -> list[int]:
    nxt = source.get((doc, i + 1))
    return [BOS_ID] if nxt is None else nxt + [EOS_ID]


# --------------------------------------------------------------------------- the proof


def test_the_loader_gives_every_row_exactly_its_next_sentence(corpus):
    doc, dev, spm_model = corpus
    model = NextSentenceTransformer(ModelConfig.from_dict({**TINY, "vocab_size": 100}))
    inputs = inputs_for(model, spm_model)
    loader = TrainLoader(doc, LoaderConfig(max_tokens=150, seed=2, inputs=inputs))
    for shards, batches in ((doc, [b for _, b in loader.iterate(DataPosition())]),
                            (dev, dev_batches(dev, 150, inputs=inputs))):   # training, validation
        source = _source(shards)
        for b in batches:
            assert b.ctx_src is None and b.extra[NEXT_SRC].size(0) == b.src.size(0)
            for doc_id, i, ctx in zip(b.doc_id, b.sent_idx, b.extra[NEXT_SRC].tolist()):
                assert [t for t in ctx if t != PAD_ID] == _next(source, doc_id, i), (doc_id, i)
        assert sorted(k for b in batches for k in zip(b.doc_id, b.sent_idx)) == sorted(source)
        assert any(ctx[0] != BOS_ID for b in batches for ctx in b.extra[NEXT_SRC].tolist())


def test_it_trains_and_its_checkpoint_loads(trained):
    recs = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["split"] == "train"] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in recs)
    dev = [r for r in recs if r["split"] == "dev"]
    assert dev and "bleu" in dev[-1]                 # greedy dev BLEU reads the context too
    assert json.loads((trained / "manifest.json").read_text())["data_mode"] == "context"
    model, cfg = ckpt.load_model(trained / "checkpoints" / "last")
    assert type(model) is NextSentenceTransformer and cfg.name == "nextsent"
    assert list(model.decoder[0].blocks) == ["self_attn", "cross_attn", NEXT_ATTN, "ffn"]


def test_it_decodes_one_hypothesis_per_row(trained, corpus, tmp_path):
    _, dev, spm_model = corpus
    model, _ = ckpt.load_model(trained / "checkpoints" / "last")
    rows = read_shards(dev)
    out, cfg = tmp_path / "hyp.parquet", BeamConfig(beam=2, max_len_b=5)
    counts = decode_file(model, rows, cfg, spm_model, out, "cpu", document_mode=False)
    hyps = {(h["doc_id"], h["sent_idx"]): h for h in pq.read_table(out).to_pylist()}
    assert counts["sentences"] == len(hyps) == len(rows) and counts["data_mode"] == "context"
    assert sorted(hyps) == sorted((r["doc_id"], r["sent_idx"]) for r in rows)
    # The decoder gave every sentence its next sentence: searching the loader's dev batches
    # (whose contexts the loader test checks) finds the same translations.
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    for b in dev_batches(dev, 10_000, inputs=inputs_for(model, spm_model)):
        for key, found in zip(zip(b.doc_id, b.sent_idx), search(model, b, cfg)):
            assert hyps[key]["hyp"] == sp.decode(found[0].tokens)
            assert hyps[key]["score"] == pytest.approx(found[0].score, abs=1e-4)


def test_the_scorer_feeds_the_model_its_own_rule(trained):
    """CheckpointScorer builds the (contrastive) document as context + current sentence and
    applies the model's rule to it. The suites' context precedes the sentence, so a
    next-sentence model reads "no next sentence" (a lone BOS) whatever that context is; the
    same candidates followed by a real next sentence score differently."""
    scorer = CheckpointScorer.from_checkpoint(trained / "checkpoints" / "last")
    sp = spm.SentencePieceProcessor(model_file=str(trained / "checkpoints" / "last" / "spm.model"))
    src, cands = "casa perro agua", ["casa perro agua", "casa agua perro"]
    scores = scorer(["sol luna"], src, [], cands)
    assert scorer(["mar rio noche", "campo"], src, [], cands) == scores
    assert scorer([], src, [], cands) == scores

    inputs = inputs_for(scorer.model, trained / "checkpoints" / "last" / "spm.model")

    def loader_scores(doc: list[str], i: int) -> list[float]:
        """Log-probabilities of ``cands`` for sentence i of ``doc``, batched by the loader."""
        rows = [{"doc_id": "x", "sent_idx": j, "src_ids": sp.encode(t)} for j, t in enumerate(doc)]
        inputs.add_context([rows], 1)
        batch = collate([{**rows[i], "tgt_ids": sp.encode(c)} for c in cands], inputs)
        with torch.no_grad():
            logp = torch.log_softmax(scorer.model(batch).logits, -1)
        tok = logp.gather(-1, batch.tgt_out[..., None])[..., 0]          # (n, T)
        return tok.masked_fill(batch.tgt_out == PAD_ID, 0.0).sum(-1).tolist()

    assert loader_scores(["sol luna", src], 1) == pytest.approx(scores, abs=1e-5)
    followed = loader_scores([src, "sol luna"], 0)
    assert all(abs(a - b) > 1e-4 for a, b in zip(followed, scores))

"""CXMI and test-time context ablation (issue 34 item 3) on real tiny models: the ablated
contexts come from where they should, a sentence-level model's CXMI is exactly 0, a DocT whose
context carries the answer has a positive one, and the intervals resample whole documents."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from pipeline_lib.evaluate.cxmi import bootstrap_interval, measure
from pipeline_lib.models import ModelConfig, build_model
from pipeline_lib.models.inputs import (NoContext, PreviousSentences, RandomSentences,
                                        SpecialIds, context_ids)

torch.set_num_threads(1)
SPECIAL = SpecialIds(sent_break=7, src_tag=8, tgt_tag=9)


def documents(n_docs: int = 6, length: int = 5, seed: int = 0) -> list[list[dict]]:
    """Documents whose sentences draw from a vocabulary of their own (ids 10 + 5 d ...), so a
    sentence tells which document it came from."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        words = list(range(10 + 5 * d, 15 + 5 * d))
        docs.append([{"doc_id": f"doc{d}", "sent_idx": i,
                      "src_ids": [rng.choice(words) for _ in range(rng.randint(2, 5))],
                      "tgt_ids": [rng.choice(words) for _ in range(rng.randint(2, 5))]}
                     for i in range(length)])
    return docs


def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=48, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                   dec_layers=1, dropout=0.0, max_len=64, name=name)).eval()


def test_random_context_comes_from_other_documents_with_the_true_amount():
    docs = documents()
    rule = PreviousSentences(2, 64, SPECIAL.sent_break)
    drawn = RandomSentences(rule, other_documents=True).contexts(docs, seed=3)
    for d, ctxs in zip(docs, drawn):
        own = {w for r in d for w in r["src_ids"]}
        for i, ctx in enumerate(ctxs):
            words = [w for w in ctx if w >= 10]
            assert not own & set(words), (d[0]["doc_id"], i, ctx)
            assert ctx.count(SPECIAL.sent_break) == max(0, min(i, 2) - 1)   # as many sentences
    assert drawn == RandomSentences(rule, other_documents=True).contexts(docs, seed=3)      # deterministic
    assert drawn != RandomSentences(rule, other_documents=True).contexts(docs, seed=4)
    empty = NoContext(rule).contexts(docs, seed=3)
    assert all(c == context_ids([], 2, 64, SPECIAL.sent_break) for d in empty for c in d)


def test_cxmi_of_a_sentence_level_model_is_exactly_zero():
    record = measure(tiny("transformer"), documents(), tiny("transformer").inputs(SPECIAL),
                     seed=1, max_tokens=64, draws=200)
    assert record["reads_context"] is False
    for contrast in record["contrasts"].values():
        assert contrast["nats_per_sentence"] == 0.0 and contrast["ci_documents"] == [0.0, 0.0]


def test_a_docT_whose_context_tells_the_document_gains_from_the_true_context():
    """DocT trained briefly on documents whose later sources are one shared word: only the
    first sentence, which is in the later ones' context, names the document, and every target
    is the document's own. The true context then makes references more likely than none or
    another document's."""
    from pipeline_lib.training.batching import collate

    docs = [[{"doc_id": f"doc{d}", "sent_idx": i, "src_ids": [10 + 5 * d] if i == 0 else [45],
              "tgt_ids": [10 + 5 * d, 11 + 5 * d, 12 + 5 * d]} for i in range(3)]
            for d in range(6)]
    model = tiny("doct").train()
    inputs = model.inputs(SPECIAL)
    rows = [dict(r) for d in docs for r in d]
    it = iter(rows)
    inputs.add_context([[next(it) for _ in d] for d in docs], seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = collate(rows, inputs)
    for _ in range(200):
        out = torch.log_softmax(model(batch).logits, -1)
        mask = batch.tgt_out.ne(0)
        loss = -(out.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1) * mask).sum() / mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    record = measure(model, docs, inputs, seed=1, max_tokens=256, draws=300)
    assert record["reads_context"] is True
    c = record["contrasts"]
    assert c["true_vs_empty"]["nats_per_sentence"] > 0.5, c
    assert c["true_vs_empty"]["ci_documents"][0] > 0, c
    assert c["true_vs_random"]["nats_per_sentence"] > 0.5, c
    assert c["true_vs_random"]["ci_documents"][0] > 0, c


def test_the_document_bootstrap_is_wider_when_documents_differ():
    """Two documents, one all +1 and one all -1: resampling documents sees means of -1 and +1,
    resampling sentences sees means near 0."""
    diff = np.array([1.0] * 50 + [-1.0] * 50)
    docs = np.array(["a"] * 50 + ["b"] * 50)
    lo, hi = bootstrap_interval(diff, docs, draws=500, seed=0)
    assert lo == pytest.approx(-1.0) and hi == pytest.approx(1.0)
    lo_s, hi_s = bootstrap_interval(diff, np.arange(100), draws=500, seed=0)
    assert -0.4 < lo_s < 0 < hi_s < 0.4


def test_models_whose_context_is_history_or_subdocuments_are_reported_not_measured():
    from pipeline_lib.models.inputs import ModelInputs
    from pipeline_lib.batch import DataMode
    record = measure(tiny("transformer"), documents(),
                     ModelInputs(mode=DataMode.STREAM, in_document_order=True),
                     seed=1, max_tokens=64, draws=10)
    assert "translation history" in record["not_measured"] and "contrasts" not in record


def test_one_document_has_no_random_context_and_says_so():
    model = tiny("doct")
    record = measure(model, documents(n_docs=1), model.inputs(SPECIAL), seed=1, max_tokens=64,
                     draws=20)
    assert set(record["contrasts"]) == {"true_vs_empty"}
    assert record["contrasts"]["true_vs_empty"]["ci_documents"] is None   # nothing to resample
    assert "no other document" in record["random_not_measured"]


def test_the_stated_rule_reads_both_intervals():
    from pipeline_lib.evaluate.report.context_use import context_table, uses_context

    def record(true_empty: float, true_random: float) -> dict:
        c = {k: {"nats_per_sentence": v, "ci_documents": [v - 0.1, v + 0.1],
                 "sentences_better": 3}
             for k, v in (("true_vs_empty", true_empty), ("true_vs_random", true_random),
                          ("random_vs_empty", true_empty - true_random))}
        return {"reads_context": True, "sentences": 5, "contrasts": c}

    assert uses_context(record(0.5, 0.4)) == "uses its context"
    assert uses_context(record(0.5, 0.05)).startswith("gains from context, but no more")
    assert uses_context(record(0.05, 0.5)) == "no evidence of context use"
    assert uses_context({"reads_context": False, "contrasts": {}}).startswith("reads no context")
    table = context_table({"doct": [("bible/test", record(0.5, 0.4)), ("extra/test", None)]})
    assert table.rows[0][1:4] == ["bible/test", "5", "uses its context"]
    assert table.rows[0][4] == "+0.500 [+0.400, +0.600]"
    assert table.rows[1][1:4] == ["extra/test", "n/a", "n/a"]

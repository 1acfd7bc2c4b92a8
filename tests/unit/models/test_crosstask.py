"""Cross-task pre-training model (Chen et al. 2021): global context encoder, gate, schedule, data
layout, learning from the document. The contract every model keeps (causality, incremental
decoding, batch-invariant search, two-step freezing) is tests/unit/models/test_model_contract.py."""

from __future__ import annotations

import pytest
import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.crosstask import (DOC_INDEX, DOC_SRC, CrossTaskTransformer,
                                           GlobalContextGate, SentenceRepresentation,
                                           document_extra)
from pipeline_lib.models.inputs import Phase, SpecialIds
from pipeline_lib.models.inputs import interleaved_schedule as task_schedule
from pipeline_lib.training.optim import build_optimizer, label_smoothed_nll

torch.set_num_threads(1)

TAG = 5   # stands for a language-tag piece such as <2en>; any id works for the model
DOCS = [[[30, 31, 32], [10, 11, 12, 13], [33, 34]],     # document 0 (row 0 is its sentence 1)
        [[14, 15], [35, 36, 37, 38]]]                   # document 1 (row 1 is its sentence 0)


def tiny(name: str = "crosstask", **extras) -> ModelConfig:
    return ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
                       dropout=0.0, max_len=64, name=name, extras=extras)


def pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def make_batch(docs: list[list[list[int]]] | None = DOCS, index: list[int] | None = None) -> Batch:
    """Row 0 translates sentence 1 of document 0, row 1 sentence 0 of document 1 (tagged)."""
    src = pad([[TAG, 10, 11, 12, 13, EOS_ID], [TAG, 14, 15, EOS_ID]])
    tgt = [[TAG, 20, 21, 22, 23], [TAG, 24, 25]]
    batch = Batch(src=src, tgt_in=pad([[BOS_ID] + t for t in tgt]), tgt_out=pad([t + [EOS_ID] for t in tgt]))
    if docs is not None:
        batch.extra = document_extra(docs, [0, 1] if index is None else index, prefix=[TAG])
    return batch


def model_for(seed: int = 0, **extras) -> CrossTaskTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(**extras)).eval()


def test_registry_shapes_and_modes():
    assert MODELS["crosstask"] is CrossTaskTransformer
    model = model_for()
    inputs = model.inputs(SpecialIds(sent_break=45, src_tag=46, tgt_tag=47))
    assert inputs.in_document_order is False and inputs.max_sentences == 30
    for batch in (make_batch(), make_batch(docs=None)):
        assert model(batch).logits.shape == (2, batch.tgt_in.size(1), 50)
        assert model.encode(batch).source.states.shape == (2, batch.src.size(1), 32)


def test_document_extra_layout():
    extra = document_extra(DOCS, [1, 0, 1], prefix=[TAG])
    doc = extra[DOC_SRC]
    assert doc.shape == (2, 3, 6)        # 2 documents, 3 sentences max, [TAG] + 4 ids + EOS
    assert doc[0, 1].tolist() == [TAG, 10, 11, 12, 13, EOS_ID]
    assert doc[1, 0].tolist() == [TAG, 14, 15, EOS_ID, PAD_ID, PAD_ID]
    assert doc[1, 2].tolist() == [PAD_ID] * 6      # document 1 has only 2 sentences
    assert extra[DOC_INDEX].tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="at least one sentence"):
        document_extra([[]], [0])
    with pytest.raises(ValueError, match="doc_index"):
        document_extra(DOCS, [2])


def test_sentence_level_input_equals_the_plain_transformer_with_the_same_weights():
    """Gate off without doc_src: H' = H, so the shared weights give the baseline's logits."""
    model = model_for()
    base = Transformer(tiny(name="transformer")).eval()
    res = base.load_state_dict(model.state_dict(), strict=False)
    assert res.missing_keys == [] and sorted(res.unexpected_keys) == sorted(model.new_parameter_names())
    batch = make_batch(docs=None)
    with torch.no_grad():
        torch.testing.assert_close(model(batch).logits, base(batch).logits, rtol=0, atol=0)
        assert not torch.allclose(model(make_batch()).logits, base(batch).logits)   # document mode differs


def test_document_context_changes_the_output_and_padding_or_sharing_does_not():
    model = model_for()
    with torch.no_grad():
        ref = model(make_batch()).logits
        # Another sentence of row 0's document changes row 0, not row 1 (a different document).
        other = [[[40, 41, 42], DOCS[0][1], DOCS[0][2]], DOCS[1]]
        out = model(make_batch(other)).logits
        assert not torch.allclose(out[0], ref[0], atol=1e-4)
        torch.testing.assert_close(out[1], ref[1], rtol=0, atol=1e-5)
        # One extra all-PAD sentence row and longer padding of every sentence change nothing.
        batch = make_batch()
        doc = batch.extra[DOC_SRC]
        batch.extra[DOC_SRC] = torch.nn.functional.pad(doc, (0, 3, 0, 1), value=PAD_ID)
        torch.testing.assert_close(model(batch).logits, ref, rtol=0, atol=1e-5)
        # Two rows reading one shared document == the same document given once per row.
        shared = make_batch(DOCS[:1], index=[0, 0])
        copies = make_batch([DOCS[0], DOCS[0]], index=[0, 1])
        torch.testing.assert_close(model(shared).logits, model(copies).logits, rtol=0, atol=1e-5)
        # Without doc_index, doc_src must hold one document per row.
        bad = make_batch(DOCS[:1], index=[0, 0])
        del bad.extra[DOC_INDEX]
        with pytest.raises(ValueError, match="no doc_index"):
            model(bad)


def test_global_encoder_shares_the_sentence_encoders_self_attention_and_ffn():
    model = model_for(global_layers=1)
    batch = make_batch()
    with torch.no_grad():
        g = model.global_context(batch)
        model.encoder[0].blocks["ffn"].fn.w2.weight.mul_(2.0)     # shared with global layer 0
        assert not torch.allclose(model.global_context(batch), g)
        g2 = model.global_context(batch)
        model.encoder[1].blocks["ffn"].fn.w2.weight.mul_(2.0)     # not used by a 1-layer global encoder
        torch.testing.assert_close(model.global_context(batch), g2, rtol=0, atol=0)
    with pytest.raises(ValueError, match="global_layers"):
        model_for(global_layers=3)
    with pytest.raises(ValueError, match="unknown extras"):
        model_for(global_layer=1)


def test_sentence_representation_ignores_padding_and_is_a_convex_combination():
    torch.manual_seed(0)
    rep = SentenceRepresentation(8, 4)
    b = torch.randn(1, 3, 8)
    c = rep(b, torch.ones(1, 3, dtype=torch.bool))
    padded = torch.cat([b, torch.randn(1, 2, 8)], dim=1)
    mask = torch.tensor([[True, True, True, False, False]])
    torch.testing.assert_close(rep(padded, mask), c)
    with torch.no_grad():
        rep.w2.weight.zero_()                       # equal scores: alpha uniform, c = mean (Eq. 2-3)
    torch.testing.assert_close(rep(padded, mask), b.mean(1))


def test_gates_stay_in_unit_interval():
    torch.manual_seed(0)
    gate = GlobalContextGate(16)
    lam = gate(torch.randn(4, 7, 16) * 50, torch.randn(4, 7, 16) * 50)
    assert lam.shape == (4, 7, 16) and lam.min() >= 0 and lam.max() <= 1
    model, seen = model_for(), []
    model.global_gate.register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        model(make_batch())
    assert seen and 0 < seen[0].min() and seen[0].max() < 1


def test_parameter_overhead_matches_the_architecture():
    """The new parameters (test_model_contract.py checks that a baseline checkpoint leaves
    exactly these missing) are the global encoder's own weights and the gate."""
    base = Transformer(tiny(name="transformer"))
    model = CrossTaskTransformer(tiny())
    assert {n.split(".")[0] for n in model.new_parameter_names()} == {
        "sent_repr", "global_attn", "global_gate"}          # global_norm: Identity in post-norm
    d, n_g = 32, 2
    # Per global layer: W_1 (d, d) + w_2 (1, d) + cross attention (4 d^2 + 4 d) + its LayerNorm (2d);
    # plus W_g (2d, d). Shared self-attention/FFN add nothing.
    expected = n_g * (d * d + d + 4 * d * d + 4 * d + 2 * d) + 2 * d * d
    overhead = model.num_parameters() - base.num_parameters()
    assert overhead == expected
    print(f"\ncrosstask params: {model.num_parameters()} vs transformer {base.num_parameters()} "
          f"(+{overhead}, +{100 * overhead / base.num_parameters():.1f}%)")


def test_task_schedule_alternates_and_keeps_the_ratio():
    assert [task_schedule(s, 0.5) for s in range(4)] == [Phase.SENTENCE, Phase.DOCUMENT] * 2
    assert all(task_schedule(s, 0.0) is Phase.SENTENCE for s in range(10))
    assert all(task_schedule(s, 1.0) is Phase.DOCUMENT for s in range(10))
    for ratio in (1 / 3, 0.25, 0.7):
        phases = [task_schedule(s, ratio) for s in range(300)]
        for n in (7, 100, 300):
            assert phases[:n].count(Phase.DOCUMENT) == int(n * ratio + 1e-9)
    with pytest.raises(ValueError):
        task_schedule(0, 1.5)
    with pytest.raises(ValueError):
        task_schedule(-1, 0.5)


def test_joint_training_learns_to_use_the_document():
    """The target is a token that only another sentence of the document reveals: alternating
    copy-translation (sentence) and document batches, the document loss falls far below the
    sentence-mode loss on the same rows."""
    torch.manual_seed(0)
    model = CrossTaskTransformer(tiny())
    opt = build_optimizer(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)

    def doc_batch() -> Batch:
        keys = torch.randint(10, 30, (16,), generator=gen).tolist()
        docs = [[[k, 40], [41, 42]] for k in keys]            # sentence 0 holds the key
        src = torch.tensor([[TAG, 41, 42, EOS_ID]] * 16)      # the current sentence is sentence 1
        tgt_in = torch.tensor([[BOS_ID, TAG, k] for k in keys])
        tgt_out = torch.tensor([[TAG, k, EOS_ID] for k in keys])
        return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
                     extra=document_extra(docs, list(range(16)), prefix=[TAG]))

    def sent_batch() -> Batch:
        ids = torch.randint(10, 30, (16, 3), generator=gen)
        tag = torch.full((16, 1), TAG)
        return Batch(src=torch.cat([tag, ids, torch.full((16, 1), EOS_ID)], 1),
                     tgt_in=torch.cat([torch.full((16, 1), BOS_ID), tag, ids], 1),
                     tgt_out=torch.cat([tag, ids, torch.full((16, 1), EOS_ID)], 1))

    model.train()
    for step in range(160):
        batch = doc_batch() if task_schedule(step, 0.5) is Phase.DOCUMENT else sent_batch()
        opt.zero_grad(set_to_none=True)
        loss, _, n = label_smoothed_nll(model(batch).logits, batch.tgt_out, 0.0)
        (loss / n).backward()
        opt.step()
    model.eval()
    test = doc_batch()
    sentence_mode = Batch(src=test.src, tgt_in=test.tgt_in, tgt_out=test.tgt_out)
    with torch.no_grad():
        doc_loss = label_smoothed_nll(model(test).logits, test.tgt_out, 0.0)[0].item()
        sent_loss = label_smoothed_nll(model(sentence_mode).logits, test.tgt_out, 0.0)[0].item()
    print(f"\ncrosstask toy: document-mode NLL {doc_loss:.3f} vs sentence-mode {sent_loss:.3f}")
    assert doc_loss < 0.5 * sent_loss


def test_a_sentence_of_the_document_is_encoded_once():
    """The global encoder reuses a row's states from its document's identical sentence instead
    of encoding the row again as a query: the same outputs (and gradients), fewer rows.
    Row 2's sentence is not in its document (a restoration row at a gap): its own query."""
    from pipeline_lib.models.crosstask import DOC_QUERIES, DOC_STATE

    model = model_for(seed=3).train()
    for p in model.parameters():
        p.requires_grad_(True)
    src = pad([[TAG, 10, 11, 12, 13, EOS_ID], [TAG, 14, 15, EOS_ID], [TAG, 39, 40, EOS_ID]])
    tgt = [[TAG, 20, 21, 22, 23], [TAG, 24, 25], [TAG, 26]]
    batch = Batch(src=src, tgt_in=pad([[BOS_ID] + t for t in tgt]),
                  tgt_out=pad([t + [EOS_ID] for t in tgt]))
    queries = [[10, 11, 12, 13], [14, 15], [39, 40]]
    batch.extra = document_extra(DOCS, [0, 1, 1], prefix=[TAG], queries=queries)
    assert batch.extra[DOC_QUERIES].tolist() == [2]               # rows 0 and 1 reuse
    assert batch.extra[DOC_STATE].tolist() == [1, 3, 5]           # R = 5 document sentences
    plain = Batch(src=src, tgt_in=batch.tgt_in, tgt_out=batch.tgt_out,
                  extra={k: v for k, v in batch.extra.items() if k not in (DOC_QUERIES, DOC_STATE)})
    outs = []
    for b in (batch, plain):
        torch.manual_seed(0)
        model.zero_grad()
        logits = model(b).logits
        label_smoothed_nll(logits, b.tgt_out, 0.1)[0].backward()
        outs.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                       if p.grad is not None}))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=0, atol=1e-5)
    assert outs[0][1].keys() == outs[1][1].keys()
    for n in outs[0][1]:
        torch.testing.assert_close(outs[0][1][n], outs[1][1][n], rtol=1e-4, atol=1e-6, msg=n)

"""CAMN (Jiang et al. 2019): memory read equations, context use, gates, ablations, parameter
overhead, learning from the memory. The contract every model keeps (causality, incremental
decoding, batch-invariant search, two-step freezing) is tests/unit/models/test_model_contract.py."""

from __future__ import annotations

import pytest
import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.camn import CTX_SENTS, CAMNTransformer, ContextGate, MemoryMode
from pipeline_lib.models.inputs import (PreviousSentences, PreviousSentenceSlots, RandomSentences,
                                        SpecialIds)
from pipeline_lib.models.layers import SOURCE_MEMORY, LayerContext
from pipeline_lib.training.two_step import apply_freeze

from marker_task import SIZE, marker_accuracy, train_on_markers

torch.set_num_threads(1)

SENT_BREAK_ID = 7   # stands for the "####" piece; any id works for the model
DOC = [[30, 31, 32], [33, 34], [35, 36, 37, 38]]   # previous sentences of row 0, oldest first


def tiny(name: str = "camn", norm_first: bool = False, **extras) -> ModelConfig:
    return ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
                       dropout=0.0, max_len=64, name=name, norm_first=norm_first, extras=extras)


def context(prev: list[list[int]], k: int) -> list[int]:
    """The documented ``ctx_src`` layout: last k sentences joined by SENT_BREAK, EOS; BOS if none."""
    sents = prev[-k:]
    if not sents:
        return [BOS_ID]
    ids: list[int] = []
    for i, s in enumerate(sents):
        ids += s + ([SENT_BREAK_ID] if i < len(sents) - 1 else [EOS_ID])
    return ids


def sentences(prev: list[list[int]], n: int) -> list[list[int]]:
    """The documented ``ctx_sents`` layout: n slots, oldest first, missing ones empty (all PAD)."""
    sents = [s + [EOS_ID] for s in prev[-n:]] or [[BOS_ID]]
    return [[] for _ in range(n - len(sents))] + sents


def pad(rows: list[list[int]], width: int = 0) -> torch.Tensor:
    width = max(width, *(len(r) for r in rows))
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def make_batch(ctx_rows: list[list[int]] | None = None,
               sent_rows: list[list[list[int]]] | None = None) -> Batch:
    src = pad([[10, 11, 12, 13, EOS_ID], [14, 15, EOS_ID]])
    tgt = [[20, 21, 22, 23], [24, 25]]
    if ctx_rows is None:
        ctx_rows = [context(DOC, 1), context([], 1)]    # row 1: first sentence of its document
    extra = {}
    if sent_rows is not None:
        L = max(len(s) for row in sent_rows for s in row)
        extra[CTX_SENTS] = torch.stack([pad(row, L) for row in sent_rows])   # (B, N, L)
    return Batch(src=src, tgt_in=pad([[BOS_ID] + t for t in tgt]), tgt_out=pad([t + [EOS_ID] for t in tgt]),
                 ctx_src=pad(ctx_rows), extra=extra)


#: the row's own previous sentence as ctx_src, gated without the FFN: the variant most tests
#: below check by hand; the default (the same memory with the FFN) and Sec. 4.3's batch memory
#: have their own tests at the end
VARIANT = {"memory_mode": "concat", "context_ffn": False}


def model_for(seed: int = 0, norm_first: bool = False, **extras) -> CAMNTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(norm_first=norm_first, **{**VARIANT, **extras})).eval()


def test_registry_shapes_and_properties():
    assert MODELS["camn"] is CAMNTransformer
    model, batch = model_for(), make_batch()
    enc = model.encode(batch)
    assert set(enc.memories) == {SOURCE_MEMORY}           # the gated states replace the source
    assert enc.source.states.shape == (2, batch.src.size(1), 32)
    assert torch.equal(enc.source.mask, batch.src.ne(PAD_ID))
    assert model(batch).logits.shape == (2, batch.tgt_in.size(1), 50)
    special = SpecialIds(sent_break=45, src_tag=46, tgt_tag=47)
    inputs = model.inputs(special)
    assert inputs.in_document_order is False
    assert inputs.context == PreviousSentences(1, model.cfg.max_len, 45)   # not random
    random = model_for(memory_sentences=3, random_context=True).inputs(special).context
    assert isinstance(random, RandomSentences) and random.rule.k == 3
    assert isinstance(model_for(random_context=True).inputs(special).context, RandomSentences)


def test_missing_context_is_an_error_not_a_fallback():
    batch = make_batch()
    batch.ctx_src = None
    with pytest.raises(ValueError, match="ctx_src"):
        model_for()(batch)
    with pytest.raises(ValueError, match=CTX_SENTS):
        model_for(memory_mode="weighted", memory_sentences=2)(make_batch())
    with pytest.raises(ValueError, match=r"expected \(B, 3, L\)"):
        model_for(memory_mode="weighted", memory_sentences=3)(make_batch(sent_rows=[sentences(DOC, 2)] * 2))


def test_bad_extras_are_errors():
    with pytest.raises(ValueError, match="unknown extras"):
        model_for(memory_sentence=2)
    with pytest.raises(ValueError, match="memory_mode"):
        model_for(memory_mode="sum")
    with pytest.raises(ValueError, match="memory_sentences"):
        model_for(memory_sentences=0)
    with pytest.raises(ValueError, match="rnn"):
        model_for(rnn="no")


def test_encoder_output_follows_equations_10_to_17():
    """Recompute Eq. 10-17 by hand from the sentence encoder and the context encoder."""
    model, batch = model_for(seed=3), make_batch()
    with torch.no_grad():
        h = Transformer.encode(model, batch).source.states              # H_source (B, S, d)
        c, mask = model.encode_memory(batch.ctx_src)                     # (B, C, d), (B, C)
        assert torch.equal(mask, batch.ctx_src.ne(PAD_ID))
        m_raw = h @ c.transpose(1, 2)                                    # (B, S, C)
        m_raw = m_raw.masked_fill(~mask[:, None, :], float("-inf"))
        alpha = torch.softmax(m_raw, dim=-1)
        torch.testing.assert_close(alpha.sum(-1), torch.ones(2, h.size(1)))
        assert alpha[1, :, 1:].abs().max() == 0                          # padded memory words: 0
        a = alpha @ c                                                    # H_context (B, S, d)
        g = torch.sigmoid(model.context_gate.w_g(torch.cat([h, a], -1)))
        expected = g * h + (1 - g) * a
        torch.testing.assert_close(model.encode(batch).source.states, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("rnn", [True, False])
def test_context_changes_the_output_and_context_padding_does_not(rnn):
    model = model_for(rnn=rnn)
    base = model(make_batch([context(DOC, 2), [BOS_ID]])).logits
    other = model(make_batch([context([[40, 41], [42]], 2), [BOS_ID]])).logits
    assert (base[0] - other[0]).abs().max() > 1e-4                      # row 0's memory changed
    torch.testing.assert_close(base[1], other[1], rtol=0, atol=1e-6)   # row 1's did not
    # Word order inside the memory matters (GRU, or the positions without it).
    swapped = model(make_batch([context([DOC[1], DOC[2][::-1]], 2), [BOS_ID]])).logits
    assert (base[0] - swapped[0]).abs().max() > 1e-4
    padded = make_batch([context(DOC, 2) + [PAD_ID] * 5, [BOS_ID]])
    torch.testing.assert_close(model(padded).logits, base, rtol=0, atol=1e-5)


def test_rnn_flag_changes_the_context_encoder():
    with_rnn, without = model_for(), model_for(rnn=False)
    assert isinstance(with_rnn.context_rnn, torch.nn.GRU) and without.context_rnn is None
    assert not any(isinstance(m, torch.nn.GRU) for m in without.modules())
    b = make_batch()
    without.load_state_dict(with_rnn.state_dict(), strict=False)        # same everything but the GRU
    assert (with_rnn(b).logits - without(b).logits).abs().max() > 1e-4


def test_weighted_memory_follows_equations_14_15():
    """beta = softmax of the mean raw similarities weights the per-sentence reads (Eq. 14-15)."""
    weighted = model_for(seed=4, memory_mode="weighted", memory_sentences=2)
    concat = model_for(seed=4)                                           # same parameters
    assert weighted.state_dict().keys() == concat.state_dict().keys()
    rows = [sentences(DOC, 2), sentences([], 2)]                         # row 1: empty slot + BOS
    batch = make_batch(sent_rows=rows)
    with torch.no_grad():
        h = Transformer.encode(weighted, batch).source.states
        src_mask = batch.src.ne(PAD_ID)
        reads, sims = [], []
        for n in range(2):
            slot = batch.extra[CTX_SENTS][:, n]                          # (B, L)
            reads.append(concat.read_memory(h, src_mask, slot[:, None]))  # one-sentence read (B, S, d)
            c, mask = concat.encode_memory(slot)
            m = h @ c.transpose(1, 2)                                    # (B, S, L)
            real = (src_mask[:, :, None] & mask[:, None, :]).float()
            sims.append((m * real).sum((1, 2)) / real.sum((1, 2)))       # (B,) mean similarity
        beta = torch.softmax(torch.stack(sims, 1), dim=1)                # (B, 2)
        beta[1] = torch.tensor([0.0, 1.0])                               # row 1's slot 0 is absent
        expected = beta[:, 0, None, None] * reads[0] + beta[:, 1, None, None] * reads[1]
        got = weighted.read_memory(h, src_mask, batch.extra[CTX_SENTS])
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        assert 0.0 < float(beta[0, 0]) < 1.0
    # A row whose only real slot is the previous sentence equals the one-sentence (concat) model.
    one = make_batch(ctx_rows=[context(DOC, 1), [BOS_ID]], sent_rows=[[[], DOC[-1] + [EOS_ID]],
                                                                      sentences([], 2)])
    torch.testing.assert_close(weighted(one).logits, concat(one).logits, rtol=0, atol=1e-5)


def test_gates_stay_in_unit_interval():
    model = model_for(seed=1)
    assert isinstance(model.context_gate, ContextGate)
    with torch.no_grad():   # large weights drive the sigmoid to saturation: still within [0, 1]
        model.context_gate.w_g.weight.mul_(50.0)
    seen: list[torch.Tensor] = []
    hook = model.context_gate.register_forward_hook(lambda _m, _i, out: seen.append(out))
    model(make_batch())
    hook.remove()
    g = seen[0]
    assert g.shape == (2, 5, 32)
    assert g.min() >= 0.0 and g.max() <= 1.0
    assert g.min() < 0.01 and g.max() > 0.99                            # really saturated


def test_parameter_overhead_matches_the_architecture():
    """New parameters = GRU (Eq. 5) + self-attention sub-layer (Eq. 6-7) + gate W_g, b_g (Eq. 16)."""
    d = 32
    gru = 2 * 3 * d * d + 2 * 3 * d                 # W_ih, W_hh (3d x d) and two 3d biases
    attn = 4 * d * d + 4 * d + 2 * d                # q/k/v/out projections with biases + LayerNorm
    gate = 2 * d * d + d
    for extras, norm_first, expected in [({}, False, gru + attn + gate),
                                         ({"rnn": False}, False, attn + gate),
                                         ({}, True, gru + attn + gate + 2 * d)]:
        base = Transformer(tiny(name="transformer", norm_first=norm_first)).num_parameters()
        model = model_for(norm_first=norm_first, **extras)
        overhead = model.num_parameters() - base
        assert overhead == expected
        assert overhead == sum(p.numel() for n, p in model.named_parameters()
                               if n in set(model.new_parameter_names()))
        assert all(n.startswith("context_") for n in model.new_parameter_names())
        print(f"camn {extras or 'default'}{' pre-norm' if norm_first else ''}: "
              f"{model.num_parameters()} parameters, baseline {base}, "
              f"overhead +{overhead} ({100 * overhead / base:.1f}%)")


@pytest.mark.slow
def test_two_step_training_learns_to_use_the_memory():
    """Step 1 (sentence level) cannot predict the memory-determined marker (chance, 50 %); step 2
    with theta_s frozen learns it through the memory read and the gate alone (~8 s on one core;
    the marker accuracy sits at chance for 100-200 steps, then jumps to ~1.0 for seeds 0-2)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    base = Transformer(ModelConfig(**SIZE))
    train_on_markers(base, 200, 3e-3, gen)
    base_marker, base_copy = marker_accuracy(base, gen)
    model = CAMNTransformer(ModelConfig(**SIZE, name="camn", extras=VARIANT))
    model.load_state_dict(base.state_dict(), strict=False)
    apply_freeze(model, CAMNTransformer.sentence_level_prefixes())
    train_on_markers(model, 300, 1e-2, gen)   # after a plateau of 100-200 steps the memory read takes over
    camn_marker, camn_copy = marker_accuracy(model, gen)
    print(f"marker accuracy: sentence-level {base_marker:.3f}, CAMN step 2 {camn_marker:.3f}; "
          f"copy accuracy {base_copy:.3f} -> {camn_copy:.3f}")
    assert base_copy > 0.95 and base_marker < 0.6
    assert camn_marker > 0.9 and camn_copy > 0.9



# ------------------------------------------------------------------ the paper's default variant

def paper_model(seed: int = 0, **extras) -> CAMNTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(**extras)).eval()


def slots_batch() -> Batch:
    """Two rows, one memory slot each (memory_sentences 1): row 0 after DOC, row 1 first."""
    return make_batch(sent_rows=[sentences(DOC, 1), sentences([], 1)])


def test_defaults_are_the_memory_the_paper_ran_with_the_feed_forward():
    """Footnote 1: only the concatenated context attention (Eq. 18) was run, with the previous
    sentence as context (Sec. 5.3); the gate reads the memory after a feed-forward sub-layer."""
    model = paper_model()
    assert model.camn.memory_mode is MemoryMode.CONCAT and model.camn.memory_sentences == 1
    assert model.context_ffn is not None
    rule = model.inputs(SpecialIds(sent_break=45, src_tag=46, tgt_tag=47)).context
    assert rule == PreviousSentences(1, model.cfg.max_len, 45)
    assert "context_ffn.fn.w1.weight" in "".join(model.new_parameter_names())
    batch_rule = paper_model(memory_mode="batch").inputs(
        SpecialIds(sent_break=45, src_tag=46, tgt_tag=47)).context
    assert batch_rule == PreviousSentenceSlots(1, model.cfg.max_len, CTX_SENTS)


def test_batch_memory_follows_equations_10_to_17_over_every_rows_context():
    """Sec. 4.3's batch memory (described, not run: footnote 1): every row reads the two context
    sentences of the batch, weighted by beta (Eq. 14-15), then the FFN sub-layer, then the gate
    (Eq. 16-17), recomputed by hand."""
    model, batch = paper_model(seed=5, memory_mode="batch"), slots_batch()
    with torch.no_grad():
        h = Transformer.encode(model, batch).source.states               # (B, S, d)
        src_mask = batch.src.ne(PAD_ID)
        mem = batch.extra[CTX_SENTS].flatten(0, 1)                        # (M=2, L)
        c, mask = model.encode_memory(mem)                                # (M, L, d)
        reads, sims = [], []
        for m in range(mem.size(0)):
            raw = h @ c[m].T                                              # (B, S, L) Eq. 10-11
            alpha = torch.softmax(raw.masked_fill(~mask[m], float("-inf")), -1)
            reads.append(alpha @ c[m])                                    # Eq. 13
            real = (src_mask[:, :, None] & mask[m][None, None, :]).float()
            sims.append((raw * real).sum((1, 2)) / real.sum((1, 2)))      # Eq. 14
        beta = torch.softmax(torch.stack(sims, 1), 1)                     # (B, M) Eq. 15
        a = sum(beta[:, m, None, None] * reads[m] for m in range(len(reads)))
        a = model.context_ffn(a, LayerContext(), None)                    # "after the FFN"
        g = torch.sigmoid(model.context_gate.w_g(torch.cat([h, a], -1)))
        torch.testing.assert_close(model.encode(batch).source.states, g * h + (1 - g) * a,
                                   rtol=0, atol=1e-5)
        assert beta.shape == (2, 2) and not torch.allclose(beta[:, 0], beta[:, 1])


def test_batch_memory_is_shared_but_a_rows_own_memory_is_not():
    """Changing row 1's context changes row 0's encoding with the batch memory, not with the
    row's own (weighted) memory: the difference between Sec. 4.3 and the per-row option."""
    other = make_batch(sent_rows=[sentences(DOC, 1), sentences([[40, 41, 42]], 1)])
    for mode, shared in (("batch", True), ("weighted", False)):
        model = paper_model(seed=2, memory_mode=mode)
        with torch.no_grad():
            a = model.encode(slots_batch()).source.states[0]
            b = model.encode(other).source.states[0]
        assert (not torch.allclose(a, b)) == shared, mode


def test_without_the_feed_forward_the_gate_reads_the_raw_memory():
    plain, ffn = paper_model(seed=1, context_ffn=False), paper_model(seed=1)
    assert plain.context_ffn is None
    assert plain.num_parameters() < ffn.num_parameters()


@pytest.mark.parametrize("mode", ["batch", "weighted"])
def test_memory_read_equals_the_direct_evaluation_of_equations_10_to_15(mode):
    """The memory read skips building the (B, M, S, L) mask and reads (Eq. 14's mean is a product
    of sums): the same values and gradients as evaluating Eq. 10-15 term by term, the way the
    model did before (kept here as the reference)."""
    from pipeline_lib.models.camn import masked_softmax

    torch.manual_seed(5)
    model = model_for(seed=2, memory_sentences=2, memory_mode=mode).train()
    B, S, N, L = 3, 5, 2, 4
    tokens = torch.randint(10, 40, (B, N, L))
    tokens[0, 0] = PAD_ID                   # an absent memory sentence
    tokens[1, 1, 2:] = PAD_ID               # a short one
    src_mask = torch.ones(B, S, dtype=torch.bool)
    src_mask[2, 3:] = False
    h = torch.randn(B, S, 32, requires_grad=True)

    def reference(h):
        if mode == "weighted":
            c, mask = model.encode_memory(tokens.reshape(B * N, L))
            c, mask = c.view(B, N, L, -1), mask.view(B, N, L)
            m_raw = torch.einsum("bsd,bnld->bnsl", h, c)
            reads = masked_softmax(m_raw, mask[:, :, None, :]) @ c
            real = (src_mask[:, None, :, None] & mask[:, :, None, :]).float()
            beta = masked_softmax((m_raw * real).sum((2, 3)) / real.sum((2, 3)),
                                  tokens.ne(PAD_ID).any(2))
            return torch.einsum("bn,bnsd->bsd", beta, reads)
        flat = tokens.flatten(0, 1)
        M = flat.size(0)
        c, mask = model.encode_memory(flat)
        m_raw = torch.einsum("bsd,mld->bmsl", h, c)
        alpha = masked_softmax(m_raw, mask[None, :, None, :])
        real = (src_mask[:, None, :, None] & mask[None, :, None, :]).float()
        beta = masked_softmax((m_raw * real).sum((2, 3)) / real.sum((2, 3)),
                              flat.ne(PAD_ID).any(1).expand(B, M))
        return (beta[:, :, None, None] * alpha).permute(0, 2, 1, 3).reshape(B, S, -1) @ c.reshape(-1, 32)

    outs = []
    for fn in (reference, lambda h: model.read_memory(h, src_mask, tokens)):
        model.zero_grad()
        h.grad = None
        y = fn(h)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append((y.detach(), h.grad.clone(),
                     {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1][1], outs[0][1], rtol=1e-5, atol=1e-5)
    assert outs[1][2].keys() == outs[0][2].keys() and outs[0][2]
    for n in outs[0][2]:
        torch.testing.assert_close(outs[1][2][n], outs[0][2][n], rtol=1e-4, atol=1e-5, msg=n)

"""DBSA (Deguchi et al. 2019): parse-head structure, bi-affine attention, supervision (incl. the
decoder's future heads), decoding without heads, the parameters it adds to a sentence-level
Transformer. The contract every model keeps (causality, incremental decoding, batch-invariant
search, two-step freezing) is tests/unit/models/test_model_contract.py."""

from __future__ import annotations

import pytest
import torch

from pipeline_lib.batch import Batch
from pipeline_lib.training.batching import collate
from pipeline_lib.models.search import BeamConfig, beam_search, greedy_search
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.dbsa import (NO_HEAD, DependencyAttention, DependencyTransformer,
                                      parse_layer_index, parse_loss, target_gold)
from pipeline_lib.models.layers import Attention
from pipeline_lib.training.optim import build_optimizer

torch.set_num_threads(1)

# Two sentences; shard-style heads (0-based positions without BOS/EOS; root points to itself).
SRC = [[10, 11, 12, 13], [14, 15]]
SRC_HEADS = [[1, 1, 3, 1], [1, 1]]
TGT = [[20, 21, 22, 23], [24, 25]]
TGT_HEADS = [[1, 1, 1, 2], [1, 1]]     # y0 -> y1 (future), y1 root, y2 -> y1, y3 -> y2


def tiny(name: str = "dbsa", **extras) -> ModelConfig:
    return ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
                       dropout=0.0, max_len=64, name=name, extras=extras)


def make_batch(with_heads: bool = True) -> Batch:
    """The loader's own collate, so the tests see the real head layout."""
    rows = [{"src_ids": s, "tgt_ids": t, "doc_id": "d", "sent_idx": i,
             **({"src_heads": sh, "tgt_heads": th} if with_heads else {})}
            for i, (s, t, sh, th) in enumerate(zip(SRC, TGT, SRC_HEADS, TGT_HEADS))]
    return collate(rows)


def model_for(seed: int = 0, **extras) -> DependencyTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(**extras)).eval()


def test_registry_structure_and_proportional_layer():
    assert MODELS["dbsa"] is DependencyTransformer
    model = model_for()
    # The paper's p_e = p_d = 4 of 6 sits at the same relative depth: layer 1 of 2.
    assert (model.parse_enc_index, model.parse_dec_index) == (0, 0)
    kinds = [type(l.blocks["self_attn"].fn) for l in [*model.encoder, *model.decoder]]
    assert kinds == [DependencyAttention, Attention, DependencyAttention, Attention]
    last = model_for(parse_layer_enc=6, parse_layer_dec=5)
    assert (last.parse_enc_index, last.parse_dec_index) == (1, 1)
    assert isinstance(last.encoder[1].blocks["self_attn"].fn, DependencyAttention)
    # round(4 L / 6): layer 2 of the tiny 3-layer stacks, 4 of base's 6, 1 of a single layer
    assert [parse_layer_index(4, n) for n in (1, 2, 3, 6, 12)] == [0, 0, 1, 3, 7]
    with pytest.raises(ValueError, match="unknown extras"):
        model_for(parse_layer=2)
    for bad in (0, 7):
        with pytest.raises(ValueError, match="parse_layer_enc"):
            model_for(parse_layer_enc=bad)


def test_shapes_aux_loss_and_metrics():
    model, batch = model_for(), make_batch()
    out = model(batch)
    assert out.logits.shape == (2, batch.tgt_in.size(1), 50)
    assert model.parse_enc.log_attn.shape == (2, batch.src.size(1), batch.src.size(1))
    assert model.parse_dec.log_attn.shape == (2, batch.tgt_in.size(1), batch.tgt_in.size(1))
    assert set(out.aux_metrics) == {"parse_loss_enc", "parse_acc_enc", "parse_loss_dec", "parse_acc_dec"}
    assert all(0.0 <= out.aux_metrics[k] <= 1.0 for k in ("parse_acc_enc", "parse_acc_dec"))
    # aux = lambda_enc * e_enc + lambda_dec * e_dec, with lambdas from the extras.
    e_enc, e_dec = float(out.aux_metrics["parse_loss_enc"]), float(out.aux_metrics["parse_loss_dec"])
    assert out.aux_loss.item() == pytest.approx(e_enc + e_dec, rel=1e-6)
    weighted = model_for(lambda_enc=0.5, lambda_dec=2.0)(batch)
    assert weighted.aux_loss.item() == pytest.approx(0.5 * e_enc + 2.0 * e_dec, rel=1e-6)


def test_parse_attention_is_a_masked_distribution_and_the_loss_is_its_cross_entropy():
    model, batch = model_for(), make_batch()
    out = model(batch)
    a_enc, a_dec = model.parse_enc.log_attn.exp(), model.parse_dec.log_attn.exp()
    torch.testing.assert_close(a_enc.sum(-1), torch.ones(a_enc.shape[:2]))
    torch.testing.assert_close(a_dec.sum(-1), torch.ones(a_dec.shape[:2]))
    assert a_enc[1, :, 3:].abs().max() == 0          # row 1's padded source keys get nothing
    T = a_dec.size(1)
    assert a_dec.masked_select(torch.ones(T, T, dtype=torch.bool).triu(1)).abs().max() == 0
    # Hand-computed cross-entropy on the documented positions.
    le, ld = model.parse_enc.log_attn, model.parse_dec.log_attn
    enc_arcs = [(b, s, h) for b, hs in enumerate(SRC_HEADS) for s, h in enumerate(hs)]
    # Target: query t >= 1 is y[t-1]; its head y[h] sits at tgt_in position h + 1 (if <= t).
    dec_arcs = [(b, i + 1, h + 1) for b, hs in enumerate(TGT_HEADS) for i, h in enumerate(hs)
                if h + 1 <= i + 1]
    want_enc = -sum(le[b, s, h] for b, s, h in enc_arcs) / len(enc_arcs)
    want_dec = -sum(ld[b, t, h] for b, t, h in dec_arcs) / len(dec_arcs)
    assert float(out.aux_metrics["parse_loss_enc"]) == pytest.approx(want_enc.item(), rel=1e-5)
    assert float(out.aux_metrics["parse_loss_dec"]) == pytest.approx(want_dec.item(), rel=1e-5)


def test_target_heads_are_mapped_to_tgt_in_positions_and_future_heads_dropped():
    batch = make_batch()
    # collate: BOS gets -1, the shard's y positions are unchanged.
    assert batch.tgt_heads[0].tolist() == [NO_HEAD, 1, 1, 1, 2]
    gold = target_gold(batch.tgt_heads)
    # tgt_in[0] = BOS 20 21 22 23: 20 -> 21 is in the future; 21 root (itself); 22 -> 21; 23 -> 22.
    assert gold[0].tolist() == [NO_HEAD, NO_HEAD, 2, 2, 3]
    assert gold[1].tolist() == [NO_HEAD, NO_HEAD, 2, NO_HEAD, NO_HEAD]   # then padding
    for b, t in ((0, 2), (0, 3), (0, 4)):   # every gold key holds the head's token id
        y, heads = TGT[b], TGT_HEADS[b]
        assert batch.tgt_in[b, gold[b, t]] == y[heads[t - 1]]
    src_gold = batch.src_heads
    assert src_gold[0].tolist() == [1, 1, 3, 1, NO_HEAD]          # EOS unsupervised


def test_future_pointing_head_labels_give_no_loss_and_no_gradient():
    model, batch = model_for().train(), make_batch()

    def loss_and_grads(tgt_heads: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        b = make_batch()
        b.tgt_heads = tgt_heads
        out = model(b)
        out.aux_loss.backward()
        return out.aux_loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()
                                     if p.grad is not None}

    ref_loss, ref_grads = loss_and_grads(batch.tgt_heads.clone())
    changed = batch.tgt_heads.clone()
    assert changed[0, 1] == 1            # y0's head y1 lies in the future of query t=1
    changed[0, 1] = 3                    # another future head: must not matter
    loss, grads = loss_and_grads(changed)
    assert loss == ref_loss and ref_grads.keys() == grads.keys()
    for n in ref_grads:
        assert torch.equal(grads[n], ref_grads[n]), n
    changed[0, 2] = 0                    # a past head (BOS side): must matter
    assert loss_and_grads(changed)[0] != ref_loss
    # Directly: the gradient of a skipped row of log A_parse is exactly zero.
    log_attn = torch.randn(1, 3, 3).log_softmax(-1).requires_grad_()
    loss, acc = parse_loss(log_attn, torch.tensor([[NO_HEAD, 0, 2]]))
    loss.backward()
    assert log_attn.grad[0, 0].abs().max() == 0 and log_attn.grad[0, 1:].abs().max() > 0
    with pytest.raises(RuntimeError, match="outside the sequence"):   # an asynchronous assertion
        parse_loss(log_attn.detach(), torch.tensor([[0, 0, 3]]))


def test_parse_head_changes_the_output():
    """The bi-affine head really feeds the layer output (U^(1) and u^(2) both matter)."""
    model, batch = model_for(), make_batch()
    ref = model(batch).logits
    for param in ("parse_u1", "parse_u2"):
        other = model_for()
        with torch.no_grad():
            getattr(other.parse_dec, param).add_(0.5)
            getattr(other.parse_enc, param).add_(0.5)
        assert (other(batch).logits - ref).abs().max() > 1e-4, param


def test_search_keeps_no_parse_attention():
    """Incremental steps (a cache) store no A_parse: decoding computes no parse loss
    (test_model_contract.py checks that the steps equal a full decode)."""
    model, batch = model_for(), make_batch(with_heads=False)
    with torch.no_grad():
        state = model.init_state(model.encode(batch))
        for t in range(batch.tgt_in.size(1)):
            _, state = model.decode_step(batch.tgt_in[:, t:t + 1], state, t)
    assert model.parse_dec.log_attn is None
    model(batch)                                         # teacher-forced: stored for the loss
    assert model.parse_dec.log_attn is not None


def test_decoding_needs_no_parser():
    model = model_for()
    batch = make_batch(with_heads=False)
    assert batch.src_heads is None and batch.tgt_heads is None
    out = model(batch)
    assert out.aux_loss is None and out.aux_metrics == {}
    src_only = make_batch()
    src_only.tgt_heads = None
    assert set(model(src_only).aux_metrics) == {"parse_loss_enc", "parse_acc_enc"}
    torch.testing.assert_close(out.logits, model(src_only).logits, rtol=0, atol=0)  # heads: loss only
    cfg = BeamConfig(beam=3, max_len_a=1.0, max_len_b=5)
    with torch.no_grad():
        for search in (greedy_search, beam_search):
            hyps = search(model, batch, cfg)
            assert len(hyps) == 2 and all(len(h) == 1 and len(h[0].tokens) <= 10 for h in hyps)  # a*S + b


def test_parse_supervision_is_learnable():
    """A few Adam steps on the parse loss alone raise both arc accuracies to 1."""
    model, batch = model_for(seed=3).train(), make_batch()
    opt = build_optimizer(model.parameters(), lr=3e-3)
    first = model(batch).aux_metrics
    for _ in range(60):
        opt.zero_grad(set_to_none=True)
        out = model(batch)
        out.aux_loss.backward()
        opt.step()
    last = model(batch).aux_metrics
    assert last["parse_loss_enc"] < 0.5 * first["parse_loss_enc"]
    assert last["parse_loss_dec"] < 0.5 * first["parse_loss_dec"]
    assert last["parse_acc_enc"] == 1.0 and last["parse_acc_dec"] == 1.0


def test_new_parameters_are_the_biaffine_u1_u2():
    """What a sentence-level checkpoint lacks (test_model_contract.py checks that it loads
    leaving exactly these missing): U^(1) and u^(2) of the two parse heads."""
    torch.manual_seed(0)
    base = Transformer(tiny(name="transformer"))
    model = model_for(seed=1)
    assert sorted(model.new_parameter_names()) == ["decoder.0.blocks.self_attn.fn.parse_u1",
                                                   "decoder.0.blocks.self_attn.fn.parse_u2",
                                                   "encoder.0.blocks.self_attn.fn.parse_u1",
                                                   "encoder.0.blocks.self_attn.fn.parse_u2"]
    overhead = model.num_parameters() - base.num_parameters()
    hs = 32 // 2
    assert overhead == 2 * (hs * hs + hs)
    big_cfg = dict(vocab_size=32000, d_model=512, n_heads=8, d_ff=2048)   # paper's base setting
    big_base = Transformer(ModelConfig(**big_cfg)).num_parameters()
    big = DependencyTransformer(ModelConfig(**big_cfg, name="dbsa")).num_parameters()
    print(f"\nnum_parameters tiny: baseline {base.num_parameters()} dbsa {model.num_parameters()} "
          f"(+{overhead}); base: baseline {big_base} dbsa {big} (+{big - big_base}, "
          f"{100 * (big - big_base) / big_base:.4f}%)")

"""DocT (Zhang et al. 2018): structure, context use, gates, parameter overhead, learning from the
context. The contract every model keeps (causality, incremental decoding, batch-invariant search,
two-step freezing) is tests/unit/models/test_model_contract.py."""

from __future__ import annotations

import pytest
import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.doct import (CONTEXT_MEMORY, CTX_ATTN, ContextGate, DocTransformer,
                                      GatedSubLayer)
from pipeline_lib.models.inputs import SpecialIds
from pipeline_lib.models.layers import SubLayer
from pipeline_lib.training.two_step import apply_freeze

from marker_task import SIZE, marker_accuracy, train_on_markers

torch.set_num_threads(1)

SENT_BREAK_ID = 7   # stands for the "####" piece; any id works for the model


def tiny(name: str = "doct", **extras) -> ModelConfig:
    return ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
                       dropout=0.0, max_len=64, name=name, extras=extras)


def context(prev: list[list[int]], k: int) -> list[int]:
    """The documented ``ctx_src`` layout: last k sentences joined by SENT_BREAK, EOS; BOS if none."""
    sents = prev[-k:]
    if not sents:
        return [BOS_ID]
    ids: list[int] = []
    for i, s in enumerate(sents):
        ids += s + ([SENT_BREAK_ID] if i < len(sents) - 1 else [EOS_ID])
    return ids


def pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def make_batch(ctx_rows: list[list[int]] | None = None) -> Batch:
    src = pad([[10, 11, 12, 13, EOS_ID], [14, 15, EOS_ID]])
    tgt = [[20, 21, 22, 23], [24, 25]]
    if ctx_rows is None:
        doc = [[30, 31, 32], [33, 34], [35, 36, 37, 38]]
        ctx_rows = [context(doc, 2), context([], 2)]    # row 1: first sentence of its document
    return Batch(src=src, tgt_in=pad([[BOS_ID] + t for t in tgt]), tgt_out=pad([t + [EOS_ID] for t in tgt]),
                 ctx_src=pad(ctx_rows))


def model_for(seed: int = 0, **extras) -> DocTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(**extras)).eval()


def test_registry_shapes_and_context_memory():
    assert MODELS["doct"] is DocTransformer
    model, batch = model_for(), make_batch()
    enc = model.encode(batch)
    assert enc.memories[CONTEXT_MEMORY].states.shape == (2, batch.ctx_src.size(1), 32)
    assert enc.source.states.shape == (2, batch.src.size(1), 32)
    assert model(batch).logits.shape == (2, batch.tgt_in.size(1), 50)
    assert model.inputs(SpecialIds(sent_break=45, src_tag=46, tgt_tag=47)).in_document_order is False


def test_missing_context_is_an_error_not_a_fallback():
    batch = make_batch()
    batch.ctx_src = None
    with pytest.raises(ValueError, match="ctx_src"):
        model_for()(batch)


@pytest.mark.parametrize("context_in", ["both", "encoder", "decoder"])
def test_context_changes_the_output_and_context_padding_does_not(context_in):
    model = model_for(context_in=context_in)
    doc = [[30, 31, 32], [33, 34], [35, 36, 37, 38]]
    base = model(make_batch([context(doc, 2), [BOS_ID]])).logits
    other = model(make_batch([context([[40, 41], [42]], 2), [BOS_ID]])).logits
    assert (base[0] - other[0]).abs().max() > 1e-4          # row 0's context changed
    torch.testing.assert_close(base[1], other[1], rtol=0, atol=1e-6)   # row 1's did not
    # Only the context sentences the model sees matter: k=3 sees the oldest sentence, k=1 does not.
    older = [[44, 45]] + doc
    k3a = model(make_batch([context(doc, 3), [BOS_ID]])).logits
    k3b = model(make_batch([context(older[:1] + doc[1:], 3), [BOS_ID]])).logits
    assert (k3a[0] - k3b[0]).abs().max() > 1e-4
    padded = make_batch([context(doc, 2) + [PAD_ID] * 5, [BOS_ID]])
    torch.testing.assert_close(model(padded).logits, base, rtol=0, atol=1e-5)


def test_flags_change_the_module_structure():
    both = model_for()
    assert list(both.encoder[0].blocks) == ["self_attn", CTX_ATTN, "ffn"]
    assert list(both.decoder[0].blocks) == ["self_attn", CTX_ATTN, "cross_attn", "ffn"]
    assert all(isinstance(l.blocks[CTX_ATTN], GatedSubLayer) for l in [*both.encoder, *both.decoder])
    special = SpecialIds(sent_break=45, src_tag=46, tgt_tag=47)
    assert len(both.context_encoder) == 1 and both.inputs(special).context.k == 2

    enc = model_for(context_in="encoder")
    assert all(CTX_ATTN in l.blocks for l in enc.encoder)
    assert not any(CTX_ATTN in l.blocks for l in enc.decoder)
    dec = model_for(context_in="decoder")
    assert not any(CTX_ATTN in l.blocks for l in dec.encoder)
    assert all(CTX_ATTN in l.blocks for l in dec.decoder)

    residual = model_for(gating=False)
    blocks = [l.blocks[CTX_ATTN] for l in [*residual.encoder, *residual.decoder]]
    assert all(type(b) is SubLayer for b in blocks)
    assert not any(isinstance(m, ContextGate) for m in residual.modules())

    assert len(model_for(context_layers=3).context_encoder) == 3
    assert len(model_for(context_layers=0).context_encoder) == 0
    assert model_for(context_sentences=3).inputs(special).context.k == 3

    with pytest.raises(ValueError, match="unknown extras"):
        model_for(context_layer=2)
    with pytest.raises(ValueError, match="context_in"):
        model_for(context_in="source")
    with pytest.raises(ValueError, match="context_sentences"):
        model_for(context_sentences=0)


def test_gates_stay_in_unit_interval():
    model = model_for(seed=1)
    with torch.no_grad():   # large weights drive the sigmoid to saturation: still within [0, 1]
        for m in model.modules():
            if isinstance(m, ContextGate):
                m.w_i.weight.mul_(50.0)
    seen: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.append(out))
             for m in model.modules() if isinstance(m, ContextGate)]
    model(make_batch())
    for h in hooks:
        h.remove()
    assert len(seen) == 4                                   # 2 encoder + 2 decoder layers
    lam = torch.cat([s.flatten() for s in seen])
    assert lam.min() >= 0.0 and lam.max() <= 1.0
    assert lam.min() < 0.01 and lam.max() > 0.99            # the test really reached saturation


def test_parameter_overhead_matches_the_architecture():
    """theta_d = N_c encoder layers + per layer (context attention + LayerNorm + gate)."""
    d, ff = 32, 64
    base = Transformer(tiny(name="transformer")).num_parameters()
    attn = 4 * d * d + 4 * d                   # q, kv, out projections with biases
    ctx_layer = attn + 2 * d * ff + ff + d + 2 * 2 * d
    per_block = {True: attn + 2 * d + 2 * d * d, False: attn + 2 * d}   # LN (+ bias-free gate)
    for extras, n_blocks, gating, n_c in [({}, 4, True, 1), ({"gating": False}, 4, False, 1),
                                          ({"context_in": "encoder"}, 2, True, 1),
                                          ({"context_layers": 2}, 4, True, 2)]:
        model = model_for(**extras)
        overhead = model.num_parameters() - base
        assert overhead == n_c * ctx_layer + n_blocks * per_block[gating]
        assert overhead == sum(p.numel() for n, p in model.named_parameters()
                               if n in set(model.new_parameter_names()))
        assert all(CTX_ATTN in n or n.startswith("context_") for n in model.new_parameter_names())
        print(f"doct {extras or 'default'}: {model.num_parameters()} parameters, baseline {base}, "
              f"overhead +{overhead} ({100 * overhead / base:.1f}%)")


def test_search_caches_the_context_keys_and_values_in_every_layer():
    """The context attention's K/V are computed once per sentence and kept in each decoder
    layer's cache (test_model_contract.py checks that the cached steps equal a full decode)."""
    model, batch = model_for(), make_batch()
    with torch.no_grad():
        state = model.init_state(model.encode(batch))
        _, state = model.decode_step(batch.tgt_in[:, :1], state, 0)
        keys = [cache[f"{CTX_ATTN}.k"] for cache in state.layers]
        _, state = model.decode_step(batch.tgt_in[:, 1:2], state, 1)
    assert all(cache[f"{CTX_ATTN}.k"] is k for cache, k in zip(state.layers, keys))   # reused
    assert all(k.size(2) == batch.ctx_src.size(1) for k in keys)                       # (B, nh, C, hs)


@pytest.mark.slow
def test_two_step_training_learns_to_use_the_context():
    """Step 1 (sentence level) cannot predict the context-determined marker (chance, 50 %); step 2
    with theta_s frozen learns it from the context alone (~8 s on one core)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    base = Transformer(ModelConfig(**SIZE))
    train_on_markers(base, 200, 3e-3, gen)
    base_marker, base_copy = marker_accuracy(base, gen)
    model = DocTransformer(ModelConfig(**SIZE, name="doct"))
    model.load_state_dict(base.state_dict(), strict=False)
    apply_freeze(model, DocTransformer.sentence_level_prefixes())
    train_on_markers(model, 150, 3e-3, gen)
    doct_marker, doct_copy = marker_accuracy(model, gen)
    print(f"marker accuracy: sentence-level {base_marker:.3f}, DocT step 2 {doct_marker:.3f}; "
          f"copy accuracy {base_copy:.3f} -> {doct_copy:.3f}")
    assert base_copy > 0.95 and base_marker < 0.6
    assert doct_marker > 0.95 and doct_copy > 0.95

"""The Transformer core: gradients, causality, padding, incremental decoding, extension point."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.func import functional_call

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.layers import FeedForward, SubLayer

torch.set_num_threads(1)


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=30, d_model=16, n_heads=2, d_ff=32, enc_layers=2, dec_layers=2, dropout=0.0,
                max_len=64)
    return ModelConfig(**{**base, **kw})


def make_batch() -> Batch:
    src = torch.tensor([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID]])
    tgt_in = torch.tensor([[BOS_ID, 11, 12, 13], [BOS_ID, 14, 15, PAD_ID]])
    tgt_out = torch.tensor([[11, 12, 13, EOS_ID], [14, 15, EOS_ID, PAD_ID]])
    return Batch(src, tgt_in, tgt_out)


def test_config_round_trip_and_unknown_keys():
    cfg = tiny(extras={"ctx_layers": 1})
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown keys"):
        ModelConfig.from_dict({**cfg.to_dict(), "d_modle": 8})
    with pytest.raises(ValueError, match="divisible"):
        tiny(n_heads=3)
    with pytest.raises(ValueError, match="unknown model"):
        build_model(tiny(name="nope"))
    assert MODELS["transformer"] is Transformer


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradcheck_float64(norm_first):
    """Analytic gradients of a tiny model equal finite differences (float64)."""
    torch.manual_seed(0)
    model = build_model(tiny(d_model=8, d_ff=8, enc_layers=1, dec_layers=1, norm_first=norm_first)).double()
    batch = make_batch()
    names = ["embed.weight", "encoder.0.blocks.self_attn.fn.qkv.weight",
             "decoder.0.blocks.self_attn.fn.qkv.weight", "decoder.0.blocks.cross_attn.fn.kv.weight",
             "decoder.0.blocks.ffn.fn.w1.weight"]
    params = dict(model.named_parameters())
    for name in names:
        def f(w: torch.Tensor, name: str = name) -> torch.Tensor:
            logits = functional_call(model, {name: w}, (batch,)).logits
            ll = torch.log_softmax(logits, -1).gather(-1, batch.tgt_out[..., None])[..., 0]
            return ll[batch.tgt_out.ne(PAD_ID)].sum()   # as the trainer: PAD positions ignored

        w = params[name].detach().clone().requires_grad_(True)
        assert torch.autograd.gradcheck(f, (w,), eps=1e-6, atol=1e-5), name


def test_causal_mask_future_tokens_do_not_change_earlier_logits():
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    batch = make_batch()
    ref = model(batch).logits
    for t in range(1, batch.tgt_in.size(1)):
        changed = batch.tgt_in.clone()
        changed[:, t:] = torch.randint(4, 30, changed[:, t:].shape)
        out = model(Batch(batch.src, changed, batch.tgt_out)).logits
        torch.testing.assert_close(out[:, :t], ref[:, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t:], ref[:, t:])


def test_source_padding_is_invisible():
    """A sentence decodes the same alone or padded inside a batch with a longer one."""
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    batch = make_batch()
    alone = Batch(batch.src[1:, :3], batch.tgt_in[1:, :3], batch.tgt_out[1:, :3])
    torch.testing.assert_close(model(alone).logits, model(batch).logits[1:, :3], rtol=0, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decoding_equals_full_recomputation(norm_first):
    torch.manual_seed(0)
    model = build_model(tiny(norm_first=norm_first)).eval()
    batch = make_batch()
    full = torch.log_softmax(model(batch).logits, -1)
    state = model.init_state(model.encode(batch))
    for t in range(batch.tgt_in.size(1)):
        lp, state = model.decode_step(batch.tgt_in[:, t:t + 1], state, t)
        torch.testing.assert_close(lp, full[:, t], rtol=0, atol=1e-5)
    assert state.layers[0]["self_attn.k"].shape[2] == batch.tgt_in.size(1)   # cache grew per step
    # reorder keeps rows: decoding the swapped state gives the swapped log-probs
    swap = torch.tensor([1, 0])
    state2 = model.init_state(model.encode(batch)).reorder(swap)
    lp, _ = model.decode_step(batch.tgt_in[swap, :1], state2, 0)
    torch.testing.assert_close(lp, full[swap, 0], rtol=0, atol=1e-5)


@torch.no_grad()
def test_beam_state_keeps_memories_once_per_sentence():
    """With K rows per sentence: every row's log-probs equal its sentence's at beam 1; beams
    reordered within their sentences copy no memory; dropping a sentence drops its memories;
    the self-attention cache is written in place after a reorder (the spare position)."""
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    batch, K = make_batch(), 3
    single = model.init_state(model.encode(batch))
    lp1, single = model.decode_step(batch.tgt_in[:, :1], single, 0)
    state = model.init_state(model.encode(batch)).with_beam(K)
    tokens = batch.tgt_in[:, :1].repeat_interleave(K, 0)                      # (2K, 1)
    lp, state = model.decode_step(tokens, state, 0)
    torch.testing.assert_close(lp, lp1.repeat_interleave(K, 0), rtol=0, atol=1e-6)
    cross = state.layers[0]["cross_attn.k"]
    assert cross.size(0) == 2 and state.layers[0]["self_attn.k"].size(0) == 2 * K
    within = torch.tensor([2, 0, 0, 4, 3, 3])                                 # beams of each sentence
    moved = state.reorder(within)
    assert moved.enc is state.enc and moved.layers[0]["cross_attn.k"] is cross
    torch.testing.assert_close(moved.layers[0]["self_attn.k"], state.layers[0]["self_attn.k"][within])
    buffer = moved.layers[0]["self_attn.k"].data_ptr()
    _, moved = model.decode_step(batch.tgt_in[:, 1:2].repeat_interleave(K, 0)[within], moved, 1)
    assert moved.layers[0]["self_attn.k"].data_ptr() == buffer                # written in place
    assert moved.layers[0]["self_attn.k"].is_contiguous() and moved.layers[0]["self_attn.k"].size(2) == 2
    dropped = moved.reorder(torch.tensor([4, 5, 3]))                          # sentence 0 finished
    assert dropped.layers[0]["cross_attn.k"].size(0) == 1
    torch.testing.assert_close(dropped.enc.source.states, moved.enc.source.states[1:])
    lp_b, _ = model.decode_step(torch.full((K, 1), 11), dropped, 2)
    alone = model.init_state(model.encode(Batch(batch.src[1:], batch.tgt_in[1:], batch.tgt_out[1:])))
    for t, tok in enumerate([BOS_ID, 14, 11]):
        lp_a, alone = model.decode_step(torch.tensor([[tok]]), alone, t)
    # every kept row is a hypothesis of sentence 1 that read BOS, 14, and now 11
    torch.testing.assert_close(lp_b, lp_a.expand(K, -1), rtol=0, atol=1e-5)


def test_shared_embeddings_tie_output_projection():
    shared = build_model(tiny())
    assert shared.tgt_embed is shared.embed and shared.out_proj is None
    separate = build_model(tiny(share_embeddings=False))
    assert separate.tgt_embed is not separate.embed
    assert shared.num_parameters() < separate.num_parameters()
    assert torch.all(shared.embed.weight[PAD_ID] == 0)


def test_inserted_sublayer_runs_in_place_and_is_saved():
    """The extension point: a block added after self_attn runs there and appears in state_dict."""
    torch.manual_seed(0)
    model = build_model(tiny()).eval()
    batch = make_batch()
    before = model(batch).logits
    calls: list[str] = []

    class Recorder(nn.Module):
        def forward(self, x, ctx, cache):
            calls.append("extra")
            return x

    for layer in model.decoder:
        layer.insert("ctx_attn", Recorder(), after="self_attn")
        layer.insert("extra_ffn", SubLayer(FeedForward(16, 8), 16, 0.0, False), after="ffn")
    assert list(model.decoder[0].blocks) == ["self_attn", "ctx_attn", "cross_attn", "ffn", "extra_ffn"]
    after = model(batch).logits
    assert calls == ["extra"] * len(model.decoder)
    assert not torch.allclose(before, after)          # the extra FFN changed the output
    assert "decoder.1.blocks.extra_ffn.fn.w1.weight" in model.state_dict()
    with pytest.raises(KeyError):
        model.decoder[0].insert("x", Recorder(), after="nope")

"""``torch.nn.Transformer`` set up as our baseline, the reference of ``train_throughput.py --reference``.

The ratio ours / reference should measure the two implementations, not two recipes, so
everything around the layers is ours and the layers are configured like ours:

* the preset's dimensions and vocabulary; one embedding matrix shared by source, target and
  output projection, scaled by sqrt(d); our sinusoidal table; dropout on the embeddings;
* norm placement: ``norm_first`` as ours. nn.Transformer always ends both stacks with a
  LayerNorm; post-norm has none there (ours: ``nn.Identity``), so those two are removed;
* dropout: attention weights and residual branches at the model's rate, as ours.
  ``TransformerEncoderLayer``/``DecoderLayer`` also drop out after the FFN activation (their
  ``dropout`` module); ours does not (Vaswani et al. 2017 has residual and attention dropout
  only), so that module is replaced by ``nn.Identity``;
* masks: source padding masked in encoder self-attention and cross-attention, causal decoder
  self-attention (``tgt_is_causal``), no target padding mask (ours has none: padding is on the
  right, so real queries never see it).

Parameter counts are then identical (fused QKV in both; our cross-attention's q and kv are
torch's ``in_proj`` split in two), and :func:`copy_weights` maps every tensor one to one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import PAD_ID
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.layers import sinusoidal_positions
from pipeline_lib.models.transformer import Transformer


class TorchReference(nn.Module):
    """Embeddings, ``nn.Transformer`` (batch first), tied output projection: (B, T) -> (B, T, V)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if not cfg.share_embeddings:
            raise ValueError("the reference ties embeddings, as the presets do")
        d = cfg.d_model
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, d, padding_idx=PAD_ID)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_len, d), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.core = nn.Transformer(d, cfg.n_heads, cfg.enc_layers, cfg.dec_layers, cfg.d_ff,
                                   cfg.dropout, batch_first=True, norm_first=cfg.norm_first)
        if not cfg.norm_first:
            self.core.encoder.norm = None
            self.core.decoder.norm = None
        for layer in [*self.core.encoder.layers, *self.core.decoder.layers]:
            layer.dropout = nn.Identity()   # ours has no dropout inside the FFN

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model) + self.positions[: tokens.size(1)]
        return self.drop(x)

    def forward(self, batch: Batch) -> torch.Tensor:
        src_pad = batch.src.eq(PAD_ID)                                      # (B, S) True = pad
        T = batch.tgt_in.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, device=batch.src.device)
        h = self.core(self._embed(batch.src), self._embed(batch.tgt_in), tgt_mask=causal,
                      src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                      tgt_is_causal=True)                                   # (B, T, d)
        return F.linear(h, self.embed.weight)                               # (B, T, V)


def _layer_map(r: str, o: str, suffix: str, ffn_norm: str) -> dict[str, list[str]]:
    """Self-attention and feed-forward of one layer, shared by encoder and decoder layers
    (torch numbers the feed-forward's norm after the layer's other norms: ``ffn_norm``)."""
    return {f"{r}.self_attn.in_proj_{suffix}": [f"{o}.self_attn.fn.qkv.{suffix}"],
            f"{r}.self_attn.out_proj.{suffix}": [f"{o}.self_attn.fn.out.{suffix}"],
            f"{r}.linear1.{suffix}": [f"{o}.ffn.fn.w1.{suffix}"],
            f"{r}.linear2.{suffix}": [f"{o}.ffn.fn.w2.{suffix}"],
            f"{r}.norm1.{suffix}": [f"{o}.self_attn.norm.{suffix}"],
            f"{r}.{ffn_norm}.{suffix}": [f"{o}.ffn.norm.{suffix}"]}


def _weight_map(ours: Transformer) -> dict[str, list[str]]:
    """Reference parameter name -> the names of ours that make it up (concatenated on dim 0)."""
    m: dict[str, list[str]] = {"embed.weight": ["embed.weight"]}
    for i in range(len(ours.encoder)):
        for suffix in ("weight", "bias"):
            m.update(_layer_map(f"core.encoder.layers.{i}", f"encoder.{i}.blocks", suffix, "norm2"))
    for i in range(len(ours.decoder)):
        o, r = f"decoder.{i}.blocks", f"core.decoder.layers.{i}"
        for suffix in ("weight", "bias"):
            m.update(_layer_map(r, o, suffix, "norm3"))
            m[f"{r}.multihead_attn.in_proj_{suffix}"] = [f"{o}.cross_attn.fn.q.{suffix}",
                                                        f"{o}.cross_attn.fn.kv.{suffix}"]
            m[f"{r}.multihead_attn.out_proj.{suffix}"] = [f"{o}.cross_attn.fn.out.{suffix}"]
            m[f"{r}.norm2.{suffix}"] = [f"{o}.cross_attn.norm.{suffix}"]
    if ours.cfg.norm_first:
        for suffix in ("weight", "bias"):
            m[f"core.encoder.norm.{suffix}"] = [f"enc_norm.{suffix}"]
            m[f"core.decoder.norm.{suffix}"] = [f"dec_norm.{suffix}"]
    return m


@torch.no_grad()
def copy_weights(ours: Transformer, ref: TorchReference) -> None:
    """Give ``ref`` exactly ``ours``'s weights; every parameter of both must be mapped."""
    src = dict(ours.named_parameters())
    dst = dict(ref.named_parameters())
    mapping = _weight_map(ours)
    if set(mapping) != set(dst) or {n for names in mapping.values() for n in names} != set(src):
        raise ValueError("torch_reference: parameter names do not map one to one "
                         f"(reference only: {sorted(set(dst) - set(mapping))}, "
                         f"ours unmapped: {sorted(set(src) - {n for v in mapping.values() for n in v})})")
    for name, parts in mapping.items():
        dst[name].copy_(torch.cat([src[p] for p in parts]))

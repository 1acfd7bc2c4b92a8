"""Shared building blocks: attention, feed-forward, residual sub-layers and extensible layers.

A layer is an ordered list of named residual sub-layer blocks (``self_attn``, ``cross_attn``,
``ffn``). Context-aware models add sub-layers by inserting a block at a named position instead of
copying a layer's ``forward`` (STYLE.md item 7). Every block has the signature
``block(x, ctx, cache) -> x`` where ``ctx`` is the :class:`LayerContext` of the whole stack (masks
and the memories it may attend to) and ``cache`` is this layer's incremental-decoding dict (``None``
while training).

How DocT (Zhang et al. 2018) plugs in, without touching this file::

    class DocTransformer(Transformer):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.context_encoder = ...                         # encodes batch.ctx_src
            for layers in (self.encoder, self.decoder):
                for layer in layers:
                    layer.insert("ctx_attn", GatedSubLayer(     # Eq. 8-9: context attention + gate
                        cfg, Attention(cfg.d_model, cfg.n_heads, cfg.dropout,
                                       AttnKind.CROSS, memory=CONTEXT_MEMORY)),
                                 after="self_attn")

        def extra_memories(self, batch):                       # attended by encoder AND decoder
            return {CONTEXT_MEMORY: self.context_encoder(batch.ctx_src)}

``GatedSubLayer`` is any ``nn.Module`` with the block signature; the cross-attention reads
``ctx.memories[CONTEXT_MEMORY]`` and caches its keys/values under its own block name, once per
sentence like the source's (beam search moves them when sentences finish). A cache model (Tu et
al. 2018) instead overrides ``Transformer.project`` (after the last decoder layer) and the
document hooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

SOURCE_MEMORY = "source"    # the encoder output, attended by every decoder layer's cross_attn
STATIC = "static"           # a layer cache's StaticSteps (fixed-shape decoding, shared by layers)


@dataclass
class Memory:
    """States a layer may attend to, with their key mask."""

    states: torch.Tensor                 # (B, S, d)
    mask: torch.Tensor | None            # (B, S) bool, True = real token; None = attend to all

    @property
    def attn_mask(self) -> torch.Tensor | None:
        return None if self.mask is None else self.mask[:, None, None, :]   # (B, 1, 1, S)

    def index_select(self, index: torch.Tensor) -> "Memory":
        return Memory(self.states.index_select(0, index),
                      None if self.mask is None else self.mask.index_select(0, index))


@dataclass
class LayerContext:
    """What every block of one stack sees besides its input: own-sequence mask and memories."""

    self_mask: torch.Tensor | None = None                  # (B, T) bool, True = real token
    memories: dict[str, Memory] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)    # model-specific (e.g. parse heads)
    # Rows of the stack per memory row: beam search keeps a sentence's memories (and their
    # cross-attention keys/values) once, for its ``beam`` consecutive hypothesis rows.
    beam: int = 1


@dataclass
class StaticSteps:
    """Fixed-shape incremental decoding (beam search replayed as a CUDA graph): self-attention
    keys/values go into buffers of ``length`` positions at position ``pos``, and a query sees
    the positions <= ``pos`` (``mask``). Every tensor keeps its address from step to step, so a
    captured step can be replayed: the host only writes the next position."""

    length: int
    pos: torch.Tensor                                     # () long
    mask: torch.Tensor                                    # (1, 1, 1, length) bool
    buffers: set[str] = field(default_factory=set)        # cache entries that are buffers

    @classmethod
    def create(cls, length: int, device: torch.device) -> "StaticSteps":
        return cls(length, torch.zeros((), dtype=torch.long, device=device),
                   torch.zeros(1, 1, 1, length, dtype=torch.bool, device=device))

    def advance(self, step: int) -> None:
        """Position ``step`` next (in place: a captured graph reads these tensors)."""
        self.pos.fill_(step)
        self.mask.copy_(torch.arange(self.length, device=self.pos.device).le(step).view_as(self.mask))


class AttnKind(str, Enum):
    SELF = "self"        # bidirectional over the own sequence, padding masked (encoder)
    CAUSAL = "causal"    # own sequence, future masked; cached incrementally (decoder)
    CROSS = "cross"      # over a named memory; keys/values computed once per sentence


class Attention(nn.Module):
    """Multi-head attention through ``F.scaled_dot_product_attention`` (fused kernels on GPU).

    Self-attention projects Q, K, V with one fused (d, 3d) matmul; cross-attention projects K, V
    with one (d, 2d) matmul. Heads are a tensor dimension, never a Python loop.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, kind: AttnKind,
                 memory: str = SOURCE_MEMORY) -> None:
        super().__init__()
        self.n_heads, self.head_dim, self.kind, self.memory = n_heads, d_model // n_heads, kind, memory
        self.dropout = dropout
        if kind is AttnKind.CROSS:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        B, T, _ = x.shape
        # (B, T, n*d) -> (n, B, nh, T, hs)
        return x.view(B, T, n, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None,
                name: str = "attn") -> torch.Tensor:
        """:param x: (B, T, d) queries. :param name: cache namespace (the block's name)."""
        B, T, D = x.shape
        if self.kind is AttnKind.CROSS:
            return self._cross(x, ctx, cache, name)
        mask, causal = None, False
        q, k, v = self._heads(self.qkv(x), 3)                     # (B, nh, T, hs) each
        if self.kind is AttnKind.SELF:
            mask = None if ctx.self_mask is None else ctx.self_mask[:, None, None, :]
        elif cache is not None:
            # Incremental: the new query may see every cached (earlier) position.
            k, v = cache_append(cache, name, k, v)
            mask = cache_key_mask(cache)
            causal = mask is None and T > 1 and k.size(2) == T
        else:
            causal = True   # right padding: real queries never reach the PAD keys after them
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(B, T, D))   # (B, T, d)

    def _cross(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None, name: str) -> torch.Tensor:
        """Attention over ``ctx.memories[self.memory]`` (n = B / ctx.beam rows).

        The ``beam`` query rows of one memory row become that row's query positions
        (n, nh, beam * T, hs), so keys/values are computed, stored and read once per sentence
        (CTranslate2 does the same), not once per hypothesis."""
        B, T, D = x.shape
        nh, hs, g = self.n_heads, self.head_dim, ctx.beam
        n = B // g
        mem = ctx.memories[self.memory]
        if cache is not None and f"{name}.k" in cache:            # computed once per sentence
            k, v = cache[f"{name}.k"], cache[f"{name}.v"]
        else:
            k, v = self._heads(self.kv(mem.states), 2)            # (n, nh, S, hs) each
            if cache is not None:
                k, v = k.contiguous(), v.contiguous()             # read at every step
                cache[f"{name}.k"], cache[f"{name}.v"] = k, v
        # (B, T, d) -> (n, g, T, nh, hs) -> (n, nh, g*T, hs): row b = i*g + j is query j of row i
        q = self.q(x).view(n, g, T, nh, hs).permute(0, 3, 1, 2, 4).reshape(n, nh, g * T, hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mem.attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.view(n, nh, g, T, hs).permute(0, 2, 3, 1, 4).reshape(B, T, D)   # back to rows
        return self.out(y)                                        # (B, T, d)


def cache_append(cache: dict, name: str, k: torch.Tensor, v: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Append one step's keys/values (B, nh, T, hs) to ``cache[name.k/.v]``; return all so far.

    An entry with spare positions after it in its buffer (beam search's reorder leaves one,
    :func:`select_rows`) is written in place, so a step copies only its T new positions;
    otherwise the entry grows by concatenation. Either way the result is one contiguous block
    per (row, head), which the attention kernels read fastest. In fixed-shape decoding
    (:class:`StaticSteps` in the cache) the step is written at its position of a buffer of
    every position, returned whole: :func:`cache_key_mask` then says which positions count."""
    steps: StaticSteps | None = cache.get(STATIC)
    if steps is not None:
        out = []
        for key, new in ((f"{name}.k", k), (f"{name}.v", v)):
            if key not in cache:
                cache[key] = new.new_zeros(*new.shape[:2], steps.length, new.size(3))
                steps.buffers.add(key)
            cache[key].index_copy_(2, steps.pos.view(1), new)
            out.append(cache[key])
        return out[0], out[1]
    out = []
    for key, new in ((f"{name}.k", k), (f"{name}.v", v)):
        old = cache.get(key)
        if old is None:
            full = new
        elif _room(old) >= new.size(2):
            t, T = old.size(2), new.size(2)
            full = old.as_strided((*old.shape[:2], t + T, old.size(3)), old.stride())
            full[:, :, t:] = new
        else:
            full = torch.cat([old, new], dim=2)
        cache[key] = full
        out.append(full)
    return out[0], out[1]


def cache_key_mask(cache: dict) -> torch.Tensor | None:
    """(1, 1, 1, length) bool: the positions a query may see in fixed-shape decoding; None in
    the growing cache, whose every position counts."""
    steps: StaticSteps | None = cache.get(STATIC)
    return None if steps is None else steps.mask


def _room(entry: torch.Tensor) -> int:
    """Spare positions after a (B, nh, t, hs) cache entry in the buffer it starts (0 unless it
    is the head of a buffer made by :func:`select_rows`)."""
    B, nh, t, hs = entry.shape
    cap = entry.stride(1) // hs
    if cap <= t or entry.stride() != (nh * cap * hs, cap * hs, hs, 1):
        return 0
    needed = (entry.storage_offset() + B * nh * cap * hs) * entry.element_size()
    return cap - t if entry.untyped_storage().nbytes() >= needed else 0


def select_rows(x: torch.Tensor, index: torch.Tensor, room: int = 0) -> torch.Tensor:
    """``x.index_select(0, index)``; with ``room`` a (B, nh, t, hs) cache entry is copied into
    a buffer with ``room`` spare positions, which the next :func:`cache_append` fills in place."""
    if room and x.dim() == 4:
        out = x.new_empty(index.numel(), x.size(1), x.size(2) + room, x.size(3))
        head = out[:, :, :x.size(2)]
        torch.index_select(x, 0, index, out=head)
        return head
    return x.index_select(0, index)


class FeedForward(nn.Module):
    """Position-wise FFN, Vaswani et al. (2017) Eq. 2: max(0, xW1 + b1)W2 + b2."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None,
                name: str = "ffn") -> torch.Tensor:
        return self.w2(F.relu(self.w1(x)))


class SubLayer(nn.Module):
    """Residual block around ``fn``: post-norm ``LN(x + drop(fn(x)))`` or pre-norm
    ``x + drop(fn(LN(x)))`` (Vaswani et al. 2017, Sec. 5.4 residual dropout)."""

    def __init__(self, fn: nn.Module, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.fn, self.norm, self.drop, self.norm_first = fn, nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first
        self.name = "block"   # set by Layer: the cache namespace of this block

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None) -> torch.Tensor:
        if self.norm_first:
            return x + self.drop(self.fn(self.norm(x), ctx, cache, name=self.name))
        return self.norm(x + self.drop(self.fn(x, ctx, cache, name=self.name)))


class Layer(nn.Module):
    """An ordered sequence of named residual blocks; :meth:`insert` is the extension point."""

    def __init__(self, blocks: list[tuple[str, nn.Module]]) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict()
        for name, block in blocks:
            self._add(name, block)

    def _add(self, name: str, block: nn.Module) -> None:
        block.name = name
        self.blocks[name] = block

    def insert(self, name: str, block: nn.Module, after: str) -> None:
        """Insert ``block`` right after the block called ``after`` (e.g. ``"self_attn"``)."""
        if after not in self.blocks:
            raise KeyError(f"no block {after!r}; blocks are {list(self.blocks)}")
        if name in self.blocks:
            raise KeyError(f"block {name!r} exists already")
        old = list(self.blocks.items())
        self.blocks = nn.ModuleDict()
        for n, b in old:
            self._add(n, b)
            if n == after:
                self._add(name, block)

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None = None) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x, ctx, cache)
        return x


def encoder_layer(d_model: int, n_heads: int, d_ff: int, dropout: float, norm_first: bool) -> Layer:
    return Layer([
        ("self_attn", SubLayer(Attention(d_model, n_heads, dropout, AttnKind.SELF), d_model, dropout, norm_first)),
        ("ffn", SubLayer(FeedForward(d_model, d_ff), d_model, dropout, norm_first)),
    ])


def decoder_layer(d_model: int, n_heads: int, d_ff: int, dropout: float, norm_first: bool) -> Layer:
    return Layer([
        ("self_attn", SubLayer(Attention(d_model, n_heads, dropout, AttnKind.CAUSAL), d_model, dropout, norm_first)),
        ("cross_attn", SubLayer(Attention(d_model, n_heads, dropout, AttnKind.CROSS), d_model, dropout, norm_first)),
        ("ffn", SubLayer(FeedForward(d_model, d_ff), d_model, dropout, norm_first)),
    ])


def sinusoidal_positions(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d) table of Vaswani et al. (2017) Sec. 3.5: sin on even, cos on odd dims."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: d_model // 2])
    return table

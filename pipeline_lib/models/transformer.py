"""The sentence-level Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Settings of the seed papers' baselines: sinusoidal positions (Sec. 3.5), one embedding matrix
shared by source, target and output projection over the joint sentencepiece vocabulary, scaled by
sqrt(d_model) (Sec. 3.4), post-norm residual blocks (Sec. 5.4) unless ``norm_first``.

Context-aware models subclass :class:`Transformer` and use its extension points instead of
copying methods: ``inputs`` (what the loader and decoder must build for it: the protocol of
models/inputs.py), ``Layer.insert`` (extra sub-layers, see layers.py), ``extra_memories`` (more
states to attend to), ``project`` (after the last decoder layer), and the document hooks
``start_documents`` / ``finish_sentences`` that pipeline_lib.evaluate.decode calls in document mode.

Extras (``ModelConfig.extras``, the plain Transformer only; subclasses read their own)
-------------------------------------------------------------------------------
``lang_tags`` (bool, false): every sentence starts with the tag of its output language (Johnson
et al. 2017): translation rows ``<2tgt>``, restoration rows ``<2src>``, the layout of the cross-
task model (models/crosstask.py, Data). Chen et al. (2021) train their Transformer baseline
pre-trained on both resources this way (Table 1 #4; Sec. 2.3: the two tasks share one model, so
each sentence says its task; fn. 12: restoration is then context-agnostic, each noised sentence
restored from its sentence-level input alone). With an aux ``restore`` stream the loader reads
restoration instances as sentence pairs (src_ids -> tgt_ids); hypotheses start with the tag, which
decoding strips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import PAD_ID
from pipeline_lib.models.config import ModelConfig, parse_extras
from pipeline_lib.models.inputs import ModelInputs, SpecialIds, require_special
from pipeline_lib.models.layers import (SOURCE_MEMORY, STATIC, LayerContext, Memory, StaticSteps,
                                        decoder_layer, encoder_layer, select_rows,
                                        sinusoidal_positions)
from pipeline_lib.models.output import ModelOutput
from pipeline_lib.models.registry import register


def _select(obj: Any, index: torch.Tensor) -> Any:
    """index_select(0) through tensors, Memory objects, dicts and lists (beam reordering)."""
    if isinstance(obj, torch.Tensor):
        return obj.index_select(0, index)
    if isinstance(obj, Memory):
        return obj.index_select(index)
    if isinstance(obj, dict):
        return {k: _select(v, index) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_select(v, index) for v in obj]
    return obj


@dataclass
class EncoderOut:
    """Everything the decoder attends to; ``memories[SOURCE_MEMORY]`` is the encoder output."""

    memories: dict[str, Memory]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> Memory:
        return self.memories[SOURCE_MEMORY]

    def reorder(self, index: torch.Tensor) -> "EncoderOut":
        """Rows ``index`` (B',) of every tensor (e.g. the sentences still decoded)."""
        return EncoderOut(_select(self.memories, index), _select(self.extra, index))


@dataclass
class DecoderState:
    """Incremental decoding state: memories plus one cache dict per decoder layer.

    Self-attention caches grow by one position per step (layers.cache_append); cross-attention
    keys/values are put in the same dicts on the first step and reused afterwards. With ``beam``
    > 1 (beam search, :meth:`with_beam`) each sentence has ``beam`` consecutive decoder rows:
    ``enc``, and every cache entry with one row per sentence (the cross-attention keys/values),
    are kept once per sentence and read by all its rows (``LayerContext.beam``); the entries
    with one row per decoder row are the self-attention caches, and ``extra`` has one row per
    decoder row too.
    """

    enc: EncoderOut
    layers: list[dict[str, torch.Tensor]]
    extra: dict[str, Any] = field(default_factory=dict)
    beam: int = 1
    steps: StaticSteps | None = None    # fixed-shape decoding (:meth:`with_static`)

    def with_beam(self, beam: int) -> "DecoderState":
        """This fresh state (no step decoded yet) with ``beam`` decoder rows per sentence."""
        if any(self.layers):
            raise ValueError("with_beam: the state has cached steps; set the beam before the first step")
        n, dev = self.enc.source.states.size(0), self.enc.source.states.device
        rows = torch.arange(n, device=dev)[:, None].expand(n, beam).reshape(-1)   # 0,0,..,1,1,..
        return DecoderState(self.enc, self.layers, _select(self.extra, rows), beam)

    def with_static(self, length: int) -> "DecoderState":
        """This fresh state decoding in fixed shapes for up to ``length`` steps: buffers of
        every position instead of caches that grow, rows never dropped (:class:`StaticSteps`;
        what lets beam search replay one captured CUDA graph per step)."""
        if any(self.layers):
            raise ValueError("with_static: the state has cached steps")
        steps = StaticSteps.create(length, self.enc.source.states.device)
        return DecoderState(self.enc, [{STATIC: steps} for _ in self.layers], self.extra,
                            self.beam, steps)

    def reorder(self, index: torch.Tensor) -> "DecoderState":
        """Keep decoder rows ``index`` (B',): beam reordering and dropping finished rows.

        With ``beam`` > 1 the rows ``index[i*beam:(i+1)*beam]`` must come from one sentence (as
        beam search picks them); per-sentence data moves only when sentences are dropped or
        reordered, so reordering beams within their sentences copies only the self-attention
        caches, into buffers with room for the next step's keys/values (written in place).

        Fixed-shape decoding (``steps``) keeps every row: ``index`` only permutes hypotheses
        within their sentences, and the self-attention buffers are permuted in place."""
        if self.steps is not None:
            for cache in self.layers:
                for key in self.steps.buffers & cache.keys():
                    cache[key].copy_(cache[key].index_select(0, index))
            return DecoderState(self.enc, self.layers, _select(self.extra, index), self.beam,
                                self.steps)
        if self.beam == 1:
            return DecoderState(self.enc.reorder(index), _select(self.layers, index),
                                _select(self.extra, index))
        n = self.enc.source.states.size(0)
        sent = torch.div(index[::self.beam], self.beam, rounding_mode="floor")    # (B' / beam,)
        same = sent.numel() == n and bool(torch.equal(sent, torch.arange(n, device=sent.device)))

        def pick(entry: torch.Tensor) -> torch.Tensor:
            if entry.size(0) != n:   # self-attention cache, a row per hypothesis: room for a step
                return select_rows(entry, index, room=1)
            return entry if same else select_rows(entry, sent)   # one row per sentence

        layers = [{k: pick(v) for k, v in cache.items()} for cache in self.layers]
        return DecoderState(self.enc if same else self.enc.reorder(sent), layers,
                            _select(self.extra, index), self.beam)


@dataclass(frozen=True)
class TransformerExtras:
    """The plain Transformer's extras (module docstring)."""

    lang_tags: bool = False


@register("transformer")
class Transformer(nn.Module):
    """Encoder-decoder Transformer; ``forward`` for training, ``encode``/``decode_step`` for search."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d, padding_idx=PAD_ID)
        self.tgt_embed = self.embed if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, d, padding_idx=PAD_ID)
        self.out_proj = None if cfg.share_embeddings else nn.Linear(d, cfg.vocab_size, bias=False)
        self.register_buffer("positions", sinusoidal_positions(cfg.max_len, d), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(
            encoder_layer(d, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.enc_layers))
        self.decoder = nn.ModuleList(
            decoder_layer(d, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.dec_layers))
        # Pre-norm leaves the residual stream unnormalised, so each stack ends with a LayerNorm.
        self.enc_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        # subclasses parse their own extras (their classes name the keys they know)
        self.extras = (parse_extras(TransformerExtras, cfg.extras, "transformer")
                       if type(self) is Transformer else TransformerExtras())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections, N(0, d^-1/2) embeddings (so sqrt(d)-scaled ones are ~N(0,1))."""
        for name, p in self.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
        for emb in {id(self.embed): self.embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, 0.0, self.cfg.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[PAD_ID].zero_()

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """What this model reads besides the sentence pair (the protocol, models/inputs.py);
        the baseline reads sentence pairs only, tagged with ``lang_tags``. ``special``: the
        piece ids of its sentencepiece model (None when it has none)."""
        if not self.extras.lang_tags:
            return ModelInputs()
        special = require_special(special, "transformer (lang_tags)")
        return ModelInputs(tag=special.tgt_tag, restore_tag=special.src_tag)

    def translation_departure(self) -> str | None:
        """How this model translates differently from the sentence-level Transformer (None: it
        does not). Engines that run only that Transformer (the CTranslate2 export) ask the model
        instead of knowing every model: a model whose decoding changes says how here."""
        if type(self) is Transformer:
            return ("language tags (extras.lang_tags): every source sentence starts with the "
                    "target language's tag, which the output's first token repeats"
                    if self.extras.lang_tags else None)
        what = (type(self).__doc__ or type(self).__name__).strip().split("\n")[0].rstrip(".")
        return f"{what}: it translates with more than the sentence-level Transformer computes"

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --- embeddings and output -------------------------------------------------------------
    def embed_tokens(self, emb: nn.Embedding, tokens: torch.Tensor,
                     start: int | torch.Tensor = 0) -> torch.Tensor:
        """(B, T) ids -> (B, T, d): sqrt(d)-scaled embedding + position ``start``.. (Sec. 3.4-3.5).
        ``start`` may be a () tensor (fixed-shape decoding: a step the host does not read)."""
        T = tokens.size(1)
        if isinstance(start, torch.Tensor):
            pos = self.positions.index_select(0, start + torch.arange(T, device=start.device))
        else:
            if start + T > self.cfg.max_len:
                raise ValueError(f"sequence position {start + T} exceeds max_len={self.cfg.max_len}")
            pos = self.positions[start:start + T]
        x = emb(tokens) * math.sqrt(self.cfg.d_model) + pos
        return self.drop(x)

    def project(self, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        """(B, T, d) decoder states -> (B, T, V) logits; tied to the target embedding when shared.

        Extension point after the last decoder layer (e.g. a continuous cache read)."""
        return self.out_proj(h) if self.out_proj is not None else F.linear(h, self.tgt_embed.weight)

    # --- encoder ---------------------------------------------------------------------------
    def extra_memories(self, batch: Batch) -> dict[str, Memory]:
        """Further states both stacks may attend to (document context); none in the baseline."""
        return {}

    def encode(self, batch: Batch) -> EncoderOut:
        src_mask = batch.src.ne(PAD_ID)                                  # (B, S)
        ctx = LayerContext(self_mask=src_mask, memories=self.extra_memories(batch), extra=batch.extra)
        x = self.embed_tokens(self.embed, batch.src)                     # (B, S, d)
        for layer in self.encoder:
            x = layer(x, ctx)
        memories = {**ctx.memories, SOURCE_MEMORY: Memory(self.enc_norm(x), src_mask)}
        return EncoderOut(memories)

    # --- decoder ---------------------------------------------------------------------------
    def decoder_context(self, enc: EncoderOut) -> LayerContext:
        return LayerContext(memories=enc.memories, extra=enc.extra)

    def decode(self, tgt_in: torch.Tensor, enc: EncoderOut) -> torch.Tensor:
        """Teacher-forced decoder: (B, T) ids -> (B, T, V) logits."""
        ctx = self.decoder_context(enc)
        x = self.embed_tokens(self.tgt_embed, tgt_in)
        for layer in self.decoder:
            x = layer(x, ctx)
        return self.project(self.dec_norm(x), ctx)

    def forward(self, batch: Batch) -> ModelOutput:
        return ModelOutput(logits=self.decode(batch.tgt_in, self.encode(batch)))

    def init_state(self, enc: EncoderOut) -> DecoderState:
        return DecoderState(enc, [{} for _ in self.decoder])

    def decode_step(self, tokens_last: torch.Tensor, state: DecoderState,
                    step: int) -> tuple[torch.Tensor, DecoderState]:
        """One incremental step: (B', 1) last tokens at position ``step`` -> (B', V) log-probs."""
        ctx = self.decoder_context(state.enc)
        ctx.beam = state.beam                                            # B' = beam x sentences
        start = step if state.steps is None else state.steps.pos         # fixed shapes: a tensor
        x = self.embed_tokens(self.tgt_embed, tokens_last, start=start)  # (B', 1, d)
        for layer, cache in zip(self.decoder, state.layers):
            x = layer(x, ctx, cache)
        logits = self.project(self.dec_norm(x), ctx)[:, -1]             # (B', V)
        return F.log_softmax(logits.float(), dim=-1), state

    # --- document hooks (no-ops: the baseline translates sentences independently) ----------
    def start_documents(self, n: int) -> None:
        """Called before the first sentence of ``n`` documents decoded side by side."""

    def finish_sentences(self, hyp_tokens: list[list[int]], slots: list[int]) -> None:
        """Called after each sentence index with the 1-best ids of the documents in ``slots``."""

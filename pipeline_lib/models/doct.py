"""DocT: Zhang et al. (2018), "Improving the Transformer Translation Model with Document-Level
Context", EMNLP 2018 (https://aclanthology.org/D18-1049/); reference implementation on THUMT:
github.com/THUNLP-MT/Document-Transformer, ``thumt/models/contextual_transformer.py``.

A context encoder (paper Sec. 2.2, Fig. 1) reads the previous k source sentences of the
document; every encoder layer (Sec. 2.3.1, Eq. 12) and every decoder layer (Sec. 2.3.2, Eq. 16)
of the sentence-level Transformer gets a multi-head *context attention* sub-layer over that
representation, and a *context gate* (Sec. 2.3.3, Eq. 21-22) replaces the residual connection
after it. Training is two-step (Sec. 2.4): the sentence-level parameters theta_s are trained on
all sentence pairs (Eq. 24, the plain ``transformer``), then loaded and kept fixed while only the
new parameters theta_d are trained on document data (Eq. 25).

Layer layout (block names of :class:`~pipeline_lib.models.layers.Layer`)::

    context encoder (N_c layers): self_attn -> ffn                         (encoder_layer)
    encoder layer:                self_attn -> ctx_attn -> ffn
    decoder layer:                self_attn -> ctx_attn -> cross_attn -> ffn

Choices the paper leaves open, taken from the THUMT implementation:

* Gate (Sec. 2.3.3, Eq. 21-22): ``lambda = sigmoid(W_i H + W_s C)`` with two bias-free (d, d)
  matrices, so lambda is a vector per position (element-wise gate), and
  ``Gating(H) = lambda * H + (1 - lambda) * C`` where C = ContextAttention(H). No residual
  dropout on C inside the gate (THUMT comments it out); attention dropout applies as usual.
* Layer norm placement: with post-norm (the THUMT default, ``layer_postprocess=layer_norm``) a
  new, trainable LayerNorm follows the gate: ``LN(Gating(H))``. With ``norm_first`` the attention
  reads ``LN(H)`` and the gate mixes the un-normalised ``H`` with it, nothing after
  (``layer_preprocess=layer_norm``). Without gating the sub-layer is the usual residual block.
* The context encoder shares the (frozen) source embedding matrix and the sinusoidal positions
  of the sentence encoder; positions restart at 0 for the concatenated context. Its input gets
  the same embedding dropout as the source (THUMT applies none there; a regulariser only).
  ``context_layers: 0`` is THUMT's ``context_representation=embedding`` (no context layers).

Data
----
Reads ``batch.ctx_src`` (B, C) long, right-padded with PAD_ID: the previous k =
``context_sentences`` source sentences of the document, oldest first, subword ids joined by the
``SENT_BREAK`` ("####") piece and ending in EOS; a single BOS_ID when the sentence is the first
of its document (so C >= 1 and no row is all padding). C may not exceed ``max_len`` (the context
gets positions 0..C-1); a builder that must cut keeps the most recent tokens. ``batch.src``,
``tgt_in`` and ``tgt_out`` as for the baseline; no ``extra`` keys. ``ctx_src`` is required in
training, validation and decoding (a missing one is an error, not a silent sentence-level
fallback). The context is source-side, so decoding needs no target history
(no translation history): the sentences of a document can be translated in any order once
``ctx_src`` is built from the source document.

A document's first sentence gets a single BOS as its context, as the paper's footnote 5 says
(THUMT's code feeds an empty context there). THUMT joins the k preceding sentences with a space;
``ctx_src`` marks the sentence boundaries with SENT_BREAK (a choice: the paper does not say).

Extras (``ModelConfig.extras``)
-------------------------------
Defaults: the paper's model (Sec. 3.2: k = 2 preceding sentences, Table 1; N_c = 1 context
layer, Table 2; context in encoder and decoder, Table 8; gating on, Table 9; THUMT's code default
is off) and the authors' README run (``num_context_layers=1``, 2 preceding sentences).

``context_sentences`` (int, 2): k, number of previous source sentences in ``ctx_src``; read by
the data loader and decoder that build ``ctx_src`` (stored here so a checkpoint says which k it
was trained with). The paper's analysis varies k (1, 2, 3).
``context_layers`` (int, 1): N_c, self-attention + FFN layers of the context encoder.
``context_in`` ("both" | "encoder" | "decoder", "both"): which stacks get context attention.
``gating`` (bool, true): context gate or a plain residual after context attention.

Two-step training (the paper's recipe, the default run's)
---------------------------------------------------------
Step 1: ``name: transformer`` on all sentence pairs. Step 2: ``name: doct`` with
``train.init_from`` = the step-1 checkpoint and ``train.freeze`` =
:meth:`DocTransformer.sentence_level_prefixes` (fnmatch patterns matching exactly the baseline
Transformer's parameters, theta_s; the paper: "the sentence-level parameters are fixed");
:meth:`DocTransformer.new_parameter_names` lists theta_d, the parameters a baseline checkpoint
does not have. The default run differs only in size (tiny, a few hundred updates on the Bible);
its matched control is the baseline continued for the same updates on the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import PAD_ID
from pipeline_lib.models.config import ModelConfig, parse_extras
from pipeline_lib.models.inputs import (ModelInputs, PreviousSentences, SpecialIds,
                                        require_special)
from pipeline_lib.models.layers import (Attention, AttnKind, LayerContext, Memory, SubLayer,
                                        encoder_layer)
from pipeline_lib.models.registry import register
from pipeline_lib.models.transformer import Transformer

CONTEXT_MEMORY = "context"      # the context encoder output, attended by every ctx_attn block
CTX_ATTN = "ctx_attn"           # block name of the context attention sub-layers
CONTEXT_ENCODER = "context_encoder"
CONTEXT_NORM = "context_norm"


class ContextIn(str, Enum):
    """Which stacks attend to the context (the paper's encoder/decoder/both ablation)."""

    BOTH = "both"
    ENCODER = "encoder"
    DECODER = "decoder"


@dataclass(frozen=True)
class DocTConfig:
    """The ``extras`` DocT reads (module docstring); unknown keys are an error (typos)."""

    context_sentences: int = 2
    context_layers: int = 1
    context_in: ContextIn = ContextIn.BOTH
    gating: bool = True

    def __post_init__(self) -> None:
        if self.context_sentences < 1:
            raise ValueError(f"doct: context_sentences={self.context_sentences} must be >= 1")
        if self.context_layers < 0:
            raise ValueError(f"doct: context_layers={self.context_layers} must be >= 0")

    @property
    def in_encoder(self) -> bool:
        return self.context_in in (ContextIn.BOTH, ContextIn.ENCODER)

    @property
    def in_decoder(self) -> bool:
        return self.context_in in (ContextIn.BOTH, ContextIn.DECODER)


class ContextGate(nn.Module):
    """Context gate: ``lambda = sigmoid(W_i H + W_s C)``, element-wise, bias-free (THUMT)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.w_i = nn.Linear(d_model, d_model, bias=False)
        self.w_s = nn.Linear(d_model, d_model, bias=False)

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """:param h: (B, T, d) sub-layer input. :param c: (B, T, d) context attention output.
        :returns: lambda (B, T, d) in [0, 1]."""
        return torch.sigmoid(self.w_i(h) + self.w_s(c))


class GatedSubLayer(nn.Module):
    """Context attention whose residual is replaced by the context gate ("Context Gating").

    Post-norm: ``LN(lambda * H + (1 - lambda) * C(H))``; pre-norm:
    ``lambda * H + (1 - lambda) * C(LN(H))``. Same block signature as :class:`SubLayer`.
    """

    def __init__(self, fn: nn.Module, d_model: int, norm_first: bool) -> None:
        super().__init__()
        self.fn, self.gate, self.norm_first = fn, ContextGate(d_model), norm_first
        self.norm = nn.LayerNorm(d_model)   # new (theta_d): after the gate, or on its input (pre-norm)
        self.name = CTX_ATTN   # reset by Layer: the cache namespace of this block

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None) -> torch.Tensor:
        c = self.fn(self.norm(x) if self.norm_first else x, ctx, cache, name=self.name)  # (B, T, d)
        lam = self.gate(x, c)               # lambda = sigmoid(W_i H + W_s C)  (B, T, d)
        y = lam * x + (1.0 - lam) * c       # Gating(H) = lambda H + (1 - lambda) C
        return y if self.norm_first else self.norm(y)


@register("doct")
class DocTransformer(Transformer):
    """Transformer + context encoder + context attention in both stacks (Zhang et al. 2018)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.doct = parse_extras(DocTConfig, cfg.extras, "doct")
        d, h, drop = cfg.d_model, cfg.n_heads, cfg.dropout
        # Context encoder (Fig. 1): N_c layers of self-attention + FFN over ctx_src.
        self.context_encoder = nn.ModuleList(
            encoder_layer(d, h, cfg.d_ff, drop, cfg.norm_first) for _ in range(self.doct.context_layers))
        self.context_norm = (nn.LayerNorm(d) if cfg.norm_first and self.doct.context_layers
                             else nn.Identity())
        stacks = (([self.encoder] if self.doct.in_encoder else [])
                  + ([self.decoder] if self.doct.in_decoder else []))
        for stack in stacks:
            for layer in stack:
                # Multi-head context attention right after self-attention: queries = the
                # sentence states (B, T, d), keys/values = the context encoder output (B, C, d).
                attn = Attention(d, h, drop, AttnKind.CROSS, memory=CONTEXT_MEMORY)
                block = (GatedSubLayer(attn, d, cfg.norm_first) if self.doct.gating
                         else SubLayer(attn, d, drop, cfg.norm_first))
                layer.insert(CTX_ATTN, block, after="self_attn")
        self.reset_parameters()   # the base class initialised before the new modules existed

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """``ctx_src``: the previous k source sentences (the Data section); the context is the
        source document, so sentences may be decoded in any order."""
        return ModelInputs(mode=DataMode.CONTEXT, context=PreviousSentences(
            self.doct.context_sentences, self.cfg.max_len, require_special(special, "doct").sent_break))

    def extra_memories(self, batch: Batch) -> dict[str, Memory]:
        """Context encoder: encode ``ctx_src`` (B, C) into the ``context`` memory (B, C, d)."""
        if batch.ctx_src is None:
            raise ValueError("doct: batch.ctx_src is None; DocT needs the previous source "
                             "sentences (see the Data section of pipeline_lib/models/doct.py)")
        mask = batch.ctx_src.ne(PAD_ID)                                   # (B, C)
        x = self.embed_tokens(self.embed, batch.ctx_src)                  # (B, C, d) shared embeddings
        lctx = LayerContext(self_mask=mask, extra=batch.extra)
        for layer in self.context_encoder:
            x = layer(x, lctx)
        return {CONTEXT_MEMORY: Memory(self.context_norm(x), mask)}

    # --- two-step training ("Training") ----------------------------------------------------
    @classmethod
    def sentence_level_prefixes(cls) -> tuple[str, ...]:
        """fnmatch patterns (``train.freeze``) matching exactly the baseline's parameters theta_s.

        Block-level patterns rather than ``encoder.*``: the new ``ctx_attn`` blocks live inside
        the encoder and decoder layers and must stay trainable."""
        return ("embed.*", "tgt_embed.*", "out_proj.*", "enc_norm.*", "dec_norm.*",
                "encoder.*.blocks.self_attn.*", "encoder.*.blocks.ffn.*",
                "decoder.*.blocks.self_attn.*", "decoder.*.blocks.cross_attn.*",
                "decoder.*.blocks.ffn.*")

    def new_parameter_names(self) -> list[str]:
        """theta_d: the parameters that a sentence-level checkpoint lacks (step-2 trainables)."""
        return [n for n, _ in self.named_parameters()
                if n.split(".")[0] in (CONTEXT_ENCODER, CONTEXT_NORM) or f".blocks.{CTX_ATTN}." in n]

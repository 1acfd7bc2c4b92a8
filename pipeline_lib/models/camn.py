"""CAMN: Jiang et al. (2019), "Document-level Neural Machine Translation with Inter-Sentence
Attention" (arXiv:1910.14528 v1; later versions titled "... with Associated Memory Network"),
Shu Jiang, Rui Wang, Zuchao Li, Masao Utiyama, Kehai Chen, Eiichiro Sumita, Hai Zhao, Bao-liang
Lu. Section and equation numbers follow the paper's v1 text.

Context sentences are a *memory*: a context encoder (a GRU, Eq. 7, then multi-head
self-attention, Eq. 6) encodes them, an *inter-sentence attention* lets every source word read
the memory words most similar to it (Eq. 10-13), several memory sentences may be weighted by
beta (Eq. 14-15), and a *context gate* (Eq. 16-17) mixes what was read, after a feed-forward
sub-layer, into the sentence encoder's output. The gated states replace the encoder output that
every decoder layer's encoder-decoder attention attends to, so the decoder is the baseline's,
unchanged::

    H_source = Encoder(src)                                   (B, S, d)   x of Eq. 5
    c^m      = SelfAttn(GRU(Emb(memory sentence m)))          (M, L, d)   Eq. 6-7
    M_raw^m  = H_source c^m^T                                 (B, S, L)   Eq. 10
    alpha^m  = softmax over the words of M_raw^m              (B, S, L)   Eq. 11-12
    a^m_i    = sum_l alpha^m_il c^m_l                         (B, S, d)   Eq. 13
    beta_m   = softmax_m(mean of M_raw^m)                     (B, M)      Eq. 14 (M > 1 only)
    H_context= FFN(sum_m beta_m a^m)                          (B, S, d)   Eq. 15, "after the FFN"
    g_i      = sigmoid(W_g [H_source; H_context] + b_g)       (B, S, d)   Eq. 16
    H_i      = g_i * H_source + (1 - g_i) * H_context         (B, S, d)   Eq. 17 -> decoder

Which memory the paper ran. Sec. 4.3 first describes a memory holding the context sentences of
the whole batch, each row reading all of them mixed by beta (Eq. 14-15). Under "Multiple Context
Attention" it names two ways to integrate several context sentences, their concatenation with
``####`` (Eq. 18) or the parallel, beta-weighted attention of Eq. 13-15, and footnote 1 says that
only the concatenation was run ("due to the lack of the computational resource ... the parallel
multiple context attention, we leave for the next version"). The context is the previous
sentence (Sec. 4.3, Sec. 5.3; Table 4: N = 1 best). So the reported model is the default here:
``memory_mode: concat``, ``memory_sentences: 1``, ``context_ffn: true`` -- each row's memory is its
own N previous source sentences joined by ``####`` (our reading of Eq. 18's c_1..c_m: Sec. 6.3
varies N, the number of previous sentences, and says that concatenating more of them did not
help). The layouts the paper describes but did not run are named options: ``memory_mode: batch``
(Sec. 4.3 as written: the memory is every context sentence of the batch, mixed by beta) and
``memory_mode: weighted`` (a row's own N previous sentences mixed by beta, Eq. 13-15);
``context_ffn: false`` gates the raw memory read.

Choices the paper leaves open (recorded so that a run says what it implements):

* Eq. 5 passes the input sentence through a multi-head attention layer; here that is the whole
  sentence encoder (its output H_source is also what the gate mixes, Eq. 16-17).
* "Column-wise softmax" (Eq. 11-12): M_raw has one row per source word i and one column per
  memory word l; the softmax runs across the columns of each row, so a_i is a convex combination
  of the memory states and padded memory words get zero weight. M_raw is the raw dot product,
  without the 1/sqrt(d) scaling of Transformer attention, as in Eq. 10.
* beta (Eq. 14-15, ``batch``/``weighted`` only): the mean of M_raw^m over the real source words
  x real words of sentence m; empty memory slots (a document start has no previous sentence) get
  no weight.
* Batch memory: the memory of a batch is the context slots of all its rows, the row's own among
  them, so a sentence's translation depends on the sentences batched with it (in decoding too:
  ``decode.batch_size`` sentences sorted by length); a lone-BOS slot (a document's first
  sentence) is a memory sentence like any other.
* The GRU (Eq. 7) is unidirectional with hidden size d_model, reading right-padded memory from
  the left, so padding after a sentence never changes its states. Its input is what the sentence
  encoder reads: the shared, sqrt(d)-scaled source embeddings plus sinusoidal positions
  (restarting at 0 for the memory); the positions are what lets the ``rnn: false`` ablation
  (Table 3) know word order.
* The self-attention (Eq. 6) is one multi-head sub-layer with the Transformer's residual
  connection and LayerNorm (post-norm, or pre-norm plus a final LayerNorm with ``norm_first``),
  n_heads heads; no feed-forward sub-layer there.
* The feed-forward operation before the gate ("after the feed-forward operation", above Eq. 16)
  is a new position-wise FFN sub-layer (d_ff inner width, residual + LayerNorm) on H_context;
  H_source already left the encoder's last FFN.
* The gate W_g is a (2d -> d) linear map with bias b_g (Eq. 16): an element-wise gate per source
  position. The gated states go to the decoder as they are (no further LayerNorm).
* Training: the paper describes no pre-training and nothing frozen (one model trained in THUMT,
  Sec. 5.3), so ``config/presets/jiang2019_es-en_ted.yaml`` trains CAMN from scratch, every
  parameter. The default run fine-tunes every parameter from the sentence-level baseline
  instead (a second from-scratch model does not fit the 60-minute CPU budget). Freezing theta_s
  (``freeze: ["@sentence_level"]``) is the two-step option the other document models use.

Data
----
``memory_mode: batch`` and ``weighted`` read ``batch.extra["ctx_sents"]`` (B, N, L) long,
right-padded with PAD_ID: slot n holds the (N - n)-th previous source sentence (oldest first, the
previous sentence in slot N - 1), each ending in EOS; a sentence the document does not have (near
its start) is an all-PAD slot; a row with no previous sentence at all has a lone BOS_ID in slot
N - 1 (so every row has at least one real slot). L <= ``max_len``. In batch mode the B x N slots
together are the memory of every row.

``memory_mode: concat`` reads ``batch.ctx_src`` (B, C) long, right-padded with PAD_ID: the
previous N = ``memory_sentences`` source sentences of the document, oldest first, subword ids
joined by the ``SENT_BREAK`` ("####") piece and ending in EOS; a single BOS_ID when the sentence
is the first of its document (C >= 1, no row all padding). C <= ``max_len``.

``batch.src``, ``tgt_in``, ``tgt_out`` as for the baseline. The context is required in training,
validation and decoding (a missing one is an error, not a sentence-level fallback). It is
source-side, so no translation history is needed.

``random_context: true`` (the paper's "without inter-sentence attention" ablation) changes no
module: the data side honours it (:meth:`CAMNTransformer.inputs` declares a random rule) by filling
the memory slots with sentence(s) from a random other position instead of the true previous ones:
for each current sentence, draw each memory sentence uniformly from the source sentences of the
same split that are neither the current sentence nor one of its true N previous sentences,
deterministically from the data seed and (doc_id, sent_idx), in training, validation and test
alike; the layout is unchanged (a first sentence gets a random sentence too, not BOS).

Extras (``ModelConfig.extras``)
-------------------------------
``memory_sentences`` (int, 1): N, previous source sentences per row; read by the loader and
decoder through :meth:`CAMNTransformer.inputs`.
``memory_mode`` ("concat" | "batch" | "weighted", "concat"): see above.
``context_ffn`` (bool, true): the feed-forward sub-layer on the memory read before the gate.
``rnn`` (bool, true): the GRU of Eq. 7; false = the paper's "without RNN" ablation (Table 3)
(self-attention straight over the memory embeddings).
``random_context`` (bool, false): the paper's "without inter-sentence attention" ablation (Sec. 6.2), a
random memory sentence (data side, see "Data"). ``rnn: false`` + ``random_context: true`` is the
"both" ablation.

Parameters
----------
:meth:`CAMNTransformer.sentence_level_prefixes` (fnmatch patterns, ``train.freeze``) match
exactly the baseline Transformer's parameters; :meth:`CAMNTransformer.new_parameter_names` lists
the new ones (``context_rnn.*``, ``context_attn.*``, ``context_norm.*``, ``context_ffn.*``,
``context_gate.*``), the parameters a baseline checkpoint lacks.
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
from pipeline_lib.models.inputs import (ModelInputs, PreviousSentences, PreviousSentenceSlots,
                                        RandomSentences, SpecialIds, require_special)
from pipeline_lib.models.layers import (SOURCE_MEMORY, Attention, AttnKind, FeedForward, Layer,
                                        LayerContext, Memory, SubLayer)
from pipeline_lib.models.registry import register
from pipeline_lib.models.transformer import EncoderOut, Transformer

CTX_SENTS = "ctx_sents"          # batch.extra key of the weighted mode: (B, N, L) memory sentences
NEW_PREFIX = "context_"          # every new module's attribute name starts with this


class MemoryMode(str, Enum):
    """Which sentences the memory holds and how they are presented."""

    CONCAT = "concat"          # Eq. 18, what footnote 1 says was run: the row's N previous
                               # sentences as one sequence ("####")
    BATCH = "batch"            # Sec. 4.3: the context sentences of the whole batch, mixed by beta
    WEIGHTED = "weighted"      # Eq. 13-15: the row's N previous sentences mixed by beta


@dataclass(frozen=True)
class CAMNConfig:
    """The ``extras`` CAMN reads (module docstring); unknown keys are an error (typos)."""

    memory_sentences: int = 1
    memory_mode: MemoryMode = MemoryMode.CONCAT
    rnn: bool = True
    random_context: bool = False
    context_ffn: bool = True

    def __post_init__(self) -> None:
        if self.memory_sentences < 1:
            raise ValueError(f"camn: memory_sentences={self.memory_sentences} must be >= 1")


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim where ``mask`` is True; masked entries get exactly 0.

    :param scores: (..., K). :param mask: (..., K) bool, at least one True per row."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


class ContextGate(nn.Module):
    """Eq. 16: ``g = sigmoid(W_g [H_source; H_context] + b_g)``, element-wise, in [0, 1]."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.w_g = nn.Linear(2 * d_model, d_model)

    def forward(self, h_source: torch.Tensor, h_context: torch.Tensor) -> torch.Tensor:
        """:param h_source, h_context: (B, S, d). :returns: g (B, S, d)."""
        return torch.sigmoid(self.w_g(torch.cat([h_source, h_context], dim=-1)))


def _real_sums(h_source: torch.Tensor, src_mask: torch.Tensor, c: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums of the real source states (B, d) and of the real memory states (..., d) over their
    words: the mean of M_raw over real word pairs (Eq. 14) is their product over the counts."""
    return ((h_source * src_mask[..., None].to(h_source.dtype)).sum(-2),
            (c * mask[..., None].to(c.dtype)).sum(-2))


@register("camn")
class CAMNTransformer(Transformer):
    """Transformer whose encoder output is gated with an inter-sentence memory read (Jiang et al.)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.camn = parse_extras(CAMNConfig, cfg.extras, "camn")
        d = cfg.d_model
        # Eq. 7: h_t = GRU(h_{t-1}, e_t) over the memory embeddings (absent in the "w/o RNN" ablation).
        self.context_rnn = nn.GRU(d, d, batch_first=True) if self.camn.rnn else None
        # Eq. 6: multi-head self-attention over the GRU states (residual + LayerNorm sub-layer).
        self.context_attn = Layer([("self_attn", SubLayer(
            Attention(d, cfg.n_heads, cfg.dropout, AttnKind.SELF), d, cfg.dropout, cfg.norm_first))])
        self.context_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        # The memory read passes a position-wise feed-forward sub-layer (residual + LayerNorm, as
        # in every Transformer block) before the gate mixes it with the encoder output, which
        # left its own last FFN already.
        self.context_ffn = (SubLayer(FeedForward(d, cfg.d_ff), d, cfg.dropout, cfg.norm_first)
                            if self.camn.context_ffn else None)
        self.context_gate = ContextGate(d)   # Eq. 16
        self.reset_parameters()   # the base class initialised before the new modules existed

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """The memory from the previous source sentences (the Data section): ``ctx_src``
        (concat) or ``extra["ctx_sents"]`` (weighted), random sentences with ``random_context``."""
        n, max_len = self.camn.memory_sentences, self.cfg.max_len
        rule = (PreviousSentences(n, max_len, require_special(special, "camn").sent_break)
                if self.camn.memory_mode is MemoryMode.CONCAT
                else PreviousSentenceSlots(n, max_len, CTX_SENTS))
        return ModelInputs(mode=DataMode.CONTEXT,
                           context=RandomSentences(rule) if self.camn.random_context else rule,
                           batch_invariant=self.camn.memory_mode is not MemoryMode.BATCH)

    # --- memory ----------------------------------------------------------------------------
    def memory_tokens(self, batch: Batch) -> torch.Tensor:
        """The memory as (B, N', L) ids: N' = 1 (concat mode, ``ctx_src``) or N (``ctx_sents``)."""
        if self.camn.memory_mode is not MemoryMode.CONCAT:
            sents = batch.extra.get(CTX_SENTS)
            if sents is None:
                raise ValueError(f"camn: batch.extra[{CTX_SENTS!r}] is missing; memory_mode="
                                 f"{self.camn.memory_mode.value} "
                                 "needs the previous sentences one by one (see the Data section of "
                                 "pipeline_lib/models/camn.py)")
            if sents.dim() != 3 or sents.size(1) != self.camn.memory_sentences:
                raise ValueError(f"camn: batch.extra[{CTX_SENTS!r}] has shape {tuple(sents.shape)}; "
                                 f"expected (B, {self.camn.memory_sentences}, L)")
            return sents
        if batch.ctx_src is None:
            raise ValueError("camn: batch.ctx_src is None; CAMN needs the previous source sentences "
                             "(see the Data section of pipeline_lib/models/camn.py)")
        return batch.ctx_src[:, None, :]

    def encode_memory(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Context encoder, Eq. 6-7: (R, L) ids -> c (R, L, d) and its mask (R, L).

        An all-PAD row (a memory sentence the document lacks) gets its first position unmasked so
        that no softmax row is empty; the caller drops such rows through beta."""
        mask = tokens.ne(PAD_ID)                                          # (R, L)
        mask[:, 0] |= ~mask.any(dim=1)
        x = self.embed_tokens(self.embed, tokens)                         # (R, L, d) shared embeddings
        if self.context_rnn is not None:
            x, _ = self.context_rnn(x)                                    # Eq. 7: (R, L, d)
        x = self.context_attn(x, LayerContext(self_mask=mask))            # Eq. 6: (R, L, d)
        return self.context_norm(x), mask

    def read_memory(self, h_source: torch.Tensor, src_mask: torch.Tensor,
                    tokens: torch.Tensor) -> torch.Tensor:
        """Inter-sentence attention, Eq. 10-15: H_source (B, S, d) with its mask (B, S), memory
        ids (B, N, L) -> H_context (B, S, d)."""
        if self.camn.memory_mode is MemoryMode.BATCH:
            return self.read_shared_memory(h_source, src_mask, tokens.flatten(0, 1))
        B, N, L = tokens.shape
        c, mask = self.encode_memory(tokens.reshape(B * N, L))
        c, mask = c.view(B, N, L, -1), mask.view(B, N, L)                 # (B, N, L, d), (B, N, L)
        m_raw = torch.einsum("bsd,bnld->bnsl", h_source, c)               # Eq. 10: (B, N, S, L)
        alpha = masked_softmax(m_raw, mask[:, :, None, :])                # Eq. 11-12: memory words
        reads = alpha @ c                                                 # Eq. 13: (B, N, S, d)
        if N == 1:
            return reads[:, 0]
        # Eq. 14-15: beta_n = softmax_n(mean of M_raw^n over real source x memory words).
        mean_sim = torch.einsum("bd,bnd->bn", *_real_sums(h_source, src_mask, c, mask)) \
            / (src_mask.sum(1)[:, None] * mask.sum(2)).to(m_raw.dtype)    # (B, N)
        present = tokens.ne(PAD_ID).any(dim=2)                            # (B, N) real sentences
        beta = masked_softmax(mean_sim, present)                          # Eq. 14: (B, N)
        return torch.einsum("bn,bnsd->bsd", beta, reads)                  # Eq. 15: (B, S, d)

    def read_shared_memory(self, h_source: torch.Tensor, src_mask: torch.Tensor,
                           tokens: torch.Tensor) -> torch.Tensor:
        """Sec. 4.3: every row reads one memory, the M context sentences of the whole batch
        (ids (M, L); empty slots are absent), each read with Eq. 10-13 and mixed by beta
        (Eq. 14-15). The memory is encoded once, and the (B, M, S, d) reads are never built:
        one product gives every similarity in the (B, S, M, L) layout the read needs, beta
        scales the attention weights in place of the reads, then one product over (memory
        sentence, word). Eq. 14's mean over real words is a product of sums (the similarity is
        bilinear), so no (B, M, S, L) mask is built either."""
        B, S, d = h_source.shape
        M, L = tokens.shape
        c, mask = self.encode_memory(tokens)                              # (M, L, d), (M, L)
        c_flat = c.reshape(M * L, d)
        m_raw = (h_source.reshape(B * S, d) @ c_flat.t()).view(B, S, M, L)  # Eq. 10
        alpha = masked_softmax(m_raw, mask)                               # Eq. 11-12: over words
        h_sum, c_sum = _real_sums(h_source, src_mask, c, mask)            # (B, d), (M, d)
        mean_sim = (h_sum @ c_sum.t()) / (src_mask.sum(1)[:, None]
                                          * mask.sum(1)[None, :]).to(h_sum.dtype)   # mean of Eq. 10
        present = tokens.ne(PAD_ID).any(dim=1)                            # (M,) real sentences
        beta = masked_softmax(mean_sim, present.expand(B, M))             # Eq. 14: (B, M)
        weights = (alpha * beta[:, None, :, None].to(alpha.dtype)).view(B, S, M * L)
        return weights @ c_flat                                           # Eq. 13 + 15: (B, S, d)

    def encode(self, batch: Batch) -> EncoderOut:
        """Sentence encoder, then the gated memory read replaces the SOURCE_MEMORY states."""
        enc = super().encode(batch)
        src = enc.source
        h_context = self.read_memory(src.states, src.mask, self.memory_tokens(batch))   # (B, S, d)
        if self.context_ffn is not None:   # "after the feed-forward operation" (Eq. 16-17)
            h_context = self.context_ffn(h_context, LayerContext(), None)
        g = self.context_gate(src.states, h_context)                          # Eq. 16: (B, S, d)
        fused = g * src.states + (1.0 - g) * h_context                        # Eq. 17
        return EncoderOut({**enc.memories, SOURCE_MEMORY: Memory(fused, src.mask)}, enc.extra)

    # --- two-step training -----------------------------------------------------------------
    @classmethod
    def sentence_level_prefixes(cls) -> tuple[str, ...]:
        """fnmatch patterns (``train.freeze``) matching exactly the baseline's parameters: CAMN
        adds no block inside the encoder/decoder layers, so whole stacks are theta_s."""
        return ("embed.*", "tgt_embed.*", "out_proj.*", "enc_norm.*", "dec_norm.*",
                "encoder.*", "decoder.*")

    def new_parameter_names(self) -> list[str]:
        """The parameters a sentence-level checkpoint lacks (the step-2 trainables)."""
        return [n for n, _ in self.named_parameters() if n.startswith(NEW_PREFIX)]

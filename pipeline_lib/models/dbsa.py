"""DBSA: Deguchi, Tamura and Ninomiya (2019), "Dependency-Based Self-Attention for Transformer
NMT", RANLP 2019, pp. 239-246 (https://aclanthology.org/R19-1028/, doi 10.26615/978-954-452-056-4_028).

The paper carries LISA (Strubell et al. 2018, "Linguistically-Informed Self-Attention") over to
both sides of a Transformer NMT model (Sec. 3). In encoder layer p_e and decoder layer p_d one
head of the multi-head self-attention is a *dependency-based self-attention* head (the "parse
head", Sec. 3.1):

* Eq. (Q/K/V): ``Q_parse = M W^Q_parse``, ``K_parse = M W^K_parse``, ``V_parse = M W^V_parse``
  with head-size projections (d -> d_h), M = the layer's input;
* bi-affine scores (Dozat and Manning 2017, the paper's parsing function):
  ``A_parse = softmax(Q_parse U^(1) K_parse^T + K_parse u^(2))``, softmax over the key axis q,
  so ``A_parse[t, q]`` is the probability that token t's head (modifiee) is token q;
* ``M_parse = A_parse V_parse`` replaces one head's output; the other h-1 heads are ordinary
  scaled dot-product heads and all h outputs go through the usual output projection W^O (Eq. 17);
* training loss (Sec. 3.2) ``e = e_trans + lambda_enc * e_parse_enc + lambda_dec * e_parse_dec``,
  with e_parse the cross-entropy of A_parse against the gold subword heads.

On the decoder side the parse head is causally masked like every decoder self-attention head
(paper Fig. 3); an arc whose head lies to the right of its dependent cannot be attended to and is
left out of the supervision. No parser runs at inference time: decoding uses the same network,
only the loss disappears (``aux_loss is None`` when the batch carries no heads).

Choices
-------
* Bias term: ``K_parse u^(2)`` (a score per candidate head, Dozat and Manning's "prior of being
  a head"), u^(2) in R^{d_h}. A query-side term ``Q_parse u^(2)`` adds the same number to a whole
  row of scores and cancels in the softmax over q, so it could not be the paper's.
* The parse head *is* the last head: its W^Q/W^K/W^V are the last d_h columns of the layer's
  fused ``qkv`` projection and its output takes the last head's slot before ``out`` (W^O).
  So a DBSA model has the baseline's parameter names plus U^(1) (d_h x d_h) and u^(2) (d_h) per
  parse layer, and a sentence-level Transformer checkpoint loads into it leaving only those
  missing.
* No 1/sqrt(d_h) scaling of the bi-affine scores (the paper's equation has none). Attention
  dropout applies to A_parse when it weights V_parse (as in the other heads), never to the
  A_parse that the loss reads.
* Layers: ``parse_layer_enc`` / ``parse_layer_dec`` are 1-based positions in the paper's 6-layer
  stacks (p_e = p_d = 4 of 6). A stack of L layers puts the parse head in layer
  max(1, round(p * L / 6)) (half rounds up), the same relative depth: layer 2 of the tiny
  default's 3, layer 4 of base's 6. (Clamping to the last layer, as an earlier version did, put
  the head at the very top of a shallow stack, which the paper never studies.)
* e_parse is the mean cross-entropy over the supervised positions of the batch (a per-token
  quantity, which the trainer weights by the number of target tokens like the token CE).
* Subword heads follow the paper's Sec. 3.3 projection (pipeline_lib/preprocess/subword_heads.py); the
  sentence's final EOS and the decoder's BOS have no head (-1).

Data
----
Reads ``batch.src`` (B, S), ``tgt_in`` (B, T), ``tgt_out`` as the baseline, plus:

* ``batch.src_heads`` (B, S) long: for source position s (aligned to ``src``, EOS and PAD = -1)
  the 0-based position in ``src`` of its head piece; root pieces point to themselves.
* ``batch.tgt_heads`` (B, T) long, as built by ``pipeline_lib.training.batching.collate``: position
  0 (BOS) is -1 and position t >= 1 (the input token ``tgt_in[t] = y[t-1]``) holds the head of
  y[t-1] as a 0-based position **in y** (the target without BOS; the shard's values, unchanged). The
  parse head's key at ``tgt_in`` position h+1 holds y[h], so the gold key of query t is
  ``tgt_heads[t] + 1`` (:func:`target_gold`); gold keys > t (future heads) are not supervised.

Either heads field may be ``None`` (its loss term is then left out); both ``None`` (decoding,
or a corpus without parses) gives ``aux_loss = None``. The data loader reads the head columns
only when the model's inputs say so (:meth:`DependencyTransformer.inputs`, ``heads=True``).
No ``extra`` keys.

Extras (``ModelConfig.extras``)
-------------------------------
``parse_layer_enc`` (int, 4): p_e, 1-based encoder layer of the paper's 6 with the parse head
(mapped proportionally onto the stack, see Choices).
``parse_layer_dec`` (int, 4): p_d, the same for the decoder.
``lambda_enc`` (float, 1.0): weight of the source parse loss e_parse_enc.
``lambda_dec`` (float, 1.0): weight of the target parse loss e_parse_dec.

``aux_metrics``: ``parse_loss_enc``, ``parse_acc_enc`` (arc accuracy: argmax_q A_parse[t, q] is
the gold head, over supervised positions), ``parse_loss_dec``, ``parse_acc_dec``.

Recipes
-------
The paper (Sec. 4.1-4.2) trains DBSA from scratch on ASPEC Ja-En (the first 1.5M pairs, 100K BPE
vocabulary, pairs over 250 subwords dropped), p_e = p_d = 4 of 6 layers, lambda_enc = lambda_dec
= 1.0, mini-batches of 224 sentences for 20 epochs, the best dev-BLEU model, beam 4, alpha 0.6:
config/presets/deguchi2019_ja-en_aspec.yaml. The default run instead
fine-tunes every parameter from the sentence-level baseline (``init_from: transformer``; only
U^(1)/u^(2) are new) for a few hundred updates on the parsed subset (``data: heads``: the pairs
stanza parsed, ``parse.max_sentences_per_split`` of them, every one supervised), because a second
full training run does not fit the 60-minute CPU budget; its matched control is the baseline
continued on the same subset for the same updates (pipeline_lib/plan/training.py), and the report says
it is a fine-tune. For the paper's recipe drop ``init_from``, give it the baseline's steps and
``data: heads`` with ``parse.max_sentences_per_split: null`` (all pairs parsed); its matched
control is then ``transformer_scratch<N>``, a Transformer trained from scratch for the same N
updates on the same ``heads`` shards.
Other differences from the authors' code (github.com/de9uch1/dbsa, a later fairseq rewrite):
their supervised head is the first of its layer (ours the last) and a word's last piece points
to the first piece of its head word (ours, following the paper's Sec. 3.3, to its last piece).
:meth:`DependencyTransformer.sentence_level_prefixes` are fnmatch patterns (``train.freeze``)
matching exactly the baseline's parameters; :meth:`DependencyTransformer.new_parameter_names`
lists the bi-affine parameters it adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import NO_HEAD
from pipeline_lib.models.config import ModelConfig, parse_extras
from pipeline_lib.models.inputs import ModelInputs, SpecialIds
from pipeline_lib.models.layers import (Attention, AttnKind, LayerContext, cache_append,
                                        cache_key_mask)
from pipeline_lib.models.output import ModelOutput
from pipeline_lib.models.registry import register
from pipeline_lib.models.transformer import Transformer

SELF_ATTN = "self_attn"            # the block whose attention function gets the parse head
PAPER_LAYERS = 6                   # the paper's stacks: p_e = p_d = 4 of 6
PARSE_PARAMS = ("parse_u1", "parse_u2")


@dataclass(frozen=True)
class DBSAConfig:
    """The ``extras`` of a DBSA model (see the module docstring)."""

    parse_layer_enc: int = 4
    parse_layer_dec: int = 4
    lambda_enc: float = 1.0
    lambda_dec: float = 1.0

    def __post_init__(self) -> None:
        for name in ("parse_layer_enc", "parse_layer_dec"):
            if not 1 <= getattr(self, name) <= PAPER_LAYERS:
                raise ValueError(f"dbsa: {name}={getattr(self, name)} must be a 1-based layer of "
                                 f"the paper's {PAPER_LAYERS}-layer stack")
        for name in ("lambda_enc", "lambda_dec"):
            if getattr(self, name) < 0:
                raise ValueError(f"dbsa: {name}={getattr(self, name)} must be >= 0")



def parse_layer_index(p: int, layers: int) -> int:
    """0-based index of the parse layer in a stack of ``layers``: the paper's 1-based layer
    ``p`` of 6 at the same relative depth, max(1, round(p * layers / 6)) with halves rounded up."""
    return max(1, math.floor(p * layers / PAPER_LAYERS + 0.5)) - 1


class DependencyAttention(Attention):
    """Multi-head self-attention whose last head is the bi-affine parse head.

    Same parameters as :class:`Attention` (fused ``qkv``, ``out``) plus ``parse_u1`` = U^(1)
    (d_h, d_h) and ``parse_u2`` = u^(2) (d_h,). After each call without an incremental cache,
    ``log_attn`` holds log A_parse (B, T, T_k) in float32 for the loss; with a cache (beam
    search) it is ``None``.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, kind: AttnKind) -> None:
        if kind is AttnKind.CROSS:
            raise ValueError("dbsa: the parse head is a self-attention head (SELF or CAUSAL)")
        super().__init__(d_model, n_heads, dropout, kind)
        hs = self.head_dim
        self.parse_u1 = nn.Parameter(torch.empty(hs, hs))
        self.parse_u2 = nn.Parameter(torch.zeros(hs))
        nn.init.xavier_uniform_(self.parse_u1)
        self.log_attn: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, ctx: LayerContext, cache: dict | None,
                name: str = "attn") -> torch.Tensor:
        """:param x: (B, T, d) queries = keys = values. :param name: cache namespace."""
        B, T, D = x.shape
        q, k, v = self._heads(self.qkv(x), 3)                     # (B, nh, T, hs) each
        key_mask, causal = None, False                            # key_mask: (B, 1, 1, T_k)
        if self.kind is AttnKind.SELF:
            key_mask = None if ctx.self_mask is None else ctx.self_mask[:, None, None, :]
        elif cache is not None:
            # Incremental (as Attention): new queries see every cached position; the parse
            # head's keys/values are the last head's, cached with the others.
            k, v = cache_append(cache, name, k, v)
            key_mask = cache_key_mask(cache)
            causal = key_mask is None and T > 1 and k.size(2) == T
        else:
            causal = True
        drop = self.dropout if self.training else 0.0
        heads = []
        if self.n_heads > 1:   # the h-1 ordinary heads: Vaswani et al. Eq. 1
            heads.append(F.scaled_dot_product_attention(
                q[:, :-1], k[:, :-1], v[:, :-1], attn_mask=key_mask, is_causal=causal, dropout_p=drop))
        qp, kp, vp = q[:, -1], k[:, -1], v[:, -1]                  # (B, T, hs), (B, T_k, hs) x2
        # Bi-affine scores: Q_parse U^(1) K_parse^T + K_parse u^(2)          (B, T, T_k)
        scores = (qp @ self.parse_u1) @ kp.transpose(1, 2) + (kp @ self.parse_u2)[:, None, :]
        scores = scores.float()
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, 0], -math.inf)
        if causal:   # decoder (Fig. 3): query t sees keys <= t
            future = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, -math.inf)
        log_attn = scores.log_softmax(-1)                         # log A_parse, softmax over q
        self.log_attn = log_attn if cache is None else None
        attn = F.dropout(log_attn.exp(), drop, self.training).to(vp.dtype)
        m_parse = attn @ vp                                        # M_parse = A_parse V_parse (B, T, hs)
        y = torch.cat([*heads, m_parse[:, None]], dim=1)          # (B, nh, T, hs): parse head last
        return self.out(y.transpose(1, 2).reshape(B, T, D))       # W^O          (B, T, d)


def target_gold(tgt_heads: torch.Tensor) -> torch.Tensor:
    """(B, T) ``batch.tgt_heads`` (y positions, see Data) -> (B, T) gold ``tgt_in`` key positions.

    Query t (input token ``tgt_in[t] = y[t-1]``) is supervised with ``tgt_heads[t] + 1``, the
    ``tgt_in`` position of its head piece; heads in the future (> t) cannot be attended to under
    the causal mask and become NO_HEAD (Fig. 3). A root piece (head = itself) keeps gold = t."""
    T = tgt_heads.size(1)
    gold = torch.where(tgt_heads >= 0, tgt_heads + 1, NO_HEAD)
    t = torch.arange(T, device=tgt_heads.device)
    return gold.masked_fill(gold > t, NO_HEAD)


def parse_loss(log_attn: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of A_parse against ``gold`` and the arc accuracy.

    :param log_attn: (B, T, T_k) log A_parse. :param gold: (B, T) key positions, NO_HEAD = skip.
    :returns: (loss, accuracy) scalars; both 0 when nothing is supervised. Skipped positions
        contribute neither loss nor gradient."""
    # An asynchronous assertion: reading gold.max() back would make every step wait for the
    # device (on the CPU it raises here; on a GPU at the next kernel launch).
    torch._assert_async(gold.max() < log_attn.size(-1),
                        f"dbsa: a dependency head position lies outside the sequence of length "
                        f"{log_attn.size(-1)}")
    valid = gold >= 0                                                   # (B, T)
    n = valid.sum().clamp(min=1)
    picked = log_attn.gather(-1, gold.clamp(min=0)[..., None]).squeeze(-1)   # (B, T)
    loss = -torch.where(valid, picked, torch.zeros_like(picked)).sum() / n
    with torch.no_grad():
        acc = ((log_attn.argmax(-1) == gold) & valid).sum() / n
    return loss, acc


@register("dbsa")
class DependencyTransformer(Transformer):
    """Transformer with a supervised bi-affine parse head in one encoder and one decoder layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.dbsa = parse_extras(DBSAConfig, cfg.extras, "dbsa")
        # p_e / p_d of the paper's 6-layer stacks at the same relative depth -> 0-based indices.
        self.parse_enc_index = parse_layer_index(self.dbsa.parse_layer_enc, cfg.enc_layers)
        self.parse_dec_index = parse_layer_index(self.dbsa.parse_layer_dec, cfg.dec_layers)
        for stack, index, kind in ((self.encoder, self.parse_enc_index, AttnKind.SELF),
                                   (self.decoder, self.parse_dec_index, AttnKind.CAUSAL)):
            stack[index].blocks[SELF_ATTN].fn = DependencyAttention(
                cfg.d_model, cfg.n_heads, cfg.dropout, kind)
        self.reset_parameters()   # the base class initialised before the new modules existed

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """Sentence pairs with their subword dependency heads (the Data section)."""
        return ModelInputs(heads=True)

    def translation_departure(self) -> str:
        """The parse heads stay in the network at inference (Sec. 3.1, Eq. 4-5)."""
        return (f"its parse heads change decoding: the last head of encoder layer "
                f"{self.parse_enc_index + 1} and of decoder layer {self.parse_dec_index + 1} "
                "attends with bi-affine scores softmax(Q U1 K^T + K u2) without 1/sqrt(d_head) at "
                "inference too, which a standard multi-head attention cannot express")

    @property
    def parse_enc(self) -> DependencyAttention:
        return self.encoder[self.parse_enc_index].blocks[SELF_ATTN].fn

    @property
    def parse_dec(self) -> DependencyAttention:
        return self.decoder[self.parse_dec_index].blocks[SELF_ATTN].fn

    def forward(self, batch: Batch) -> ModelOutput:
        enc = self.encode(batch)
        enc_log_attn = self.parse_enc.log_attn                           # (B, S, S)
        logits = self.decode(batch.tgt_in, enc)
        dec_log_attn = self.parse_dec.log_attn                           # (B, T, T)
        terms, metrics = [], {}
        if batch.src_heads is not None:
            loss, acc = parse_loss(enc_log_attn, batch.src_heads)   # src heads are src positions
            terms.append(self.dbsa.lambda_enc * loss)
            metrics.update(parse_loss_enc=loss.detach(), parse_acc_enc=acc)
        if batch.tgt_heads is not None:
            loss, acc = parse_loss(dec_log_attn, target_gold(batch.tgt_heads))
            terms.append(self.dbsa.lambda_dec * loss)
            metrics.update(parse_loss_dec=loss.detach(), parse_acc_dec=acc)
        # e - e_trans = lambda_enc * e_parse_enc + lambda_dec * e_parse_dec
        aux = torch.stack(terms).sum() if terms else None
        return ModelOutput(logits=logits, aux_loss=aux, aux_metrics=metrics)

    # --- starting from a sentence-level checkpoint -----------------------------------------
    @classmethod
    def sentence_level_prefixes(cls) -> tuple[str, ...]:
        """fnmatch patterns (``train.freeze``) matching exactly the baseline Transformer's
        parameters: every weight/bias of the stacks, never the parse heads' U^(1)/u^(2)."""
        return ("embed.*", "tgt_embed.*", "out_proj.*", "enc_norm.*", "dec_norm.*",
                "encoder.*.weight", "encoder.*.bias", "decoder.*.weight", "decoder.*.bias")

    def new_parameter_names(self) -> list[str]:
        """The bi-affine parameters a sentence-level checkpoint lacks."""
        return [n for n, _ in self.named_parameters() if n.rsplit(".", 1)[-1] in PARSE_PARAMS]

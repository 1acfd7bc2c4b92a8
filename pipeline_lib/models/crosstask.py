"""Cross-task pre-training: Chen et al. (2021), "Breaking the Corpus Bottleneck for Context-Aware
Neural Machine Translation with Cross-Task Pre-training", ACL 2021
(https://aclanthology.org/2021.acl-long.222/).

One model learns two tasks at once (paper Sec. 2.1, 2.3): (a) sentence-level translation on
sentence pairs and (b) document restoration on source-side monolingual documents noised by
CA-GSR / CA-MSR (pipeline_lib/preprocess/noise.py), then is fine-tuned on the parallel documents
with sentence- and document-level batches alternating (Sec. 3). The architecture (Sec. 2.2.1,
Figure 3) adds to the Transformer a **global context encoder** and a **gate** on the encoder
output::

    sentence encoder (N layers):    self_attn -> ffn                    -> H (B, S, d)
    global context encoder (N_g):   self_attn* -> sent_repr -> global_attn -> ffn*   -> G (B, S, d)
    gate (Eq. 6-7):                 H' = lambda * H + (1 - lambda) * G,
                                    lambda = sigmoid([H; G] W_g)
    decoder (M layers):             unchanged, attends to H'

``*`` = the very modules of sentence-encoder layer l (shared parameters, not copies). Per global
layer l, over the word states B_j (L, d) of every sentence j of the document (Eq. 1-5):

* Eq. 1: ``B_j = SelfAttn_l(X_j)`` word level, inside each sentence (shared with encoder layer l);
* Eq. 2-3: sentence representation ``alpha_j = softmax(w_2 tanh(W_1 B_j^T))`` (1, L),
  ``c_j = alpha_j B_j`` (1, d) -- no residual, no layer norm (the sub-layer only *produces* the
  document memory ``C = [c_1; ...; c_D]`` (D, d), the word states pass through unchanged);
* Eq. 4: global context attention ``A_j = LN(B_j + MultiHead(B_j, C, C))``: every word attends
  to the stacked sentence vectors of its document (a new residual sub-layer);
* Eq. 5: ``FFN_l`` (shared with encoder layer l).

Sentence-level input (no ``doc_src``) turns the global encoder and the gate off: H' = H, exactly
the sentence-level Transformer with the same weights (Sec. 2.2.2; the "ours-sent" rows).

Choices the paper leaves open (all recorded here):

* The global context encoder reads the sqrt(d)-scaled shared embeddings of each sentence, with
  positions restarting at 0 in every sentence (as the sentence encoder), and its layer l shares
  encoder layer l's self-attention and FFN sub-layers (residual + LayerNorm included); the first
  N_g encoder layers are shared. Sentence vectors are taken after the (shared) self-attention.
* The current sentence. G must be aligned word by word with H, so the sentence being translated
  is ``batch.src`` itself, run through the global encoder as one more query sentence that
  attends to its document's sentence vectors; its own vector in C comes from its entry in
  ``doc_src`` (for translation the same sentence, so the two are identical; for CA-GSR the
  document holds the gap's own input at the gap, ``left <mask1> right`` with the default
  ``noise.gap_document_input: sentence`` as in Sec. 2.1 and Figure 2, or a lone ``<mask1>`` with
  ``mask``: never the gap sentence, so it cannot leak into the context; see
  pipeline_lib/preprocess/noise.py). Hence the model does not need the index of the current
  sentence, and several rows can share one encoded document (``doc_index``).
* W_1 is (d_a, d) with d_a = ``repr_dim`` (default d), w_2 is (1, d_a), both bias-free as in
  Eq. 2; padded words get alpha = 0. W_g is a bias-free (2d, d) matrix: an element-wise gate.
* Pre-norm (``norm_first``): the global encoder ends with its own LayerNorm (new parameter), like
  the sentence encoder. Post-norm (the paper): none.
* Language tags (Sec. 2.3, after Johnson et al. 2017; pipeline_lib.vocab.lang_tag): every
  source and target sentence starts with the tag of the task's *output* language -- ``<2en>`` for Es->En translation, ``<2es>`` for
  restoring Spanish documents -- so the encoder knows the task and the decoder's first token is
  determined (see "Data").

Data
----
Sentence-level batches (pre-training task (a), fine-tuning sentence batches, sentence-mode
inference): ``batch.src`` (B, S), ``tgt_in`` / ``tgt_out`` (B, T) as for the baseline, no
``extra`` keys. Document-level batches (restoration task (b), fine-tuning document batches,
document-mode inference) add:

``extra["doc_src"]`` (N, D, L) long: N (sub-)documents of at most ``max_sentences`` source
sentences, each sentence ``[tag] + ids + [EOS]`` right-padded with PAD_ID to L; documents with
fewer than D sentences are padded with all-PAD rows. Every document has >= 1 sentence.
``extra["doc_index"]`` (B,) long, optional: row b's document is ``doc_src[doc_index[b]]``; when
absent, N must equal B and row b reads document b. Rows of the same sub-document share one entry
(the global encoder then runs once per document, not once per sentence).
``extra["doc_rows"]`` (R, 2) long, optional: (document, sentence) of every real sentence of
``doc_src``, in order. Built on the host with the tensors, so the model knows R without reading
``doc_src`` back from the device (a synchronisation every document batch); when absent the
real sentences are found from ``doc_src``'s padding.
``extra["doc_queries"]`` (Q,) long and ``extra["doc_state"]`` (B,) long, optional: the rows whose
sentence is not one of their document's sentences (they are run through the global encoder as
queries of their own), and for every row where its states are: index r < R into the real
sentences of ``doc_src`` (in ``doc_rows`` order) of an identical sentence of its document, or
R + q for its own query. A translation row's sentence is in its sub-document, and an identical
sentence of the same document gets identical states in every global layer, so the global
encoder runs each sentence of a batch once, not once as a document sentence and again as the
current one (Q = 0; restoration rows at a CA-GSR gap keep their own query). Absent: every row
is a query (Q = B).
``extra["doc_pos"]`` is not read (the current sentence is ``src``; see above).

:func:`document_extra` builds these tensors from id lists. What goes into them:

* restoration (restore shards, RESTORE_SCHEMA): ``src = [<2src>] + src_ids + [EOS]``,
  ``tgt_in = [BOS, <2src>] + tgt_ids``, ``tgt_out = [<2src>] + tgt_ids + [EOS]``;
  ``doc_src`` = the ``[<2src>] + ctx_ids + [EOS]`` of every row of the sub-document, in order;
* translation: ``src = [<2tgt>] + src_ids + [EOS]``, ``tgt_in = [BOS, <2tgt>] + tgt_ids``,
  ``tgt_out = [<2tgt>] + tgt_ids + [EOS]``; document-level: ``doc_src`` = the tagged source
  sentences of the row's sub-document. Long documents are cut into sub-documents of at most
  ``max_sentences`` sentences with pipeline_lib.documents.split_document (balanced sizes, the split
  the restoration data uses).

Hypotheses begin with the target tag piece; the decoder strips that first token before
detokenising.

Training and inference
----------------------
Pre-training: the schedule of :class:`~pipeline_lib.models.inputs.ModelInputs`
(:func:`~pipeline_lib.models.inputs.interleaved_schedule` of step and ``train.aux_ratio``) says
whether a step takes a translation batch (``Phase.SENTENCE``) or a restoration batch
(``Phase.DOCUMENT``);
0.5 alternates strictly, as the paper does (Sec. 2.3: a batch of one task, then one of the
other). Fine-tuning (all parameters, from the pre-trained checkpoint via ``train.init_from``):
the same schedule with ``train.aux_ratio`` alternates sentence-level and document-level batches
of the parallel documents (Sec. 3.2). Inference has two modes,
both reported: **sentence** (plain sentence batches, gate off) and **document** (``doc_src`` =
the source sub-document; no target history, so sentences may be
translated in any order).

Recipes (Sec. 4.1-4.2): "with resources" pre-trains on external sentence pairs and monolingual
documents, then fine-tunes (config/presets/chen2021_*: ``crosstask``); "without resources"
trains from scratch on the two fine-tuning tasks, no pre-training (``crosstask_scratch`` there).
The default run does neither: it pre-trains on the Bible's own pairs and documents for a few
hundred updates, then fine-tunes (self pre-training, config/config.yaml). A matched control
mirrors the chain with Transformers: the same translation updates on the same corpora
(pipeline_lib/plan/training.py). The presets' header tables give the paper's steps, batches and learning
rates (Sec. 4.1) beside their own.

The paper trains every parameter in both stages (no freezing). For a two-step comparison with
the other models, :meth:`CrossTaskTransformer.sentence_level_prefixes` gives ``train.freeze``
patterns matching exactly the baseline Transformer's parameters (this freezes the shared
self-attention/FFN of the global encoder as well) and
:meth:`CrossTaskTransformer.new_parameter_names` the parameters a baseline checkpoint lacks.

Extras (``ModelConfig.extras``)
-------------------------------
``global_layers`` (int | null, null): N_g, layers of the global context encoder, sharing the first
N_g sentence-encoder layers; null = every encoder layer (N_g = N). Must be 1..enc_layers.
``repr_dim`` (int | null, null): d_a of W_1 in Eq. 2; null = d_model.
``max_sentences`` (int, 30): sub-document size for document-level fine-tuning and inference
(Sec. 4.1 and Appendix A: sub-documents of at most 30 sentences; read by the loader and the
decoder, stored so a checkpoint says it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import EOS_ID, PAD_ID
from pipeline_lib.models.config import ModelConfig, parse_extras
from pipeline_lib.models.inputs import DocumentRule, ModelInputs, SpecialIds, require_special
from pipeline_lib.models.layers import (SOURCE_MEMORY, Attention, AttnKind, LayerContext, Memory,
                                        SubLayer)
from pipeline_lib.models.registry import register
from pipeline_lib.models.transformer import EncoderOut, Transformer

DOC_SRC = "doc_src"             # batch.extra key: (N, D, L) sentences of the (sub-)documents
DOC_INDEX = "doc_index"         # batch.extra key: (B,) document of each row (optional)
DOC_ROWS = "doc_rows"           # batch.extra key: (R, 2) (document, sentence) of real sentences
DOC_QUERIES = "doc_queries"     # batch.extra key: (Q,) rows encoded as queries of their own
DOC_STATE = "doc_state"         # batch.extra key: (B,) row -> its states among the R + Q rows
GLOBAL_MEMORY = "global"        # the stacked sentence vectors C of a row's document
GLOBAL_ATTN = "global_attn"     # module/block name of the global context attention sub-layers
NEW_MODULES = ("sent_repr", GLOBAL_ATTN, "global_norm", "global_gate")


def document_extra(documents: Sequence[Sequence[Sequence[int]]], doc_index: Sequence[int],
                   prefix: Sequence[int] = (), device: torch.device | str = "cpu",
                   queries: Sequence[Sequence[int]] | None = None) -> dict[str, torch.Tensor]:
    """``extra`` entries for a document-level batch (the "Data" layout).

    :param documents: N documents, each a list of sentences (ids without tag and EOS).
    :param doc_index: (B,) the document of each batch row.
    :param prefix: ids put before every sentence (the language tag).
    :param queries: the B rows' own sentences, like ``documents``' (ids without ``prefix`` and
        EOS): a row whose sentence is one of its document's reuses that sentence's states.
    :returns: ``{"doc_src": (N, D, L), "doc_index": (B,), "doc_rows": (R, 2)}`` long tensors,
        with ``queries`` also ``"doc_queries"`` (Q,) and ``"doc_state"`` (B,).
    """
    if not documents or any(len(d) == 0 for d in documents):
        raise ValueError("crosstask: every document needs at least one sentence")
    if any(not 0 <= i < len(documents) for i in doc_index):
        raise ValueError(f"crosstask: doc_index {list(doc_index)} outside 0..{len(documents) - 1}")
    sents = [[list(prefix) + list(s) + [EOS_ID] for s in d] for d in documents]
    D = max(len(d) for d in sents)
    L = max(len(s) for d in sents for s in d)
    doc = torch.full((len(sents), D, L), PAD_ID, dtype=torch.long)
    for n, d in enumerate(sents):
        for j, s in enumerate(d):
            doc[n, j, :len(s)] = torch.tensor(s, dtype=torch.long)
    index = torch.tensor(list(doc_index), dtype=torch.long)
    rows = torch.tensor([(n, j) for n, d in enumerate(sents) for j in range(len(d))],
                        dtype=torch.long)
    out = {DOC_SRC: doc, DOC_INDEX: index, DOC_ROWS: rows}
    if queries is not None:
        out.update(_reused_states(documents, doc_index, queries))
    return {k: v.to(device) for k, v in out.items()}


def _reused_states(documents: Sequence[Sequence[Sequence[int]]], doc_index: Sequence[int],
                   queries: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
    """``doc_queries`` / ``doc_state`` (the "Data" section): each row's states are those of the
    first identical sentence of its document, else of a query row of its own."""
    seen: list[dict[tuple[int, ...], int]] = []     # per document: sentence -> its row r
    R = 0
    for d in documents:
        seen.append({})
        for j, s in enumerate(d):
            seen[-1].setdefault(tuple(s), R + j)
        R += len(d)
    own, state = [], []
    for b, (n, q) in enumerate(zip(doc_index, queries)):
        r = seen[n].get(tuple(q))
        if r is None:
            r = R + len(own)
            own.append(b)
        state.append(r)
    return {DOC_QUERIES: torch.tensor(own, dtype=torch.long),
            DOC_STATE: torch.tensor(state, dtype=torch.long)}


@dataclass(frozen=True)
class SubDocuments(DocumentRule):
    """Document-level batches of this model: ``doc_src`` / ``doc_index`` (:func:`document_extra`)."""

    max_sentences: int

    def collate(self, documents: Sequence[Sequence[Sequence[int]]], doc_index: Sequence[int],
                queries: Sequence[Sequence[int]] | None = None) -> dict[str, torch.Tensor]:
        return document_extra(documents, doc_index, queries=queries)


@dataclass(frozen=True)
class CrossTaskConfig:
    """The ``extras`` this model reads (module docstring); unknown keys are an error (typos)."""

    global_layers: int | None = None
    repr_dim: int | None = None
    max_sentences: int = 30

    def __post_init__(self) -> None:
        if self.global_layers is not None and self.global_layers < 1:
            raise ValueError(f"crosstask: global_layers={self.global_layers} must be >= 1")
        if self.repr_dim is not None and self.repr_dim < 1:
            raise ValueError(f"crosstask: repr_dim={self.repr_dim} must be >= 1")
        if self.max_sentences < 1:
            raise ValueError(f"crosstask: max_sentences={self.max_sentences} must be >= 1")

    def n_global(self, enc_layers: int) -> int:
        return enc_layers if self.global_layers is None else self.global_layers


class SentenceRepresentation(nn.Module):
    """Eq. 2-3: attentive pooling of a sentence's word states into one vector."""

    def __init__(self, d_model: int, d_attn: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_attn, bias=False)   # W_1 (d_a, d)
        self.w2 = nn.Linear(d_attn, 1, bias=False)         # w_2 (1, d_a)

    def forward(self, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:param b: (R, L, d) word states. :param mask: (R, L) bool, True = word; every row has one.
        :returns: c (R, d)."""
        scores = self.w2(torch.tanh(self.w1(b))).squeeze(-1)              # (R, L)
        alpha = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)   # Eq. 2
        return torch.einsum("rl,rld->rd", alpha, b)                       # Eq. 3: c = alpha B


class GlobalContextGate(nn.Module):
    """Eq. 7: ``lambda = sigmoid([H; G] W_g)``, element-wise, W_g (2d, d) bias-free."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.w_g = nn.Linear(2 * d_model, d_model, bias=False)

    def forward(self, h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """:param h: (B, S, d) sentence encoder output. :param g: (B, S, d) global context.
        :returns: lambda (B, S, d) in [0, 1]."""
        return torch.sigmoid(self.w_g(torch.cat([h, g], dim=-1)))


@register("crosstask")
class CrossTaskTransformer(Transformer):
    """Transformer + global context encoder (shared sub-layers) + gate (Chen et al. 2021)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.xt = parse_extras(CrossTaskConfig, cfg.extras, "crosstask")
        d, n_g = cfg.d_model, self.xt.n_global(cfg.enc_layers)
        if n_g > cfg.enc_layers:
            raise ValueError(f"crosstask: global_layers={n_g} must be in 1..enc_layers={cfg.enc_layers} "
                             "(each global layer shares one sentence-encoder layer)")
        self.sent_repr = nn.ModuleList(
            SentenceRepresentation(d, self.xt.repr_dim or d) for _ in range(n_g))
        self.global_attn = nn.ModuleList(
            SubLayer(Attention(d, cfg.n_heads, cfg.dropout, AttnKind.CROSS, memory=GLOBAL_MEMORY),
                     d, cfg.dropout, cfg.norm_first) for _ in range(n_g))
        for block in self.global_attn:
            block.name = GLOBAL_ATTN
        self.global_norm = nn.LayerNorm(d) if cfg.norm_first else nn.Identity()
        self.global_gate = GlobalContextGate(d)
        self.reset_parameters()   # the base class initialised before the new modules existed

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """Tagged sentences, and sub-documents of at most ``max_sentences`` sentences for the
        document-level batches (the Data section); restoration rows take the source tag."""
        special = require_special(special, "crosstask")
        return ModelInputs(mode=DataMode.DOCUMENT, documents=SubDocuments(self.xt.max_sentences),
                           tag=special.tgt_tag, restore_tag=special.src_tag)

    def global_context(self, batch: Batch) -> torch.Tensor:
        """Global context encoder (Eq. 1-5): (B, S, d) states G of ``batch.src`` in its document."""
        doc = batch.extra[DOC_SRC]                                        # (N, D, L)
        N, D, L = doc.shape
        B, S = batch.src.shape
        index = batch.extra.get(DOC_INDEX)
        if index is None:
            if N != B:
                raise ValueError(f"crosstask: doc_src holds {N} documents for {B} rows and no doc_index")
            index = torch.arange(B, device=doc.device)
        sent_mask = doc.ne(PAD_ID).any(-1)                                # (N, D) real sentences
        rows = batch.extra.get(DOC_ROWS)
        if rows is None:   # not built by document_extra: read the sentences off the padding
            if not bool(sent_mask.any(-1).all()):
                raise ValueError("crosstask: a document in doc_src has no sentence")
            real = sent_mask.view(-1).nonzero().squeeze(1)                # (R,) flat n*D + j
        else:
            real = rows[:, 0] * D + rows[:, 1]                            # (R,) flat n*D + j
        state = batch.extra.get(DOC_STATE)
        if state is None:                                                 # every row a query
            q_src, q_doc = batch.src, index
        else:
            queries = batch.extra[DOC_QUERIES]                            # (Q,)
            q_src, q_doc = batch.src.index_select(0, queries), index.index_select(0, queries)
        R, W = real.numel(), max(L, S)
        # Word-level rows: the R document sentences, then the Q query sentences of their own.
        words = torch.cat([F.pad(doc.view(N * D, L).index_select(0, real), (0, W - L), value=PAD_ID),
                           F.pad(q_src, (0, W - S), value=PAD_ID)])       # (R + Q, W)
        row_doc = torch.cat([torch.div(real, D, rounding_mode="floor"), q_doc])   # (R + Q,)
        word_mask = words.ne(PAD_ID)                                      # (R + Q, W)
        wctx = LayerContext(self_mask=word_mask, extra=batch.extra)
        x = self.embed_tokens(self.embed, words)                          # (R + Q, W, d)
        for layer, repr_, gattn in zip(self.encoder, self.sent_repr, self.global_attn):
            x = layer.blocks["self_attn"](x, wctx, None)                  # Eq. 1 (shared)
            c = repr_(x[:R], word_mask[:R])                               # Eq. 2-3: (R, d)
            C = x.new_zeros(N * D, x.size(-1)).index_copy(0, real, c.to(x.dtype)).view(N, D, -1)
            gctx = LayerContext(self_mask=word_mask, extra=batch.extra,
                                memories={GLOBAL_MEMORY: Memory(C, sent_mask).index_select(row_doc)})
            x = gattn(x, gctx, None)                                      # Eq. 4: words -> C
            x = layer.blocks["ffn"](x, gctx, None)                        # Eq. 5 (shared)
        rows_x = x[R:] if state is None else x.index_select(0, state)     # (B, W, d)
        return self.global_norm(rows_x[:, :S])                            # (B, S, d)

    def encode(self, batch: Batch) -> EncoderOut:
        """Sentence encoder; with ``doc_src`` also the global context encoder and the gate."""
        enc = super().encode(batch)
        if DOC_SRC not in batch.extra:
            return enc                                                    # sentence mode: H' = H
        h = enc.source                                                    # H (B, S, d)
        g = self.global_context(batch)                                    # G (B, S, d)
        lam = self.global_gate(h.states, g)                               # Eq. 7: lambda (B, S, d)
        gated = Memory(lam * h.states + (1.0 - lam) * g, h.mask)          # Eq. 6: H'
        return EncoderOut({**enc.memories, SOURCE_MEMORY: gated}, enc.extra)

    # --- two-step comparison (the paper itself fine-tunes everything) -----------------------
    @classmethod
    def sentence_level_prefixes(cls) -> tuple[str, ...]:
        """fnmatch patterns (``train.freeze``) matching exactly the baseline's parameters."""
        return ("embed.*", "tgt_embed.*", "out_proj.*", "enc_norm.*", "dec_norm.*",
                "encoder.*", "decoder.*")

    def new_parameter_names(self) -> list[str]:
        """Parameters a sentence-level checkpoint lacks (sentence representation, global
        attention, global norm, gate)."""
        return [n for n, _ in self.named_parameters() if n.split(".")[0] in NEW_MODULES]

"""Continuous cache: Tu et al. (2018), "Learning to Remember Translation History with a Continuous
Cache", TACL 6 (https://aclanthology.org/Q18-1029/), ported from the paper's RNNsearch to the
Transformer.

A cache of I slots per document remembers, for every target word already translated in the
document, a key (the attention context c_i), a value (the decoder state s_i) and the word y_i
itself (Sec. 3.1). While translating the next sentence each decoder state reads the cache and is
combined with what it reads before the output layer (Sec. 3.2)::

    P_m(c_i | c_t) = softmax_i(c_t^T c_i)                       # (matching) Eq. 5
    m_t = sum_i P_m(c_i | c_t) s_i                              # (reading) value reading
    lambda_t = sigmoid(U s_t + V c_t + W m_t)                   # (gate) Eq. 8, element-wise (d,)
    s~_t = (1 - lambda_t) * s_t + lambda_t * m_t                # (combining) Eq. 6
    P(y_t | ...) = softmax(E s~_t)                              # Eq. 7: the Transformer's output layer

The labels in parentheses mark the lines of the code below. After a sentence is finished its
(c_t, s_t, y_t) triples are written token by token (Sec. 3.3): if y_t is in the cache, its key
and value are averaged with the new ones; otherwise it goes to an empty slot or, when the cache
is full, replaces the least recently used entry (``ContinuousCache.write`` computes that
sequence in one vectorised step). The cache is cleared at each new document. Training (Sec.
3.4, Eq. 9-10): the sentence-level model is loaded and fixed; only U, V, W are trained, on
documents processed in sentence order, with the reference (teacher-forced) states written to
the cache.

Choices for the Transformer and choices the paper leaves open
-------------------------------------------------------------
* c_t is the *last* decoder layer's encoder-decoder attention output (the multi-head attention
  after its output projection, before the residual and LayerNorm: the Transformer's analogue of
  the RNN's context vector sum_j alpha_tj h_j). It is captured by a forward hook on that
  ``cross_attn`` attention module, so the core layers stay untouched and a baseline state_dict
  loads unchanged. s_t is the last decoder layer's output (after ``dec_norm`` with pre-norm), the
  input of ``Transformer.project``. Both have d = d_model dimensions, so U, V, W are bias-free
  (d, d) matrices as in the gate formula (no bias term is written there).
* Key matching is the paper's unscaled dot product (no 1/sqrt(d)).
* Empty cache: the softmax runs over filled slots only; when a document has no filled slot yet
  (its first sentence) lambda_t is set to 0, so the model is exactly the sentence-level
  Transformer there (combining with m_t = 0 would instead shrink s_t by (1 - lambda_t)).
* What is written: every target token except EOS and padding (the hypothesis at inference has no
  EOS either), one slot per distinct word (the paper's words are the RNN's vocabulary words; here
  they are subword pieces). "Recently used" means written or updated (every slot is *read*
  softly at every step, so reads cannot order the slots).
* Inference (1-best): after beam search finishes a sentence, ``finish_sentences``
  re-runs the decoder teacher-forced on the 1-best to get its (c_t, s_t); those do not depend on
  the cache, and teacher-forced and incremental decoding agree, so these are the states search
  computed for that hypothesis.
* Truncated back-propagation: written keys and values are detached, so gradients never flow
  into earlier sentences; with theta_s frozen they would reach nothing trainable anyway.

Shallow fusion (``fusion: shallow``), the paper's word-level comparison (Sec. 4.4, Table 6)
----------------------------------------------------------------------------------------
The cache's words instead of its states are used, as in the continuous cache for language
models of Grave et al. (2017) that the paper builds on (probability-level "shallow" fusion
against the state-level "deep" fusion above): the read probabilities are summed per word,
P_cache(w) = sum_{i: y_i = w} P_m(c_i | c_t), and interpolated with the model's output
distribution, P(y_t) = (1 - lambda_t) softmax(E s_t)(y_t) + lambda_t P_cache(y_t), with a *scalar*
gate lambda_t = sigmoid(u s_t + v c_t + w m_t) (u, v, w are (d -> 1) projections; one
distribution needs one weight). ``project`` then returns log P(y_t) as logits (softmax of a
log-distribution is the distribution, so the trainer's loss and the decoder's log_softmax work
unchanged).

Data
----
Training and validation (``forward``): ``batch.src`` (B, S), ``tgt_in`` (B, T), ``tgt_out``
(B, T) as for the baseline, plus ``batch.extra["doc_start"]`` (B,) bool, True where row b's
sentence is the first of its document, ``batch.extra["lane"]`` (B,) long, the document stream
(lane) of each row, and ``batch.extra["lanes"]`` (int), the number of lanes. Batches are
*document streams*: a lane's rows in consecutive batches (not every batch has a row of every
lane) hold consecutive sentences of one document (a new document in a lane starts with
doc_start True), so the cache of each lane carries over from one batch to the next
(pipeline_lib/training/batching.py ``stream_batches``). A change of the number of lanes starts
fresh streams. Without ``lane``, row b of consecutive batches is stream b (B streams). A
missing ``doc_start`` is an error, not a sentence-level fallback. Training and evaluation keep separate caches, so a validation pass in the middle of
training does not disturb the training streams.
Decoding: ``pipeline_lib.evaluate.decode.translate_documents`` (``in_document_order``) calls
``start_documents(n)``, then per sentence index a search over a batch whose
``batch.extra["doc_slot"]`` (B,) long gives each row's document slot, then
``finish_sentences(1-best ids, slots)``. A search without ``doc_slot`` (sentence mode, the
trainer's greedy dev BLEU) reads no cache: the sentence-level model.

Extras (``ModelConfig.extras``)
-------------------------------
``cache_size`` (int, 25): I, slots per document (the paper's choice after Table 2, Sec. 4.2);
the least recently used slot is overwritten once all I hold distinct words.
``fusion`` ("deep" | "shallow", "deep"): combining on the decoder state (the paper's model) or the
word-level probability interpolation above (its comparison).

Two-step training
-----------------
Tu et al. (Sec. 3.4, Eq. 9-10; Sec. 4.1) pre-train RNNsearch, then fix its parameters and train
only U, V, W for 5 more epochs on the same data (15 epochs for the baseline). The default run and
``config/presets/tu2018_zh-en_ted.yaml`` do the same with the Transformer (``freeze:
["@sentence_level"]``; ``freeze: []`` trains everything); the matched control is the baseline
continued for the same updates on the same document streams' pairs.
Step 1: ``name: transformer`` on all sentence pairs. Step 2: ``name: cache`` with
``train.init_from`` = the step-1 checkpoint and ``train.freeze`` =
:meth:`CacheTransformer.sentence_level_prefixes` (matches exactly the baseline's parameters);
:meth:`CacheTransformer.new_parameter_names` lists the trainables ``cache_gate.{u,v,w}.weight``.
``forward`` reports the mean gate over real target tokens as ``aux_metrics["cache_gate"]``
(0 on tokens whose document cache is still empty, e.g. every first sentence).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
from torch import nn

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode, EXTRA_DOC_SLOT, EXTRA_DOC_START, EXTRA_LANE, EXTRA_LANES
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models.config import ModelConfig, parse_extras
from pipeline_lib.models.inputs import ModelInputs, SpecialIds
from pipeline_lib.models.layers import LayerContext
from pipeline_lib.models.output import ModelOutput
from pipeline_lib.models.registry import register
from pipeline_lib.models.transformer import EncoderOut, Transformer

CACHE_GATE = "cache_gate"      # module holding U, V, W (the only step-2 trainables)
# Keys this model puts in EncoderOut.extra / LayerContext.extra (reordered with the sentences):
_CACHE = "cache.store"         # the ContinuousCache the rows read (not a tensor: kept as is)
_ROWS = "cache.rows"           # (B,) long: cache row of each sentence (ctx.beam decoder rows each)
_CONTEXT = "cache.c_t"         # (B, T, d): last cross_attn output, written by the hook
_RECORD = "cache.record"       # dict that project fills with s_t, c_t, lambda_t when present


class Fusion(str, Enum):
    DEEP = "deep"          # (combining): mix decoder state and cache value
    SHALLOW = "shallow"    # interpolate output and cache-word distributions


@dataclass(frozen=True)
class CacheConfig:
    """The ``extras`` this model reads (module docstring); unknown keys are an error (typos)."""

    cache_size: int = 25
    fusion: Fusion = Fusion.DEEP

    def __post_init__(self) -> None:
        if self.cache_size < 1:
            raise ValueError(f"cache: cache_size={self.cache_size} must be >= 1")


class ContinuousCache:
    """I key/value/word slots for each of n document streams; pure tensor ops, batched over rows.

    Empty slots hold word -1. Updates are out of place (new tensors), so the cache may be written
    under ``torch.inference_mode`` and read later in training or the other way round.
    """

    def __init__(self, n: int, size: int, dim: int, device: torch.device | str = "cpu") -> None:
        self.keys = torch.zeros(n, size, dim, device=device)              # (n, I, d) c_i
        self.values = torch.zeros(n, size, dim, device=device)            # (n, I, d) s_i
        self.words = torch.full((n, size), -1, dtype=torch.long, device=device)   # (n, I) y_i
        self.last_used = torch.zeros(n, size, dtype=torch.long, device=device)    # (n, I)
        self.clock = torch.zeros(n, dtype=torch.long, device=device)              # (n,) writes

    @property
    def n(self) -> int:
        return self.words.size(0)

    @property
    def device(self) -> torch.device:
        return self.words.device

    @property
    def filled(self) -> torch.Tensor:
        return self.words.ge(0)                                           # (n, I) bool

    def clear(self, rows: torch.Tensor) -> None:
        """Empty the streams where ``rows`` (n,) bool is True (a new document starts there)."""
        r = rows.to(self.device)
        self.keys = self.keys.masked_fill(r[:, None, None], 0.0)
        self.values = self.values.masked_fill(r[:, None, None], 0.0)
        self.words = self.words.masked_fill(r[:, None], -1)
        self.last_used = self.last_used.masked_fill(r[:, None], 0)
        self.clock = self.clock.masked_fill(r, 0)

    def read(self, query: torch.Tensor, rows: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(matching) and (reading) for queries ``query`` (R, T, d) of the streams ``rows`` (R,) long.

        :returns: m (R, T, d) read values, P (R, T, I) slot probabilities (0 on empty slots and
            everywhere for an empty stream), nonempty (R,) bool.
        """
        keys, values, filled = self.keys[rows], self.values[rows], self.filled[rows]
        scores = torch.einsum("rtd,rid->rti", query, keys.to(query.dtype))   # c_t^T c_i (R, T, I)
        # A finite fill keeps an all-empty row NaN-free (uniform, then zeroed below).
        scores = scores.masked_fill(~filled[:, None, :], torch.finfo(scores.dtype).min)
        nonempty = filled.any(dim=1)                                          # (R,)
        probs = torch.softmax(scores, dim=-1) * nonempty[:, None, None]      # (matching) (R, T, I)
        m = torch.einsum("rti,rid->rtd", probs, values.to(probs.dtype))      # (reading) (R, T, d)
        return m, probs, nonempty

    def write(self, keys: torch.Tensor, values: torch.Tensor, words: torch.Tensor,
              mask: torch.Tensor, rows: torch.Tensor) -> None:
        """Write a finished sentence per stream (cache updating), all tokens at once.

        :param keys: (R, T, d) c_t. :param values: (R, T, d) s_t. :param words: (R, T) y_t.
        :param mask: (R, T) bool, True = write this token. :param rows: (R,) long stream index.

        The result is that of the paper's token-by-token writing (Sec. 3.3), in order: a word in
        the cache is averaged with the new key and value, a word not in it takes an empty slot or
        replaces the least recently written one, and every write ticks the stream's clock. Why no
        loop is needed: the slots are a least-recently-used cache, which after any sequence of
        writes holds exactly the ``I`` most recently written distinct words. So token t finds its
        word cached iff fewer than ``I`` distinct other words were written since that word's
        previous write (its stack distance), which a (T, T) same-word matrix and the slots'
        timestamps give for every token at once; a miss starts the word afresh (an earlier entry
        is gone, even one evicted by this very sentence), and each later hit halves the weight of
        what came before. The cache then holds the ``I`` most recent of the sentence's words and
        of the entries it did not write. Only *which* free slot a new word lands in may differ
        from one-by-one writing (new words fill the free slots in the order of their first
        write, empty slots by index first, then the least recently written): reading is a
        softmax over slots and does not see their order. Stored detached (truncated
        back-propagation between sentences).
        """
        R, T = words.shape
        if T == 0:
            return
        dev, size = self.device, self.words.size(1)
        rows = rows.to(dev)
        K, Vs, W = self.keys[rows], self.values[rows], self.words[rows]      # (R, I, d/.)
        last_used, clock = self.last_used[rows], self.clock[rows]            # (R, I), (R,)
        keys, values = keys.detach().to(K.dtype), values.detach().to(Vs.dtype)
        ok = mask.to(dev)
        w = torch.where(ok, words.to(dev), -2)                              # -2: never a word
        tick = clock[:, None] + ok.long().cumsum(1)                         # (R, T) write time
        idx = torch.arange(T, device=dev)
        before = idx[None, :] < idx[:, None]                                # (T, T) [t, u]: u < t
        upto = ~before.T                                                    # [t, u]: u <= t
        same = (w[:, :, None] == w[:, None, :]) & ok[:, :, None] & ok[:, None, :]   # (R, T, T)
        prev = torch.where(same & before, idx, -1).amax(2)                  # (R, T) -1: none
        nxt = torch.where(same & before.T, idx, T).amin(2)                  # (R, T) T: none
        # alive[t, u]: u < t is the latest write of its word before t (counts distinct words)
        alive = before & ok[:, None, :] & (nxt[:, None, :] >= idx[None, :, None])
        # stack distance of each token: distinct words written since its word's previous write
        filled = W.ge(0)
        hit_at = (w[:, :, None] == W[:, None, :]) & filled[:, None, :]      # (R, T, I)
        cached = hit_at.any(2)                                              # word in the cache
        slot = hit_at.long().argmax(2)                                      # (R, T) its slot
        stamp = torch.where(cached, last_used.gather(1, slot), -1)          # (R, T) its time
        newer_slots = (filled[:, None, :] & (last_used[:, None, :] > stamp[:, :, None])).sum(2)
        counted = cached[:, None, :] & (stamp[:, None, :] > stamp[:, :, None])   # in newer_slots
        since_prev = (alive & (idx[None, None, :] > prev[:, :, None])).sum(2)
        since_slot = newer_slots + (alive & ~counted).sum(2)
        distance = torch.where(prev.ge(0), since_prev, torch.where(cached, since_slot, size))
        miss = ok & distance.ge(size)                                       # (R, T)
        # the state after each token: its word restarted at its last miss, else from its slot
        start = torch.where(same & upto & miss[:, None, :], idx, -1).amax(2)   # (R, T)
        fresh = start.ge(0)
        rank = (same & upto).sum(2)                                         # j-th occurrence
        chain = same & upto & (idx[None, None, :] >= start[:, :, None])     # [t, u] since start
        after = (rank[:, :, None] - rank[:, None, :] + 1).clamp(min=0)     # [t, u] halvings
        weight = torch.where(chain, torch.exp2(-after.to(K.dtype)), 0.0)   # (R, T, T) t <- u
        weight = torch.where(idx[None, None, :] == start[:, :, None], 2.0 * weight, weight)
        old_w = torch.where(fresh | ~cached, 0.0, torch.exp2(-rank.to(K.dtype)))   # (R, T)
        # what stays: the I most recent of the sentence's words, then of the untouched entries
        last = ok & nxt.eq(T)                                               # one per word
        kept = last & (last[:, None, :] & before.T).sum(2).lt(size)         # (R, T)
        touched = hit_at.any(1)                                             # (R, I)
        untouched = filled & ~touched
        newer_old = (untouched[:, None, :] & (last_used[:, None, :] > last_used[:, :, None])).sum(2)
        stays = untouched & (last.sum(1, keepdim=True) + newer_old).lt(size)     # (R, I)
        # slots: a word never missed keeps its own; new words fill the others in first-write
        # order, empty slots by index first, then the least recently written
        in_place = kept & ~fresh
        held = stays | (in_place[..., None] & hit_at).any(1)                # (R, I)
        big = torch.iinfo(torch.long).max // 4
        order = torch.where(held, big, torch.where(filled, last_used,
                                                   torch.arange(size, device=dev) - big))
        queue = order.argsort(1)                                            # (R, I) free first
        new = kept & fresh
        nth = (new[:, None, :] & (start[:, None, :] < start[:, :, None])).sum(2)   # (R, T)
        dest = torch.where(in_place, slot, torch.where(new, queue.gather(
            1, nth.clamp(max=size - 1)), -1))                               # (R, T) -1: none
        # (R, T, I); -1 matches no slot. A comparison rather than one_hot, whose range check
        # reads the indices back to the host on some devices (a synchronisation per write).
        to = dest[..., None] == torch.arange(size, device=dev)
        written = to.any(1)                                                 # (R, I)
        at = to.to(K.dtype).transpose(1, 2)                                 # (R, I, T)
        gone = ~written & ~stays                                            # evicted, not refilled
        # slot i <- its token's mix of the sentence's (c_t, s_t), plus its own old entry when the
        # word was never missed (the tokens' (R, T, T) mixes composed first: I < T rows)
        old = torch.cat([K, Vs], -1)                                        # (R, I, 2d)
        mixed = (at @ weight) @ torch.cat([keys, values], -1) + (at @ old_w[..., None]) * old
        kv = torch.where(written[..., None], mixed, old).masked_fill(gone[..., None], 0.0)
        K, Vs = kv.split([K.size(2), Vs.size(2)], dim=-1)
        W = torch.where(written, (to.long() * w[..., None]).sum(1), W).masked_fill(gone, -1)
        last_used = torch.where(written, (to.long() * tick[..., None]).sum(1),
                                last_used).masked_fill(gone, 0)
        self.keys = self.keys.index_put((rows,), K)
        self.values = self.values.index_put((rows,), Vs)
        self.words = self.words.index_put((rows,), W)
        self.last_used = self.last_used.index_put((rows,), last_used)
        self.clock = self.clock.index_put((rows,), clock + ok.long().sum(1))


class CacheGate(nn.Module):
    """(gate) lambda_t = sigmoid(U s_t + V c_t + W m_t); d outputs (deep) or 1 (shallow)."""

    def __init__(self, d_model: int, out: int) -> None:
        super().__init__()
        self.u = nn.Linear(d_model, out, bias=False)
        self.v = nn.Linear(d_model, out, bias=False)
        self.w = nn.Linear(d_model, out, bias=False)

    def forward(self, s: torch.Tensor, c: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """(B, T, d) each -> lambda (B, T, out) in [0, 1]."""
        return torch.sigmoid(self.u(s) + self.v(c) + self.w(m))


def _record_context(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    """Forward hook on the last decoder layer's cross-attention: keep c_t (B, T, d) in ctx.extra.

    Called as ``attn(x, ctx, cache, name=...)``, so ``args[1]`` is the stack's LayerContext."""
    args[1].extra[_CONTEXT] = output


@register("cache")
class CacheTransformer(Transformer):
    """Transformer + continuous cache read before the output layer (Tu et al. 2018)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.cache_cfg = parse_extras(CacheConfig, cfg.extras, "cache")
        out = cfg.d_model if self.cache_cfg.fusion is Fusion.DEEP else 1
        self.cache_gate = CacheGate(cfg.d_model, out)
        self.decoder[-1].blocks["cross_attn"].fn.register_forward_hook(_record_context)
        self.reset_parameters()   # the base class initialised before the gate existed
        # Document streams, not parameters: "train"/"eval" (forward) and "decode" (search).
        self._streams: dict[str, ContinuousCache] = {}
        self._pending: EncoderOut | None = None   # encoder output of the last document-mode search

    def inputs(self, special: SpecialIds | None) -> ModelInputs:
        """Document streams in training; decoding in document order so the cache holds the
        1-best translations of earlier sentences (the Data section)."""
        return ModelInputs(mode=DataMode.STREAM, in_document_order=True, dev_bleu_skip=(
            "the continuous cache reads its 1-best history only in document-order decoding; "
            "greedy dev search would score the sentence-level model"))

    # --- reading: (matching), (reading), (gate), (combining) ----------------------------
    def decoder_context(self, enc: EncoderOut) -> LayerContext:
        """Like the base, but with a copy of ``extra`` so the hook's c_t stays per call."""
        return LayerContext(memories=enc.memories, extra=dict(enc.extra))

    def project(self, h: torch.Tensor, ctx: LayerContext) -> torch.Tensor:
        """(B, T, d) states s_t -> (B, T, V) logits through the cache (deep or shallow fusion)."""
        c = ctx.extra[_CONTEXT]                                               # (B, T, d) c_t
        store: ContinuousCache | None = ctx.extra.get(_CACHE)
        record = ctx.extra.get(_RECORD)
        if record is not None:
            record.update(s=h, c=c)
        if store is None:                                 # no document streams: baseline
            return super().project(h, ctx)
        rows = ctx.extra[_ROWS][:, None].expand(-1, ctx.beam).reshape(-1)   # (B,) per decoder row
        m, probs, nonempty = store.read(c, rows)                            # (B, T, d), (B, T, I)
        lam = self.cache_gate(h, c, m) * nonempty[:, None, None]            # (gate); 0 if empty
        if record is not None:
            record["gate"] = lam
        if self.cache_cfg.fusion is Fusion.DEEP:
            return super().project((1.0 - lam) * h + lam * m, ctx)          # (combining)
        # Shallow: P = (1 - lambda) P_model + lambda P_cache, P_cache summed per cached word.
        p_model = torch.softmax(super().project(h, ctx).float(), dim=-1)    # (B, T, V)
        words = store.words[rows].clamp_min(0)                              # (B, I); empty: p=0
        p_cache = torch.zeros_like(p_model).scatter_add_(
            2, words[:, None, :].expand(-1, h.size(1), -1), probs.float())
        p = (1.0 - lam.float()) * p_model + lam.float() * p_cache
        return p.clamp_min(torch.finfo(p.dtype).tiny).log()

    def _decode_recording(self, tgt_in: torch.Tensor, enc: EncoderOut
                          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Teacher-forced decode that also returns s_t, c_t (and lambda_t when read)."""
        record: dict[str, torch.Tensor] = {}
        logits = self.decode(tgt_in, EncoderOut(enc.memories, {**enc.extra, _RECORD: record}))
        return logits, record

    # --- training and validation: document streams ------------------------------------------
    def _stream(self, key: str, n: int, device: torch.device) -> ContinuousCache:
        store = self._streams.get(key)
        if store is None or store.n != n or store.device != device:
            store = self._streams[key] = ContinuousCache(n, self.cache_cfg.cache_size,
                                                         self.cfg.d_model, device)
        return store

    def forward(self, batch: Batch) -> ModelOutput:
        """Read the caches of the batch's document streams, then write the reference states."""
        if EXTRA_DOC_START not in batch.extra:
            raise ValueError("cache: batch.extra['doc_start'] is missing; the cache model trains on "
                             "document streams (see the Data section of pipeline_lib/models/cache.py)")
        B, dev = batch.src.size(0), batch.src.device
        lanes = batch.extra.get(EXTRA_LANE)
        if lanes is None:                          # row b is stream b
            rows, n = torch.arange(B, device=dev), B
        else:                                      # row b is stream lane[b] of `lanes`
            rows, n = lanes, int(batch.extra[EXTRA_LANES])
        store = self._stream("train" if self.training else "eval", n, dev)
        store.clear(torch.zeros(n, dtype=torch.bool, device=dev).index_put(
            (rows,), batch.extra[EXTRA_DOC_START].bool()))
        enc = self.encode(batch)
        enc.extra.update({_CACHE: store, _ROWS: rows})
        logits, rec = self._decode_recording(batch.tgt_in, enc)
        real = batch.tgt_out.ne(PAD_ID) & batch.tgt_out.ne(EOS_ID)          # (B, T) words to write
        store.write(rec["c"], rec["s"], batch.tgt_out, real, rows)
        gate = rec["gate"].detach().float().mean(-1)                          # (B, T)
        tok = batch.tgt_out.ne(PAD_ID).float()
        mean_gate = (gate * tok).sum() / tok.sum().clamp(min=1.0)             # no host sync
        return ModelOutput(logits=logits, aux_metrics={"cache_gate": mean_gate})

    # --- decoding: document hooks -------------------------------------------------------------
    def encode(self, batch: Batch) -> EncoderOut:
        """In document-mode search (``doc_slot`` given) attach the decode cache to the rows."""
        enc = super().encode(batch)
        slots = batch.extra.get(EXTRA_DOC_SLOT)
        if slots is not None and "decode" in self._streams:
            enc.extra.update({_CACHE: self._streams["decode"], _ROWS: slots})
            self._pending = enc
        return enc

    def start_documents(self, n: int) -> None:
        """New group of n documents: n empty streams."""
        self._streams["decode"] = ContinuousCache(n, self.cache_cfg.cache_size, self.cfg.d_model,
                                                  next(self.parameters()).device)
        self._pending = None

    @torch.no_grad()
    def finish_sentences(self, hyp_tokens: list[list[int]], slots: list[int]) -> None:
        """Write the 1-best of the last search (rows = ``slots``) into the decode cache."""
        enc = self._pending
        if enc is None or enc.extra[_ROWS].tolist() != list(slots):
            raise RuntimeError(f"cache: finish_sentences({slots}) without a document-mode search "
                               "over these slots (encode a batch with extra['doc_slot'] first)")
        store: ContinuousCache = enc.extra[_CACHE]
        dev = enc.source.states.device
        width = max(len(h) for h in hyp_tokens)
        words = torch.full((len(hyp_tokens), width), PAD_ID, dtype=torch.long, device=dev)
        for i, h in enumerate(hyp_tokens):
            words[i, :len(h)] = torch.as_tensor(h, dtype=torch.long)   # (B, T) y_t, PAD after
        self._pending = None
        if width == 0:
            return
        tgt_in = torch.cat([torch.full_like(words[:, :1], BOS_ID), words[:, :-1]], dim=1)  # (B, T)
        # c_t, s_t do not depend on the cache: decode without reading it.
        plain = EncoderOut(enc.memories, {k: v for k, v in enc.extra.items() if k != _CACHE})
        _, rec = self._decode_recording(tgt_in, plain)
        store.write(rec["c"], rec["s"], words, words.ne(PAD_ID), enc.extra[_ROWS])

    # --- two-step training --------------------------------------------------------------------
    @classmethod
    def sentence_level_prefixes(cls) -> tuple[str, ...]:
        """fnmatch patterns (``train.freeze``) matching exactly the baseline's parameters."""
        return ("embed.*", "tgt_embed.*", "out_proj.*", "enc_norm.*", "dec_norm.*",
                "encoder.*", "decoder.*")

    def new_parameter_names(self) -> list[str]:
        """U, V, W: the parameters a sentence-level checkpoint lacks (step-2 trainables)."""
        return [n for n, _ in self.named_parameters() if n.startswith(f"{CACHE_GATE}.")]

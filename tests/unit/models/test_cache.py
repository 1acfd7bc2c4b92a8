"""Continuous cache (Tu et al. 2018): the cache's LRU/averaging rules by hand, reading, the model's
document streams, gates, document slots, document-mode decoding, learning from the history. The
contract every model keeps (causality, incremental decoding with a filled cache, batch-invariant
document-order search, two-step freezing) is tests/unit/models/test_model_contract.py."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.evaluate.decode import translate_documents
from pipeline_lib.models.search import BeamConfig
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.cache import CacheTransformer, ContinuousCache
from pipeline_lib.training.optim import build_optimizer, label_smoothed_nll
from pipeline_lib.training.two_step import apply_freeze

torch.set_num_threads(1)


# --- the cache on its own: hand-computed cases ---------------------------------------------------
def vec(*xs: float) -> list[float]:
    return list(xs)


def one_stream_write(cache: ContinuousCache, words: list[int], keys: list[list[float]],
                     values: list[list[float]] | None = None, row: int = 0) -> None:
    k = torch.tensor([keys])
    v = torch.tensor([values if values is not None else keys])
    cache.write(k, v, torch.tensor([words]), torch.ones(1, len(words), dtype=torch.bool),
                torch.tensor([row]))


def test_new_words_fill_empty_slots_in_order_and_repeats_are_averaged():
    cache = ContinuousCache(n=1, size=3, dim=2)
    one_stream_write(cache, [5, 6], [vec(1, 0), vec(0, 1)], [vec(10, 0), vec(0, 10)])
    assert cache.words.tolist() == [[5, 6, -1]]
    assert cache.keys[0, :2].tolist() == [[1, 0], [0, 1]]
    # 5 again: key and value averaged with the new ones, no new slot.
    one_stream_write(cache, [5], [vec(3, 2)], [vec(20, 4)])
    assert cache.words.tolist() == [[5, 6, -1]]
    assert cache.keys[0, 0].tolist() == [2.0, 1.0]        # (1+3)/2, (0+2)/2
    assert cache.values[0, 0].tolist() == [15.0, 2.0]     # (10+20)/2, (0+4)/2
    assert cache.values[0, 1].tolist() == [0.0, 10.0]     # untouched
    # A repeat inside one sentence averages too (the second occurrence sees the first).
    one_stream_write(cache, [7, 7], [vec(4, 4), vec(0, 0)])
    assert cache.words.tolist() == [[5, 6, 7]]
    assert cache.keys[0, 2].tolist() == [2.0, 2.0]


def test_full_cache_overwrites_the_least_recently_used_slot():
    cache = ContinuousCache(n=1, size=2, dim=1)
    one_stream_write(cache, [5, 6], [vec(1), vec(2)])      # 5 at time 1, 6 at time 2
    one_stream_write(cache, [5], [vec(3)])                 # 5 updated at time 3: 6 is now LRU
    one_stream_write(cache, [8], [vec(9)])                 # replaces 6, no averaging
    assert cache.words.tolist() == [[5, 8]]
    assert cache.keys[0, :, 0].tolist() == [2.0, 9.0]
    one_stream_write(cache, [6], [vec(4)])                 # now 5 (time 3) is LRU
    assert cache.words.tolist() == [[6, 8]]
    assert cache.keys[0, :, 0].tolist() == [4.0, 9.0]
    assert cache.last_used.tolist() == [[5, 4]]


def test_streams_are_independent_masked_tokens_skipped_and_clear_empties_rows():
    cache = ContinuousCache(n=3, size=2, dim=1)
    keys = torch.tensor([[[1.0], [2.0]], [[3.0], [4.0]]])  # rows 2 and 0 of the cache
    words = torch.tensor([[5, 6], [7, 9]])
    mask = torch.tensor([[True, True], [True, False]])     # 9 is padding: not written
    cache.write(keys, keys, words, mask, torch.tensor([2, 0]))
    assert cache.words.tolist() == [[7, -1], [-1, -1], [5, 6]]
    assert cache.clock.tolist() == [1, 0, 2]
    cache.clear(torch.tensor([False, False, True]))
    assert cache.words.tolist() == [[7, -1], [-1, -1], [-1, -1]]
    assert cache.keys[2].abs().sum() == 0 and cache.clock.tolist() == [1, 0, 0]
    assert cache.keys[0, 0, 0] == 3.0


def test_a_word_evicted_earlier_in_the_sentence_comes_back_as_a_new_entry():
    """Issue 22's reproduction: cache {5 (least recent), 6} of 2 slots, sentence [7, 5]. Token by
    token, 7 evicts 5, then 5 is no longer cached and evicts 6: words [7, 5], keys [3, 4] (5's
    old key is gone, not averaged in)."""
    cache = ContinuousCache(n=1, size=2, dim=1)
    one_stream_write(cache, [5, 6], [vec(1), vec(2)])
    one_stream_write(cache, [7, 5], [vec(3), vec(4)])
    assert cache.words.tolist() == [[7, 5]]
    assert cache.keys[0, :, 0].tolist() == [3.0, 4.0]
    assert cache.last_used.tolist() == [[3, 4]] and cache.clock.tolist() == [4]


def sequential_write(cache: ContinuousCache, keys, values, words, mask, rows) -> None:
    """The cache update written token by token, as the paper states it: the reference the
    sentence-at-once ``ContinuousCache.write`` must reproduce."""
    for r, row in enumerate(rows.tolist()):
        for t in range(words.size(1)):
            if not mask[r, t]:
                continue
            y = int(words[r, t])
            cache.clock[row] += 1
            hit = (cache.words[row] == y).nonzero().flatten().tolist()
            if hit:
                i = hit[0]
                cache.keys[row, i] = (cache.keys[row, i] + keys[r, t]) / 2
                cache.values[row, i] = (cache.values[row, i] + values[r, t]) / 2
            else:
                empty = (cache.words[row] < 0).nonzero().flatten().tolist()
                i = empty[0] if empty else int(cache.last_used[row].argmin())
                cache.keys[row, i], cache.values[row, i] = keys[r, t], values[r, t]
                cache.words[row, i] = y
            cache.last_used[row, i] = cache.clock[row]


def contents(cache: ContinuousCache, row: int) -> dict[int, tuple]:
    """A stream's cache as the reader sees it: word -> (key, value, last write); the slot order
    is not part of it (reading is a softmax over the slots)."""
    return {int(cache.words[row, i]): (cache.keys[row, i], cache.values[row, i],
                                        int(cache.last_used[row, i]))
            for i in range(cache.words.size(1)) if cache.words[row, i] >= 0}


def assert_same_cache(fast: ContinuousCache, slow: ContinuousCache) -> None:
    assert torch.equal(fast.clock, slow.clock)
    for row in range(fast.n):
        a, b = contents(fast, row), contents(slow, row)
        assert a.keys() == b.keys(), (row, sorted(a), sorted(b))
        for word in a:
            assert a[word][2] == b[word][2], (row, word)              # last write
            torch.testing.assert_close(a[word][0], b[word][0])        # key
            torch.testing.assert_close(a[word][1], b[word][1])        # value
        # a freed slot is empty, not stale
        empty = fast.words[row] < 0
        assert not fast.keys[row][empty].any() and not fast.last_used[row][empty].any()


SENTENCE = st.lists(st.tuples(st.integers(5, 10), st.booleans()), min_size=1, max_size=9)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(size=st.integers(1, 4), n=st.integers(1, 3), data=st.data())
def test_sentence_at_once_write_equals_token_by_token_writing(size, n, data):
    """Small caches (1-4 slots) and a 6-word vocabulary, so that sentences evict words, words
    evicted by their own sentence come back, repeats hit and miss: after every sentence each
    stream holds the words, keys, values and timestamps of writing token by token."""
    d = 2
    fast, slow = ContinuousCache(n, size, d), ContinuousCache(n, size, d)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    for _ in range(data.draw(st.integers(1, 5))):
        rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        sents = [data.draw(SENTENCE) for _ in rows]
        T = max(map(len, sents))
        words = torch.tensor([[w for w, _ in s] + [0] * (T - len(s)) for s in sents])
        mask = torch.tensor([[m for _, m in s] + [False] * (T - len(s)) for s in sents])
        keys = torch.randn(len(rows), T, d, generator=gen)
        values = torch.randn(len(rows), T, d, generator=gen)
        fast.write(keys, values, words, mask, torch.tensor(rows))
        sequential_write(slow, keys, values, words, mask, torch.tensor(rows))
        assert_same_cache(fast, slow)
    if data.draw(st.booleans()):
        cleared = torch.tensor([i % 2 == 0 for i in range(n)])
        fast.clear(cleared)
        slow.clear(cleared)
        assert_same_cache(fast, slow)


def test_slot_order_is_the_token_by_token_one_while_a_sentence_keeps_its_words():
    """While no sentence evicts a word it wrote itself, the slots are the very slots of
    one-by-one writing, not only the same contents."""
    fast, slow = ContinuousCache(1, 3, 1), ContinuousCache(1, 3, 1)
    for sentence in ([5, 6, 7], [6, 8], [9, 5], [6, 5, 7]):
        k = torch.arange(len(sentence), dtype=torch.float)[None, :, None] + 1
        m = torch.ones(1, len(sentence), dtype=torch.bool)
        fast.write(k, k, torch.tensor([sentence]), m, torch.tensor([0]))
        sequential_write(slow, k, k, torch.tensor([sentence]), m, torch.tensor([0]))
        assert fast.words.tolist() == slow.words.tolist()
        assert torch.equal(fast.keys, slow.keys) and torch.equal(fast.last_used, slow.last_used)


def test_a_sentence_with_more_new_words_than_slots_keeps_the_most_recent():
    cache = ContinuousCache(n=1, size=3, dim=1)
    one_stream_write(cache, [5, 6, 7, 8, 9], [vec(1), vec(2), vec(3), vec(4), vec(5)])
    assert sorted(cache.words[0].tolist()) == [7, 8, 9]
    assert sorted(cache.keys[0, :, 0].tolist()) == [3.0, 4.0, 5.0]
    assert cache.clock.tolist() == [5] and sorted(cache.last_used[0].tolist()) == [3, 4, 5]


def test_read_is_the_softmax_over_filled_slots_and_zero_when_empty():
    cache = ContinuousCache(n=2, size=3, dim=2)
    one_stream_write(cache, [5, 6], [vec(1, 0), vec(0, 1)], [vec(10, 0), vec(0, 10)])
    q = torch.tensor([[[2.0, 0.0]], [[2.0, 0.0]]])          # (R=2, T=1, d=2)
    m, probs, nonempty = cache.read(q, torch.tensor([0, 1]))
    e = math.exp(2.0)
    p0, p1 = e / (e + 1), 1 / (e + 1)                       # softmax of scores (2, 0); slot 3 empty
    torch.testing.assert_close(probs[0, 0], torch.tensor([p0, p1, 0.0]))
    torch.testing.assert_close(m[0, 0], torch.tensor([10 * p0, 10 * p1]))
    assert nonempty.tolist() == [True, False]
    assert probs[1].abs().sum() == 0 and m[1].abs().sum() == 0


# --- the model -------------------------------------------------------------------------------------
def tiny(name: str = "cache", **extras) -> ModelConfig:
    return ModelConfig(vocab_size=50, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
                       dropout=0.0, max_len=64, name=name, extras=extras)


def pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


#: Two document streams of three sentences each: (source ids, target ids).
DOCS = [
    [([10, 11, 12], [20, 21, 22]), ([13, 14], [21, 23]), ([10, 15, 16, 17], [20, 24, 22, 25])],
    [([30, 31], [40, 41]), ([32, 33, 34], [41, 42, 43]), ([35], [44])],
]


def stream_batch(i: int, doc_start: list[bool] | None = None) -> Batch:
    """Sentence i of both documents; row b = document b (document streams)."""
    srcs, tgts = zip(*(doc[i] for doc in DOCS))
    starts = doc_start if doc_start is not None else [i == 0] * len(DOCS)
    return Batch(src=pad([s + [EOS_ID] for s in srcs]), tgt_in=pad([[BOS_ID] + t for t in tgts]),
                 tgt_out=pad([t + [EOS_ID] for t in tgts]), extra={"doc_start": torch.tensor(starts)})


def model_for(seed: int = 0, **extras) -> CacheTransformer:
    torch.manual_seed(seed)
    return build_model(tiny(**extras)).eval()


def baseline_and_model(seed: int = 0, **extras) -> tuple[Transformer, CacheTransformer]:
    torch.manual_seed(seed)
    base = Transformer(tiny(name="transformer")).eval()
    model = model_for(seed + 1, **extras)
    model.load_state_dict(base.state_dict(), strict=False)
    return base, model


def test_registry_shapes_and_gate_metric():
    assert MODELS["cache"] is CacheTransformer
    model = model_for()
    assert model.inputs(None).in_document_order
    for i in range(3):
        b = stream_batch(i)
        out = model(b)
        assert out.logits.shape == (2, b.tgt_in.size(1), 50)
        assert 0.0 <= out.aux_metrics["cache_gate"] <= 1.0
    store = model._streams["eval"]
    assert store.words.shape == (2, 25) and store.filled.sum(1).tolist() == [6, 5]   # distinct words


@pytest.mark.parametrize("fusion", ["deep", "shallow"])
def test_empty_cache_is_the_baseline_and_a_filled_cache_changes_the_output(fusion):
    base, model = baseline_and_model(fusion=fusion)
    first = stream_batch(0)
    ref = torch.log_softmax(base(first).logits, -1)
    torch.testing.assert_close(torch.log_softmax(model(first).logits, -1), ref, rtol=0, atol=1e-5)
    second = stream_batch(1)
    with_cache = torch.log_softmax(model(second).logits, -1)
    alone = torch.log_softmax(base(second).logits, -1)
    assert (with_cache - alone).abs().max() > 1e-3
    # doc_start clears the stream: the same sentence as a document start is the baseline again.
    restarted = torch.log_softmax(model(stream_batch(1, doc_start=[True, True])).logits, -1)
    torch.testing.assert_close(restarted, alone, rtol=0, atol=1e-5)
    # Only row 0 restarted: row 1 keeps its history, row 0 is the baseline.
    model(stream_batch(1, doc_start=[True, True]))
    mixed = torch.log_softmax(model(stream_batch(2, doc_start=[True, False])).logits, -1)
    ref2 = torch.log_softmax(base(stream_batch(2)).logits, -1)
    torch.testing.assert_close(mixed[0], ref2[0], rtol=0, atol=1e-5)
    assert (mixed[1] - ref2[1]).abs().max() > 1e-3


def test_shallow_fusion_returns_log_probabilities_that_favour_cached_words():
    base, model = baseline_and_model(fusion="shallow")
    model(stream_batch(0))
    logits = model(stream_batch(1)).logits
    torch.testing.assert_close(logits.logsumexp(-1), torch.zeros(logits.shape[:2]), rtol=0, atol=1e-5)
    gain = logits.exp() - torch.softmax(base(stream_batch(1)).logits, -1)     # (B, T, V)
    cached = [20, 21, 22]                                                     # document 0, sentence 0
    assert (gain[0][:, cached].sum(-1) > 0).all()
    others = [w for w in range(50) if w not in cached]
    assert (gain[0][:, others] <= 1e-6).all()


def test_missing_doc_start_and_bad_extras_are_errors():
    batch = stream_batch(0)
    batch.extra = {}
    with pytest.raises(ValueError, match="doc_start"):
        model_for()(batch)
    with pytest.raises(ValueError, match="unknown extras"):
        model_for(cache_sizes=3)
    with pytest.raises(ValueError, match="fusion"):
        model_for(fusion="medium")
    with pytest.raises(ValueError, match="cache_size"):
        model_for(cache_size=0)
    assert model_for(cache_size=3)._stream("x", 2, torch.device("cpu")).words.shape == (2, 3)


@pytest.mark.parametrize("fusion", ["deep", "shallow"])
def test_gates_stay_in_unit_interval(fusion):
    model = model_for(seed=1, fusion=fusion)
    with torch.no_grad():   # large weights drive the sigmoid to saturation: still within [0, 1]
        model.cache_gate.u.weight.mul_(50.0)
    seen: list[torch.Tensor] = []
    hook = model.cache_gate.register_forward_hook(lambda _m, _i, out: seen.append(out))
    for i in range(3):
        model(stream_batch(i))
    hook.remove()
    lam = torch.cat([s.flatten() for s in seen])
    assert lam.min() >= 0.0 and lam.max() <= 1.0
    assert lam.min() < 0.01 and lam.max() > 0.99


def test_new_parameters_are_the_gate_u_v_w():
    """What a sentence-level checkpoint lacks (test_model_contract.py checks that it loads
    leaving exactly these missing): U, V, W, (d, d) for deep fusion, (d -> 1) for shallow."""
    torch.manual_seed(0)
    base = Transformer(tiny(name="transformer"))
    for fusion, out in (("deep", 32), ("shallow", 1)):
        model = model_for(seed=1, fusion=fusion)
        assert sorted(model.new_parameter_names()) == [
            "cache_gate.u.weight", "cache_gate.v.weight", "cache_gate.w.weight"]
        assert model.cache_gate.u.weight.shape == (out, 32)
        extra = model.num_parameters() - base.num_parameters()
        print(f"\n[cache/{fusion}] parameters: baseline {base.num_parameters()}, "
              f"cache {model.num_parameters()}, overhead {extra} "
              f"({100 * extra / base.num_parameters():.2f}%)")
        assert extra == 3 * 32 * out


def test_finish_sentences_writes_each_one_best_into_its_document_slot():
    """Rows of a document-mode search are documents ``doc_slot``; finish_sentences writes row
    b's 1-best into stream ``doc_slot[b]`` (test_model_contract.py checks that the incremental
    steps read that history like a full decode does)."""
    model = model_for()
    first = stream_batch(0)
    slots = torch.tensor([1, 0])                          # rows are documents 1 and 0
    with torch.no_grad():
        model.start_documents(2)
        model.encode(Batch(src=first.src, tgt_in=first.tgt_in, tgt_out=first.tgt_out,
                           extra={"doc_slot": slots}))
        model.finish_sentences([[20, 21, 22], [40, 41]], slots.tolist())
    assert model._streams["decode"].words[:, :3].tolist() == [[40, 41, -1], [20, 21, 22]]


def test_translate_documents_writes_the_one_best_and_scores_match_forced_decoding():
    """Document mode end to end: each greedy 1-best's log-probability equals the teacher-forced
    score under the cache of the 1-bests before it (what finish_sentences wrote)."""
    model = model_for(seed=3)
    with torch.no_grad():
        model.cache_gate.w.weight.mul_(5.0)
    docs = [[s for s, _ in doc] for doc in DOCS]
    cfg = BeamConfig(beam=1, greedy=True, max_len_a=0.0, max_len_b=6)
    hyps = translate_documents(model, docs, cfg)
    assert [len(d) for d in hyps] == [3, 3]
    assert all(h[0].tokens for d in hyps for h in d)                 # something was written
    assert model._streams["decode"].filled.any(1).all()
    beam = translate_documents(model, docs, BeamConfig(beam=3, max_len_a=0.0, max_len_b=6))
    assert all(h for d in beam for h in d)
    # Replay with forward(): streams fed the 1-bests reproduce the search's scores.
    for i in range(3):
        srcs = [d[i] for d in docs]
        outs = [h[i][0].tokens for h in hyps]
        batch = Batch(src=pad([s + [EOS_ID] for s in srcs]), tgt_in=pad([[BOS_ID] + o for o in outs]),
                      tgt_out=pad([o + [EOS_ID] for o in outs]),
                      extra={"doc_start": torch.tensor([i == 0] * 2)})
        with torch.no_grad():
            lp = torch.log_softmax(model(batch).logits, -1).gather(2, batch.tgt_out[..., None])[..., 0]
        for b in range(2):
            n = len(outs[b]) + 1
            assert lp[b, :n].sum().item() == pytest.approx(hyps[b][i][0].logprob, abs=1e-4)
    with pytest.raises(RuntimeError, match="finish_sentences"):
        model.finish_sentences([[1]], [0])



# --- does the cache learn what the paper says it should? ---------------------------------------
AMBIGUOUS, SENSES, CUES = 5, (6, 7), (8, 9)


def sense_document(rng: random.Random, n: int = 4) -> list[tuple[list[int], list[int]]]:
    """Source word 5 means target 6 or 7, fixed per document; only sentence 0 has the cue
    (8 or 9) that says which. Other words w translate to w + 20."""
    sense, doc = rng.randrange(2), []
    for i in range(n):
        src = rng.sample(range(10, 30), rng.randint(2, 4)) + [AMBIGUOUS]
        rng.shuffle(src)
        if i == 0:
            src = [CUES[sense]] + src
        doc.append((src, [SENSES[sense] if w == AMBIGUOUS else CUES[sense] if w in CUES else w + 20
                          for w in src]))
    return doc


def pairs_batch(pairs: list[tuple[list[int], list[int]]], start: bool) -> Batch:
    return Batch(src=pad([s + [EOS_ID] for s, _ in pairs]), tgt_in=pad([[BOS_ID] + t for _, t in pairs]),
                 tgt_out=pad([t + [EOS_ID] for _, t in pairs]),
                 extra={"doc_start": torch.full((len(pairs),), start)})


def ambiguous_accuracy(model: Transformer, docs: list) -> float:
    """Teacher-forced arg-max accuracy on word 5's translation in sentences 1.. (no cue there)."""
    model.eval()
    hit = total = 0
    with torch.no_grad():
        for i in range(len(docs[0])):
            b = pairs_batch([d[i] for d in docs], i == 0)
            pred = model(b).logits.argmax(-1)
            at = (b.tgt_out == SENSES[0]) | (b.tgt_out == SENSES[1])
            if i:
                hit, total = hit + int((pred[at] == b.tgt_out[at]).sum()), total + int(at.sum())
    return hit / total


def sense_experiment(seed: int) -> tuple[float, float]:
    """Step 1 learns the sentence task (the ambiguous word is a coin flip without the cue);
    step 2 trains only U, V, W on document streams. Returns both models' ambiguous accuracy."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    base = Transformer(tiny(name="transformer"))
    opt = build_optimizer(base.parameters(), lr=3e-3)
    base.train()
    for _ in range(300):
        b = pairs_batch([p for _ in range(8) for p in sense_document(rng)], False)
        loss, _, n = label_smoothed_nll(base(b).logits, b.tgt_out, 0.0)
        opt.zero_grad()
        (loss / n).backward()
        opt.step()
    test_docs = [sense_document(random.Random(1000 + i)) for i in range(64)]
    base_acc = ambiguous_accuracy(base, test_docs)
    model = model_for(seed=seed + 1)
    model.load_state_dict(base.state_dict(), strict=False)
    apply_freeze(model, CacheTransformer.sentence_level_prefixes())
    opt = build_optimizer([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(120):
        docs = [sense_document(rng) for _ in range(16)]
        model.train()
        for i in range(4):
            b = pairs_batch([d[i] for d in docs], i == 0)
            loss, _, n = label_smoothed_nll(model(b).logits, b.tgt_out, 0.0)
            opt.zero_grad()
            (loss / n).backward()
            opt.step()
    return base_acc, ambiguous_accuracy(model, test_docs)


@pytest.mark.slow
def test_deep_fusion_learns_document_consistent_translations():
    """The cache recalls the sense its document used before; the sentence-level model cannot."""
    base_acc, cache_acc = sense_experiment(0)
    print(f"\n[cache] ambiguous-word accuracy, sentences 2-4: sentence-level {base_acc:.3f}, "
          f"deep cache {cache_acc:.3f}")
    assert base_acc < 0.65 and cache_acc > max(0.75, base_acc + 0.2)

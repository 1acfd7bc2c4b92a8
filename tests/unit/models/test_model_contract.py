"""The contract every registered model keeps, checked for each entry of ``MODELS`` and the
variants below: causality, incremental decoding, batch-invariant search, two-step freezing and
loading a sentence-level checkpoint.

A newly registered model is checked with its default extras without any change here; ``MORE``
adds the variants worth a second look (pre-norm, ablation flags, another memory layout).

The batches come through the protocol, never by hand per model: the model's ``inputs(SPECIAL)``
says what it reads, and the loader's own functions turn the hand-made ``DOCS`` into batches
(``prepare`` tags the rows, the context rule adds each row's context, then ``collate`` /
``collate_stream`` / ``collate_documents``, as pipeline_lib/training/data.py does for that mode).
A model with translation history (``in_document_order``) is decoded the way
pipeline_lib/evaluate/decode.py does it: ``start_documents``, a search per sentence index over
rows that carry ``extra["doc_slot"]``, ``finish_sentences`` with the 1-best.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode, EXTRA_DOC_SLOT, EXTRA_DOC_START
from pipeline_lib.vocab import EOS_ID, PAD_ID
from pipeline_lib.evaluate.decode import translate_documents
from pipeline_lib.models import MODELS, ModelConfig, Transformer, build_model
from pipeline_lib.models.inputs import ModelInputs, SpecialIds
from pipeline_lib.models.search import BeamConfig, beam_search, greedy_search
from pipeline_lib.models.transformer import EncoderOut
from pipeline_lib.documents import split_document
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.batching import (collate, collate_documents, collate_stream,
                                            stream_batches)
from pipeline_lib.training.shards import prepare
from pipeline_lib.training.optim import build_optimizer, label_smoothed_nll
from pipeline_lib.training.two_step import SENTENCE_LEVEL, apply_freeze, init_from_checkpoint

torch.set_num_threads(1)

VOCAB = 40
SPECIAL = SpecialIds(sent_break=36, src_tag=37, tgt_tag=38)   # stand for "####", <2es>, <2en>
SEED = 1   # the data seed (context rules that draw at random)

#: Three documents of three (source ids, target ids) pairs, lengths mixed so that every batch
#: pads; equally long documents, so document streams keep all three rows in every batch.
DOCS = [
    [([4, 5, 6, 7], [20, 21, 22]), ([8, 9], [23, 24, 25, 26]), ([10, 11, 12], [27, 28])],
    [([13, 14, 15], [29, 30]), ([16, 17, 18, 19, 4], [31, 32, 33]), ([5], [34, 35])],
    [([6, 7], [20, 22, 24]), ([9, 11, 13], [26, 28]), ([15, 17, 19, 8], [30, 32, 34, 21])],
]


@dataclass(frozen=True)
class Variant:
    """One model configuration under test; ``sentence_batches``: the plain (tagged) sentence
    batches that a DOCUMENT-mode model also trains on."""

    name: str
    extras: dict = field(default_factory=dict)
    norm_first: bool = False
    sentence_batches: bool = False

    def __str__(self) -> str:
        flags = [f"{k}={v}" for k, v in self.extras.items()]
        flags += ["norm_first"] * self.norm_first + ["sentence_batches"] * self.sentence_batches
        return "-".join([self.name, *flags])

    def config(self, dropout: float = 0.0) -> ModelConfig:
        return ModelConfig(vocab_size=VOCAB, d_model=16, n_heads=2, d_ff=32, enc_layers=2,
                           dec_layers=2, dropout=dropout, max_len=64, name=self.name,
                           norm_first=self.norm_first, extras=dict(self.extras))


#: Variants beyond each registered model's defaults (those the per-model tests exercised).
MORE: dict[str, list[Variant]] = {
    "transformer": [Variant("transformer", norm_first=True),
                    Variant("transformer", {"lang_tags": True})],
    "doct": [Variant("doct", norm_first=True), Variant("doct", {"gating": False})],
    "camn": [Variant("camn", {"memory_sentences": 2}),
             Variant("camn", {"memory_sentences": 2, "memory_mode": "concat"}),
             Variant("camn", {"memory_sentences": 2, "memory_mode": "weighted"}),
             Variant("camn", {"memory_mode": "concat", "context_ffn": False}),
             Variant("camn", norm_first=True), Variant("camn", {"rnn": False}),
             Variant("camn", {"memory_sentences": 2, "random_context": True}),
             Variant("camn", {"memory_sentences": 2, "memory_mode": "weighted",
                              "random_context": True})],
    "cache": [Variant("cache", {"fusion": "shallow"}), Variant("cache", norm_first=True)],
    "dbsa": [Variant("dbsa", norm_first=True)],
    "crosstask": [Variant("crosstask", {"max_sentences": 2}),
                  Variant("crosstask", norm_first=True),
                  Variant("crosstask", sentence_batches=True)],
}
VARIANTS = [v for name in sorted(MODELS) for v in [Variant(name), *MORE.get(name, [])]]
#: Variants with their own parameters (the batches do not matter for a state_dict).
TWO_STEP = [v for v in VARIANTS if not v.sentence_batches]


@dataclass
class Case:
    """A model of one variant with its inputs, the loader's rows of ``DOCS`` and the batches of
    one training pass over them (one batch, or one per sentence index of document streams)."""

    variant: Variant
    model: torch.nn.Module
    inputs: ModelInputs
    docs: list[list[dict]]
    batches: list[Batch]

    @property
    def history(self) -> list[Batch]:
        return self.batches[:-1]

    @property
    def probe(self) -> Batch:
        """The batch under test; the ones before it are its documents' history (streams)."""
        return self.batches[-1]


def make_case(variant: Variant, seed: int = 0, dropout: float = 0.0, pad_multiple: int = 1) -> Case:
    """``pad_multiple``: the loader's rounding of padded lengths (8 on CUDA)."""
    torch.manual_seed(seed)
    model = build_model(variant.config(dropout)).eval()
    inputs = model.inputs(SPECIAL)
    if variant.sentence_batches:
        inputs = inputs.sentence_batches()
    docs = [[prepare(_row(k, i, src, tgt, inputs.heads), inputs) for i, (src, tgt) in enumerate(d)]
            for k, d in enumerate(DOCS)]
    if inputs.mode is DataMode.CONTEXT:
        inputs.add_context(docs, SEED)
    if inputs.mode is DataMode.STREAM:
        batches = [collate_stream(b, pad_multiple, 64) for b in stream_batches(docs, 10 ** 6)]
    else:
        batches = [collate_units(inputs, units(inputs, docs), pad_multiple)]
    return Case(variant, model, inputs, docs, batches)


def _row(doc: int, i: int, src: list[int], tgt: list[int], heads: bool) -> dict:
    """A shard row; subword heads (when the model reads them): each piece's head is the piece
    before it, the first piece is the root (points to itself)."""
    row = {"doc_id": f"d{doc}", "sent_idx": i, "src_ids": list(src), "tgt_ids": list(tgt)}
    if heads:
        row["src_heads"] = [max(j - 1, 0) for j in range(len(src))]
        row["tgt_heads"] = [max(j - 1, 0) for j in range(len(tgt))]
    return row


def units(inputs: ModelInputs, docs: list[list[dict]]) -> list:
    """What a batch is made of: rows, or whole sub-documents (DOCUMENT mode)."""
    if inputs.mode is DataMode.DOCUMENT:
        return [d[a:b] for d in docs for a, b in split_document(len(d), inputs.max_sentences)]
    return [r for d in docs for r in d]


def collate_units(inputs: ModelInputs, chosen: list, pad_multiple: int = 1) -> Batch:
    if inputs.mode is DataMode.DOCUMENT:
        return collate_documents(chosen, inputs, pad_multiple, 64)
    return collate(chosen, inputs, pad_multiple, 64)


def references(batch: Batch) -> list[list[int]]:
    """Each row's target as a hypothesis (ids without EOS and padding)."""
    return [[t for t in row if t not in (PAD_ID, EOS_ID)] for row in batch.tgt_out.tolist()]


def with_slots(batch: Batch, slots: torch.Tensor) -> Batch:
    return replace(batch, extra={**batch.extra, EXTRA_DOC_SLOT: slots})


def encode_probe(case: Case, history: bool = True, reverse: bool = True) -> EncoderOut:
    """The probe encoded for search. A model with translation history first decodes its
    documents' earlier sentences as decode.translate_documents does, each row's reference as
    its 1-best; with ``reverse`` rows take the document slots in reverse order (row != slot)."""
    model, probe = case.model, case.probe
    if not case.inputs.in_document_order:
        return model.encode(probe)
    slots = torch.arange(probe.src.size(0))
    slots = slots.flip(0) if reverse else slots
    model.start_documents(len(slots))
    for batch in case.history if history else []:
        model.encode(with_slots(batch, slots))
        model.finish_sentences(references(batch), slots.tolist())
    return model.encode(with_slots(probe, slots))


def forward_probe(case: Case, tgt_in: torch.Tensor | None = None) -> torch.Tensor:
    """Teacher-forced logits of the probe after its history (document streams carry state)."""
    for batch in case.history:
        case.model(batch)
    probe = case.probe if tgt_in is None else replace(case.probe, tgt_in=tgt_in)
    return case.model(probe).logits


@pytest.fixture(params=VARIANTS, ids=str)
def case(request) -> Case:
    return make_case(request.param)


# --------------------------------------------------------------------------- the contract


def test_every_registered_model_is_checked():
    assert {v.name for v in VARIANTS} == set(MODELS)
    assert set(MORE) <= set(MODELS), "a variant names a model that is not registered"


@torch.no_grad()
def test_future_target_tokens_do_not_change_earlier_logits(case):
    ref = forward_probe(case)
    tgt_in = case.probe.tgt_in
    longest = int(tgt_in.ne(PAD_ID).sum(1).argmax())
    for t in range(tgt_in.size(1) - 1):
        changed = tgt_in.clone()
        future = changed[:, t + 1:]
        changed[:, t + 1:] = torch.where(future == VOCAB - 5, VOCAB - 6, VOCAB - 5)
        out = forward_probe(case, changed)
        torch.testing.assert_close(out[:, : t + 1], ref[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[longest, t + 1:], ref[longest, t + 1:])


@torch.no_grad()
def test_incremental_decode_step_equals_full_decode(case):
    model, probe = case.model, case.probe
    T = probe.tgt_in.size(1)
    enc = encode_probe(case)
    full = torch.log_softmax(model.decode(probe.tgt_in, enc), dim=-1)          # (B, T, V)
    state = model.init_state(enc)
    for t in range(T):
        lp, state = model.decode_step(probe.tgt_in[:, t:t + 1], state, t)
        torch.testing.assert_close(lp, full[:, t], rtol=0, atol=1e-5)
    assert all(cache["self_attn.k"].size(2) == T for cache in state.layers)    # grew per step
    # Beam reordering moves every row's memories and caches with it.
    swap = torch.arange(probe.src.size(0)).flip(0)
    state = model.init_state(encode_probe(case)).reorder(swap)
    assert isinstance(state.enc, EncoderOut)
    lp, _ = model.decode_step(probe.tgt_in[swap, :1], state, 0)
    torch.testing.assert_close(lp, full[swap, 0], rtol=0, atol=1e-5)
    if case.inputs.in_document_order:
        # Slots only name the documents: another assignment of slots to rows changes nothing.
        in_order = model.decode(probe.tgt_in, encode_probe(case, reverse=False))
        torch.testing.assert_close(torch.log_softmax(in_order, dim=-1), full, rtol=0, atol=1e-5)
        # The translation history is really read.
        fresh = model.decode(probe.tgt_in, encode_probe(case, history=False))
        assert (full - torch.log_softmax(fresh, dim=-1)).abs().max() > 1e-3


@pytest.mark.parametrize("search,cfg", [
    (beam_search, BeamConfig(beam=3, nbest=2)), (greedy_search, BeamConfig(beam=1, greedy=True))],
    ids=["beam", "greedy"])
def test_search_over_a_batch_equals_search_unit_by_unit(case, search, cfg):
    """Each sentence (each sub-document in DOCUMENT mode, each document for a model with
    translation history) gets the hypotheses it gets alone, with its own context."""
    model, inputs = case.model, case.inputs
    if not inputs.batch_invariant:
        pytest.skip("the model reads the sentences batched with it (declared batch_invariant="
                    "False); its own tests check that the batch is what it reads")
    if inputs.in_document_order:
        docs = [[r["src_ids"] for r in d] for d in case.docs]
        together = [h for d in translate_documents(model, docs, replace(cfg, batch_size=len(docs)))
                    for h in d]
        alone = [h for d in docs for h in translate_documents(model, [d], cfg)[0]]
    else:
        parts = units(inputs, case.docs)
        together = search(model, collate_units(inputs, parts), cfg)
        alone = [h for part in parts for h in search(model, collate_units(inputs, [part]), cfg)]
    assert len(together) == len(alone) == sum(len(d) for d in DOCS)
    for a, b in zip(alone, together):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_padding_to_a_multiple_changes_no_loss_and_no_hypothesis(variant):
    """The loader's rounding of padded lengths (``pad_multiple``, 8 on CUDA) only adds masked
    padding: the same loss (and logits at every real target position), the same beam search
    hypotheses (with the same scores)."""
    plain, wide = make_case(variant), make_case(variant, pad_multiple=16)
    assert wide.probe.src.size(1) % 16 == 0 and wide.probe.src.size(1) > plain.probe.src.size(1)
    with torch.no_grad():
        a, b = forward_probe(plain), forward_probe(wide)
        T = a.size(1)
        real = plain.probe.tgt_out.ne(PAD_ID)
        torch.testing.assert_close(b[:, :T][real], a[real], rtol=0, atol=1e-5)
        losses = [label_smoothed_nll(x, c.probe.tgt_out, 0.1)[0] for x, c in ((a, plain), (b, wide))]
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-5)
    cfg = BeamConfig(beam=3, nbest=2)
    hyps = []
    for c in (plain, wide):
        if c.inputs.in_document_order:
            hyps.append(translate_documents(c.model, [[r["src_ids"] for r in d] for d in c.docs], cfg))
            hyps[-1] = [h for d in hyps[-1] for h in d]
        else:
            hyps.append(beam_search(c.model, c.probe, cfg))
    for x, y in zip(*hyps):
        assert [h.tokens for h in x] == [h.tokens for h in y]
        assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-4)


@pytest.mark.parametrize("nbest", [1, 3])
def test_fixed_shape_beam_search_gives_the_same_hypotheses(case, nbest):
    """Beam search in fixed shapes (buffers of every position, finished sentences kept unread:
    what is replayed as a CUDA graph on a GPU) finds what the shrinking search finds."""
    cfg = BeamConfig(beam=3, nbest=nbest, max_len_b=4)
    found = []
    for static in (False, True):
        c = replace(cfg, static=static)
        if case.inputs.in_document_order:
            docs = [[r["src_ids"] for r in d] for d in case.docs]
            found.append([h for d in translate_documents(case.model, docs, c) for h in d])
        else:
            found.append(beam_search(case.model, case.probe, c))
    assert len(found[0]) == len(found[1]) == case.probe.src.size(0) * (
        len(case.batches) if case.inputs.in_document_order else 1)
    for a, b in zip(*found):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


#: aten ops that read a tensor's values back to the host (or whose output's shape depends on
#: them): on a GPU each makes the step wait for all the work queued before it.
HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
              torch.ops.aten.masked_select.default, torch.ops.aten.equal.default,
              torch.ops.aten.repeat_interleave.Tensor}
BOOL_INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default,
                 torch.ops.aten.index_put_.default}


class HostReads(TorchDispatchMode):
    """Names the ops run under it that would synchronise a GPU (boolean-mask indexing runs a
    nonzero inside its kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS or (func in BOOL_INDEXING and any(
                i is not None and i.dtype == torch.bool for i in args[1])):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_a_training_pass_never_reads_the_device(variant):
    """Forward (history batches included), the trainer's loss and backward, with dropout, read
    nothing back to the host: the trainer's step never waits for the GPU (it fetches its
    numbers once per log record)."""
    case = make_case(variant, dropout=0.1)
    model = case.model.train()
    with HostReads() as reads:
        for batch in case.batches:
            out = model(batch)
            loss, _, n = label_smoothed_nll(out.logits, batch.tgt_out, 0.1)
            if out.aux_loss is not None:
                loss = loss + out.aux_loss.float() * n
            loss.backward()
    assert reads.ops == []


def _two_step(cls: type) -> None:
    if cls is Transformer or not hasattr(cls, "sentence_level_prefixes"):
        pytest.skip(f"{cls.__name__} is not trained on top of a sentence-level checkpoint")


@pytest.mark.parametrize("variant", TWO_STEP, ids=str)
def test_baseline_state_dict_leaves_only_new_parameters_missing(variant):
    _two_step(MODELS[variant.name])
    torch.manual_seed(0)
    base = Transformer(replace(variant, name="transformer", extras={}).config())
    model = make_case(variant, seed=1).model
    res = model.load_state_dict(base.state_dict(), strict=False)
    new = model.new_parameter_names()
    assert res.unexpected_keys == []
    assert res.missing_keys and sorted(res.missing_keys) == sorted(new)
    base_params = dict(base.named_parameters())
    for name, p in model.named_parameters():
        if name in base_params:
            assert torch.equal(p, base_params[name]), name
    # the overhead over the baseline is exactly the new parameters
    assert model.num_parameters() - base.num_parameters() == sum(
        p.numel() for n, p in model.named_parameters() if n in set(new))


@pytest.mark.parametrize("variant", TWO_STEP, ids=str)
def test_two_step_training_keeps_sentence_level_parameters_bit_identical(variant, tmp_path):
    """Step 2 with the trainer's own helpers: init_from the step-1 checkpoint, freeze
    ``@sentence_level``, train the new parameters on the model's batches (with dropout, the
    trainer's loss); then the checkpoint reloads as the same model."""
    cls = MODELS[variant.name]
    _two_step(cls)
    torch.manual_seed(0)
    base = Transformer(replace(variant, name="transformer", extras={}).config())
    ckpt.save_checkpoint(tmp_path / "step1", base.state_dict(), base.cfg.to_dict())
    case = make_case(variant, seed=1, dropout=0.1)
    model = case.model
    keys = init_from_checkpoint(model, tmp_path / "step1")
    assert keys["unexpected"] == []
    assert sorted(keys["missing"]) == sorted(model.new_parameter_names())
    frozen = apply_freeze(model, (SENTENCE_LEVEL,))
    assert sorted(frozen) == sorted(n for n, _ in base.named_parameters())
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert sorted(trainable) == sorted(model.new_parameter_names())

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model.parameters(), lr=1e-2)
    model.train()
    for step in range(max(3, 2 * len(case.batches))):   # streams: twice through, in order
        batch = case.batches[step % len(case.batches)]
        opt.zero_grad(set_to_none=True)
        out = model(batch)
        loss, _, n = label_smoothed_nll(out.logits, batch.tgt_out, 0.1)
        if out.aux_loss is not None:   # as the trainer combines them
            loss = loss + out.aux_loss * n
        (loss / n).backward()
        assert all(p.grad is not None for p in trainable.values())   # every new parameter is used
        # A batch that only starts documents has no history to read; any other moves them all.
        starts = batch.extra.get(EXTRA_DOC_START)
        if starts is None or not bool(starts.all()):
            assert all(p.grad.abs().sum() > 0 for p in trainable.values())
        opt.step()
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, before[name]), f"sentence-level parameter changed: {name}"
        else:
            assert not torch.equal(p, before[name]), f"new parameter not trained: {name}"

    ckpt.save_checkpoint(tmp_path / "step2", model.state_dict(), model.cfg.to_dict())
    loaded, loaded_cfg = ckpt.load_model(tmp_path / "step2")
    assert type(loaded) is cls and loaded_cfg == model.cfg
    model.eval()
    with torch.no_grad():
        for batch in case.batches:   # in order: stream models carry their history along
            torch.testing.assert_close(loaded(batch).logits, model(batch).logits, rtol=0, atol=0)

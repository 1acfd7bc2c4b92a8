"""Context controls (issue 34 items 2-3): which models read context (the plan's torch-free table
against every registered model), what a random-context twin and an ablated decode read instead
(a swapped rule, or documents regrouped from other documents' sentences), and the refusals for
models that read no context."""

from __future__ import annotations

import pytest

from pipeline_lib.context_conditions import CONTEXT_MODELS
from pipeline_lib.models import MODELS, ModelConfig, build_model
from pipeline_lib.models.inputs import (CTX_KEY, RandomSentences, SpecialIds, with_context,
                                        within_document)
from pipeline_lib.training.train_config import TrainConfig

SPECIAL = SpecialIds(sent_break=36, src_tag=37, tgt_tag=38)


def _inputs(name: str):
    cfg = ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                      dec_layers=1, max_len=64, name=name)
    return build_model(cfg).inputs(SPECIAL)


#: the context models whose context is a per-sentence rule (the others read whole documents)
RULE_MODELS = sorted(n for n in CONTEXT_MODELS if _inputs(n).context is not None)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_plans_table_names_exactly_the_models_that_read_context(name):
    inputs = _inputs(name)
    assert (inputs.context is not None or inputs.reads_documents) == (name in CONTEXT_MODELS)


def _docs() -> list[list[dict]]:
    """Three documents whose sentences use disjoint ids (document d: ids 10 d + ...)."""
    return [[{"doc_id": f"d{d}", "sent_idx": i, "src_ids": [10 * d + i, 10 * d + i]}
             for i in range(4)] for d in (1, 2, 3)]


@pytest.mark.parametrize("name", RULE_MODELS)
def test_a_twin_reads_only_other_documents_sentences_in_the_true_amount(name):
    true, twin = _inputs(name), with_context(_inputs(name), "random", name)
    docs, twin_docs = _docs(), _docs()
    true.add_context(docs, seed=1)
    twin.add_context(twin_docs, seed=1)
    for d, (own, drawn) in enumerate(zip(docs, twin_docs), start=1):
        for i, (a, b) in enumerate(zip(own, drawn)):
            ctx_true = _ids(a[CTX_KEY]) - {SPECIAL.sent_break}
            ctx_twin = _ids(b[CTX_KEY]) - {SPECIAL.sent_break}
            assert ctx_true <= {10 * d + j for j in range(i)}      # the document's own
            assert not ctx_twin & set(range(10 * d, 10 * d + 10)), (name, d, i)
            assert bool(ctx_twin) == bool(i)   # a first sentence gets none, as in training


def _ids(ctx) -> set[int]:
    flat = ctx if not ctx or isinstance(ctx[0], int) else [t for s in ctx for t in s]
    return set(flat) - {0, 1, 2, 3}     # pad, bos, eos, unk


@pytest.mark.parametrize("name", RULE_MODELS)
def test_an_empty_context_is_what_a_first_sentence_gets(name):
    empty = with_context(_inputs(name), "empty", name)
    docs = _docs()
    empty.add_context(docs, seed=1)
    assert {repr(r[CTX_KEY]) for d in docs for r in d} == {repr(docs[0][0][CTX_KEY])}


@pytest.mark.parametrize("name", sorted(set(MODELS) - CONTEXT_MODELS))
def test_a_model_that_reads_no_context_has_no_twin_or_ablation(name):
    assert with_context(_inputs(name), "true", name) == _inputs(name)
    with pytest.raises(ValueError, match=f"model '{name}' reads no context"):
        with_context(_inputs(name), "random", name)


def test_train_context_is_one_of_the_conditions():
    assert TrainConfig(context="random").context == "random"
    with pytest.raises(ValueError, match=r"train.context='other'"):
        TrainConfig(context="other")


@pytest.mark.parametrize("name", RULE_MODELS)
def test_one_document_falls_back_to_its_own_sentences_outside_the_true_context(name):
    """A dev or test set of one document has no other document: the twin's and the ablation's
    random context is then CAMN's own condition, and ``within_document`` says so."""
    twin = with_context(_inputs(name), "random", name)
    one, camn = _docs()[:1], _docs()[:1]
    assert within_document(twin, one) and not within_document(twin, _docs())
    assert not within_document(_inputs(name), one)
    twin.add_context(one, seed=1)
    camn_rule = RandomSentences(twin.context.true_context())
    for r, ctxs in zip(camn[0], camn_rule.contexts(camn, seed=1)[0]):
        r[CTX_KEY] = ctxs
    assert [r[CTX_KEY] for r in one[0]] == [r[CTX_KEY] for r in camn[0]]


@pytest.mark.parametrize("name", sorted(set(CONTEXT_MODELS) - set(RULE_MODELS)))
def test_a_document_readers_twin_reads_regrouped_documents(name):
    """The cache and cross-task read whole documents: their random condition regroups them
    (the loader's and the decoder's inputs say so), their empty one gives a sentence each."""
    assert with_context(_inputs(name), "random", name).documents_from == "random"
    assert with_context(_inputs(name), "empty", name).documents_from == "empty"
    assert with_context(_inputs(name), "true", name) == _inputs(name)
    twin = with_context(_inputs(name), "random", name)
    assert within_document(twin, _docs()[:1]) and not within_document(twin, _docs())

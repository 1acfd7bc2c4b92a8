"""The model protocol's context building (pipeline_lib/models/inputs.py) on hand examples and a
real sentencepiece model."""

from __future__ import annotations

import pytest
import sentencepiece as spm

from pipeline_lib.preprocess.bpe import user_symbols
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID, SENT_BREAK, UNK_ID, lang_tag
from pipeline_lib.models.inputs import (CTX_KEY, ModelInputs, PreviousSentences,
                                        PreviousSentenceSlots, SpecialIds, context_ids,
                                        context_sentences, inputs_for, random_previous)

BRK = 9
DOC = [[10, 11], [12], [13, 14, 15]]


def test_first_sentence_gets_lone_bos():
    assert context_ids([], 2, 50, BRK) == [BOS_ID]
    assert context_sentences([], 2, 50) == [[], [BOS_ID]]


def test_previous_k_oldest_first_joined_by_break():
    assert context_ids(DOC, 2, 50, BRK) == [12, BRK, 13, 14, 15, EOS_ID]
    assert context_ids(DOC[:1], 1, 50, BRK) == [10, 11, EOS_ID]
    assert context_sentences(DOC, 2, 50) == [[12, EOS_ID], [13, 14, 15, EOS_ID]]


def test_k_larger_than_available():
    assert context_ids(DOC, 5, 50, BRK) == [10, 11, BRK, 12, BRK, 13, 14, 15, EOS_ID]
    assert context_sentences(DOC[:1], 3, 50) == [[], [], [10, 11, EOS_ID]]


def test_truncation_keeps_most_recent_tokens():
    assert context_ids(DOC, 3, 4, BRK) == [13, 14, 15, EOS_ID]
    assert context_ids(DOC, 3, 6, BRK) == [12, BRK, 13, 14, 15, EOS_ID]
    assert context_sentences([[1, 2, 3, 4, 5]], 1, 3) == [[4, 5, EOS_ID]]


def test_random_context_deterministic_and_excludes_true_context():
    pool = [[i] for i in range(10, 20)]
    draws = {tuple(map(tuple, random_previous(pool, 5, 2, 2, 1, "d", s))) for s in range(50)}
    assert len(draws) > 10                               # depends on the sentence
    for s in range(50):
        got = random_previous(pool, 5, 2, 2, 1, "d", s)
        assert got == random_previous(pool, 5, 2, 2, 1, "d", s)   # deterministic
        assert all(x[0] not in (13, 14, 15) for x in got)          # current + 2 previous
    with pytest.raises(ValueError, match="no sentence"):
        random_previous(pool[:2], 1, 1, 1, 1, "d", 0)


def test_add_context_and_tensors():
    inputs = ModelInputs(mode=DataMode.CONTEXT, context=PreviousSentences(1, 50, BRK))
    docs = [[{"doc_id": "a", "sent_idx": i, "src_ids": s} for i, s in enumerate(DOC)],
            [{"doc_id": "b", "sent_idx": 0, "src_ids": [20]}]]
    inputs.add_context(docs, 1)
    assert [r[CTX_KEY] for r in docs[0]] == [[BOS_ID], [10, 11, EOS_ID], [12, EOS_ID]]
    assert docs[1][0][CTX_KEY] == [BOS_ID]
    ctx, extra = inputs.context_tensors(docs[0])
    assert ctx.tolist() == [[BOS_ID, PAD_ID, PAD_ID], [10, 11, EOS_ID], [12, EOS_ID, PAD_ID]]
    assert extra == {}
    weighted = ModelInputs(mode=DataMode.CONTEXT, context=PreviousSentenceSlots(2, 50, "ctx_sents"))
    weighted.add_context(docs, 1)
    ctx, extra = weighted.context_tensors(docs[0])
    assert ctx is None and extra["ctx_sents"].shape == (3, 2, 3)
    assert extra["ctx_sents"][2].tolist() == [[10, 11, EOS_ID], [12, EOS_ID, PAD_ID]]


def test_special_ids_from_real_spm(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("\n".join(["el perro come pan", "the dog eats bread"] * 30) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "m"), vocab_size=40, pad_id=PAD_ID,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, user_defined_symbols=user_symbols("es", "en"),
        hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    ids = SpecialIds.from_spm(tmp_path / "m.model")
    assert sp.id_to_piece(ids.sent_break) == SENT_BREAK
    assert sp.id_to_piece(ids.src_tag) == lang_tag("es")
    assert sp.id_to_piece(ids.tgt_tag) == lang_tag("en")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "plain"), vocab_size=30, pad_id=PAD_ID,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, hard_vocab_limit=False, minloglevel=2)
    with pytest.raises(ValueError, match="####"):
        SpecialIds.from_spm(tmp_path / "plain.model")


@pytest.mark.parametrize("name,extras", [("doct", {"context_sentences": 2}),
                                         ("camn", {"memory_sentences": 2, "memory_mode": "weighted"}),
                                         ("crosstask", {"max_sentences": 4})])
def test_contrastive_scorer_builds_the_training_context(tmp_path, name, extras):
    """discourse.CheckpointScorer feeds the model the same context the loader builds."""
    import torch

    from pipeline_lib.evaluate.discourse import CheckpointScorer
    from pipeline_lib.models import ModelConfig, build_model

    text = tmp_path / "t.txt"
    text.write_text("\n".join(["el perro come pan", "the dog eats bread", "la casa"] * 30) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "m"), vocab_size=40, pad_id=PAD_ID,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, user_defined_symbols=user_symbols("es", "en"),
        hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=sp.get_piece_size(), d_model=16, n_heads=2, d_ff=32,
                                    enc_layers=1, dec_layers=1, dropout=0.0, max_len=64, name=name,
                                    extras=extras))
    inputs = inputs_for(model, tmp_path / "m.model")
    special = SpecialIds.from_spm(tmp_path / "m.model")
    seen = []
    forward = model.forward
    model.forward = lambda b: seen.append(b) or forward(b)
    scorer = CheckpointScorer(model, sp.encode, max_len=64, inputs=inputs)
    ctx = ["el perro", "come pan", "la casa"]
    a = scorer(ctx, "el perro", [], ["the dog", "a dog"])
    b = scorer(ctx[:1], "el perro", [], ["the dog", "a dog"])
    assert a != b                               # the context reaches the model
    prev = [sp.encode(t) for t in ctx]
    batch = seen[0]
    if name == "doct":
        want = context_ids(prev, 2, 64, special.sent_break)
        assert batch.ctx_src[0].tolist() == want
    elif name == "camn":
        assert batch.extra["ctx_sents"].shape[:2] == (2, 2)
        got = [[t for t in s if t != PAD_ID] for s in batch.extra["ctx_sents"][0].tolist()]
        assert got == context_sentences(prev, 2, 64)
    else:
        doc = batch.extra["doc_src"][0]
        assert doc.size(0) == 4 and doc[0, 0].item() == special.tgt_tag
        assert (batch.src[:, 0] == special.tgt_tag).all()

"""The checkpoint score_fn and the contrastive command, and lexical consistency."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from pipeline_lib.evaluate import discourse, suites
from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID
from pipeline_lib.tables import DOC_SCHEMA

# a Voita-format suite (tests/data/contrastive/README.md)
DEIXIS = Path(__file__).resolve().parents[2] / "data/contrastive/voita/deixis_test.json"

V = 12  # toy vocabulary: ids 4.. are the letters a, b, c, ...


def encode(text: str) -> list[int]:
    return [4 + ord(ch) - ord("a") for ch in text.replace(" ", "")]


class ContextCopyModel(nn.Module):
    """Tiny model of the pipeline interface: prefers, at every step, the first token of the
    source context (Batch.ctx_src), so only context decides between candidates."""

    def forward(self, batch):
        B, T = batch.tgt_in.shape
        logits = torch.zeros(B, T, V)
        favourite = batch.ctx_src[:, 0]                           # (B,)
        logits[torch.arange(B), :, favourite] = 5.0
        logits[:, :, EOS_ID] = 5.0
        return type("Out", (), {"logits": logits})()


class UniformModel(nn.Module):
    def forward(self, batch):
        B, T = batch.tgt_in.shape
        assert (batch.tgt_in[:, 0] == BOS_ID).all() and (batch.src[:, -1] == EOS_ID).all()
        return type("Out", (), {"logits": torch.zeros(B, T, V)})()


def test_checkpoint_scorer_sums_log_probabilities():
    scorer = discourse.CheckpointScorer(UniformModel(), encode)
    scores = scorer([], "ab", [], ["a", "abc"])
    # uniform over V: each target token and the EOS cost log V
    assert scores == pytest.approx([-2 * math.log(V), -4 * math.log(V)], abs=1e-5)


def test_checkpoint_scorer_picks_the_candidate_the_context_supports():
    from pipeline_lib.batch import DataMode
    from pipeline_lib.models.inputs import ModelInputs, PreviousSentences

    inputs = ModelInputs(mode=DataMode.CONTEXT, context=PreviousSentences(1, 256, sent_break=V - 1))
    scorer = discourse.CheckpointScorer(ContextCopyModel(), encode, inputs=inputs)
    assert max(range(2), key=scorer(["b"], "x", [], ["a a", "b b"]).__getitem__) == 1
    assert max(range(2), key=scorer(["a"], "x", [], ["a a", "b b"]).__getitem__) == 0
    ex = [suites.ContrastiveExample("p", ["b"], "x", [], ["a", "b"], 1, "1"),
          suites.ContrastiveExample("p", ["a"], "x", [], ["a", "b"], 0, "1"),
          suites.ContrastiveExample("p", ["c"], "x", [], ["a", "c", "b"], 1, "2")]
    strict = suites.Decision.STRICT
    assert suites.evaluate_suite(ex, scorer, strict)["accuracy"] == 100.0
    assert suites.evaluate_suite(ex, discourse.CheckpointScorer(UniformModel(), encode),
                                    strict)["accuracy"] == 0.0


def test_lexical_consistency_on_a_hand_checked_example():
    stop: set[str] = set()
    cfg = discourse.ConsistencyConfig(stop_top_k=0, min_chars=3)
    # 'casa' is repeated in doc 1; 'perro' in doc 2. Dice aligns casa->house and perro->dog.
    consistent = [[("la casa", "the house"), ("una casa", "a house")],
                  [("el perro", "the dog"), ("un perro", "one dog"), ("sin gato", "no cat")]]
    res = discourse.lexical_consistency(consistent, stop, stop, cfg)
    assert res == {"consistency": 100.0, "consistent": 2, "items": 2}
    # doc 1 now uses 'home' once: casa's translations differ there
    mixed = [[("la casa", "the house"), ("una casa", "a home")],
             [("el perro", "the dog"), ("un perro", "one dog"), ("sin gato", "no cat")]]
    res = discourse.lexical_consistency(mixed, stop, stop, cfg)
    assert res == {"consistency": 50.0, "consistent": 1, "items": 2}
    # an untranslated occurrence (no content word) is inconsistent
    empty = [[("la casa", "the house"), ("una casa", "")]]
    assert discourse.lexical_consistency(empty, stop, stop, cfg)["consistent"] == 0
    assert discourse.function_words(["a a b", "b c a"], 2) == {"a", "b"}


def test_consistency_cli_reports_references_and_models(tmp_path):
    rows = []
    for d in range(3):
        for i, (s, t) in enumerate([("la casa grande", "the big house"),
                                    ("la casa roja", "the red house")]):
            rows.append(dict(corpus="c", split="test", doc_id=f"d{d}", sent_idx=i, src=s, tgt=[t],
                             has_context=True, origin_file="f", origin_line=1))
    pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), tmp_path / "docs.parquet")
    good = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"], hyp=r["tgt"][0]) for r in rows]
    bad = [dict(g, hyp=g["hyp"].replace("house", "home") if g["sent_idx"] else g["hyp"])
           for g in good]
    pq.write_table(pa.Table.from_pylist(good), tmp_path / "good.parquet")
    pq.write_table(pa.Table.from_pylist(bad[:-1]), tmp_path / "bad.parquet")
    out = tmp_path / "o" / "consistency.json"
    rc = discourse.main(["consistency", "--refs", "c", str(tmp_path / "docs.parquet"),
                         "--hyp", "good", "c", "test", str(tmp_path / "good.parquet"),
                         "--hyp", "bad", "c", "test", str(tmp_path / "bad.parquet"),
                         "--stop-top-k", "0", "--min-chars", "4", "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())["results"]["c/test"]
    assert res["reference"]["consistency"] == 100.0 and res["good"]["consistency"] == 100.0
    assert res["bad"]["consistency"] == 0.0 and res["bad"]["items"] == 3
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["rejected_total"] == 1


def test_contrastive_cli_refuses_a_suite_in_another_direction(tmp_path, caplog):
    """Before it opens the checkpoint (which does not exist here)."""
    pronouns = {"format": "contrapro", "path": "c.json"}
    rc = discourse.main(["contrastive", "--checkpoint", str(tmp_path / "none"), "--suites",
                         json.dumps({"pronouns": pronouns}), "--lang-pair", "es-en",
                         "--output", str(tmp_path / "o.json")])
    assert rc == 1 and not (tmp_path / "o.json").exists()
    assert "suite pronouns is en-de" in caplog.text and "is es-en" in caplog.text


def test_contrastive_cli_on_a_real_checkpoint(tmp_path):
    """The pipeline's transformer, saved as a checkpoint directory with a real sentencepiece
    model, scored on a Voita-format suite through the CLI; scores match a direct forward pass."""
    import sentencepiece as spm

    from pipeline_lib.checkpoint import save_checkpoint
    from pipeline_lib.models.config import ModelConfig
    from pipeline_lib.models.registry import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    text = tmp_path / "train.txt"
    text.write_text("\n".join(f"you were late {i} . ты опоздал . вы опоздали . are you coming ?"
                              for i in range(200)) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "spm"),
                                   vocab_size=60, pad_id=0, unk_id=1, bos_id=2, eos_id=3,
                                   model_type="bpe", minloglevel=2)
    cfg = ModelConfig(vocab_size=60, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                      dropout=0.0)
    model = build_model(cfg)
    ckpt = save_checkpoint(tmp_path / "best", model.state_dict(), cfg.to_dict(),
                           spm_model=tmp_path / "spm.model")
    out = tmp_path / "o" / "contrastive.json"
    rc = discourse.main(["contrastive", "--checkpoint", str(ckpt), "--suites",
                         json.dumps({"deixis": {"format": "voita", "path": str(DEIXIS)}}),
                         "--lang-pair", "en-ru", "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())["suites"]["deixis"]
    assert res["total"] == 4 and set(res["by_distance"]) == {"1", "2", "3"}
    assert res["decision"] == "first_best"
    scorer = discourse.CheckpointScorer.from_checkpoint(ckpt)
    scores = scorer([], "You were late .", [], ["Ты опоздал .", "Вы опоздали ."])
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    y = sp.encode("Ты опоздал .")
    x = torch.tensor([sp.encode("You were late .") + [EOS_ID]])
    batch = Batch(src=x, tgt_in=torch.tensor([[BOS_ID] + y]), tgt_out=torch.tensor([y + [EOS_ID]]),
                  ctx_src=torch.tensor([[EOS_ID]]), extra={"ctx_tgt": torch.tensor([[EOS_ID]])})
    with torch.no_grad():
        logp = torch.log_softmax(scorer.model(batch).logits, -1)[0]
    expected = sum(logp[t, tok].item() for t, tok in enumerate(y + [EOS_ID]))
    assert scores[0] == pytest.approx(expected, abs=1e-4)

"""Contrastive suite readers and scorer, the checkpoint score_fn, and lexical consistency."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from pipeline_lib.evaluate import discourse
from pipeline_lib.batch import Batch
from pipeline_lib.constants import BOS_ID, EOS_ID
from pipeline_lib.schema import DOC_SCHEMA

# Two examples in the exact layout of lena-voita/good-translation-wrong-in-context
# consistency_testsets/deixis_test.json (context and current sentence joined by " _eos ").
VOITA = [
    {"src": "Are you coming ? _eos Yes . _eos You were late .",
     "dst": ["Ты идёшь ? _eos Да . _eos Ты опоздал .", "Ты идёшь ? _eos Да . _eos Вы опоздали ."],
     "true_ind": 0, "ctx_dist": 2},
    {"src": "Are you coming ? _eos You were late .",
     "dst": ["Вы идёте ? _eos Ты опоздал .", "Вы идёте ? _eos Вы опоздали ."],
     "true_ind": 1, "ctx_dist": 1},
]
# ContraPro (ZurichNLP/ContraPro contrapro.json) field names; context from
# json2text_and_context.pl --context 1: one line per scored line (reference, then errors).
CONTRAPRO = [
    {"src segment": "Play it .", "ref segment": "Spiel ihn .", "src pronoun": "it",
     "ref pronoun": "ihn", "ante distance": 1, "intrasegmental": False,
     "errors": [{"contrastive": "Spiel sie .", "replacement": "sie"},
                {"contrastive": "Spiel es .", "replacement": "es"}]},
    {"src segment": "It is red .", "ref segment": "Sie ist rot .", "src pronoun": "it",
     "ref pronoun": "Sie", "ante distance": 5, "intrasegmental": False,
     "errors": [{"contrastive": "Er ist rot .", "replacement": "er"}]},
]


# Fixtures in the real formats (tests/data/contrastive/README.md): Voita suites with ties written
# into their loss files; ContraPro with the context files json2text_and_context.pl extracted.
DATA = Path(__file__).resolve().parents[1] / "data" / "contrastive"
CONTRAPRO_DIR = DATA / "contrapro"


def read_losses(path: Path) -> list[float]:
    """A loss file as both official scripts read it: one float per line, lower is better."""
    return [float(line) for line in path.read_text().splitlines()]


def replay(losses: list[float]):
    """A score_fn that hands out the loss file's lines in scoring order, as log-probabilities
    (minus the loss); ``left()`` says how many lines were not asked for."""
    queue = list(losses)

    def score(src_context, src, tgt_context, candidates):
        assert len(queue) >= len(candidates), "loss file shorter than the suite"
        return [-queue.pop(0) for _ in candidates]

    score.left = lambda: len(queue)
    return score


def official_voita(data: list[dict], losses: list[float], with_distance: bool) -> dict:
    """Re-implements lena-voita/good-translation-wrong-in-context scripts/evaluate_consistency.py:
    the loss file is cut into consecutive groups of len(dst) lines; a group is right when
    np.argmin of its losses is true_ind; accuracy is the mean, and for deixis/lex_cohesion also
    the mean per ctx_dist 1, 2, 3."""
    ends = np.cumsum([len(rec["dst"]) for rec in data])
    right = [int(np.argmin(losses[end - len(rec["dst"]): end]) == rec["true_ind"])
             for rec, end in zip(data, ends)]
    out = {"total": np.mean(right)}
    if with_distance:
        out["by_distance"] = {d: np.mean([r for r, rec in zip(right, data) if rec["ctx_dist"] == d])
                              for d in (1, 2, 3)}
    return out


def official_contrapro(data: list[dict], losses: list[float]) -> dict:
    """Re-implements ZurichNLP/ContraPro evaluate.py count_errors (default: lower is better):
    per example one line for the reference, then one per error; right when the reference is
    strictly better (operator.lt) than every error; counted per 'src:ref' pronoun category
    (lowercased) and per antecedent distance with >3 merged."""
    lines = iter(losses)
    cat: dict = defaultdict(Counter)
    dist: dict = defaultdict(Counter)
    for rec in data:
        ref = next(lines)
        # a list, not a generator: every error line is read even after a loss, as the script does
        right = all([ref < next(lines) for _ in rec["errors"]])  # noqa: C419
        d = rec["ante distance"]
        for table, key in ((cat, f"{rec['src pronoun'].lower()}:{rec['ref pronoun'].lower()}"),
                           (dist, ">3" if d > 3 else str(d))):
            table[key]["total"] += 1
            table[key]["correct"] += right
    assert next(lines, None) is None
    return {"correct": sum(c["correct"] for c in cat.values()),
            "total": sum(c["total"] for c in cat.values()), "by_category": cat,
            "by_distance": dist}


def test_read_voita_splits_context_and_candidates(tmp_path):
    path = tmp_path / "deixis_test.json"
    path.write_text(json.dumps(VOITA, ensure_ascii=False))
    ex = discourse.read_voita(path, "deixis")
    assert ex[0].src_context == ["Are you coming ?", "Yes ."]
    assert ex[0].src == "You were late ."
    assert ex[0].tgt_context == ["Ты идёшь ?", "Да ."]
    assert ex[0].candidates == ["Ты опоздал .", "Вы опоздали ."]
    assert (ex[1].true_index, ex[1].distance, ex[1].phenomenon) == (1, "1", "deixis")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"src": "a _eos b", "dst": ["x _eos y", "z _eos y"], "true_ind": 0}]))
    with pytest.raises(discourse.SuiteFormatError, match="differ in their context"):
        discourse.read_voita(bad, "x")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"src": 1,\n')
    with pytest.raises(discourse.SuiteFormatError, match="broken.json:2"):
        discourse.read_voita(broken, "x")


def test_read_contrapro_with_context_files_of_the_official_extraction():
    """contrapro.context.* from json2text_and_context.pl --context 1 and --context 2: one block
    per scored line, empty lines before the document start, a lone CR kept inside its line."""
    ex = discourse.read_suite("pronouns", {
        "format": "contrapro", "path": str(CONTRAPRO_DIR / "contrapro.json"),
        "context_src": str(CONTRAPRO_DIR / "context1/contrapro.context.en"),
        "context_tgt": str(CONTRAPRO_DIR / "context1/contrapro.context.de")})
    # the scored lines are those the extraction wrote to contrapro.text.{en,de}, in order: the
    # order of the loss file the official script reads
    text = (CONTRAPRO_DIR / "context1/contrapro.text.de").read_text(encoding="utf-8")
    assert [c for e in ex for c in e.candidates] == text.splitlines()
    src = (CONTRAPRO_DIR / "context1/contrapro.text.en").read_text(encoding="utf-8")
    assert [e.src for e in ex for _ in e.candidates] == src.splitlines()
    assert [e.src_context for e in ex] == [["I bought a new lamp ."],
                                           ["Where did you put the dog ?"], [],
                                           ["Take the umbrella\rplease ."]]
    assert ex[3].tgt_context == ["Nimm den Schirm\rbitte ."]
    assert [e.phenomenon for e in ex] == ["it:sie", "it:er", "it:es", "it:ihn"]
    assert [e.distance for e in ex] == ["1", "1", "0", "1"]
    two = discourse.read_contrapro(CONTRAPRO_DIR / "contrapro.json",
                                   CONTRAPRO_DIR / "context2/contrapro.context.en",
                                   CONTRAPRO_DIR / "context2/contrapro.context.de", context_size=2)
    assert [e.src_context for e in two] == [
        ["I bought a new lamp ."], ["It is beautiful .", "Where did you put the dog ?"], [],
        ["It is raining again .", "Take the umbrella\rplease ."]]
    assert two[1].tgt_context == ["Sie ist schön .", "Wo hast du den Hund hingetan ?"]
    no_ctx = discourse.read_contrapro(CONTRAPRO_DIR / "contrapro.json")
    assert no_ctx[0].src_context == [] and no_ctx[0].true_index == 0


def test_contrapro_context_files_must_fit_the_context_size(tmp_path):
    json_path = CONTRAPRO_DIR / "contrapro.json"
    with pytest.raises(discourse.SuiteFormatError,
                       match=r"context2/contrapro.context.en: 24 lines, expected 12 = context_size "
                             r"1 x 12 scored lines.*extracted with --context 2"):
        discourse.read_contrapro(json_path, CONTRAPRO_DIR / "context2/contrapro.context.en")
    with pytest.raises(discourse.SuiteFormatError, match=r"12 lines, expected 24 = context_size 2"):
        discourse.read_contrapro(json_path, CONTRAPRO_DIR / "context1/contrapro.context.en",
                                 context_size=2)
    # right count, wrong order: a candidate's context differs from its reference's
    lines = (CONTRAPRO_DIR / "context1/contrapro.context.en").read_bytes().split(b"\n")
    lines[1], lines[3] = lines[3], lines[1]
    (tmp_path / "ctx.en").write_bytes(b"\n".join(lines))
    with pytest.raises(discourse.SuiteFormatError, match=r"ctx.en:2: context of example 0 "):
        discourse.read_contrapro(json_path, tmp_path / "ctx.en")


def test_voita_accuracy_matches_the_official_script_on_ties():
    """argmin over losses: the first of tied best candidates wins (scripts/evaluate_consistency.py).
    ellipsis_vp's first group lists the reference twice, so only this rule counts it right."""
    for name, with_distance in (("ellipsis_vp", False), ("deixis_test", True)):
        path = DATA / "voita" / f"{name}.json"
        data = json.loads(path.read_text())
        losses = read_losses(DATA / "voita" / f"{name}.loss")
        examples = discourse.read_suite(name, {"format": "voita", "path": str(path)})
        # the rebuilt scoring lines are the JSON's dst strings, in the loss file's order
        assert [discourse.VOITA_SEP.join(e.tgt_context + [c]) for e in examples
                for c in e.candidates] == [d for rec in data for d in rec["dst"]]
        score = replay(losses)
        res = discourse.evaluate_suite(examples, score, discourse.Decision.FIRST_BEST)
        assert score.left() == 0
        official = official_voita(data, losses, with_distance)
        # hand-checked: two of four groups right, each suite with one tie won and one lost
        assert res["accuracy"] == round(100 * official["total"], 2) == 50.0
        assert res["by_phenomenon"] == {name: {"accuracy": 50.0, "correct": 2, "total": 4}}
        for d, acc in official.get("by_distance", {}).items():
            assert res["by_distance"][str(d)]["accuracy"] == round(100 * acc, 2)
    # deixis: distance 3 is the tie the reference wins, distance 1 a tie lost and a plain loss
    assert {d: v["accuracy"] for d, v in res["by_distance"].items()} == {"1": 0.0, "2": 100.0,
                                                                          "3": 100.0}


def test_contrapro_accuracy_matches_the_official_script_on_ties():
    """evaluate.py: the reference must be strictly better; the tie of 'it:er' is wrong."""
    data = json.loads((CONTRAPRO_DIR / "contrapro.json").read_text(encoding="utf-8"))
    losses = read_losses(CONTRAPRO_DIR / "contrapro.loss")
    examples = discourse.read_suite("pronouns", {"format": "contrapro",
                                                 "path": str(CONTRAPRO_DIR / "contrapro.json")})
    score = replay(losses)
    res = discourse.evaluate_suite(examples, score, discourse.Decision.STRICT)
    assert score.left() == 0
    official = official_contrapro(data, losses)
    assert (res["correct"], res["total"]) == (official["correct"], official["total"]) == (2, 4)
    for mine, theirs in (("by_phenomenon", "by_category"), ("by_distance", "by_distance")):
        assert {k: (v["correct"], v["total"]) for k, v in res[mine].items()} == \
            {k: (v["correct"], v["total"]) for k, v in official[theirs].items()}
    assert res["by_phenomenon"]["it:er"]["correct"] == 0      # hand-checked: 1.75 vs 1.75
    assert res["by_phenomenon"]["it:sie"]["correct"] == 1


def test_evaluate_suite_counts_strict_wins_per_category_and_distance(tmp_path):
    (tmp_path / "contrapro.json").write_text(json.dumps(CONTRAPRO))
    ex = discourse.read_contrapro(tmp_path / "contrapro.json")

    def prefers(word):  # a fake model that likes one pronoun
        return lambda sc, s, tc, cands: [float(word in c.lower().split()) for c in cands]

    res = discourse.evaluate_suite(ex, prefers("ihn"), discourse.Decision.STRICT)
    assert (res["accuracy"], res["correct"], res["total"]) == (50.0, 1, 2)
    assert res["by_phenomenon"]["it:ihn"]["accuracy"] == 100.0
    assert res["by_phenomenon"]["it:sie"]["accuracy"] == 0.0
    assert res["by_distance"] == {"1": {"accuracy": 100.0, "correct": 1, "total": 1},
                                  ">3": {"accuracy": 0.0, "correct": 0, "total": 1}}


def test_decision_rules_on_ties():
    assert discourse.is_correct([-1.0, -1.0, -2.0], 0, discourse.Decision.FIRST_BEST)
    assert not discourse.is_correct([-1.0, -1.0, -2.0], 1, discourse.Decision.FIRST_BEST)
    assert not discourse.is_correct([-1.0, -1.0, -2.0], 0, discourse.Decision.STRICT)
    assert discourse.is_correct([-1.0, -1.5], 0, discourse.Decision.STRICT)
    with pytest.raises(ValueError, match="NaN"):
        discourse.is_correct([float("nan"), -1.0], 0, discourse.Decision.FIRST_BEST)


def test_suites_in_another_direction_are_refused(tmp_path, caplog):
    suites = {"deixis": {"format": "voita", "path": "d.json"},
              "pronouns": {"format": "contrapro", "path": "c.json"},
              "own": {"format": "voita", "path": "o.json", "direction": "zh-en"}}
    discourse.check_suite_directions({"own": suites["own"]}, "zh", "en")
    discourse.check_suite_directions({"deixis": suites["deixis"]}, "en", "ru")
    with pytest.raises(discourse.SuiteConfigError,
                       match=r"suite deixis is en-ru; suite pronouns is en-de; .* is zh-en"):
        discourse.check_suite_directions(suites, "zh", "en")
    with pytest.raises(discourse.SuiteConfigError, match="suite x: unknown format 'plain'"):
        discourse.check_suite_directions({"x": {"format": "plain", "path": "p"}}, "en", "de")
    # the CLI refuses before it opens the checkpoint (which does not exist here)
    rc = discourse.main(["contrastive", "--checkpoint", str(tmp_path / "none"), "--suites",
                         json.dumps({"pronouns": suites["pronouns"]}), "--lang-pair", "es-en",
                         "--output", str(tmp_path / "o.json")])
    assert rc == 1 and not (tmp_path / "o.json").exists()
    assert "suite pronouns is en-de" in caplog.text and "is es-en" in caplog.text


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
    from pipeline_lib.constants import DataMode
    from pipeline_lib.training.context import ContextSpec, SpecialIds

    spec = ContextSpec(mode=DataMode.CONTEXT, k=1, special=SpecialIds(sent_break=V - 1, src_tag=V - 2,
                                                                     tgt_tag=V - 3))
    scorer = discourse.CheckpointScorer(ContextCopyModel(), encode, spec=spec)
    assert max(range(2), key=scorer(["b"], "x", [], ["a a", "b b"]).__getitem__) == 1
    assert max(range(2), key=scorer(["a"], "x", [], ["a a", "b b"]).__getitem__) == 0
    ex = [discourse.ContrastiveExample("p", ["b"], "x", [], ["a", "b"], 1, "1"),
          discourse.ContrastiveExample("p", ["a"], "x", [], ["a", "b"], 0, "1"),
          discourse.ContrastiveExample("p", ["c"], "x", [], ["a", "c", "b"], 1, "2")]
    strict = discourse.Decision.STRICT
    assert discourse.evaluate_suite(ex, scorer, strict)["accuracy"] == 100.0
    assert discourse.evaluate_suite(ex, discourse.CheckpointScorer(UniformModel(), encode),
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


def test_contrastive_cli_on_a_real_checkpoint(tmp_path):
    """The pipeline's transformer, saved as a checkpoint directory with a real sentencepiece
    model, scored on a Voita-format suite through the CLI; scores match a direct forward pass."""
    import sentencepiece as spm

    from pipeline_lib.training.checkpoint import save_checkpoint
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
    suite = tmp_path / "deixis_test.json"
    suite.write_text(json.dumps(VOITA, ensure_ascii=False))
    out = tmp_path / "o" / "contrastive.json"
    rc = discourse.main(["contrastive", "--checkpoint", str(ckpt), "--suites",
                         json.dumps({"deixis": {"format": "voita", "path": str(suite)}}),
                         "--lang-pair", "en-ru", "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())["suites"]["deixis"]
    assert res["total"] == 2 and set(res["by_distance"]) == {"1", "2"}
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

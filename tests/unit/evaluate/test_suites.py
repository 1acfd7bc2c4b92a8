"""Contrastive suites as their authors score them: readers, decision rules, accuracy, direction.

The accuracies are compared with re-implementations of the official scripts on loss files with
ties written in (fixtures under tests/data/contrastive, see its README.md).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from pipeline_lib.evaluate import suites

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
DATA = Path(__file__).resolve().parents[2] / "data" / "contrastive"
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
    ex = suites.read_voita(path, "deixis")
    assert ex[0].src_context == ["Are you coming ?", "Yes ."]
    assert ex[0].src == "You were late ."
    assert ex[0].tgt_context == ["Ты идёшь ?", "Да ."]
    assert ex[0].candidates == ["Ты опоздал .", "Вы опоздали ."]
    assert (ex[1].true_index, ex[1].distance, ex[1].phenomenon) == (1, "1", "deixis")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"src": "a _eos b", "dst": ["x _eos y", "z _eos y"], "true_ind": 0}]))
    with pytest.raises(suites.SuiteFormatError, match="differ in their context"):
        suites.read_voita(bad, "x")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"src": 1,\n')
    with pytest.raises(suites.SuiteFormatError, match="broken.json:2"):
        suites.read_voita(broken, "x")


def test_read_contrapro_with_context_files_of_the_official_extraction():
    """contrapro.context.* from json2text_and_context.pl --context 1 and --context 2: one block
    per scored line, empty lines before the document start, a lone CR kept inside its line."""
    ex = suites.read_suite("pronouns", {
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
    two = suites.read_contrapro(CONTRAPRO_DIR / "contrapro.json",
                                   CONTRAPRO_DIR / "context2/contrapro.context.en",
                                   CONTRAPRO_DIR / "context2/contrapro.context.de", context_size=2)
    assert [e.src_context for e in two] == [
        ["I bought a new lamp ."], ["It is beautiful .", "Where did you put the dog ?"], [],
        ["It is raining again .", "Take the umbrella\rplease ."]]
    assert two[1].tgt_context == ["Sie ist schön .", "Wo hast du den Hund hingetan ?"]
    no_ctx = suites.read_contrapro(CONTRAPRO_DIR / "contrapro.json")
    assert no_ctx[0].src_context == [] and no_ctx[0].true_index == 0


def test_contrapro_context_files_must_fit_the_context_size(tmp_path):
    json_path = CONTRAPRO_DIR / "contrapro.json"
    with pytest.raises(suites.SuiteFormatError,
                       match=r"context2/contrapro.context.en: 24 lines, expected 12 = context_size "
                             r"1 x 12 scored lines.*extracted with --context 2"):
        suites.read_contrapro(json_path, CONTRAPRO_DIR / "context2/contrapro.context.en")
    with pytest.raises(suites.SuiteFormatError, match=r"12 lines, expected 24 = context_size 2"):
        suites.read_contrapro(json_path, CONTRAPRO_DIR / "context1/contrapro.context.en",
                                 context_size=2)
    # right count, wrong order: a candidate's context differs from its reference's
    lines = (CONTRAPRO_DIR / "context1/contrapro.context.en").read_bytes().split(b"\n")
    lines[1], lines[3] = lines[3], lines[1]
    (tmp_path / "ctx.en").write_bytes(b"\n".join(lines))
    with pytest.raises(suites.SuiteFormatError, match=r"ctx.en:2: context of example 0 "):
        suites.read_contrapro(json_path, tmp_path / "ctx.en")


def test_voita_accuracy_matches_the_official_script_on_ties():
    """argmin over losses: the first of tied best candidates wins (scripts/evaluate_consistency.py).
    ellipsis_vp's first group lists the reference twice, so only this rule counts it right."""
    for name, with_distance in (("ellipsis_vp", False), ("deixis_test", True)):
        path = DATA / "voita" / f"{name}.json"
        data = json.loads(path.read_text())
        losses = read_losses(DATA / "voita" / f"{name}.loss")
        examples = suites.read_suite(name, {"format": "voita", "path": str(path)})
        # the rebuilt scoring lines are the JSON's dst strings, in the loss file's order
        assert [suites.VOITA_SEP.join(e.tgt_context + [c]) for e in examples
                for c in e.candidates] == [d for rec in data for d in rec["dst"]]
        score = replay(losses)
        res = suites.evaluate_suite(examples, score, suites.Decision.FIRST_BEST)
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
    examples = suites.read_suite("pronouns", {"format": "contrapro",
                                                 "path": str(CONTRAPRO_DIR / "contrapro.json")})
    score = replay(losses)
    res = suites.evaluate_suite(examples, score, suites.Decision.STRICT)
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
    ex = suites.read_contrapro(tmp_path / "contrapro.json")

    def prefers(word):  # a fake model that likes one pronoun
        return lambda sc, s, tc, cands: [float(word in c.lower().split()) for c in cands]

    res = suites.evaluate_suite(ex, prefers("ihn"), suites.Decision.STRICT)
    assert (res["accuracy"], res["correct"], res["total"]) == (50.0, 1, 2)
    assert res["by_phenomenon"]["it:ihn"]["accuracy"] == 100.0
    assert res["by_phenomenon"]["it:sie"]["accuracy"] == 0.0
    assert res["by_distance"] == {"1": {"accuracy": 100.0, "correct": 1, "total": 1},
                                  ">3": {"accuracy": 0.0, "correct": 0, "total": 1}}


def test_decision_rules_on_ties():
    assert suites.is_correct([-1.0, -1.0, -2.0], 0, suites.Decision.FIRST_BEST)
    assert not suites.is_correct([-1.0, -1.0, -2.0], 1, suites.Decision.FIRST_BEST)
    assert not suites.is_correct([-1.0, -1.0, -2.0], 0, suites.Decision.STRICT)
    assert suites.is_correct([-1.0, -1.5], 0, suites.Decision.STRICT)
    with pytest.raises(ValueError, match="NaN"):
        suites.is_correct([float("nan"), -1.0], 0, suites.Decision.FIRST_BEST)


def test_suites_in_another_direction_are_refused():
    config = {"deixis": {"format": "voita", "path": "d.json"},
              "pronouns": {"format": "contrapro", "path": "c.json"},
              "own": {"format": "voita", "path": "o.json", "direction": "zh-en"}}
    suites.check_suite_directions({"own": config["own"]}, "zh", "en")
    suites.check_suite_directions({"deixis": config["deixis"]}, "en", "ru")
    with pytest.raises(suites.SuiteConfigError,
                       match=r"suite deixis is en-ru; suite pronouns is en-de; .* is zh-en"):
        suites.check_suite_directions(config, "zh", "en")
    with pytest.raises(suites.SuiteConfigError, match="suite x: unknown format 'plain'"):
        suites.check_suite_directions({"x": {"format": "plain", "path": "p"}}, "en", "de")


def test_suites_module_stays_light():
    """Workflow planning calls check_suite_directions before the DAG is built: no torch, no
    pyarrow, no numpy on that path."""
    import subprocess
    import sys

    code = ("import sys, pipeline_lib.evaluate.suites; "
            "print(sorted({'torch', 'pyarrow', 'numpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == "[]"

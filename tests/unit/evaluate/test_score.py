"""pipeline_lib.evaluate.score against sacreBLEU's own CLI on the same text files, and its bootstrap."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline_lib.evaluate import score
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import DOC_SCHEMA

SACREBLEU = Path(sys.executable).with_name("sacrebleu")
WORDS = ("the cat sat on a mat and the dog ran to the house with a big red ball in the "
         "garden while it rained").split()


def make_corpus(tmp: Path, n_docs: int = 20, per_doc: int = 5, seed: int = 0, n_refs: int = 1):
    """Documents with references and three systems: poor, good (1 word wrong), poor's copy."""
    rng = random.Random(seed)
    rows, poor, good = [], [], []
    for d in range(n_docs):
        for i in range(per_doc):
            refs = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(n_refs)]
            rows.append(dict(corpus="c", split="test", doc_id=f"d{d}", sent_idx=i, src="x",
                             tgt=refs, has_context=True, origin_file="f", origin_line=1))
            g = refs[0].split()
            g[rng.randrange(12)] = "Zebra"
            good.append(dict(doc_id=f"d{d}", sent_idx=i, hyp=" ".join(g)))
            poor.append(dict(doc_id=f"d{d}", sent_idx=i,
                             hyp=" ".join(w if rng.random() < 0.5 else "qqq"
                                          for w in refs[0].split())))
    pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), tmp / "docs.parquet")
    for name, hyps in (("poor", poor), ("good", good)):
        pq.write_table(pa.Table.from_pylist(hyps), tmp / f"{name}.parquet")
    return rows, poor, good


def cli_scores(hyp: list[str], refs: list[list[str]], tmp: Path, extra: tuple = ()) -> dict:
    """BLEU, chrF and TER from the sacrebleu command line on plain text files."""
    (tmp / "hyp.txt").write_text("\n".join(hyp) + "\n")
    ref_files = []
    for k, stream in enumerate(refs):
        (tmp / f"ref{k}.txt").write_text("\n".join(stream) + "\n")
        ref_files.append(str(tmp / f"ref{k}.txt"))
    out = subprocess.run([str(SACREBLEU), *ref_files, "-i", str(tmp / "hyp.txt"), "-m", "bleu",
                          "chrf", "ter", "-w", "2", "-f", "json", *extra], capture_output=True, text=True,
                         check=True).stdout
    return {r["name"].rstrip("2").lower(): r["score"] for r in json.loads(out)}


@pytest.mark.parametrize("n_refs", [1, 2])
def test_sentence_scores_match_the_sacrebleu_cli(tmp_path, n_refs):
    rows, poor, _ = make_corpus(tmp_path, n_refs=n_refs)
    manifest = Manifest("t")
    out = score.score_all({"c": tmp_path / "docs.parquet"},
                          [("poor", "c", "test", tmp_path / "poor.parquet")], "poor",
                          score.ScoreConfig(), manifest)
    mine = out["results"]["c/test"]["models"]["poor"]
    theirs = cli_scores([h["hyp"] for h in poor],
                        [[r["tgt"][k] for r in rows] for k in range(n_refs)], tmp_path)
    for metric in ("bleu", "chrf", "ter"):
        assert mine[metric] == pytest.approx(theirs[metric], abs=0.01), metric
    assert f"nrefs:{n_refs}" in mine["bleu_signature"]
    assert "case:mixed" in mine["bleu_signature"]


def test_document_bleu_is_bleu_over_joined_documents(tmp_path):
    rows, poor, _ = make_corpus(tmp_path, n_docs=6, per_doc=4)
    out = score.score_all({"c": tmp_path / "docs.parquet"},
                          [("poor", "c", "test", tmp_path / "poor.parquet")], "poor",
                          score.ScoreConfig(), Manifest("t"))
    docs_h = [" ".join(h["hyp"] for h in poor[d * 4:(d + 1) * 4]) for d in range(6)]
    docs_r = [" ".join(r["tgt"][0] for r in rows[d * 4:(d + 1) * 4]) for d in range(6)]
    theirs = cli_scores(docs_h, [docs_r], tmp_path)
    assert out["results"]["c/test"]["models"]["poor"]["dbleu"] == pytest.approx(theirs["bleu"],
                                                                                 abs=0.01)
    assert out["results"]["c/test"]["documents"] == 6


def test_lowercase_scores_ignore_case(tmp_path):
    rows, _, _ = make_corpus(tmp_path, n_docs=3)
    upper = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"], hyp=r["tgt"][0].upper()) for r in rows]
    pq.write_table(pa.Table.from_pylist(upper), tmp_path / "upper.parquet")
    hyps = [("upper", "c", "test", tmp_path / "upper.parquet")]
    cased = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "upper", score.ScoreConfig(),
                            Manifest("t"))["results"]["c/test"]["models"]["upper"]
    lower = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "upper",
                            score.ScoreConfig(lowercase=True),
                            Manifest("t"))["results"]["c/test"]["models"]["upper"]
    assert cased["bleu"] < 5 and lower["bleu"] == 100.0
    assert "case:lc" in lower["bleu_signature"]
    theirs = cli_scores([r["tgt"][0].upper() for r in rows], [[r["tgt"][0] for r in rows]],
                        tmp_path, ("-lc",))
    assert lower["bleu"] == pytest.approx(theirs["bleu"], abs=0.01)


def test_bootstrap_separates_a_better_system_but_not_a_copy(tmp_path):
    rows, poor, _ = make_corpus(tmp_path)
    # a twin: another system of the same quality (same noise, other draws), so its differences
    # to the baseline go both ways and the bootstrap is not degenerate as for an exact copy
    rng = random.Random(7)
    near = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"],
                 hyp=" ".join(w if rng.random() < 0.5 else "qqq" for w in r["tgt"][0].split()))
            for r in rows]
    pq.write_table(pa.Table.from_pylist(near), tmp_path / "near.parquet")
    hyps = [(m, "c", "test", tmp_path / f"{f}.parquet")
            for m, f in (("poor", "poor"), ("good", "good"), ("copy", "poor"), ("near", "near"))]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "poor", score.ScoreConfig(),
                          Manifest("t"))
    res = out["results"]["c/test"]["models"]
    assert out["models"] == ["poor", "good", "copy", "near"]
    for metric in ("bleu", "chrf", "ter", "dbleu"):
        assert res["good"][f"{metric}_p"] < 0.05 and res["good"][f"{metric}_significant"]
        assert res["copy"][f"{metric}_p"] == 1.0 and not res["copy"][f"{metric}_significant"]
        assert res["near"][f"{metric}_p"] >= 0.05 and not res["near"][f"{metric}_significant"]
    assert "bs:1000" in res["good"]["bleu_bs_signature"]
    assert "bleu_p" not in res["poor"]


def test_every_system_has_its_own_95_interval_a_lone_baseline_too(tmp_path):
    """``bleu_ci`` = [mean, half-width] of sacreBLEU's bootstrap: for a run of one model it is
    what ``sacrebleu --confidence`` prints for the same text (same seed, same resamples)."""
    rows, poor, _ = make_corpus(tmp_path)
    out = score.score_all({"c": tmp_path / "docs.parquet"},
                          [("poor", "c", "test", tmp_path / "poor.parquet")], "poor",
                          score.ScoreConfig(bootstrap_samples=200), Manifest("t"))
    mine = out["results"]["c/test"]["models"]["poor"]
    (tmp_path / "hyp.txt").write_text("\n".join(h["hyp"] for h in poor) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(r["tgt"][0] for r in rows) + "\n")
    theirs = json.loads(subprocess.run(
        [str(SACREBLEU), str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"), "-m",
         "bleu", "--confidence", "--confidence-n", "200", "-w", "2", "-f", "json"],
        capture_output=True, text=True, check=True).stdout)
    assert mine["bleu_ci"] == pytest.approx([theirs["confidence_mean"],
                                             theirs["confidence_var"]], abs=0.01)
    assert mine["bleu_ci"][0] - mine["bleu_ci"][1] <= mine["bleu"] <= sum(mine["bleu_ci"])
    assert "bleu_p" not in mine     # nothing to compare a lone baseline with
    good = score.score_all({"c": tmp_path / "docs.parquet"},
                           [(m, "c", "test", tmp_path / f"{m}.parquet") for m in ("poor", "good")],
                           "poor", score.ScoreConfig(bootstrap_samples=200), Manifest("t"))
    assert {"bleu_ci", "dbleu_ci"} <= set(good["results"]["c/test"]["models"]["good"])


def test_a_zero_difference_is_never_significant(tmp_path):
    """Two different outputs with the same score in every resample (BLEU 0: no 1-gram right)
    get p = 1, against the baseline and against a control, not sacreBLEU's 1/(n+1)."""
    rows, _, _ = make_corpus(tmp_path, n_docs=4)
    for name, word in (("zero", "qqq"), ("nil", "zzz")):
        pq.write_table(pa.Table.from_pylist([dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"],
                                                  hyp=word) for r in rows]),
                       tmp_path / f"{name}.parquet")
    hyps = [(m, "c", "test", tmp_path / f"{m}.parquet") for m in ("zero", "nil")]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "zero",
                          score.ScoreConfig(bootstrap_samples=50), Manifest("t"),
                          controls={"nil": "zero"})
    nil = out["results"]["c/test"]["models"]["nil"]
    assert nil["bleu"] == out["results"]["c/test"]["models"]["zero"]["bleu"] == 0.0
    assert nil["bleu_p"] == 1.0 and not nil["bleu_significant"]
    assert nil["control"]["bleu_p"] == 1.0 and not nil["control"]["bleu_significant"]


def test_each_model_is_also_tested_against_its_matched_control(tmp_path):
    """A model's Δ and p-value against its control: "good" gains significantly on its control
    "poor"; "copy" (identical output) gains nothing, p = 1, as against the baseline."""
    make_corpus(tmp_path)
    hyps = [(m, "c", "test", tmp_path / f"{f}.parquet")
            for m, f in (("base", "good"), ("good", "good"), ("poor", "poor"), ("copy", "poor"))]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "base", score.ScoreConfig(),
                          Manifest("t"), controls={"good": "poor", "copy": "poor"})
    res = out["results"]["c/test"]["models"]
    assert out["controls"] == {"good": "poor", "copy": "poor"}
    good = res["good"]["control"]
    assert good["system"] == "poor" and good["bleu_delta"] == pytest.approx(
        res["good"]["bleu"] - res["poor"]["bleu"], abs=0.02)
    assert good["bleu_significant"] and good["dbleu_significant"] and good["dbleu_delta"] > 0
    assert res["copy"]["control"]["bleu_p"] == 1.0 and res["copy"]["control"]["bleu_delta"] == 0
    assert not res["good"]["bleu_significant"]   # against the baseline: the same output
    assert "control" not in res["base"] and "control" not in res["poor"]
    with pytest.raises(ValueError, match="without hypotheses"):
        score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "base", score.ScoreConfig(),
                        Manifest("t"), controls={"good": "missing"})


def test_all_concatenates_test_sets_and_missing_hypotheses_count(tmp_path):
    rows, poor, _ = make_corpus(tmp_path, n_docs=4)
    other = tmp_path / "other"
    other.mkdir()
    make_corpus(other, n_docs=3, seed=1)
    pq.write_table(pa.Table.from_pylist(poor[:-2]), tmp_path / "short.parquet")
    manifest = Manifest("t")
    out = score.score_all({"c": tmp_path / "docs.parquet", "d": other / "docs.parquet"},
                          [("m", "c", "test", tmp_path / "short.parquet"),
                           ("m", "d", "test", other / "poor.parquet")], "m", score.ScoreConfig(),
                          manifest)
    assert out["test_sets"] == ["c/test", "d/test", "All"]
    assert out["results"]["All"]["sentences"] == 4 * 5 + 3 * 5
    assert out["results"]["All"]["documents"] == 7     # d0 of c and d0 of d stay distinct
    assert sum(manifest.rejected.values()) == 2


def test_cli_writes_scores_and_prints_signatures(tmp_path, capsys):
    make_corpus(tmp_path, n_docs=3)
    rc = score.main(["--refs", "c", str(tmp_path / "docs.parquet"), "--hyp", "poor", "c", "test",
                     str(tmp_path / "poor.parquet"), "--hyp", "good", "c", "test",
                     str(tmp_path / "good.parquet"), "--baseline", "poor",
                     "--bootstrap-samples", "100", "--output", str(tmp_path / "o/scores.json")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "nrefs:1|case:mixed" in printed
    data = json.loads((tmp_path / "o/scores.json").read_text())
    assert "bs:100" in data["results"]["c/test"]["models"]["good"]["bleu_bs_signature"]
    assert (tmp_path / "o/manifest.json").exists()
    assert score.main(["--refs", "c", str(tmp_path / "docs.parquet"), "--hyp", "poor", "c",
                       "test", str(tmp_path / "poor.parquet"), "--baseline", "nobody",
                       "--output", str(tmp_path / "x.json")]) == 1


@pytest.mark.parametrize("t, df, p", [(12.706, 1, 0.05), (4.303, 2, 0.05), (9.925, 2, 0.01),
                                      (3.182, 3, 0.05), (2.776, 4, 0.05), (2.228, 10, 0.05),
                                      (1.0, 1, 0.5), (0.0, 2, 1.0), (-4.303, 2, 0.05)])
def test_t_test_p_values_match_the_t_table(t, df, p):
    assert score.t_test_p(t, df) == pytest.approx(p, abs=2e-4)


def test_seeds_are_tested_within_each_seed_and_across_seeds(tmp_path):
    """Three seeds of a baseline, a model and its control: each seed's systems are tested
    against that seed's baseline (not seed 1's), each model against the same seed's control,
    and per system the mean ± sd and the paired t-test of the per-seed differences."""
    rows, _, _ = make_corpus(tmp_path)
    rng = random.Random(3)

    def hyps(name: str, keep: float) -> Path:
        out = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"],
                    hyp=" ".join(w if rng.random() < keep else "qqq" for w in r["tgt"][0].split()))
               for r in rows]
        pq.write_table(pa.Table.from_pylist(out), tmp_path / f"{name}.parquet")
        return tmp_path / f"{name}.parquet"

    runs, replicates, controls = [], {}, {}
    for seed, (base, model, ctrl) in {1: (0.5, 0.9, 0.6), 2: (0.55, 0.85, 0.62),
                                      3: (0.45, 0.88, 0.58)}.items():
        for group, keep in (("base", base), ("model", model), ("ctrl", ctrl)):
            name = f"{group}_seed{seed}"
            runs.append((name, "c", "test", hyps(name, keep)))
            replicates[name] = (group, seed)
        controls[f"model_seed{seed}"] = f"ctrl_seed{seed}"
    # the control doubles as each seed's context control (a twin): tested across seeds too
    twins = [(f"model_seed{s}", f"ctrl_seed{s}", "twin") for s in (1, 2, 3)]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, runs, "base_seed1",
                          score.ScoreConfig(bootstrap_samples=100), Manifest("t"), controls,
                          replicates, against=twins)
    res = out["results"]["c/test"]
    rows_ = res["models"]
    assert out["replicates"]["model_seed2"] == ["model", 2]
    assert "bleu_p" not in rows_["base_seed2"] and "bleu_p" in rows_["model_seed2"]
    # seed 2's model against seed 2's baseline: same difference as a test of those two alone
    alone = score.score_all({"c": tmp_path / "docs.parquet"}, [runs[3], runs[4]], "base_seed2",
                            score.ScoreConfig(bootstrap_samples=100), Manifest("t"))
    assert rows_["model_seed2"]["bleu_p"] == alone["results"]["c/test"]["models"]["model_seed2"]["bleu_p"]
    seeds = res["seeds"]
    assert set(seeds) == {"base", "model", "ctrl"} and seeds["model"]["seeds"] == [1, 2, 3]
    bleu = [rows_[f"model_seed{s}"]["bleu"] for s in (1, 2, 3)]
    assert seeds["model"]["bleu"] == bleu
    assert seeds["model"]["mean"] == pytest.approx(sum(bleu) / 3, abs=0.01)
    c = seeds["model"]["control"]
    assert c["group"] == "ctrl" and c["deltas"] == [rows_[f"model_seed{s}"]["control"]["bleu_delta"]
                                                    for s in (1, 2, 3)]
    assert c["wins"] == 3 and c["df"] == 2 and c["significant"] and c["p"] < 0.05
    assert c["per_seed_p"] == [rows_[f"model_seed{s}"]["control"]["bleu_p"] for s in (1, 2, 3)]
    assert "control" not in seeds["base"] and "baseline" not in seeds["base"]
    assert seeds["model"]["against"]["twin"]["deltas"] == c["deltas"]
    assert seeds["model"]["against"]["twin"]["p"] == c["p"] and "against" not in seeds["ctrl"]
    assert seeds["ctrl"]["baseline"]["group"] == "base"
    with pytest.raises(ValueError, match="--replicate names unknown systems: \\['nope'\\]"):
        score.score_all({"c": tmp_path / "docs.parquet"}, runs, "base_seed1", score.ScoreConfig(),
                        Manifest("t"), controls, {**replicates, "nope": ("x", 1)})
    with pytest.raises(ValueError, match="seed 2: no run of the baseline base"):
        score.score_all({"c": tmp_path / "docs.parquet"}, runs, "base_seed1", score.ScoreConfig(),
                        Manifest("t"), controls,
                        {k: v for k, v in replicates.items() if k != "base_seed2"})
    # one baseline every seed shares (seed_scope fine_tune): no replicate of its own; every
    # seed's model is tested against it, and the t-test against it reads the per-seed Δ
    shared = [r for r in runs if r[0] not in ("base_seed2", "base_seed3")]
    shared[0] = ("base", *shared[0][1:])
    one = {k: v for k, v in replicates.items() if not k.startswith("base")}
    out = score.score_all({"c": tmp_path / "docs.parquet"}, shared, "base",
                          score.ScoreConfig(bootstrap_samples=100), Manifest("t"), controls, one)
    res = out["results"]["c/test"]
    assert score.seed_groups(out["models"], one) == [
        ["base", "model_seed1", "ctrl_seed1"], ["base", "model_seed2", "ctrl_seed2"],
        ["base", "model_seed3", "ctrl_seed3"]]
    assert "base" not in res["seeds"] and set(res["seeds"]) == {"model", "ctrl"}
    base = res["models"]["base"]["bleu"]
    assert res["seeds"]["model"]["baseline"]["deltas"] == [
        round(res["models"][f"model_seed{s}"]["bleu"] - base, 2) for s in (1, 2, 3)]
    assert res["seeds"]["model"]["baseline"]["group"] == "base"
    alone = score.score_all({"c": tmp_path / "docs.parquet"}, [shared[0], runs[4]], "base",
                            score.ScoreConfig(bootstrap_samples=100), Manifest("t"))
    assert res["models"]["model_seed2"]["bleu_p"] == \
        alone["results"]["c/test"]["models"]["model_seed2"]["bleu_p"]


def test_paired_t_without_spread():
    assert score.paired_t([1.0], 0.05)["p"] is None                  # one seed: no test
    same = score.paired_t([0.5, 0.5, 0.5], 0.05)
    assert same["p"] == 0.0 and same["significant"] and same["t"] is None
    assert score.paired_t([0.0, 0.0], 0.05)["p"] == 1.0


def test_the_interval_of_a_delta_resamples_documents_and_sentences(tmp_path):
    """Issue 34 item 5: a paired bootstrap interval of Δ BLEU against the control. "good" beats
    "poor" in every document: both intervals lie above 0 and hold the observed Δ; a copy's
    Δ interval is exactly [0, 0]. Where the gain sits in a few documents, resampling documents
    gives the wider interval."""
    make_corpus(tmp_path)
    hyps = [(m, "c", "test", tmp_path / f"{f}.parquet")
            for m, f in (("base", "poor"), ("good", "good"), ("poor", "poor"), ("copy", "poor"))]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "base",
                          score.ScoreConfig(bootstrap_samples=300), Manifest("t"),
                          controls={"good": "poor", "copy": "poor"})
    res = out["results"]["c/test"]["models"]
    good = res["good"]["control"]
    for key in ("bleu_delta_ci_documents", "bleu_delta_ci_sentences"):
        lo, hi = good[key]
        assert 0 < lo <= good["bleu_delta"] <= hi, (key, good)
    assert res["copy"]["control"]["bleu_delta_ci_documents"] == [0.0, 0.0]

    # the gain only in 3 of 20 documents: "good" there, "poor" elsewhere
    rows = pq.read_table(tmp_path / "good.parquet").to_pylist()
    poor = pq.read_table(tmp_path / "poor.parquet").to_pylist()
    mixed = [g if g["doc_id"] in ("d0", "d1", "d2") else p for g, p in zip(rows, poor)]
    pq.write_table(pa.Table.from_pylist(mixed), tmp_path / "mixed.parquet")
    hyps = [(m, "c", "test", tmp_path / f"{f}.parquet")
            for m, f in (("base", "poor"), ("mixed", "mixed"), ("poor", "poor"))]
    out = score.score_all({"c": tmp_path / "docs.parquet"}, hyps, "base",
                          score.ScoreConfig(bootstrap_samples=300), Manifest("t"),
                          controls={"mixed": "poor"})
    c = out["results"]["c/test"]["models"]["mixed"]["control"]
    doc, sent = c["bleu_delta_ci_documents"], c["bleu_delta_ci_sentences"]
    assert doc[1] - doc[0] > sent[1] - sent[0], c


def test_each_context_model_is_tested_against_its_context_controls(tmp_path, capsys):
    """``--against MODEL SYSTEM KIND`` (issue 34 items 2-3): the paired test of the matched
    control, under ``against.<kind>``: "good" against a twin that translates worse (a gain,
    significant, its document interval above 0) and against an ablated decoding with the same
    output (Δ 0, p 1); the CLI reads the flag, a system without hypotheses is refused."""
    make_corpus(tmp_path)
    docs = tmp_path / "docs.parquet"
    hyps = [(m, "c", "test", tmp_path / f"{f}.parquet")
            for m, f in (("base", "poor"), ("good", "good"), ("good_random_context", "poor"),
                         ("good_ctx_empty", "good"))]
    against = [("good", "good_random_context", "twin"), ("good", "good_ctx_empty", "ctx_empty")]
    out = score.score_all({"c": docs}, hyps, "base", score.ScoreConfig(), Manifest("t"),
                          against=against)
    row = out["results"]["c/test"]["models"]["good"]
    assert out["against"] == [list(a) for a in against]
    twin, empty = row["against"]["twin"], row["against"]["ctx_empty"]
    assert twin["system"] == "good_random_context" and twin["bleu_significant"]
    assert twin["bleu_delta"] > 0 and twin["bleu_delta_ci_documents"][0] > 0
    assert (empty["bleu_delta"], empty["bleu_p"]) == (0, 1.0)
    assert "against" not in out["results"]["c/test"]["models"]["base"]
    with pytest.raises(ValueError, match="--against names systems without hypotheses"):
        score.score_all({"c": docs}, hyps, "base", score.ScoreConfig(), Manifest("t"),
                        against=[("good", "missing", "twin")])
    flags = [a for m, c, s, p in hyps for a in ("--hyp", m, c, s, str(p))]
    assert score.main(["--refs", "c", str(docs), *flags, "--baseline", "base",
                       "--against", "good", "good_random_context", "twin",
                       "--bootstrap-samples", "50", "--output", str(tmp_path / "s.json")]) == 0
    cli = json.loads((tmp_path / "s.json").read_text())["results"]["c/test"]["models"]["good"]
    assert cli["against"]["twin"]["bleu_delta"] == twin["bleu_delta"]

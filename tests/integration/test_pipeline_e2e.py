"""The whole DAG for real on a tiny config (tests/conftest.py: tiny_pipeline): ingest of two
corpora, stanza training + parsing, BPE, shards, every registered model with its two-step recipe,
decoding, scoring and the report, with `snakemake --cores 2`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pipeline_lib.models.registry import MODELS

pytestmark = pytest.mark.slow

BASELINE_BEST = "results/train_model/transformer/checkpoints/best"
JOBS = ["transformer", "dbsa", "doct", "cache", "camn", "crosstask_pretrain", "crosstask"]
# every registered model, plus cross-task decoded sentence by sentence
MODEL_SYSTEMS = [*MODELS, "crosstask_sent"]


def _manifest(run: Path, *parts: str) -> dict:
    return json.loads((run / "results" / Path(*parts)).read_text())


def _plan(run: Path):
    from conftest import ROOT

    from pipeline_lib.plan import Plan
    from pipeline_lib.run_config import load_config

    return Plan(load_config(ROOT / "config" / "config.yaml", run / "config.yaml"))


def test_every_model_has_a_matched_control_that_was_trained_decoded_and_scored(tiny_pipeline):
    plan = _plan(tiny_pipeline)
    assert set(plan.controls) == set(MODELS) - {"transformer"}
    scores = _manifest(tiny_pipeline, "score_test", "scores.json")
    assert scores["controls"] == {s: c for s in plan.systems if (c := plan.control_of(s))}
    for model, control in plan.controls.items():
        assert (tiny_pipeline / plan.results.train_model(control).manifest).is_file()
        row = scores["results"]["bible/test"]["models"][model]
        assert row["control"]["system"] == control and "bleu_p" in row["control"]
    doct, base = plan.jobs[plan.controls["doct"]], plan.jobs["transformer"]
    assert doct.init_from == "transformer" and doct.data == "doc" and doct.train["freeze"] == []
    assert doct.train["max_steps"] == plan.jobs["doct"].train["max_steps"]
    man = _manifest(tiny_pipeline, "train_model", doct.name, "manifest.json")
    assert man["counts"]["steps"] == plan.jobs["doct"].train["max_steps"]
    assert man["counts"]["frozen_parameters"] == 0 and base.model == doct.model
    md = (tiny_pipeline / "results" / "report" / "report.md").read_text()
    assert "BLEU vs control" in md and "Matched control" in md


def test_report_has_a_row_for_every_registered_model(tiny_pipeline):
    report = tiny_pipeline / "results" / "report"
    assert (report / "index.html").stat().st_size > 0
    lines = (report / "report.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ")]
    systems = list(_plan(tiny_pipeline).systems)
    assert set(MODEL_SYSTEMS) <= set(systems)
    for system in systems:
        assert any(row.split("|")[1].strip().split(" ")[0] == system for row in rows), system
    html = (report / "index.html").read_text()
    assert all(system in html for system in systems)
    scores = _manifest(tiny_pipeline, "score_test", "scores.json")
    assert scores["models"][0] == "transformer" and sorted(scores["models"]) == sorted(systems)


def test_two_step_recipes(tiny_pipeline):
    base_params = _manifest(tiny_pipeline, "train_model", "transformer", "manifest.json")["counts"]
    assert base_params["frozen_parameters"] == 0
    for model in ("doct", "cache"):  # theta_s loaded from the baseline and frozen
        m = _manifest(tiny_pipeline, "train_model", model, "manifest.json")
        assert m["params"]["train"]["init_from"] == BASELINE_BEST
        assert m["init_from"]["missing"] and not m["init_from"]["unexpected"]
        assert 0 < m["counts"]["trainable_parameters"] < m["counts"]["parameters"]
        assert m["counts"]["frozen_parameters"] > 0
        assert any(p.endswith("doc/train") for p in m["inputs"]), m["inputs"]
    camn = _manifest(tiny_pipeline, "train_model", "camn", "manifest.json")
    assert camn["params"]["train"]["init_from"] == BASELINE_BEST   # joint: every parameter
    assert camn["counts"]["trainable_parameters"] == camn["counts"]["parameters"]
    dbsa = _manifest(tiny_pipeline, "train_model", "dbsa", "manifest.json")
    assert dbsa["counts"]["frozen_parameters"] == 0  # fine-tuned whole, with parse supervision
    assert any(p.endswith("make_head_shards/bible/sent/train") for p in dbsa["inputs"])
    assert dbsa["counts"]["supervision"]["src_heads"] > 0
    pre = _manifest(tiny_pipeline, "train_model", "crosstask_pretrain", "manifest.json")
    fine = _manifest(tiny_pipeline, "train_model", "crosstask", "manifest.json")
    assert pre["params"]["train"]["init_from"] is None
    pretrained = "results/train_model/crosstask_pretrain/checkpoints/best"
    assert fine["params"]["train"]["init_from"] == pretrained
    assert fine["counts"]["frozen_parameters"] == 0 and fine["init_from"]["missing"] == []
    logs = tiny_pipeline / "logs" / "train_model"
    aux = "--aux-shards results/make_shards/bible/{}/train"
    assert aux.format("restore") in (logs / "crosstask_pretrain.log").read_text()
    assert aux.format("doc") in (logs / "crosstask.log").read_text()


def test_report_gives_parameter_overheads_against_the_baseline(tiny_pipeline):
    md = (tiny_pipeline / "results" / "report" / "report.md").read_text()
    models = md.split("## Models")[1].split("##")[0]
    row = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:]]
           for r in models.splitlines() if r.startswith("| ")}
    doct = _manifest(tiny_pipeline, "train_model", "doct", "manifest.json")["counts"]
    base = _manifest(tiny_pipeline, "train_model", "transformer", "manifest.json")["counts"]
    assert row["doct"][1] == f"{doct['parameters']:,}"
    overhead = 100 * (doct["parameters"] - base["parameters"]) / base["parameters"]
    assert row["doct"][2] == f"{overhead:+.1f}%"
    assert row["crosstask_sent"][:2] == ["crosstask", row["crosstask"][1]] != ["crosstask", "n/a"]


def test_report_counts_a_fine_tune_on_from_its_initial_checkpoint(tiny_pipeline):
    """Every job of the chains and controls is in the report's training table; doct starts at
    the update the baseline's checkpoints/best was saved (its first lowest dev loss)."""
    md = (tiny_pipeline / "results" / "report" / "report.md").read_text()
    table = md.split("### Training jobs")[1].split("##")[0]
    row = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:]]
           for r in table.splitlines() if r.startswith("| ")}
    assert set(_plan(tiny_pipeline).jobs) <= set(row)
    dev = [json.loads(line) for line in (tiny_pipeline / "results" / "train_model" / "transformer"
                                          / "metrics.jsonl").read_text().splitlines()]
    best = min((r for r in dev if r["split"] == "dev"), key=lambda r: r["loss"])["step"]
    assert row["doct"][1:3] == ["transformer", str(best)]
    assert row["transformer"][2] == "0"
    walls = [r.split("|")[2] for r in md.split("## Wall time per stage")[1].splitlines()
             if r.startswith("| ")]
    assert walls and not any("n/a" in jobs for jobs in walls)   # every job's benchmark was read


def test_averaging_jobs_are_decoded_from_their_averaged_checkpoint(tiny_pipeline):
    """Decoding reads each job's checkpoints/final: the averaged weights of a job that averages
    (doct here), the best checkpoint of one that does not."""
    import filecmp

    doct = _manifest(tiny_pipeline, "decode_test", "doct", "bible", "test.manifest.json")
    base = _manifest(tiny_pipeline, "decode_test", "transformer", "bible", "test.manifest.json")
    assert any("train_model/doct/checkpoints/final" in p for p in doct["inputs"]), doct["inputs"]
    assert any("train_model/transformer/checkpoints/final" in p for p in base["inputs"])
    runs = tiny_pipeline / "results" / "train_model"
    for job, weights in (("doct", "averaged"), ("transformer", "best")):
        ck = runs / job / "checkpoints"
        assert filecmp.cmp(ck / "final" / "model.pt", ck / weights / "model.pt", shallow=False)
    ck = runs / "doct" / "checkpoints"
    assert not filecmp.cmp(ck / "final" / "model.pt", ck / "best" / "model.pt", shallow=False)


def test_crosstask_is_decoded_by_document_and_by_sentence(tiny_pipeline):
    doc = _manifest(tiny_pipeline, "decode_test", "crosstask", "bible", "test.manifest.json")
    sent = _manifest(tiny_pipeline, "decode_test", "crosstask_sent", "bible", "test.manifest.json")
    assert doc["counts"]["unit"] == "document" and sent["counts"]["unit"] == "sentence"
    assert doc["counts"]["sentences"] == sent["counts"]["sentences"] > 0


def test_every_training_and_decoding_job_is_benchmarked(tiny_pipeline):
    bench = tiny_pipeline / "benchmarks"
    for job in JOBS:
        with open(bench / "train_model" / f"{job}.tsv") as f:
            row = next(csv.DictReader(f, delimiter="\t"))
        assert float(row["s"]) > 0
    for system in _plan(tiny_pipeline).systems:
        assert (bench / "decode_test" / system / "extra" / "test.tsv").is_file()


def test_context_ablation_measures_every_model_on_every_test_set(tiny_pipeline):
    """Issue 34 item 3 through the real DAG: every model's references are scored with true,
    random and empty context; a sentence-level model's CXMI is exactly 0, DocT and CAMN are
    measured, the cache and cross-task are reported as not measured with the reason, and the
    report has the section."""
    root = tiny_pipeline / "results" / "context_cxmi"
    for model in ("transformer", "dbsa", "doct", "cache", "camn", "crosstask"):
        for corpus in ("bible", "extra"):
            record = json.loads((root / model / corpus / "test.json").read_text())
            assert record["sentences"] > 0, (model, corpus)
            if model in ("cache", "crosstask"):
                assert "not_measured" in record, (model, record)
            elif model in ("transformer", "dbsa"):
                assert record["reads_context"] is False
                assert {c["nats_per_sentence"] for c in record["contrasts"].values()} == {0.0}
            else:
                assert record["reads_context"] is True
                ll = record["loglik_per_sentence"]
                assert ll["true"] != ll["empty"], (model, corpus, record)
                if record["documents"] > 1:
                    assert ll["true"] != ll["random"], (model, corpus, record)
                else:   # the extra corpus: one document, no other to draw from
                    assert "no other document" in record["random_not_measured"]
    report = (tiny_pipeline / "results" / "report" / "report.md").read_text()
    assert "Context use: forced decoding with true, random and empty context" in report



def test_context_twins_and_ablated_decodings_run_and_are_scored(tiny_pipeline):
    """Issue 34 items 2-3 through the real DAG: every context model's twin (DocT's and CAMN's
    with other documents' context, the cache's and cross-task's on documents regrouped from
    other documents' sentences) trained for its model's updates (their dev set, one chapter,
    with its own sentences outside the true context), each model decoded again with random and
    empty context, and the scores and the report hold each model against them (not as verdict
    rows)."""
    plan = _plan(tiny_pipeline)
    scores = _manifest(tiny_pipeline, "score_test", "scores.json")
    for model in ("doct", "cache", "camn", "crosstask"):
        twin = _manifest(tiny_pipeline, "train_model", f"{model}_random_context", "manifest.json")
        own = _manifest(tiny_pipeline, "train_model", model, "manifest.json")
        assert twin["params"]["train"]["context"] == "random"
        assert own["params"]["train"]["context"] == "true"
        assert twin["counts"]["steps"] == own["counts"]["steps"]
        # extra/test: two documents; bible/test (Jude): one, so random sentences of its own
        # outside the true context, and the manifest says so
        for condition, corpus, read in (("random", "extra", "random"), ("empty", "extra", "empty"),
                                        ("random", "bible", "random_within_document")):
            dec = _manifest(tiny_pipeline, "decode_test", f"{model}_ctx_{condition}", corpus,
                            "test.manifest.json")
            assert (dec["params"]["context"], dec["counts"]["context"]) == (condition, read)
        row = scores["results"]["bible/test"]["models"][model]
        assert set(row["against"]) == {"twin", "ctx_random", "ctx_empty"}
    assert not any("random_context" in m or "_ctx_" in m for m in plan.controls)
    md = (tiny_pipeline / "results" / "report" / "report.md").read_text()
    assert "Context use in BLEU" in md
    # the verdict rows are the models'; the budget table has the twin (it trained), not the
    # ablated decodings (they trained nothing of their own)
    verdict = md[md.index("## Verdict"):md.index("## Run")]
    assert "| doct_ctx_random |" not in verdict
    assert "| doct_random_context | control | doct_random_context |" in verdict

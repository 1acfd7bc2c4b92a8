"""The run plan (pipeline_lib/plan/) on the default config and on every preset: jobs and their
init_from chains, what each job is given, evaluated systems, test sets and the final targets."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from pipeline_lib.models.registry import MODELS
from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config
from pipeline_lib.plan.training import PARSE_PRIORITY

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "config" / "presets").glob("*.yaml"))


@pytest.fixture(scope="module")
def default() -> Plan:
    return Plan(load_config())


def test_default_jobs_follow_the_init_chains(default):
    assert list(default.jobs)[:7] == ["transformer", "dbsa", "doct", "cache", "camn", "crosstask",
                                      "crosstask_pretrain"]      # then the matched controls
    doct = default.jobs["doct"]
    assert doct.init_from == "transformer" and doct.data == "doc" and doct.aux is None
    assert doct.train["init_from"] == "results/train_model/transformer/checkpoints/best"
    assert doct.train["freeze"] == ["@sentence_level"]
    assert doct.model["name"] == "doct" and doct.model["extras"]["context_sentences"] == 2
    assert doct.model["d_model"] == 128          # model_sizes.tiny via model.size
    pre = default.jobs["crosstask_pretrain"]
    assert pre.model["name"] == "crosstask" and pre.init_from is None
    assert pre.train["aux_ratio"] == 0.5 and pre.aux == "restore"
    assert default.aux_flag("crosstask_pretrain") == \
        "--aux-shards results/make_shards/bible/restore/train"
    assert default.aux_flag("transformer") == ""
    base = default.jobs["transformer"]
    assert base.train["init_from"] is None and base.train["freeze"] == []
    assert "aux_ratio" not in base.train and "corpus" not in base.train
    assert base.corpus == base.dev_corpus == "bible"
    assert default.init_inputs("crosstask") == [
        "results/train_model/crosstask_pretrain/checkpoints/best"]
    # the trainer's --config-json: model + train, nothing else
    assert set(json.loads(doct.config_json())) == {"model", "train"}


def test_default_systems_tests_and_targets(default):
    assert default.systems["crosstask_sent"] == ("crosstask", "sentence")
    assert default.systems["doct"] == ("doct", "document")
    assert default.baseline == "transformer" and default.test_corpora == ["bible"]
    assert ("doct", "bible", "test", "results/decode_test/doct/bible/test.parquet") in \
        default.hypotheses()
    assert default.checkpoint("doct") == "results/train_model/doct/checkpoints/final"
    targets = default.final_targets()
    assert "results/report/index.html" in targets
    assert "results/parse_corpus/bible/manifest.json" in targets
    assert "results/decode_test/crosstask_sent/bible/test.manifest.json" in targets
    assert not any("discourse_contrastive" in t for t in targets)   # no suites configured
    assert default.parse_shard_dirs("bible", "src") == ["results/parse_shard/bible/src/0",
                                                        "results/parse_shard/bible/src/1"]


def test_job_without_settings_gets_the_schema_defaults():
    plan = Plan(load_config(overrides={"models": ["transformer", "camn"],
                                       "model_settings": {"camn": {"init_from": "base"},
                                                          "base": {"name": "transformer"}}}))
    assert list(plan.jobs)[:3] == ["transformer", "camn", "base"]
    base = plan.jobs["base"]
    assert base.model["name"] == "transformer" and base.data == "sent" and base.aux is None
    assert base.train["freeze"] == [] and base.model["extras"] == {}
    # a job named after no registered model, without a name of one, is refused
    with pytest.raises(ValueError, match="job 'base' .*no registered model 'base'"):
        load_config(overrides={"models": ["transformer", "camn"],
                               "model_settings": {"camn": {"init_from": "base"}}})


def test_test_set_arguments_are_shell_quoted(tmp_path):
    plan = Plan(load_config(overrides={"results_dir": "my results"}))
    args = shlex.split(plan.test_set_args())
    assert args[:3] == ["--refs", "bible", "my results/ingest_corpus/bible/docs.parquet"]
    assert args.count("--hyp") == len(plan.hypotheses())


def test_only_what_a_heads_job_trains_on_is_parsed(default):
    assert default.head_corpora == ["bible"] and default.jobs["dbsa"].data == "heads"
    assert default.shard_root("bible", "heads") == "results/make_head_shards/bible"
    assert default.shard_task("heads") == "sent" and default.shard_task("doc") == "doc"
    assert default.jobs[default.controls["dbsa"]].data == "heads"   # the same rows
    plan = Plan(load_config(overrides={"models": ["transformer", "doct"]}))
    assert not plan.parses and plan.head_corpora == []
    assert not any("parse" in t for t in plan.final_targets())


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_plans_registered_models_on_its_corpora(preset):
    config = load_config(overrides={"preset": preset})
    plan = Plan(config)
    assert plan.jobs and plan.systems
    for job in plan.jobs.values():
        assert job.model["name"] in MODELS, job.name
        assert job.corpus in config["corpora"] and job.dev_corpus in config["corpora"]
        assert job.init_from is None or job.init_from in plan.jobs
        assert (job.aux is None) == ("aux_ratio" not in job.train)
        assert job.model["d_model"] == 512          # the papers' base size
    for system, (job, unit) in plan.systems.items():
        assert job in plan.jobs and unit in ("document", "sentence")
    for corpus in plan.test_corpora:
        assert "test" in config["corpora"][corpus]["splits"], corpus
    downloads = {plan.results.download(d).manifest
                 for d in config["downloads"]["corpora"]}
    assert downloads <= set(plan.final_targets())


def test_zhang2018_trains_the_baseline_on_sentences_and_doct_on_documents():
    plan = Plan(load_config(overrides={"preset": "zhang2018_zh-en"}))
    assert plan.jobs["transformer"].corpus == "ldc_sent"
    assert plan.jobs["doct"].init_from == "transformer"
    assert plan.jobs["doct"].corpus != "ldc_sent"
    assert len(plan.test_corpora) == 5


def test_matched_controls_have_the_same_updates_on_the_same_pairs(default):
    c = default.controls
    assert set(c) == {"dbsa", "doct", "cache", "camn", "crosstask"}   # not the baseline itself
    # two-step models and the DBSA fine-tune: the baseline continued, all parameters trained
    doct, ctrl = default.jobs["doct"], default.jobs[c["doct"]]
    assert ctrl.init_from == "transformer" and ctrl.model == default.jobs["transformer"].model
    assert ctrl.data == doct.data == "doc" and ctrl.corpus == doct.corpus and ctrl.aux is None
    assert {k: v for k, v in ctrl.train.items() if k != "freeze"} == \
        {k: v for k, v in doct.train.items() if k != "freeze"}
    assert ctrl.train["freeze"] == [] and doct.train["freeze"] == ["@sentence_level"]
    assert c["doct"] == c["cache"] == c["camn"] != c["dbsa"]     # one job serves equal recipes
    assert default.jobs[c["dbsa"]].data == "heads"
    # cross-task: its chain mirrored link by link by Transformer jobs with the same translation
    # updates (restoration updates do not count) on the same corpora and schedules
    pre, fine = default.jobs["crosstask_pretrain"], default.jobs["crosstask"]
    ctrl_fine = default.jobs[c["crosstask"]]
    ctrl_pre = default.jobs[ctrl_fine.init_from]
    assert ctrl_pre.init_from is None and ctrl_pre.model["name"] == "transformer"
    assert ctrl_pre.train["max_steps"] == round(pre.train["max_steps"] * (1 - pre.train["aux_ratio"]))
    assert ctrl_pre.corpus == pre.corpus and ctrl_pre.train["lr"] == pre.train["lr"]
    assert ctrl_fine.train["max_steps"] == fine.train["max_steps"]
    assert ctrl_fine.train["warmup"] == fine.train["warmup"] and ctrl_fine.data == "sent"
    assert ctrl_fine.train["init_from"] == default.checkpoint(ctrl_pre.name, "best")
    # controls are trained, decoded and scored, and tested against their models
    assert set(c.values()) <= set(default.jobs) and set(c.values()) <= set(default.systems)
    assert ["crosstask_sent", c["crosstask"]] in json.loads(default.options("score_test"))["control"]
    assert default.control_of("crosstask_sent") == c["crosstask"]


def test_a_control_equal_to_an_existing_job_is_that_job():
    """DBSA trained from scratch with the baseline's steps on all pairs (the paper's recipe):
    its control is the baseline itself, not a second identical run; on the parsed subset
    (data: heads) it is a run on that subset."""
    base = Plan(load_config()).jobs["transformer"].train
    same = {k: base[k] for k in ("max_steps", "warmup", "lr", "validate_every", "save_every")}
    plan = Plan(load_config(overrides={"model_settings": {"dbsa": {
        "init_from": None, "data": "sent", "train": same}}}))
    assert plan.controls["dbsa"] == "transformer"
    subset = Plan(load_config(overrides={"model_settings": {"dbsa": {
        "init_from": None, "train": same}}}))
    assert subset.jobs[subset.controls["dbsa"]].data == "heads"
    off = Plan(load_config(overrides={"score": {"matched_controls": False}}))
    assert off.controls == {} and "transformer_plus150" not in off.jobs


def test_pretraining_can_read_another_corpus_restoration_instances():
    """Chen et al.'s "with resources" rows: translation pairs of one corpus, restoration
    instances of a monolingual document corpus (its mono split). The corpora a config names
    are the run's: ``bible: {}`` keeps the embedded one beside it."""
    plan = Plan(load_config(overrides={
        "corpora": {"bible": {},
                    "gigaword": {"reader": "mono_text", "splits": {"mono": {"src": "g.txt"}}}},
        "model_settings": {"crosstask_pretrain": {"aux_corpus": "gigaword"}}}))
    job = plan.jobs["crosstask_pretrain"]
    assert job.corpus == "bible" and job.aux_corpus == "gigaword"
    assert plan.aux_flag("crosstask_pretrain") == \
        "--aux-shards results/make_shards/gigaword/restore/mono"
    assert plan.aux_inputs("crosstask_pretrain") == ["results/make_shards/gigaword"]
    assert plan.aux_flag("crosstask") == "--aux-shards results/make_shards/bible/doc/train"
    assert plan.aux_inputs("transformer") == []


def test_with_resources_control_pretrains_on_the_same_external_pairs():
    """Chen et al. with resources: the control pre-trains a Transformer on the WMT pairs for as
    many translation updates as cross-task's pre-training made, then fine-tunes on the task."""
    plan = Plan(load_config(overrides={"preset": "chen2021_en-de_ted"}))
    ctrl = plan.jobs[plan.controls["crosstask"]]
    pre, ctrl_pre = plan.jobs["crosstask_pretrain"], plan.jobs[ctrl.init_from]
    assert pre.corpus == ctrl_pre.corpus == "wmt14" and ctrl.corpus == plan.jobs["crosstask"].corpus
    assert ctrl_pre.train["max_steps"] == round(pre.train["max_steps"] * (1 - pre.train["aux_ratio"]))


def test_bpe_reads_only_corpora_with_train_or_mono_text():
    """A test-only corpus is not train_bpe's input: editing it must not retrain BPE (and so every
    model); a monolingual corpus is (its documents feed the joint vocabulary)."""
    plan = Plan(load_config(overrides={"train": {"corpus": "bible"}, "corpora": {
        "bible": {},
        "extra": {"reader": "plaintext", "splits": {"test": {"src": "e.es", "tgt": "e.en"}}},
        "news": {"reader": "plaintext", "splits": {"dev": {"src": "d.es", "tgt": "d.en"},
                                                   "train": {"src": "t.es", "tgt": "t.en"}}},
        "gigaword": {"reader": "mono_text", "splits": {"mono": {"src": "g.txt"}}},
        "psalms": {"reader": "bible", "src_module": "a", "tgt_module": "b"}}}))
    assert plan.splits("extra") == {"test"} and plan.splits("psalms") == {"train"}
    assert plan.splits("bible") == {"train", "dev", "test"}
    assert plan.bpe_corpora == ["bible", "news", "gigaword", "psalms"]


def test_a_configfile_override_of_one_job_leaves_the_others_alone(tmp_path):
    """config.yaml holds no YAML alias: one shared dict would take one job's override into every
    job that shares it when Snakemake deep-merges a --configfile (update_config is in place)."""
    import yaml

    assert "&" not in "".join(line.split("#")[0] for line in
                              (ROOT / "config" / "config.yaml").read_text().splitlines())
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"model_settings": {"doct": {"train": {"lr": 5.0e-4}}}}))
    plan = Plan(load_config(ROOT / "config" / "config.yaml", extra))
    assert plan.jobs["doct"].train["lr"] == 5.0e-4
    assert {plan.jobs[j].train["lr"] for j in ("dbsa", "cache", "camn", "crosstask")} == {1.0e-3}
    assert plan.controls["doct"] != plan.controls["cache"] == plan.controls["camn"]


def test_rule_jobs_and_the_reports_flags_name_every_planned_job(default):
    """The report's inputs: every job's benchmark (rule -> wildcards; test_workflow.py checks
    the counts against snakemake -n) and one flag per stage output it shows, each a declared
    input (a job's metrics.jsonl beside its manifest, the shard manifest inside its folder), with
    each training job's parent as planned."""
    jobs = default.rule_jobs()
    assert {r: len(w) for r, w in jobs.items()} == {
        "ingest_corpus": 1, "stanza_models": 2, "parse_shard": 4, "parse_corpus": 1,
        "train_bpe": 1, "encode_bpe": 1, "encode_heads": 1, "make_head_shards": 1,
        "noise_docs": 1, "make_shards": 1, "verify_shards": 1, "train_model": 11,
        "decode_test": 18, "context_cxmi": 6, "score_test": 1, "discourse_consistency": 1}
    assert {"corpus": "bible", "side": "tgt", "shard": "1"} in jobs["parse_shard"]
    assert {"model": "crosstask_sent", "corpus": "bible", "split": "test"} in jobs["decode_test"]
    inputs = default.report_inputs()
    args = shlex.split(default.report_args())
    flags: dict[str, list[list[str]]] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            end = next((j for j in range(i + 1, len(args)) if args[j].startswith("--")), len(args))
            flags.setdefault(a, []).append(args[i + 1:end])
    assert flags["--system"][:2] == [["transformer", "transformer"], ["dbsa", "dbsa"]]
    assert ["crosstask_sent", "crosstask"] in flags["--system"]
    assert [p for _, p in flags["--ingest"]] == inputs["ingest"]
    assert [p.removesuffix("/manifest.json") for _, p in flags["--shards"]] == inputs["shards"]
    assert [m for _, m, _, _ in flags["--train"]] == inputs["train"]
    assert [j for j, _, _, _ in flags["--train"]] == list(default.jobs)
    assert all(p == m.replace("manifest.json", "metrics.jsonl") for _, m, p, _ in flags["--train"])
    parents = {j: p for j, _, _, p in flags["--train"]}
    assert parents["transformer"] == "" and parents["doct"] == "transformer"
    assert parents["crosstask"] == "crosstask_pretrain"
    assert [p for _, p in flags["--decode"]] == inputs["decode"]
    assert [p for _, p in flags["--benchmark"]] == inputs["benchmarks"]
    assert ["train_bpe", "benchmarks/train_bpe/train_bpe.tsv"] in flags["--benchmark"]
    assert ["parse_shard", "benchmarks/parse_shard/bible/tgt.1.tsv"] in flags["--benchmark"]


def test_rule_jobs_of_downloads_ldc_and_suites():
    plan = Plan(load_config(overrides={
        "downloads": {"corpora": ["wmt14_en_de_train"], "ldc": {"MT02": "/tmp"},
                      "ldc_required": ["MT02"]},
        "models": ["transformer", "doct"], "score": {"matched_controls": False}}))
    jobs = plan.rule_jobs()
    # local rules run on the submit host and have no benchmark file (Plan.rule_jobs)
    assert "download_corpus" not in jobs and "check_ldc" not in jobs
    assert "stanza_models" not in jobs and "parse_shard" not in jobs   # no heads job: no parse
    assert "discourse_contrastive" not in jobs                          # no suites
    assert [w["model"] for w in jobs["train_model"]] == ["transformer", "doct"]


def test_the_longest_chain_trains_first(default):
    """On 2 cores the default run fits its budget only in this order (README, bench/RESULTS):
    the baseline, then parsing, then the jobs that others start from, then the fine-tunes."""
    assert default.train_priority("transformer") == 10 > PARSE_PRIORITY
    heads = ("crosstask_pretrain", default.jobs[default.control_of("crosstask")].init_from)
    assert {default.train_priority(job) for job in heads} == {3}
    assert PARSE_PRIORITY > 3
    for job in ("doct", "cache", "camn", "dbsa", "crosstask", default.control_of("doct"),
                default.control_of("crosstask")):
        assert default.train_priority(job) == 2, job


def test_several_seeds_repeat_the_fine_tunes_from_one_baseline():
    """seeds: [1, 2, 3] (seed_scope fine_tune, the default; issue 34 item 5): every job that
    starts from a checkpoint once per seed as <job>_seed<N>, each from the same seed's parent;
    the jobs trained from scratch (baseline, cross-task pre-training, its control) once, with
    the first seed, shared by every seed; each model against the same seed's control."""
    plan = Plan(load_config(overrides={"seeds": [1, 2, 3]}))
    single = Plan(load_config())
    scratch = {j for j, job in single.jobs.items() if not job.init_from}
    assert scratch == {"transformer", "crosstask_pretrain", "transformer_scratch100"}
    assert set(plan.jobs) == scratch | {f"{j}_seed{s}" for j in single.jobs.keys() - scratch
                                        for s in (1, 2, 3)}
    assert plan.jobs["transformer"].train == {**single.jobs["transformer"].train, "seed": 1}
    doct = plan.jobs["doct_seed2"]
    assert doct.train["seed"] == 2 and doct.init_from == "transformer"
    assert doct.train["init_from"] == "results/train_model/transformer/checkpoints/best"
    assert {k: v for k, v in doct.train.items() if k != "seed"} == \
        {k: v for k, v in single.jobs["doct"].train.items() if k != "seed"}
    assert plan.controls["doct_seed3"] == f"{single.controls['doct']}_seed3"
    assert plan.jobs[plan.controls["doct_seed3"]].init_from == "transformer"
    assert plan.jobs["crosstask_seed2"].init_from == "crosstask_pretrain"
    assert plan.models[:3] == ["transformer", "dbsa_seed1", "dbsa_seed2"]
    assert plan.baseline == "transformer" and plan.replica("transformer") is None
    assert plan.replica("crosstask_seed2_sent") == ("crosstask_sent", 2)
    replicates = json.loads(plan.options("score_test"))["replicate"]
    assert len(replicates) == len(plan.systems) - 1 == 3 * (len(single.systems) - 1)
    per_system = len(plan.test_corpora) * len(plan.test_splits)
    assert len(plan.hypotheses()) == 3 * len(single.hypotheses()) - 2 * per_system
    assert plan.train_priority("transformer") == 10
    assert {plan.train_priority(j) for j in ("doct_seed1", "doct_seed3", "crosstask_seed2")} == {2}


def test_seed_scope_all_repeats_every_chain_and_control_per_seed():
    """seed_scope all: every job (chains and controls) once per seed, the baseline too, each
    link initialised from the same seed's parent, each model against the same seed's control
    and baseline; the report and the score get which system is which seed's run."""
    plan = Plan(load_config(overrides={"seeds": [1, 2, 3], "seed_scope": "all"}))
    single = Plan(load_config())
    assert set(plan.jobs) == {f"{j}_seed{s}" for j in single.jobs for s in (1, 2, 3)}
    doct = plan.jobs["doct_seed2"]
    assert doct.train["seed"] == 2 and doct.init_from == "transformer_seed2"
    assert doct.train["init_from"] == "results/train_model/transformer_seed2/checkpoints/best"
    assert {k: v for k, v in doct.train.items() if k not in ("seed", "init_from")} == \
        {k: v for k, v in single.jobs["doct"].train.items() if k not in ("seed", "init_from")}
    assert plan.controls["doct_seed3"] == f"{single.controls['doct']}_seed3"
    assert plan.jobs[plan.controls["doct_seed3"]].init_from == "transformer_seed3"
    assert plan.models[:4] == ["transformer_seed1", "transformer_seed2", "transformer_seed3",
                               "dbsa_seed1"]
    assert plan.baseline == "transformer_seed1"
    assert plan.systems["crosstask_seed2_sent"] == ("crosstask_seed2", "sentence")
    assert plan.replica("crosstask_seed2_sent") == ("crosstask_sent", 2)
    assert plan.replica(plan.controls["camn_seed1"]) == (single.controls["camn"], 1)
    replicates = json.loads(plan.options("score_test"))["replicate"]
    assert len(replicates) == len(plan.systems) == 3 * len(single.systems)
    assert ["crosstask_seed2_sent", "crosstask_sent", "2"] in replicates
    assert len(plan.hypotheses()) == 3 * len(single.hypotheses())
    # every seed's baseline goes first on 2 cores, every seed's fine-tunes last
    assert {plan.train_priority(f"transformer_seed{s}") for s in (1, 2, 3)} == {10}
    assert plan.train_priority("crosstask_pretrain_seed2") == 3
    assert {plan.train_priority(f"{j}_seed2") for j in ("doct", "crosstask")} == {2}


def test_one_seed_keeps_the_names_and_the_default_none():
    plan = Plan(load_config(overrides={"seeds": [7]}))
    default = Plan(load_config())
    assert list(plan.jobs) == list(default.jobs) and plan.systems == default.systems
    assert {j.train["seed"] for j in plan.jobs.values()} == {7}
    assert {j.train["seed"] for j in default.jobs.values()} == {1} and default.seeds == [1]
    assert json.loads(plan.options("score_test"))["replicate"] == \
        json.loads(default.options("score_test"))["replicate"] == []


def test_a_control_of_a_job_that_stops_on_a_plateau_trains_exactly_its_updates():
    """Issue 34 item 1, the converged regime: each model gets its own control, which runs after
    it (its manifest is an input) and trains the model's updates (times the translation share)
    with the stop rule off, from the same checkpoint, on the same data, with the same
    schedule and every parameter trained."""
    rule = {"patience": 4, "min_delta": 0.01, "stop_metric": "loss"}
    plan = Plan(load_config(overrides={"train": rule}))
    assert plan.controls["doct"] == "transformer_plus_matched_doct"
    assert plan.controls["cache"] == "transformer_plus_matched_cache"   # no longer shared
    assert plan.controls["dbsa"] == "transformer_plus_matched_dbsa"
    ctrl, doct = plan.jobs["transformer_plus_matched_doct"], plan.jobs["doct"]
    assert (ctrl.budget_of, ctrl.budget_share, ctrl.init_from) == ("doct", 1.0, "transformer")
    assert {k: v for k, v in ctrl.train.items() if k not in ("freeze", "patience")} == \
        {k: v for k, v in doct.train.items() if k not in ("freeze", "patience")}
    assert ctrl.train["patience"] == 0 and ctrl.train["freeze"] == []
    assert plan.budget_inputs(ctrl.name) == [plan.results.train_model("doct").manifest]
    assert plan.budget_flag(ctrl.name) == (
        f"--budget-of {plan.results.train_model('doct').manifest} --budget-share 1.0")
    assert plan.budget_inputs("doct") == [] and plan.budget_flag("doct") == ""
    # cross-task: the pre-training's control copies its translation share of the updates
    pre = plan.jobs[plan.jobs[plan.controls["crosstask"]].init_from]
    assert pre.name == "transformer_scratch_matched_crosstask_pretrain"
    assert pre.budget_of == "crosstask_pretrain" and pre.budget_share == 0.5
    assert pre.train["max_steps"] == 100                                # the cap
    # seeds: each seed's control copies the same seed's model
    seeded = Plan(load_config(overrides={"train": rule, "seeds": [1, 2]}))
    assert seeded.jobs["transformer_plus_matched_doct_seed2"].budget_of == "doct_seed2"
    # the GPU profile (the converged one without CPU cuts) and the CPU converged profile
    configs = [ROOT / "config" / f for f in ("config.yaml", "converged.yaml", "gpu.yaml")]
    gpu = Plan(load_config(*configs))
    assert gpu.seeds == [1, 2, 3]          # the profile's seeds (config/converged.yaml)
    assert gpu.jobs[gpu.controls["crosstask_seed2"]].budget_of == "crosstask_seed2"
    converged = Plan(load_config(*configs[:2]))
    assert not any(j.startswith("crosstask") for j in converged.jobs)
    assert all(j.train["patience"] > 0 for j in converged.jobs.values() if not j.budget_of)
    assert all(j.train["patience"] == 0 for j in converged.jobs.values() if j.budget_of)


def test_matched_budget_reads_the_models_updates(tmp_path):
    """The trainer's side: the control's max_steps is the model's counts.steps times the
    share, the stop rule off; a manifest without them, or a budget over the cap, is refused."""
    from pipeline_lib.training.train_config import TrainConfig, matched_budget

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"counts": {"steps": 350, "target_tokens": 10}}))
    tcfg = TrainConfig(max_steps=600, patience=3)
    assert matched_budget(tcfg, manifest).max_steps == 350
    assert matched_budget(tcfg, manifest).patience == 0
    assert matched_budget(tcfg, manifest, 0.5).max_steps == 175
    with pytest.raises(ValueError, match="exceed the control's cap max_steps=300"):
        matched_budget(TrainConfig(max_steps=300), manifest)
    manifest.write_text("{}")
    with pytest.raises(ValueError, match="no counts.steps of a finished run"):
        matched_budget(tcfg, manifest)


def test_each_run_keeps_its_logs_and_benchmarks_apart():
    """Issue 27: a profile or preset run in the default run's checkout wrote its logs and wall
    times over the default run's. Each results folder now has its own; the default run's paths
    are unchanged (a benchmark file is a job output: moving it would rerun the job)."""
    from pipeline_lib.results import JOB_FILES, UNTIMED, Results, run_name

    default = Results("results", "resources")
    assert default.log("train_model") == "logs/train_model/{model}.log"
    assert default.benchmark("parse_shard", corpus="bible", side="src", shard="1") == \
        "benchmarks/parse_shard/bible/src.1.tsv"
    assert Results("results/converged", "r").log("decode_test", model="m", corpus="c",
                                                 split="test") == \
        "logs/converged/decode_test/m/c/test.log"
    assert Results("results/chen2021_zh-en", "r").benchmark("train_model") == \
        "benchmarks/chen2021_zh-en/train_model/{model}.tsv"
    assert run_name("/scratch/run1/") == "scratch_run1" and run_name("results/") == ""
    assert set(UNTIMED) < set(JOB_FILES)
    with pytest.raises(ValueError, match="check_ldc has no benchmark"):
        default.benchmark("check_ldc")
    # every rule of the workflow names its log through Results.log (no literal path)
    rules = "".join(p.read_text() for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert '"logs/' not in rules and "'logs/" not in rules
    assert set(re.findall(r"^rule (\w+):", rules, re.M)) - {"all"} <= set(JOB_FILES)


def test_context_twins_and_ablations_exist_for_context_models_only():
    """Issue 34 items 2-3: score.context_twins trains every context model (DocT, CAMN, the
    cache, cross-task) again with other documents' context (the same job otherwise; under a
    plateau rule exactly the model's updates, after it); score.context_ablation decodes them
    again with random and empty context. Each is scored against its model, not against the
    matched control, and replicated per seed; the sentence-level models get neither."""
    rule = {"patience": 4, "min_delta": 0.01, "stop_metric": "loss"}
    on = {"score": {"context_twins": True, "context_ablation": True}}
    plan = Plan(load_config(overrides={**on, "train": rule}))
    assert plan.twins == {m: f"{m}_random_context" for m in ("doct", "cache", "camn", "crosstask")}
    twin, doct = plan.jobs["doct_random_context"], plan.jobs["doct"]
    assert twin.train["context"] == "random" and "context" not in doct.train
    assert {k: v for k, v in twin.train.items() if k not in ("context", "patience")} == \
        {k: v for k, v in doct.train.items() if k != "patience"}
    assert (twin.model, twin.init_from, twin.data, twin.corpus) == \
        (doct.model, doct.init_from, doct.data, doct.corpus)
    assert (twin.budget_of, twin.train["patience"]) == ("doct", 0)
    assert plan.ablations == {f"{m}_ctx_{c}": (m, c) for m in ("doct", "cache", "camn", "crosstask")
                              for c in ("random", "empty")}
    # the cross-task twin fine-tunes from the same pre-trained checkpoint
    assert plan.jobs["crosstask_random_context"].init_from == plan.jobs["crosstask"].init_from
    assert plan.systems["doct_ctx_empty"] == ("doct", "document")
    assert plan.systems["camn_random_context"] == ("camn_random_context", "document")
    assert plan.control_of("doct_ctx_random") is None
    assert plan.control_of("doct_random_context") is None
    assert json.loads(plan.options("decode_test", model="doct_ctx_random"))["context"] == "random"
    assert json.loads(plan.options("decode_test", model="doct"))["context"] == "true"
    against = json.loads(plan.options("score_test"))["against"]
    assert ["doct", "doct_random_context", "twin"] in against
    assert ["camn", "camn_ctx_empty", "ctx_empty"] in against and len(against) == 12
    assert not any(m in ("transformer", "dbsa") for m, _, _ in against)
    # without a plateau rule a twin has its model's cap, not its manifest
    capped = Plan(load_config(overrides=on))
    assert capped.jobs["doct_random_context"].budget_of is None
    # by default the ablations (cheap decodes), not the twins (trainings)
    default = Plan(load_config())
    assert default.twins == {} and default.ablations == plan.ablations
    assert not any("random_context" in j for j in default.jobs)
    # seeds: each seed's model gets its own twin and ablations
    seeded = Plan(load_config(overrides={**on, "seeds": [1, 2]}))
    assert seeded.twins["doct_seed2"] == "doct_random_context_seed2"
    assert seeded.jobs["doct_random_context_seed2"].init_from == "transformer"
    assert seeded.replica("doct_seed2_ctx_empty") == ("doct_ctx_empty", 2)
    assert ["doct_seed2", "doct_seed2_ctx_empty", "ctx_empty"] in \
        json.loads(seeded.options("score_test"))["against"]


def test_the_gpu_type_is_config_beside_the_gpu_count():
    """Issue 35 item 6: cluster.gpu_model asks SLURM for that GPU type, training with
    --gres=gpu:<model>:<gpus_per_node>, decoding and contrastive scoring with the plugin's
    gpu_model (--gpus=<model>:1); without it, any GPU, and a CPU training asks for none."""
    typed = Plan(load_config(overrides={"cluster": {"gpus_per_node": 4, "gpu_model": "a100"}}))
    assert typed.train_resources() == {"nodes": 1, "gres": "gpu:a100:4"}
    assert typed.gpu_resources() == {"gpu_model": "a100"}
    any_gpu = Plan(load_config(overrides={"cluster": {"gpus_per_node": 2}}))
    assert any_gpu.train_resources()["gres"] == "gpu:2" and any_gpu.gpu_resources() == {}
    assert Plan(load_config()).train_resources()["gres"] == ""
    with pytest.raises(Exception, match="gpu_model"):
        load_config(overrides={"cluster": {"gpu_model": "a100'"}})

"""Test-set scores with significance (pipeline_lib.evaluate.score) and discourse measures (pipeline_lib.evaluate.discourse)."""

SCORE = config.get("score", {})
# Every decoded system (baseline first; decode.smk: `models` plus <model>_sent rows) is scored;
# contrastive suites score the trained models themselves.
SCORE_MODELS = EVAL_SYSTEMS
SCORE_SPLITS = SCORE.get("test_splits", ["test"])
DISCOURSE_SUITES = SCORE.get("discourse_suites", {})


# (model, corpus, split, hypothesis file) of every test set, and the flags naming them all
SCORE_HYPS = [(m, c, s, f"{RESULTS}/decode_test/{m}/{c}/{s}.parquet")
              for m in SCORE_MODELS for c in TEST_CORPORA for s in SCORE_SPLITS]
SCORE_ARGS = " ".join(
    [f"--refs {c} {RESULTS}/ingest_corpus/{c}/docs.parquet" for c in TEST_CORPORA]
    + [f"--hyp {m} {c} {s} {p}" for m, c, s, p in SCORE_HYPS]
)


rule score_test:
    input:
        refs=expand(f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet", corpus=TEST_CORPORA),
        hyps=[p for *_, p in SCORE_HYPS],
    output:
        scores=f"{RESULTS}/score_test/scores.json",
        manifest=f"{RESULTS}/score_test/manifest.json",
    log:
        "logs/score_test/score_test.log",
    params:
        args=SCORE_ARGS,
        baseline=SCORE_MODELS[0],
        lowercase="--lowercase" if SCORE.get("lowercase", False) else "",
        samples=SCORE.get("bootstrap_samples", 1000),
        level=SCORE.get("significance_level", 0.05),
        code=code_hash("evaluate.score"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.score {params.args} --baseline {params.baseline} {params.lowercase}"
        " --bootstrap-samples {params.samples} --significance-level {params.level}"
        " --output {output.scores} > {log} 2>&1"


rule discourse_consistency:
    input:
        refs=expand(f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet", corpus=TEST_CORPORA),
        hyps=[p for *_, p in SCORE_HYPS],
    output:
        consistency=f"{RESULTS}/discourse_consistency/consistency.json",
        manifest=f"{RESULTS}/discourse_consistency/manifest.json",
    log:
        "logs/discourse_consistency/discourse_consistency.log",
    params:
        args=SCORE_ARGS,
        stop=SCORE.get("consistency_stop_top_k", 100),
        min_chars=SCORE.get("consistency_min_chars", 3),
        code=code_hash("evaluate.discourse"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.discourse consistency {params.args} --stop-top-k {params.stop}"
        " --min-chars {params.min_chars} --output {output.consistency} > {log} 2>&1"


rule discourse_contrastive:
    input:
        checkpoint=f"{RESULTS}/train_model/{{model}}/checkpoints/best",
        suites=[s["path"] for s in DISCOURSE_SUITES.values()],
    output:
        contrastive=f"{RESULTS}/discourse_contrastive/{{model}}/contrastive.json",
        manifest=f"{RESULTS}/discourse_contrastive/{{model}}/manifest.json",
    log:
        "logs/discourse_contrastive/{model}.log",
    params:
        suites=json.dumps(DISCOURSE_SUITES, sort_keys=True),
        max_examples=SCORE.get("discourse_max_examples", 0),
        code=code_hash("evaluate.discourse", "training.checkpoint", "batch", "models"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.discourse contrastive --checkpoint {input.checkpoint}"
        " --suites {params.suites:q} --max-examples {params.max_examples}"
        " --output {output.contrastive} > {log} 2>&1"


FINAL_TARGETS.extend([rules.score_test.output.scores, rules.discourse_consistency.output.consistency])
if DISCOURSE_SUITES:
    FINAL_TARGETS.extend(
        expand(f"{RESULTS}/discourse_contrastive/{{model}}/contrastive.json", model=DECODE_MODELS)
    )

"""The final report (pipeline_lib.evaluate.report): rebuilt whenever a score, curve or manifest changes."""

# Trained models (contrastive suites, training manifests) and evaluated systems (score rows, from
# decode.smk, which is included before this file; score.smk comes after it, alphabetically).
REPORT_MODELS = list(config.get("models", ["transformer"]))
REPORT_SYSTEMS = EVAL_SYSTEMS
REPORT_SUITES = config.get("score", {}).get("discourse_suites", {})


rule report:
    input:
        # paths, not rules.<name>: rule files are included alphabetically (score.smk after this)
        scores=f"{RESULTS}/score_test/scores.json",
        consistency=f"{RESULTS}/discourse_consistency/consistency.json",
        contrastive=expand(f"{RESULTS}/discourse_contrastive/{{model}}/contrastive.json",
                           model=REPORT_MODELS if REPORT_SUITES else []),
        ingest=expand(f"{RESULTS}/ingest_corpus/{{corpus}}/manifest.json", corpus=CORPORA),
        shards=expand(f"{RESULTS}/make_shards/{{corpus}}", corpus=CORPORA),
        train=expand(f"{RESULTS}/train_model/{{model}}/manifest.json", model=REPORT_MODELS),
    output:
        html=report(f"{RESULTS}/report/index.html", caption="../report/index.rst",
                    category="Report"),
        md=report(f"{RESULTS}/report/report.md", caption="../report/markdown.rst",
                  category="Report"),
        curves=report(f"{RESULTS}/report/training_curves.png", caption="../report/curves.rst",
                      category="Training"),
        manifest=f"{RESULTS}/report/manifest.json",
    log:
        "logs/report/report.log",
    params:
        contrastive=lambda w, input: " ".join(
            f"--contrastive {m} {p}" for m, p in zip(REPORT_MODELS, input.contrastive)
        ),
        suites=" ".join(REPORT_SUITES),
        models=" ".join(REPORT_SYSTEMS),
        corpora=" ".join(CORPORA),
        results=lambda w, input: Path(input.scores).parent.parent,
        title=config.get("report", {}).get("title", "Document-level NMT: results"),
        code=code_hash("evaluate.report"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.report --scores {input.scores} --consistency {input.consistency}"
        " {params.contrastive} --suites {params.suites} --models {params.models}"
        " --corpora {params.corpora} --results-dir {params.results} --title {params.title:q}"
        " --out-dir $(dirname {output.html}) > {log} 2>&1"


FINAL_TARGETS.append(rules.report.output.html)

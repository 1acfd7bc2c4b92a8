"""The final report (pipeline_lib.evaluate.report): rebuilt whenever a score, curve or manifest changes."""

from pathlib import Path

from pipeline_lib.codehash import code_hash


rule report:
    input:
        scores=plan.out("score_test", "scores.json"),
        consistency=plan.out("discourse_consistency", "consistency.json"),
        contrastive=[plan.out("discourse_contrastive", m, "contrastive.json")
                     for m in (config["models"] if plan.suites else [])],
        ingest=[plan.out("ingest_corpus", c, "manifest.json") for c in plan.corpora],
        shards=[plan.out("make_shards", c) for c in plan.corpora],
        train=[plan.out("train_model", m, "manifest.json") for m in config["models"]],
    output:
        html=report(plan.out("report", "index.html"), caption="../report/index.rst",
                    category="Report"),
        md=report(plan.out("report", "report.md"), caption="../report/markdown.rst",
                  category="Report"),
        curves=report(plan.out("report", "training_curves.png"), caption="../report/curves.rst",
                      category="Training"),
        manifest=plan.out("report", "manifest.json"),
    log:
        "logs/report/report.log",
    params:
        contrastive=lambda w, input: " ".join(
            f"--contrastive {m} {p}" for m, p in zip(config["models"], input.contrastive)
        ),
        suites=" ".join(plan.suites),
        models=" ".join(plan.systems),
        corpora=" ".join(plan.corpora),
        results=lambda w, input: Path(input.scores).parent.parent,
        title=config["report"]["title"],
        code=code_hash("evaluate.report"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.report --scores {input.scores:q}"
        " --consistency {input.consistency:q} {params.contrastive} --suites {params.suites}"
        " --models {params.models} --corpora {params.corpora} --results-dir {params.results:q}"
        " --title {params.title:q} --out-dir $(dirname {output.html:q}) > {log:q} 2>&1"

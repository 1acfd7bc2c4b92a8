"""The final report (pipeline_lib.evaluate.report): rebuilt whenever a score, curve, manifest or
benchmark changes. It reads only the files named here (plan.report_inputs / plan.report_args)."""

import json

from pipeline_lib.codehash import code_hash

# (rule, benchmark file) of every job of the run: each rule's own `benchmark:` pattern filled
# with the wildcards of its jobs, so the paths are spelled once, in the rule files.
BENCHMARKS = [(name, getattr(rules, name).benchmark.format(**wildcards))
              for name, jobs in plan.rule_jobs().items() for wildcards in jobs]


rule report:
    input:
        scores=plan.out("score_test", "scores.json"),
        consistency=plan.out("discourse_consistency", "consistency.json"),
        contrastive=[plan.out("discourse_contrastive", m, "contrastive.json")
                     for m in (plan.models if plan.suites else [])],
        **plan.report_inputs(),
        benchmarks=[path for _, path in BENCHMARKS],
    output:
        html=report(plan.out("report", "index.html"), caption="../report/index.rst",
                    category="Report"),
        md=report(plan.out("report", "report.md"), caption="../report/markdown.rst",
                  category="Report"),
        bleu=report(plan.out("report", "bleu_intervals.png"), caption="../report/bleu.rst",
                    category="Results"),
        curves=report(plan.out("report", "training_curves.png"), caption="../report/curves.rst",
                      category="Training"),
        config=plan.out("report", "config.json"),
        manifest=plan.out("report", "manifest.json"),
    log:
        "logs/report/report.log",
    params:
        contrastive=lambda w, input: " ".join(
            f"--contrastive {m} {p}" for m, p in zip(plan.models, input.contrastive)
        ),
        suites=" ".join(plan.suites),
        files=plan.report_args(BENCHMARKS),
        # the validated config (preset and command line applied): its hash is the run's
        config=json.dumps(config, sort_keys=True),
        title=config["report"]["title"],
        code=code_hash("evaluate.report"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.report --scores {input.scores:q}"
        " --consistency {input.consistency:q} {params.contrastive} --suites {params.suites}"
        " {params.files} --config-json {params.config:q}"
        " --title {params.title:q} --out-dir $(dirname {output.html:q}) > {log:q} 2>&1"

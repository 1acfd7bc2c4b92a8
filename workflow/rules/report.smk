"""The final report (pipeline_lib.evaluate.report): rebuilt whenever a score, curve, manifest or
benchmark changes. It reads only the files named here (plan.report_inputs / plan.report_args).
"""

from pipeline_lib.codehash import code_hash

OUT = plan.results.report()


rule report:
    input:
        **plan.report_inputs(),
        scores=plan.results.score_test().scores,
        consistency=plan.results.discourse_consistency().consistency,
        contrastive=[
            plan.results.discourse_contrastive(m).contrastive
            for m in (plan.models if plan.suites else [])
        ],
    output:
        html=report(OUT.html, caption="../report/index.rst", category="Report"),
        md=report(OUT.md, caption="../report/markdown.rst", category="Report"),
        bleu=report(OUT.bleu, caption="../report/bleu.rst", category="Results"),
        curves=report(OUT.curves, caption="../report/curves.rst", category="Training"),
        config=OUT.config,
        manifest=OUT.manifest,
    log:
        plan.results.log("report"),
    conda:
        "../../envs/score.yaml"
    params:
        contrastive=lambda w, input: " ".join(
            f"--contrastive {m} {p}" for m, p in zip(plan.models, input.contrastive)
        ),
        files=plan.report_args(),
        # the title, suites and the validated config (its hash is the run's)
        options=plan.options("report"),
        code=code_hash("evaluate.report.__main__"),
    shell:
        "python -m pipeline_lib.evaluate.report --scores {input.scores:q}"
        " --consistency {input.consistency:q} {params.contrastive}"
        " {params.files} --options {params.options:q} --out-dir $(dirname {output.html:q}) > {log:q} 2>&1"

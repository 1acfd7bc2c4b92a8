"""Test-set scores with significance (pipeline_lib.evaluate.score) and discourse measures
(pipeline_lib.evaluate.discourse); every decoded system of plan.systems is scored, the baseline
(the first of `models`) first."""

import json
import shlex

from snakemake.exceptions import WorkflowError

from pipeline_lib.codehash import code_hash
from pipeline_lib.evaluate.suites import check_suite_directions

# Before the DAG is built: a suite in another language pair than the models would be scored
# without a word of warning (e.g. the En-Ru suites under a Zh-En preset).
try:
    check_suite_directions(plan.suites, config["src_lang"], config["tgt_lang"])
except ValueError as e:
    raise WorkflowError(str(e)) from None


rule score_test:
    input:
        refs=[plan.results.ingest_corpus(c).docs for c in plan.test_corpora],
        hyps=[p for *_, p in plan.hypotheses()],
    output:
        **plan.results.score_test(),
    log:
        plan.results.log("score_test"),
    benchmark:
        plan.results.benchmark("score_test")
    params:
        args=plan.test_set_args(),
        baseline=plan.baseline,
        controls=plan.control_args(),
        # several seeds: which system is which seed's run of which system (statistics across seeds)
        replicates=plan.replicate_args(),
        flags=shlex.join(plan.score_flags()),
        code=code_hash("evaluate.score"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.score {params.args} --baseline {params.baseline:q}"
        " {params.controls} {params.replicates} {params.flags}"
        " --output {output.scores:q} > {log:q} 2>&1"


rule discourse_consistency:
    input:
        refs=[plan.results.ingest_corpus(c).docs for c in plan.test_corpora],
        hyps=[p for *_, p in plan.hypotheses()],
    output:
        **plan.results.discourse_consistency(),
    log:
        plan.results.log("discourse_consistency"),
    benchmark:
        plan.results.benchmark("discourse_consistency")
    params:
        args=plan.test_set_args(),
        stop=config["score"]["consistency_stop_top_k"],
        min_chars=config["score"]["consistency_min_chars"],
        code=code_hash("evaluate.discourse"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.discourse consistency {params.args}"
        " --stop-top-k {params.stop} --min-chars {params.min_chars}"
        " --output {output.consistency:q} > {log:q} 2>&1"


rule discourse_contrastive:
    input:
        checkpoint=plan.checkpoint("{model}"),
        suites=plan.suite_files(),
    output:
        **plan.results.discourse_contrastive(),
    log:
        plan.results.log("discourse_contrastive"),
    benchmark:
        plan.results.benchmark("discourse_contrastive")
    params:
        suites=json.dumps(plan.suites, sort_keys=True),
        lang_pair=f"{config['src_lang']}-{config['tgt_lang']}",
        max_examples=config["score"]["discourse_max_examples"],
        code=lambda wc: plan.model_code(wc.model, "evaluate.discourse"),
    conda:
        "../../envs/score.yaml"
    shell:
        "python -m pipeline_lib.evaluate.discourse contrastive --checkpoint {input.checkpoint:q}"
        " --suites {params.suites:q} --lang-pair {params.lang_pair}"
        " --max-examples {params.max_examples}"
        " --output {output.contrastive:q} > {log:q} 2>&1"

"""Test-set scores with significance (pipeline_lib.evaluate.score) and discourse measures
(pipeline_lib.evaluate.discourse); every decoded system of plan.systems is scored, the baseline
(the first of `models`) first."""

from snakemake.exceptions import WorkflowError

from pipeline_lib.codehash import code_hash
from pipeline_lib.evaluate.suites import check_suite_directions

# Before the DAG is built: a suite in another language pair than the models would be scored
# without a word of warning (e.g. the En-Ru suites under a Zh-En preset).
try:
    check_suite_directions(plan.suites, *plan.lang_pair)
except ValueError as e:
    raise WorkflowError(str(e)) from None


rule score_test:
    input:
        refs=[plan.results.ingest_corpus(c).docs for c in plan.test_corpora],
        hyps=[p for *_, p in plan.hypotheses()],
    output:
        scores=plan.results.score_test().scores,
        manifest=plan.results.score_test().manifest,
        # every test set's references and hypotheses as plain text, for sacreBLEU, COMET...
        text=directory(plan.results.score_test().text),
    log:
        plan.results.log("score_test"),
    benchmark:
        plan.results.benchmark("score_test")
    conda:
        "../../envs/score.yaml"
    # TER's edit statistics in parallel (pipeline_lib/evaluate/cached_ter.py): the last job
    # of a run, on the cores the decodes have left; Snakemake gives at most --cores
    threads: 4
    params:
        args=plan.test_set_args(),
        # statistics, the baseline, matched controls and, with several seeds, which system is
        # which seed's run (pipeline_lib.plan.options)
        options=plan.options("score_test"),
        code=code_hash("evaluate.score"),
    shell:
        "python -m pipeline_lib.evaluate.score {params.args} --options {params.options:q}"
        " --threads {threads} --output {output.scores:q} --text-dir {output.text:q}"
        " > {log:q} 2>&1"


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
    conda:
        "../../envs/score.yaml"
    params:
        args=plan.test_set_args(),
        options=plan.options("discourse_consistency"),
        code=code_hash("evaluate.discourse"),
    shell:
        "python -m pipeline_lib.evaluate.discourse consistency {params.args}"
        " --options {params.options:q}"
        " --output {output.consistency:q} > {log:q} 2>&1"


rule context_cxmi:
    input:
        checkpoint=plan.checkpoint("{model}"),
        shards=plan.results.make_shards(),
        spm=plan.results.train_bpe().model,
    output:
        **plan.results.context_cxmi(),
    log:
        plan.results.log("context_cxmi"),
    benchmark:
        plan.results.benchmark("context_cxmi")
    conda:
        "../../envs/train.yaml"
    threads: 1
    params:
        shards=lambda wc: plan.decode_shards(wc.model, wc.corpus, wc.split),
        options=lambda wc: plan.options("context_cxmi", model=wc.model),
        code=lambda wc: plan.model_code(wc.model, "evaluate.cxmi"),
    shell:
        "python -m pipeline_lib.evaluate.cxmi --checkpoint {input.checkpoint:q}"
        " --shards {params.shards:q} --spm {input.spm:q} --output {output.cxmi:q}"
        " --options {params.options:q} --threads {threads} > {log:q} 2>&1"


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
    conda:
        "../../envs/score.yaml"
    resources:
        **plan.gpu_resources(),  # config cluster.gpu_model (the profile asks for the GPU)
    params:
        options=lambda wc: plan.options("discourse_contrastive", model=wc.model),
        code=lambda wc: plan.model_code(wc.model, "evaluate.discourse"),
    shell:
        "python -m pipeline_lib.evaluate.discourse contrastive --checkpoint {input.checkpoint:q}"
        " --options {params.options:q}"
        " --output {output.contrastive:q} > {log:q} 2>&1"

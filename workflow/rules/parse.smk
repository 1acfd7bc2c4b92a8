"""Stanza models per language, then dependency parses of both corpus sides in fixed shards
(pipeline_lib.parse.stanza_models, pipeline_lib.parse.dependencies)."""

from pipeline_lib.codehash import code_hash
from pipeline_lib.plan.training import PARSE_PRIORITY


wildcard_constraints:
    side="src|tgt",
    shard=r"\d+",


rule stanza_models:
    output:
        **plan.results.stanza_models(),
    log:
        plan.results.log("stanza_models"),
    benchmark:
        plan.results.benchmark("stanza_models")
    priority: PARSE_PRIORITY  # after the baselines, before the other training jobs: train.smk
    conda:
        "../../envs/parse.yaml"
    # one thread per language: both languages train side by side on 2 cores
    threads: 1
    params:
        # the stanza section and the configured shared folder (pipeline_lib.plan.options), and
        # the content of its treebank files: never a path of the checkout, so a moved checkout
        # does not retrain the parsers
        options=plan.options("stanza_models"),
        treebanks=lambda wc: plan.treebank_digest(wc.lang),
        store=plan.results.stanza_store(),
        code=code_hash("parse.stanza_models"),
    shell:
        "python -m pipeline_lib.parse.stanza_models --lang {wildcards.lang:q} --options {params.options:q}"
        " --resources-dir {params.store:q}"
        " --out-dir $(dirname {output.model:q}) --threads {threads} > {log:q} 2>&1"


rule parse_shard:
    input:
        docs=lambda wc: plan.text_docs(wc.corpus),
        model=lambda wc: plan.results.stanza_models(plan.side_lang(wc.side)).model,
    output:
        **plan.results.parse_shard(),
    log:
        plan.results.log("parse_shard"),
    benchmark:
        plan.results.benchmark("parse_shard")
    priority: PARSE_PRIORITY
    conda:
        "../../envs/parse.yaml"
    threads: plan.parse_threads
    params:
        options=plan.options("parse_shard"),
        code=code_hash("parse.dependencies", "parse.stanza_models"),
    shell:
        "python -m pipeline_lib.parse.dependencies shard --docs {input.docs:q}"
        " --side {wildcards.side} --model {input.model:q} --shard {wildcards.shard}"
        " --options {params.options:q} --threads {threads}"
        " --out-dir $(dirname {output.parse:q}) > {log:q} 2>&1"


rule parse_corpus:
    input:
        # every file the merge reads: each shard's parses, quarantine and manifest
        src=lambda wc: plan.parse_shard_files(wc.corpus, "src"),
        tgt=lambda wc: plan.parse_shard_files(wc.corpus, "tgt"),
    output:
        **plan.results.parse_corpus(),
    log:
        plan.results.log("parse_corpus"),
    benchmark:
        plan.results.benchmark("parse_corpus")
    priority: PARSE_PRIORITY
    conda:
        "../../envs/parse.yaml"
    params:
        src=lambda wc: " ".join(plan.parse_shard_dirs(wc.corpus, "src")),
        tgt=lambda wc: " ".join(plan.parse_shard_dirs(wc.corpus, "tgt")),
        code=code_hash("parse.dependencies", "parse.stanza_models"),
    shell:
        "python -m pipeline_lib.parse.dependencies merge --src-shards {params.src}"
        " --tgt-shards {params.tgt} --out-dir $(dirname {output.src:q}) > {log:q} 2>&1"

"""Raw corpora -> document Parquet (pipeline_lib.ingest)."""

from pipeline_lib.codehash import code_hash
from pipeline_lib.ingest import code_modules, rule_inputs


rule ingest_corpus:
    input:
        lambda wc: rule_inputs(plan.corpus_spec(wc.corpus), plan.results),
    output:
        **plan.results.ingest_corpus(),
    log:
        plan.results.log("ingest_corpus"),
    benchmark:
        plan.results.benchmark("ingest_corpus")
    priority: 10  # ahead of stanza: see train.smk
    conda:
        "../../envs/ingest.yaml"
    params:
        # the corpus's entry, ingest limits, hygiene and languages (pipeline_lib.plan.options)
        options=lambda wc: plan.options("ingest_corpus", corpus=wc.corpus),
        code=lambda wc: code_hash(*code_modules(plan.corpus_spec(wc.corpus))),
    # its warnings (long documents, hygiene's findings, language check skipped) repeated on
    # the console: the log alone is where no one looks
    shell:
        "python -m pipeline_lib.ingest --corpus {wildcards.corpus:q} --options {params.options:q}"
        " --out-dir $(dirname {output.docs:q}) > {log:q} 2>&1"
        " && {{ grep ' WARNING ' {log:q} >&2 || true; }}"

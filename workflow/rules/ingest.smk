"""Raw corpora -> document Parquet (pipeline_lib.ingest)."""

import json


rule ingest_corpus:
    input:
        lambda wc: plan.ingest_inputs(wc.corpus),
    output:
        docs=plan.out("ingest_corpus", "{corpus}", "docs.parquet"),
        quarantine=plan.out("ingest_corpus", "{corpus}", "quarantine.parquet"),
        manifest=plan.out("ingest_corpus", "{corpus}", "manifest.json"),
    log:
        "logs/ingest_corpus/{corpus}.log",
    benchmark:
        "benchmarks/ingest_corpus/{corpus}.tsv"
    params:
        # the corpus's config entry as one JSON argument (also a rerun trigger)
        spec=lambda wc: json.dumps(config["corpora"][wc.corpus], sort_keys=True),
        max_line_chars=config["ingest"]["max_line_chars"],
        hygiene=json.dumps(config["hygiene"], sort_keys=True),
        src_lang=config["src_lang"],
        tgt_lang=config["tgt_lang"],
        code=lambda wc: plan.ingest_code(wc.corpus),
    priority: 10   # ahead of stanza: see train.smk
    conda:
        "../../envs/ingest.yaml"
    shell:
        "python -m pipeline_lib.ingest --corpus {wildcards.corpus:q} --spec {params.spec:q}"
        " --max-line-chars {params.max_line_chars} --hygiene {params.hygiene:q}"
        " --src-lang {params.src_lang} --tgt-lang {params.tgt_lang}"
        " --out-dir $(dirname {output.docs:q}) > {log:q} 2>&1"

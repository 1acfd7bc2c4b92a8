"""Raw corpora -> document Parquet (pipeline_lib.ingest)."""

import json

from pipeline_lib.codehash import code_hash
from pipeline_lib.ingest import code_modules, rule_inputs


rule ingest_corpus:
    input:
        lambda wc: rule_inputs(config["corpora"][wc.corpus], plan.results),
    output:
        **plan.results.ingest_corpus(),
    log:
        plan.results.log("ingest_corpus"),
    benchmark:
        plan.results.benchmark("ingest_corpus")
    params:
        # the corpus's config entry as one JSON argument (also a rerun trigger)
        spec=lambda wc: json.dumps(config["corpora"][wc.corpus], sort_keys=True),
        max_line_chars=config["ingest"]["max_line_chars"],
        max_quarantined_share=config["ingest"]["max_quarantined_share"],
        hygiene=json.dumps(config["hygiene"], sort_keys=True),
        src_lang=config["src_lang"],
        tgt_lang=config["tgt_lang"],
        code=lambda wc: code_hash(*code_modules(config["corpora"][wc.corpus])),
    priority: 10   # ahead of stanza: see train.smk
    conda:
        "../../envs/ingest.yaml"
    shell:
        "python -m pipeline_lib.ingest --corpus {wildcards.corpus:q} --spec {params.spec:q}"
        " --max-line-chars {params.max_line_chars} --hygiene {params.hygiene:q}"
        " --max-quarantined-share {params.max_quarantined_share}"
        " --src-lang {params.src_lang} --tgt-lang {params.tgt_lang}"
        " --out-dir $(dirname {output.docs:q}) > {log:q} 2>&1"

"""Raw corpora -> document Parquet (pipeline_lib.ingest)."""

import json

from pipeline_lib.codehash import code_hash
from pipeline_lib.ingest import code_modules, reader_module


def ingest_inputs(wc) -> list[str]:
    """The raw files a corpus's reader reads: changing one reruns only that corpus's ingestion.
    A downloaded corpus stands behind its download manifest (rule download_corpus). Reader
    modules import their own libraries lazily, so this is cheap."""
    spec = config["corpora"][wc.corpus]
    if spec.get("download"):
        return [plan.resource("corpora", spec["download"], "manifest.json")]
    return reader_module(spec["reader"]).input_files(spec)


rule ingest_corpus:
    input:
        ingest_inputs,
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
        code=lambda wc: code_hash(*code_modules(config["corpora"][wc.corpus])),
    priority: 10   # ahead of stanza: see train.smk
    conda:
        "../../envs/ingest.yaml"
    shell:
        "python -m pipeline_lib.ingest --corpus {wildcards.corpus:q} --spec {params.spec:q}"
        " --max-line-chars {params.max_line_chars} --hygiene {params.hygiene:q}"
        " --src-lang {params.src_lang} --tgt-lang {params.tgt_lang}"
        " --out-dir $(dirname {output.docs:q}) > {log:q} 2>&1"

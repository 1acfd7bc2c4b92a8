"""Raw corpora -> document Parquet (pipeline_lib.ingest)."""


rule ingest_corpus:
    input:
        ingest_inputs,
    output:
        docs=f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet",
        quarantine=f"{RESULTS}/ingest_corpus/{{corpus}}/quarantine.parquet",
        manifest=f"{RESULTS}/ingest_corpus/{{corpus}}/manifest.json",
    log:
        "logs/ingest_corpus/{corpus}.log",
    params:
        spec=corpus_spec_json,
        max_line_chars=config.get("ingest", {}).get("max_line_chars", 2000),
        code=code_hash("ingest"),
    conda:
        "../../envs/ingest.yaml"
    shell:
        "python -m pipeline_lib.ingest --corpus {wildcards.corpus} --spec {params.spec:q}"
        " --max-line-chars {params.max_line_chars}"
        " --out-dir $(dirname {output.docs}) > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESULTS}/ingest_corpus/{{corpus}}/manifest.json", corpus=CORPORA)
)

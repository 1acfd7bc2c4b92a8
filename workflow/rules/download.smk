"""Public corpora -> resources/corpora/<name>/ (pipeline_lib.ingest.download); licensed LDC corpora checked."""

DOWNLOADS = config.get("downloads", {})
LDC_REQUIRED = DOWNLOADS.get("ldc_required", [])

if LDC_REQUIRED:
    # Before the DAG is built: the LDC readers would otherwise fail on the first missing file
    # alone, while a user wants the list of everything to obtain.
    from snakemake.exceptions import WorkflowError

    from pipeline_lib.ingest.download import DownloadError, check_ldc

    try:
        check_ldc(DOWNLOADS.get("ldc", {}), LDC_REQUIRED)
    except DownloadError as e:
        raise WorkflowError(str(e)) from None


wildcard_constraints:
    download="[a-z0-9_]+",


# Compute nodes of many clusters cannot reach the internet; under SLURM these run on the submit host.
localrules:
    download_corpus,
    check_ldc,


rule download_corpus:
    output:
        manifest=f"{RESOURCES}/corpora/{{download}}/manifest.json",
    log:
        "logs/download_corpus/{download}.log",
    params:
        resources=lambda w, output: Path(output.manifest).parents[2],
        trust="--trust-first-download" if DOWNLOADS.get("trust_first_download") else "",
        retries=DOWNLOADS.get("retries", 5),
        timeout=DOWNLOADS.get("timeout_s", 60),
        code=code_hash("ingest.download"),
    conda:
        "../../envs/download.yaml"
    shell:
        "python -m pipeline_lib.ingest.download get --name {wildcards.download}"
        " --resources {params.resources} {params.trust} --retries {params.retries}"
        " --timeout-s {params.timeout} > {log} 2>&1"


rule check_ldc:
    output:
        manifest=f"{RESULTS}/check_ldc/manifest.json",
    log:
        "logs/check_ldc.log",
    params:
        dirs=json.dumps(DOWNLOADS.get("ldc", {}), sort_keys=True),
        required=" ".join(LDC_REQUIRED),
        code=code_hash("ingest.download"),
    conda:
        "../../envs/download.yaml"
    shell:
        "python -m pipeline_lib.ingest.download check-ldc --dirs {params.dirs:q}"
        " --required {params.required} --manifest {output.manifest} > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESOURCES}/corpora/{{download}}/manifest.json", download=DOWNLOADS.get("corpora", []))
)
if LDC_REQUIRED:
    FINAL_TARGETS.append(f"{RESULTS}/check_ldc/manifest.json")

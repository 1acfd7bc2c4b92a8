"""Public corpora -> resources/corpora/<name>/ (pipeline_lib.ingest.download); licensed LDC corpora checked."""

import json
from pathlib import Path

from pipeline_lib.codehash import code_hash

DOWNLOADS = config["downloads"]

if DOWNLOADS["ldc_required"]:
    # Before the DAG is built: the LDC readers would otherwise fail on the first missing file
    # alone, while a user wants the list of everything to obtain.
    from snakemake.exceptions import WorkflowError

    from pipeline_lib.ingest.download import DownloadError, check_ldc

    try:
        check_ldc(DOWNLOADS["ldc"], DOWNLOADS["ldc_required"])
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
        manifest=plan.results.download().manifest,
    log:
        plan.results.log("download_corpus"),
    params:
        resources=lambda w, output: Path(output.manifest).parents[2],
        trust="--trust-first-download" if DOWNLOADS["trust_first_download"] else "",
        retries=DOWNLOADS["retries"],
        timeout=DOWNLOADS["timeout_s"],
        code=code_hash("ingest.download"),
    conda:
        "../../envs/download.yaml"
    shell:
        "python -m pipeline_lib.ingest.download get --name {wildcards.download:q}"
        " --resources {params.resources:q} {params.trust} --retries {params.retries}"
        " --timeout-s {params.timeout} > {log:q} 2>&1"


rule check_ldc:
    output:
        manifest=plan.results.check_ldc().manifest,
    log:
        plan.results.log("check_ldc"),
    params:
        dirs=json.dumps(DOWNLOADS["ldc"], sort_keys=True),
        required=" ".join(DOWNLOADS["ldc_required"]),
        code=code_hash("ingest.download"),
    conda:
        "../../envs/download.yaml"
    shell:
        "python -m pipeline_lib.ingest.download check-ldc --dirs {params.dirs:q}"
        " --required {params.required} --manifest {output.manifest:q} > {log:q} 2>&1"

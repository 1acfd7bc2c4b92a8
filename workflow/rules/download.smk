"""Public corpora -> resources/corpora/<name>/ (pipeline_lib.ingest.download); licensed LDC corpora checked."""

from pathlib import Path

from pipeline_lib.codehash import code_hash

if plan.downloads["ldc_required"]:
    # Before the DAG is built: the LDC readers would otherwise fail on the first missing file
    # alone, while a user wants the list of everything to obtain.
    from snakemake.exceptions import WorkflowError

    from pipeline_lib.ingest.download import DownloadError, check_ldc

    try:
        check_ldc(plan.downloads["ldc"], plan.downloads["ldc_required"])
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
    conda:
        "../../envs/download.yaml"
    params:
        resources=lambda w, output: Path(output.manifest).parents[2],
        options=plan.options("download_corpus"),
        code=code_hash("ingest.download"),
    shell:
        "python -m pipeline_lib.ingest.download get --name {wildcards.download:q}"
        " --resources {params.resources:q} --options {params.options:q} > {log:q} 2>&1"


rule check_ldc:
    output:
        manifest=plan.results.check_ldc().manifest,
    log:
        plan.results.log("check_ldc"),
    conda:
        "../../envs/download.yaml"
    params:
        options=plan.options("check_ldc"),
        code=code_hash("ingest.download"),
    shell:
        "python -m pipeline_lib.ingest.download check-ldc --options {params.options:q}"
        " --manifest {output.manifest:q} > {log:q} 2>&1"

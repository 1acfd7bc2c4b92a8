"""Input functions, paths and the final-target registry shared by every rule file."""

import json
import os
from pathlib import Path

from pipeline_lib.codehash import code_hash

RESULTS = config.get("results_dir", "results")
RESOURCES = config.get("resources_dir", "resources")
SHARED = os.environ.get("DOCMT_SHARED", config.get("shared_dir", "../shared"))
CORPORA = list(config["corpora"])
# Corpora decoded and scored on score.test_splits (training-only corpora have no test split).
TEST_CORPORA = list(config.get("score", {}).get("corpora") or CORPORA)

# Rule files append what `rule all` must build; final_targets() is evaluated after all includes.
FINAL_TARGETS = []


def final_targets():
    return FINAL_TARGETS


def corpus_spec(corpus):
    return config["corpora"][corpus]


def corpus_spec_json(wildcards):
    """The corpus's config entry as one shell-quoted JSON argument (also a rerun trigger)."""
    return json.dumps(corpus_spec(wildcards.corpus), sort_keys=True)


def ingest_inputs(wildcards):
    """The raw files a corpus's reader reads: changing one reruns only that corpus's ingestion."""
    from pipeline_lib.ingest import reader_module

    spec = corpus_spec(wildcards.corpus)
    if "download" in spec:  # fetched by rule download_corpus; its manifest stands for the files
        return [f"{RESOURCES}/corpora/{spec['download']}/manifest.json"]
    return reader_module(spec["reader"]).input_files(spec)

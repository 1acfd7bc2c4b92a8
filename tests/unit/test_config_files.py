"""Strict config files (pipeline_lib/config_files.py) and the failed jobs' errors printed on the
console (pipeline_lib/failed_jobs.py, the Snakefile's onerror handler)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from pipeline_lib import failed_jobs
from pipeline_lib.config_files import DuplicateKeyError, check_files, load_yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_shipped_config_and_profile_has_unique_keys():
    check_files([ROOT / "config/config.yaml", *(ROOT / "config/presets").glob("*.yaml"),
                 *(ROOT / "profiles").glob("*/config.yaml")])


def test_a_merge_key_may_be_overridden_but_a_repeated_key_may_not(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("base: &b {lr: 1, steps: 2}\njob:\n  <<: *b\n  lr: 3\n")
    assert load_yaml(f)["job"] == {"lr": 3, "steps": 2}
    f.write_text("a:\n  b:\n    c: 1\n    d: 2\n    c: 3\n")
    with pytest.raises(DuplicateKeyError, match=r"c\.yaml:5: duplicate key 'c' \(first given at "
                                                r"line 3\)"):
        check_files([f, tmp_path / "absent.yaml"])


def test_failed_jobs_print_the_end_of_each_failed_log(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("started\n\nERROR x.es:3: broken\n")
    (tmp_path / "logs" / "b.log").write_text("only line\n")
    log = tmp_path / "run.snakemake.log"
    log.write_text("Error in rule ingest_corpus:\n    jobid: 1\n    log: logs/a.log (check log "
                   "file(s) for error details)\n    shell: ...\nError in rule train_model:\n"
                   "    log: logs/b.log, logs/missing.log\nother text\n    log: logs/no.log\n")
    assert failed_jobs.failed_logs(log) == [("ingest_corpus", ["logs/a.log"]),
                                            ("train_model", ["logs/b.log", "logs/missing.log"])]
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        failed_jobs.report([str(log)], out)
    finally:
        os.chdir(cwd)
    text = out.getvalue()
    assert "ingest_corpus failed; the end of logs/a.log:\n  started\n  ERROR x.es:3: broken" in text
    assert "train_model failed; the end of logs/b.log:\n  only line" in text
    assert "missing.log" not in text
    failed_jobs.report(None, out)   # no Snakemake log: nothing to do

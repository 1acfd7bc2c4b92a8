"""Ingestion under Snakemake (issue 21): a failing stage's one-line error, with file and line,
reaches the console (stderr of the snakemake process), not only its log; and what a failure
leaves (README "Bad input": Snakemake deletes a job's old outputs before running it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _snakemake(work: Path, *targets: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(work), "--configfile", str(ROOT / "config" / "config.yaml"),
           str(work / "config.yaml"), "--cores", "1", *targets]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)


def test_a_failing_ingest_prints_its_error_with_file_and_line_on_the_console(tmp_path):
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("Frase número uno del corpus.\nFrase número dos.\n")
    tgt.write_text("Sentence number one of the corpus.\nSentence number two.\n")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "corpora": {"c": {"reader": "plaintext",
                          "splits": {"train": {"src": str(src), "tgt": str(tgt)}}}},
        "hygiene": {"langid": False}}))
    manifest = "results/ingest_corpus/c/manifest.json"
    proc = _snakemake(tmp_path, manifest)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert json.loads((tmp_path / manifest).read_text())["counts"]["kept"] == 2

    src.write_text("Frase número uno del corpus.\nFrase número dos.\nY tres.\n")   # changed
    proc = _snakemake(tmp_path, manifest)
    assert proc.returncode != 0
    error = (f"{src}: has 3 lines but {tgt} has 2, and neither has a document separator ('') to "
             "realign them: the files must be line-aligned")
    assert error in (tmp_path / "logs/ingest_corpus/c.log").read_text()
    assert "ingest_corpus failed; the end of logs/ingest_corpus/c.log:" in proc.stderr
    assert error in proc.stderr
    # Snakemake deleted the job's old outputs before running it: nothing stale is left
    out = tmp_path / "results/ingest_corpus/c"
    assert not out.exists() or not [p.name for p in out.iterdir()]


def test_an_ingest_warning_reaches_the_console_and_the_job_succeeds(tmp_path):
    """Issue 36 item 3: a file read as one document of 250 sentences (no separator occurs in it)
    is warned of on the console, not only in the log and the manifest."""
    src, tgt = tmp_path / "a.es", tmp_path / "a.en"
    src.write_text("".join(f"Frase número {i} del corpus.\n" for i in range(250)))
    tgt.write_text("".join(f"Sentence number {i} of the corpus.\n" for i in range(250)))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "corpora": {"c": {"reader": "plaintext",
                          "splits": {"train": {"src": str(src), "tgt": str(tgt)}}}},
        "hygiene": {"langid": False}}))
    proc = _snakemake(tmp_path, "results/ingest_corpus/c/manifest.json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"c: split train ({src}): all 250 sentences are one document" in proc.stderr, \
        proc.stderr[-3000:]

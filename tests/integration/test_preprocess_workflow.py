"""The preprocessing rules end to end through Snakemake on a small slice of the embedded Bible:
ingest -> train_bpe -> encode_bpe -> noise_docs -> checkpoint make_shards -> verify_shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _snakemake(workdir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    # Rules call `python -m pipeline_lib...`: the interpreter running the tests must be first.
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(workdir), "--configfile", str(config), "--cores", "2", *args],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_preprocess_rules_on_bible_slice(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["results_dir"] = str(tmp_path / "results")
    config["corpora"] = {"bible": {**config["corpora"]["bible"], "max_chapters": 40}}
    # Heads need stanza parses (slow; covered by tests/unit/preprocess/test_bpe.py with gold UD trees).
    config["bpe"] = {**config.get("bpe", {}), "vocab_size": 1000}
    config["shards"] = {**config.get("shards", {}), "rows_per_shard": 300}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    target = str(tmp_path / "results" / "verify_shards" / "bible" / "manifest.json")
    proc = _snakemake(tmp_path, cfg, target)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    res = tmp_path / "results"
    assert (res / "train_bpe" / "spm.model").is_file()
    noise = json.loads((res / "noise_docs" / "bible" / "manifest.json").read_text())
    assert abs(noise["achieved"]["mask_rate"] - 0.15) < 0.01
    verified = json.loads(Path(target).read_text())["counts"]
    assert verified["sent/train"]["shards"] > 1 and verified["doc/test"]["rows"] > 0
    index = pq.read_table(res / "make_shards" / "bible" / "doc" / "train" / "index.parquet")
    assert sum(index["rows"].to_pylist()) == verified["doc/train"]["rows"]
    # Nothing left to do: the checkpoint's fan-out is stable.
    again = _snakemake(tmp_path, cfg, "-n", target)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

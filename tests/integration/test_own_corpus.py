"""Issue 35 item 1 through real Snakemake runs: a user's own corpus, named the two ways users
expect (a ``--configfile`` from the checkout; a working folder of their own with
``config/config.yaml``, run with ``-s <checkout>/Snakefile``), plans no Bible job and trains
every model on that corpus; and a plaintext corpus in another language pair (English ->
Spanish, the Bible's text in the other direction, with document ids) runs end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPLITS = {"train": range(0, 9), "dev": range(9, 11)}   # Genesis chapters; Jude is the test


def _snakemake(cwd: Path, *args: str, timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    return out


def _plaintext(folder: Path) -> dict:
    """English -> Spanish plaintext files with document ids from the embedded Bible modules
    (12 chapters of Genesis and Jude), and the corpus entry that reads them."""
    from pipeline_lib.ingest import Limits
    from pipeline_lib.ingest.bible import read

    folder.mkdir(parents=True, exist_ok=True)
    rows = [r for r in read("b", {"reader": "bible", "src_module": "spaRV1909eb",
                                  "tgt_module": "engWEB2015eb", "max_chapters": 12,
                                  "test_books": ["Jude"]}, Limits()) if hasattr(r, "src")]
    chapters = list(dict.fromkeys(r.doc_id for r in rows if r.split == "train"))
    splits = {}
    for split in ("train", "dev", "test"):
        part = [r for r in rows if (r.split == "test") == (split == "test") and
                (split == "test" or chapters.index(r.doc_id) in SPLITS[split])]
        files = {side: folder / f"{split}.{side}" for side in ("en", "es", "docids")}
        files["en"].write_text("".join(r.tgt[0] + "\n" for r in part))
        files["es"].write_text("".join(r.src + "\n" for r in part))
        files["docids"].write_text("".join(r.doc_id + "\n" for r in part))
        splits[split] = {"src": str(files["en"]), "tgt": str(files["es"]),
                         "docids": str(files["docids"])}
    return {"reader": "plaintext", "splits": splits}


def _user_config(corpus: dict, **more) -> dict:
    return {"src_lang": "en", "tgt_lang": "es", "corpora": {"genesis": corpus},
            "models": ["transformer", "doct"], **more}


def _planned(out: str) -> tuple[set[str], list[str]]:
    """The output paths and every training job's --shards of ``snakemake -n -p``."""
    outputs = {p for line in re.findall(r"^\s+output: (.+)$", out, re.M) for p in line.split(", ")}
    return outputs, re.findall(r"--shards (\S+)/\w+/train ", out)


def test_a_configfile_from_the_checkout_plans_no_bible_job(tmp_path):
    config = tmp_path / "genesis-en-es.yaml"
    config.write_text(yaml.safe_dump(_user_config(_plaintext(tmp_path / "data"))))
    out = _snakemake(ROOT, "-n", "-p", "--configfile", str(config))
    outputs, shards = _planned(out)
    assert outputs and not [p for p in outputs if "bible" in p], sorted(outputs)
    assert all(p.startswith(("results/genesis-en-es/", "logs/", "benchmarks/")) for p in outputs)
    assert len(shards) == out.count("rule train_model:") >= 3          # with DocT's control
    assert set(shards) == {"results/genesis-en-es/make_shards/genesis"}


def test_a_working_folder_of_ones_own_plans_no_bible_job(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(
        _user_config(_plaintext(tmp_path / "data"))))
    out = _snakemake(tmp_path, "-n", "-p", "-s", str(ROOT / "Snakefile"))
    outputs, shards = _planned(out)
    assert outputs and not [p for p in outputs if "bible" in p]
    assert all(not p.startswith("/") for p in outputs)                  # in the working folder
    assert set(shards) == {"results/make_shards/genesis"}


@pytest.mark.slow
def test_an_english_to_spanish_plaintext_corpus_end_to_end(tmp_path):
    """Tiny models, six updates each: ingest (document ids), BPE, shards, the baseline, DocT
    and its control, decoding, scores and the report, in results/<the config's name>/."""
    steps = {"max_steps": 6, "warmup": 3, "validate_every": 6, "save_every": 6, "log_every": 2}
    config = tmp_path / "en-es.yaml"
    config.write_text(yaml.safe_dump(_user_config(
        _plaintext(tmp_path / "data"),
        resources_dir=str(tmp_path / "resources"), bpe={"vocab_size": 300},
        model_sizes={"tiny": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                              "dec_layers": 1}},
        train={**steps, "max_tokens": 1024},
        model_settings={job: {"train": dict(steps)} for job in ("transformer", "doct")},
        decode={"beam": 2, "max_len_b": 5}, score={"bootstrap_samples": 50})))
    (tmp_path / "config").symlink_to(ROOT / "config")   # a checkout's layout
    _snakemake(tmp_path, "-s", str(ROOT / "Snakefile"), "--configfile", str(config),
               "--cores", "2", timeout=1200)
    results = tmp_path / "results" / "en-es"
    assert not (tmp_path / "results" / "ingest_corpus").exists()
    assert [p.name for p in (results / "ingest_corpus").iterdir()] == ["genesis"]
    ingest = json.loads((results / "ingest_corpus" / "genesis" / "manifest.json").read_text())
    assert ingest["counts"]["documents"]["test"] == 1                  # Jude, one document
    scores = json.loads((results / "score_test" / "scores.json").read_text())
    assert scores["test_sets"] == ["genesis/test"]
    assert set(scores["models"]) >= {"transformer", "doct"}
    assert "Document-level NMT" in (results / "report" / "index.html").read_text()

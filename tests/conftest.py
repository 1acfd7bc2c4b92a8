"""Shared fixtures: paths to the project and to the shared material (UD treebanks)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# tests/unit/<package>/ mirrors pipeline_lib/<package>/; the builders some test modules share
# (test_data's shards, test_report's results, test_readers_common's runs) import by name
# from any folder
sys.path[1:1] = [str(d) for d in sorted((ROOT / "tests" / "unit").iterdir()) if d.is_dir()]


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The folder with the UD treebanks: the repository's third_party/ (DOCMT_SHARED overrides)."""
    return Path(os.environ.get("DOCMT_SHARED") or ROOT / "third_party")


# --- The tiny end-to-end Snakemake run, shared by tests/integration/test_pipeline_e2e.py and
# test_reruns.py (running the whole DAG twice would double the suite's slowest part).

EXTRA_CORPUS = {  # a second, test-only corpus: touching it must not rerun the Bible's ingestion
    "extra.es": ["Hola mundo.", "El perro come.", "Buenos días.", "La casa es grande."],
    "extra.en": ["Hello world.", "The dog eats.", "Good morning.", "The house is big."],
    "extra.docids": ["d1", "d1", "d2", "d2"],
}
TINY_STEPS = {"max_steps": 6, "warmup": 3, "validate_every": 6, "save_every": 6, "log_every": 2}


def tiny_config(work: Path, resources: Path) -> dict:
    """Every stage at toy size: 20 Bible chapters, one-chapter dev/test books, 1+1-layer models.
    No ``shared_dir``: the treebanks are the checkout's own (or env DOCMT_SHARED's), as in the
    default run, so a copy of the checkout and the run elsewhere plans nothing
    (tests/integration/test_reruns.py)."""
    jobs = ["transformer", "dbsa", "doct", "cache", "camn", "crosstask_pretrain", "crosstask"]
    return {
        "results_dir": "results",
        "resources_dir": str(resources),
        "corpora": {
            "bible": {"reader": "bible", "max_chapters": 20, "dev_books": ["Obadiah"],
                      "test_books": ["Jude"]},
            "extra": {"reader": "plaintext", "splits": {"test": {
                "src": str(work / "extra.es"), "tgt": str(work / "extra.en"),
                "docids": str(work / "extra.docids")}}},
        },
        "bpe": {"vocab_size": 500},
        "stanza": {"download": False, "training": {
            "tagger_steps": 8, "parser_steps": 8, "hidden_dim": 32, "deep_biaff_hidden_dim": 32,
            "word_emb_dim": 16, "tag_emb_dim": 8, "transformed_dim": 16, "parser_layers": 1}},
        "parse": {"max_sentences_per_split": 40, "shards": 1, "batch_size": 64},
        "model_sizes": {"tiny": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                                   "dec_layers": 1}},
        "train": {**TINY_STEPS, "max_tokens": 1024},
        # doct decodes the average of its last two checkpoints (steps 3 and 6)
        "model_settings": {job: {"train": {**TINY_STEPS, **({"save_every": 3, "average_last_k": 2}
                                                            if job == "doct" else {})}}
                           for job in jobs},
        "decode": {"beam": 2, "max_len_b": 5},
        # context_ablation is on by default; the twins are not
        "score": {"bootstrap_samples": 50, "context_twins": True},
    }


def run_snakemake(work: Path, *args: str, timeout: float = 900, preset: str | None = None,
                  root: Path = ROOT) -> subprocess.CompletedProcess:
    """snakemake on the Snakefile of checkout ``root`` (this one) in ``work``, its config.yaml
    over the default's.

    With ``preset``, ``--config preset=<name>`` and work/config.yaml alone: every --configfile
    counts as command-line config, which wins over a preset, so passing the default config too
    would put the default's sections back over the preset's."""
    env = {**os.environ, "PYTHONPATH": str(root),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if preset is None:
        # the Snakefile's `configfile: config/config.yaml` is relative to the working directory
        config = ["--configfile", str(root / "config" / "config.yaml"), str(work / "config.yaml")]
    else:
        if not (work / "config").exists():   # where `configfile: config/config.yaml` looks
            (work / "config").symlink_to(root / "config")
        config = ["--configfile", str(work / "config.yaml"), "--config", f"preset={preset}"]
    cmd = [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "--directory",
           str(work), *config, *args]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory, request, shared_dir) -> Path:
    """A completed tiny run of the whole DAG (``snakemake --cores 2``); returns its directory.

    Stanza's kept models live in a pytest cache folder (``resources_dir``), so later sessions
    reuse them instead of training again (pipeline_lib.parse.stanza_models reuses kept models that
    were trained with the same settings).
    """
    if not (shared_dir / "ud").is_dir():
        pytest.skip(f"no UD treebanks under {shared_dir}/ud")
    # One run for all pytest-xdist workers (their base folders share this parent): the first
    # builds it on both cores, the others wait instead of building their own copies beside it.
    # Tests read it; the one test file that edits files there keeps to one worker
    # (test_reruns.py's xdist_group).
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    work = root / "tiny_pipeline"
    with FileLock(str(root / "tiny_pipeline.lock")):
        if not (work / ".built").is_file():
            if work.exists():
                shutil.rmtree(work)   # a build that failed in another worker
            work.mkdir()
            for name, lines in EXTRA_CORPUS.items():
                (work / name).write_text("\n".join(lines) + "\n")
            resources = Path(request.config.cache.mkdir("tiny_pipeline_resources"))
            cfg = tiny_config(work, resources)
            (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            proc = run_snakemake(work, "--cores", "2")
            assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-20000:]
            (work / ".built").touch()
    return work

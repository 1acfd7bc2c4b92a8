"""The project's own rule train_model through profiles/slurm, the real executor plugin and the shim
SLURM (tests/shims/fake_slurm.py): a pre-empted job whose trainer saves slowly, and a 2-node x
4-GPU job (issue 11, items 9-11).

The stages before training run locally once (a small plaintext corpus, no parses); each test
trains in its own copy of that folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "tests" / "shims"
HOOKS = ROOT / "tests" / "hooks"   # sitecustomize: DOCMT_TEST_SAVE_DELAY_S slows `last` saves

pytestmark = pytest.mark.slow

SAVE_DELAY_S = 10   # far longer than a shell wrapper takes to die and its step to end (~1 s)
MAX_STEPS = 60
PRE_EMPT_AFTER = 10  # steps: the first train record in metrics.jsonl
WORDS = (["el perro", "la casa", "el gato", "la mujer", "el hombre", "el niño"],
         ["the dog", "the house", "the cat", "the woman", "the man", "the child"],
         ["come", "duerme", "corre", "canta", "lee"], ["eats", "sleeps", "runs", "sings", "reads"])


def _write_corpus(work: Path) -> dict:
    splits = {}
    for split, n in (("train", 2000), ("dev", 12), ("test", 8)):
        rows = [(i % 6, (i * 7) % 5) for i in range(n)]
        files = {"src": f"{split}.es", "tgt": f"{split}.en", "docids": f"{split}.docids"}
        (work / files["src"]).write_text("".join(f"{WORDS[0][a]} {WORDS[2][b]} .\n" for a, b in rows))
        (work / files["tgt"]).write_text("".join(f"{WORDS[1][a]} {WORDS[3][b]} .\n" for a, b in rows))
        (work / files["docids"]).write_text("".join(f"{split}{i // 4}\n" for i in range(n)))
        splits[split] = files
    return splits


def _config(splits: dict, **overrides) -> dict:
    return {
        "results_dir": "results", "src_lang": "es", "tgt_lang": "en",
        "corpora": {"tiny": {"reader": "plaintext", "splits": splits}},
        "hygiene": {"enabled": False},   # 30 distinct pairs repeated: deduplication would keep 30
        "bpe": {"vocab_size": 100},             # no DBSA job: nothing is parsed
        "models": ["transformer"],
        "model_presets": {"tiny": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                                   "dec_layers": 1}},
        # no periodic checkpoint: `last` exists only if the pre-empted attempt saved it
        "train": {"corpus": "tiny", "max_tokens": 256, "max_steps": MAX_STEPS, "warmup": 10,
                  "log_every": PRE_EMPT_AFTER, "validate_every": 1000, "save_every": 1000,
                  "dev_bleu": False},
        **overrides,
    }


def _snakemake(work: Path, *args: str) -> list[str]:
    # no config/config.yaml in `work`: the Snakefile's configfile is skipped, ours is the config
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
            str(work), *args, "--configfile", str(work / "config.yaml")]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOKS), str(ROOT)]),
           "PATH": os.pathsep.join([str(SHIMS), str(Path(sys.executable).parent),
                                    os.environ["PATH"]]), **extra}
    for var in [v for v in env if v.startswith("SLURM_")]:
        del env[var]
    return env


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """BPE model and shards of the tiny corpus, built locally (not through the shims)."""
    work = tmp_path_factory.mktemp("slurm_training_upstream")
    splits = _write_corpus(work)
    (work / "config.yaml").write_text(yaml.safe_dump(_config(splits)))
    proc = subprocess.run(_snakemake(work, "--cores", "2", "results/make_shards/tiny",
                                     "results/train_bpe/spm.model"),
                          cwd=work, env=_env(), capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return work


def _copy(upstream: Path, dest: Path, **overrides) -> Path:
    shutil.copytree(upstream, dest, symlinks=True)
    cfg = yaml.safe_load((dest / "config.yaml").read_text())
    cfg.update(overrides)
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dest


def _slurm_run(work: Path, state: Path, *args: str) -> list[str]:
    return _snakemake(work, "results/train_model/transformer/manifest.json", "--workflow-profile",
                      str(ROOT / "profiles" / "slurm"), "--slurm-init-seconds-before-status-checks",
                      "1", "--jobs", "1", *args)


def _calls(state: Path, tool: str) -> list[list[str]]:
    return [c["argv"] for c in map(json.loads, (state / "calls.jsonl").read_text().splitlines())
            if c["tool"] == tool]


def _job(state: Path, job_id: str) -> dict:
    return json.loads((state / "jobs" / f"{job_id}.json").read_text())


def _wait_for_train_record(metrics: Path, proc: subprocess.Popen, timeout: float = 400) -> None:
    t0 = time.time()
    while not (metrics.exists() and '"split": "train"' in metrics.read_text()):
        assert proc.poll() is None, "snakemake ended before the trainer logged a step"
        assert time.time() - t0 < timeout, f"no train record in {metrics} after {timeout} s"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def preempted(upstream, tmp_path_factory) -> dict:
    """train_model submitted through the profile; when its trainer has logged its first steps,
    `scancel --signal=TERM` signals every process of the job step, as SLURM's
    `--signal=TERM@120` does before the time limit. The trainer's save of `last` takes
    SAVE_DELAY_S; the rule's `retries` resubmit the job."""
    work = _copy(upstream, tmp_path_factory.mktemp("preempted") / "work")
    state = work.parent / "fake_slurm"
    env = _env(FAKE_SLURM_DIR=str(state), DOCMT_TEST_SAVE_DELAY_S=str(SAVE_DELAY_S))
    proc = subprocess.Popen(_slurm_run(work, state), cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_train_record(work / "results/train_model/transformer/metrics.jsonl", proc)
        first = _calls(state, "sbatch")
        assert len(first) == 1
        job_id = next(j["id"] for j in map(json.loads, (p.read_text() for p in
                                                         (state / "jobs").glob("*.json"))))
        signalled = time.time()
        subprocess.run([str(SHIMS / "scancel"), "--signal=TERM", job_id], env=env, check=True)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {"work": work, "state": state, "rc": proc.returncode, "out": out, "job": job_id,
            "signalled": signalled}


def test_sigterm_reaches_the_trainer_and_the_job_ends_after_its_save(preempted):
    """Item 9: the rule `exec`s the trainer, so no shell dies first and ends the step mid-save."""
    assert preempted["rc"] == 0, preempted["out"][-6000:]
    work, state = preempted["work"], preempted["state"]
    assert len(_calls(state, "sbatch")) == 2          # pre-empted, then resubmitted
    first = _job(state, preempted["job"])
    assert first["state"] == "FAILED"
    # the job's step lasted until the trainer had saved, not a moment after the signal
    assert first["end"] - preempted["signalled"] >= SAVE_DELAY_S, first
    log = (work / "logs/train_model/transformer.log").read_text()
    resumed = re.search(r"resumed from \S+/checkpoints/last at step (\d+)", log)
    assert resumed, log[-3000:]   # `last` exists only because the pre-empted attempt saved it
    assert PRE_EMPT_AFTER <= int(resumed.group(1)) < MAX_STEPS
    manifest = json.loads((work / "results/train_model/transformer/manifest.json").read_text())
    assert manifest["counts"]["steps"] == MAX_STEPS


def test_the_log_keeps_every_attempt(preempted):
    """Item 10: Snakemake deletes a rule's log before each attempt; the training log keeps the
    pre-empted attempt's output above the resumed one's, each under its header."""
    assert preempted["rc"] == 0, preempted["out"][-6000:]
    log = (preempted["work"] / "logs/train_model/transformer.log").read_text()
    ids = [re.search(r"SLURM job (\d+)", line).group(1)
           for line in log.splitlines() if line.startswith("===== attempt")]
    assert len(ids) == 2 and ids[0] == preempted["job"] and ids[1] != ids[0], log[-3000:]
    first, second = log.split("===== attempt 2:")
    assert first.startswith("===== attempt 1:")
    saved = re.search(r"signal 15: saved last at step (\d+), exiting 143", first)
    assert saved, first[-3000:]
    assert f"checkpoints/last at step {saved.group(1)}" in second


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_with_four_gpus_each(upstream, tmp_path):
    """Item 11: config cluster alone shapes the job: sbatch asks for 4 GPUs on each of 2 nodes,
    the launcher's srun overlaps the plugin's job step (without --overlap the fake refuses it,
    as SLURM would make it wait for ever) with one torchrun per node, and each of a node's 4
    processes gets a quarter of the node's CPUs. The shims run both "nodes" here, so the 8
    processes really train together (gloo on CPU; the fake GPUs are only counted).

    The in-job Snakemake caps a rule's threads to the CPUs it sees (`--cores all`): 32 on a real
    node, this machine's count here, so the CPU numbers inside the job are checked against the
    job step's, and tests/unit/test_launch.py checks 32 CPUs / 4 processes = 8 threads."""
    work = _copy(upstream, tmp_path / "work", cluster={"nodes": 2, "gpus_per_node": 4},
                 train={**_config({})["train"], "max_steps": 2})
    state = tmp_path / "fake_slurm"
    env = _env(FAKE_SLURM_DIR=str(state), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    proc = subprocess.run(_slurm_run(work, state), cwd=work, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    log_path = work / "logs/train_model/transformer.log"
    log = log_path.read_text() if log_path.exists() else ""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-5000:]

    (sbatch,) = _calls(state, "sbatch")
    line = " ".join(sbatch)
    assert "--nodes=2" in line and "--gres=gpu:4" in line and "--cpus-per-task=32" in line
    assert "--gpus" not in line and "-p gpu" in line
    step, trainer = _calls(state, "srun")
    assert step[:1] == ["-n1"] and "--nodes=2" in step     # the plugin's job step
    cpus = int(next(a for a in step if a.startswith("--cpus-per-task=")).split("=")[1])
    assert trainer[:6] == ["--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                           f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1"]
    assert trainer[7:11] == ["-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=4"]
    assert f"launch: OMP_NUM_THREADS={max(1, cpus // 4)} srun --overlap" in log
    manifest = json.loads((work / "results/train_model/transformer/manifest.json").read_text())
    assert manifest["world_size"] == 8

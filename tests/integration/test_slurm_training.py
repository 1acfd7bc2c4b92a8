"""The project's own rule train_model through profiles/slurm, the real executor plugin and the shim
SLURM (tests/shims/fake_slurm.py): a pre-empted job whose trainer saves slowly, and a 2-node x
4-GPU job (issue 11, items 9-11); --forcerun, SLURM's requeue, a partition that pre-empts by
CANCEL and an allocation with fewer nodes than the config (issue 23).

The stages before training run locally once (a small plaintext corpus, no parses); each test
trains in its own copy of that folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml

from pipeline_lib import checkpoint as ckpt

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
        "model_sizes": {"tiny": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
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
                                    os.environ["PATH"]]),
           "DOCMT_SLURM_SITE": str(ROOT / "tests" / "data" / "slurm_site_none.yaml"), **extra}
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


def _slurm_run(work: Path, state: Path, *args: str, profile: Path = ROOT / "profiles" / "slurm"
               ) -> list[str]:
    return _snakemake(work, "results/train_model/transformer/manifest.json", "--workflow-profile",
                      str(profile), "--slurm-init-seconds-before-status-checks", "1", "--jobs", "1",
                      *args)


def _site_profile(dest: Path, **train_model: object) -> Path:
    """profiles/slurm with a site's edits to train_model's resources (a --set-resources on the
    command line would replace the profile's whole set-resources)."""
    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    profile["set-resources"]["train_model"].update(train_model)
    dest.mkdir(parents=True)
    (dest / "config.yaml").write_text(yaml.safe_dump(profile))
    return dest


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


def test_the_manifest_times_every_attempt(preempted):
    """Issue 23, item 5: Snakemake's benchmark file keeps only the last attempt; the training
    manifest lists both, with the SLURM job, the steps and the seconds of each, and the total."""
    assert preempted["rc"] == 0, preempted["out"][-6000:]
    manifest = json.loads((preempted["work"] / "results/train_model/transformer/manifest.json")
                          .read_text())
    first, second = manifest["attempts"]
    assert (first["attempt"], first["slurm_job"], first["start_step"]) == (1, preempted["job"], 0)
    assert first["end"] == "signal 15" and PRE_EMPT_AFTER <= first["step"] < MAX_STEPS
    assert (second["attempt"], second["start_step"], second["step"], second["end"]) == (
        2, first["step"], MAX_STEPS, "finished")
    assert second["slurm_job"] != preempted["job"]      # resubmitted by Snakemake
    # the first attempt's seconds include its slow save of `last`
    assert first["seconds"] >= SAVE_DELAY_S and second["seconds"] > 0
    assert manifest["attempt_seconds_total"] == round(first["seconds"] + second["seconds"], 3)


def test_forcerun_trains_the_finished_job_again(preempted, tmp_path):
    """Issue 23, item 1: `--forcerun train_model` of a finished job used to resume its final
    checkpoint and only re-validate it (17 s, byte-identical model.pt); it trains from scratch."""
    assert preempted["rc"] == 0, preempted["out"][-6000:]
    work = tmp_path / "work"
    shutil.copytree(preempted["work"], work, symlinks=True)
    state = tmp_path / "fake_slurm"
    proc = subprocess.run(_slurm_run(work, state, "--forcerun", "train_model"), cwd=work,
                          env=_env(FAKE_SLURM_DIR=str(state)), capture_output=True, text=True,
                          timeout=900, check=False)
    log = (work / "logs/train_model/transformer.log").read_text()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + log[-3000:]
    rerun = log.split("===== attempt ")[-1]
    assert f"is a run that finished at step {MAX_STEPS}" in rerun, rerun[-3000:]
    assert "trains from scratch" in rerun and "resumed from" not in rerun
    manifest = json.loads((work / "results/train_model/transformer/manifest.json").read_text())
    (attempt,) = manifest["attempts"]
    assert (attempt["start_step"], attempt["step"], attempt["end"]) == (0, MAX_STEPS, "finished")
    metrics = [json.loads(line) for line in
               (work / "results/train_model/transformer/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if r["split"] == "train"] == list(
        range(PRE_EMPT_AFTER, MAX_STEPS + 1, PRE_EMPT_AFTER))


@contextmanager
def _running(work: Path, state: Path, profile: Path = ROOT / "profiles" / "slurm",
             **env: str) -> Iterator[subprocess.Popen]:
    """The submitting Snakemake, started; on leaving, killed if it still runs and what is left
    of its jobs cancelled (a failed test's jobs would train on beside later tests)."""
    proc = subprocess.Popen(_slurm_run(work, state, profile=profile), cwd=work,
                            env=_env(FAKE_SLURM_DIR=str(state), **env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        ids = [p.stem for p in (state / "jobs").glob("*.json")] if (state / "jobs").is_dir() \
            else []
        if ids:
            subprocess.run([str(SHIMS / "scancel"), *ids], env=_env(FAKE_SLURM_DIR=str(state)),
                           check=False)


def _only_job(state: Path) -> str:
    (job,) = [json.loads(p.read_text())["id"] for p in (state / "jobs").glob("*.json")]
    return job


def _preempt(state: Path, job: str, mode: str) -> None:
    """What slurmctld does to a pre-empted job, by the shim (PreemptMode `mode`)."""
    subprocess.run([sys.executable, str(SHIMS / "fake_slurm.py"), "_preempt", job],
                   env=_env(FAKE_SLURM_DIR=str(state), FAKE_SLURM_PREEMPT_MODE=mode), check=True)


def test_slurm_requeue_resumes_under_the_same_job(upstream, tmp_path):
    """Issue 23, item 1: a job that SLURM pre-empts and requeues (PreemptMode=REQUEUE; the
    profile's --requeue) runs again under the same job id and Snakemake attempt; the trainer
    resumes its run, and Snakemake never resubmits."""
    work = _copy(upstream, tmp_path / "work", train={**_config({})["train"], "max_steps": 30})
    state = tmp_path / "fake_slurm"
    with _running(work, state) as proc:
        _wait_for_train_record(work / "results/train_model/transformer/metrics.jsonl", proc)
        job = _only_job(state)
        _preempt(state, job, "REQUEUE")
        out, _ = proc.communicate(timeout=600)
    log = (work / "logs/train_model/transformer.log").read_text()
    assert proc.returncode == 0, out[-3000:] + log[-3000:]
    assert len(_calls(state, "sbatch")) == 1 and _job(state, job)["restarts"] == 1
    headers = re.findall(r"===== attempt \d+: SLURM job \d+ \(restart \d+\)", log)
    assert headers == [f"===== attempt 1: SLURM job {job} (restart 0)",
                       f"===== attempt 1: SLURM job {job} (restart 1)"], headers
    saved = re.search(r"signal 15: saved last at step (\d+)", log)
    assert saved and f"interrupted at step {saved.group(1)}: resuming" in log, log[-3000:]
    attempts = json.loads((work / "results/train_model/transformer/manifest.json")
                          .read_text())["attempts"]
    assert [(a["slurm_job"], a["slurm_restart"], a["end"]) for a in attempts] == [
        (job, 0, "signal 15"), (job, 1, "finished")]


def test_a_cancel_partition_stops_the_run_once_before_any_submission(upstream, tmp_path):
    """Issue 27 item 7: a partition that pre-empts by CANCEL (require_requeue 1, the profile's
    default) would refuse every training job at its start, each submitted 1 + retries times
    with only "FAILED" on the console. The submit host reads the partition first and stops the
    run once, with the reason; nothing is submitted."""
    work = _copy(upstream, tmp_path / "work")
    state = tmp_path / "fake_slurm"
    proc = subprocess.run(_slurm_run(work, state), cwd=work, capture_output=True, text=True,
                          env=_env(FAKE_SLURM_DIR=str(state), FAKE_SLURM_PREEMPT_MODE="CANCEL"),
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "train_model: partition gpu pre-empts by PreemptMode=CANCEL" in out, out
    assert "no training job was submitted" in out and "require_requeue: 0" in out
    calls = (state / "calls.jsonl").read_text() if (state / "calls.jsonl").exists() else ""
    assert '"sbatch"' not in calls


@pytest.mark.parametrize("extra, profile_edit, said", [
    # a command-line --set-resources replaces the profile's block: train_model's partition is
    # default-resources' (cpu), which cancels
    (["--set-resources", "train_model:mem_mb=1000"], {},
     "train_model: partition cpu pre-empts by PreemptMode=CANCEL: a pre-empted job ends "
     "PREEMPTED (its partition: default-resources' slurm_partition)"),
    # the profile asks sbatch for 2 nodes; config cluster.nodes is 1
    ([], {"nodes": 2}, "train_model: set-resources nodes=2 but config cluster.nodes=1"),
])
def test_what_the_submit_host_knows_stops_the_run_before_any_sbatch(upstream, tmp_path, extra,
                                                                   profile_edit, said):
    """Issue 33 item 4: the partition resolved as Snakemake resolves it, and the node count
    checked against config cluster.nodes, on the submit host: one message, no sbatch call."""
    work = _copy(upstream, tmp_path / "work")
    state = tmp_path / "fake_slurm"
    profile = _site_profile(tmp_path / "profile", **profile_edit)
    mode = "CANCEL" if extra else "REQUEUE"
    proc = subprocess.run(_slurm_run(work, state, *extra, profile=profile), cwd=work,
                          capture_output=True, text=True, timeout=300,
                          env=_env(FAKE_SLURM_DIR=str(state), FAKE_SLURM_PREEMPT_MODE=mode))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and said in out, out
    calls = (state / "calls.jsonl").read_text() if (state / "calls.jsonl").exists() else ""
    assert '"sbatch"' not in calls


def test_a_preemption_slurm_does_not_requeue_fails_at_the_next_poll_and_is_retried(
        upstream, tmp_path):
    """Issue 33 item 3, on a CANCEL partition the user accepted (require_requeue=0): the job
    ends PREEMPTED, which the plugin alone polls for ever; the run fails it at the executor's
    next status poll with the reason on the console, Snakemake's retry submits it again, and it
    resumes from checkpoints/last to the end."""
    work = _copy(upstream, tmp_path / "work", train={**_config({})["train"], "max_steps": 30})
    state = tmp_path / "fake_slurm"
    with _running(work, state, _site_profile(tmp_path / "profile", require_requeue=0),
                  FAKE_SLURM_PREEMPT_MODE="CANCEL") as proc:
        _wait_for_train_record(work / "results/train_model/transformer/metrics.jsonl", proc)
        job = _only_job(state)
        _preempt(state, job, "CANCEL")
        assert _job(state, job)["state"] == "PREEMPTED"
        # the next poll sees it (the console line below names the job): a second job is
        # submitted. Not counted in sacct calls: a poll already under way when the job was
        # pre-empted reads the new state with a call recorded before it (a race seen once)
        deadline = time.time() + 180
        while len(_calls(state, "sbatch")) < 2 and time.time() < deadline:
            time.sleep(1)
        assert len(_calls(state, "sbatch")) == 2, "the pre-empted job was not retried"
        out, _ = proc.communicate(timeout=600)
    log = (work / "logs/train_model/transformer.log").read_text()
    assert proc.returncode == 0, out[-3000:] + log[-3000:]
    assert f"SLURM job {job} was pre-empted and SLURM does not requeue it" in out
    assert "launch: warning: partition gpu pre-empts by PreemptMode=CANCEL" in log
    assert re.search(r"resumed from \S+/checkpoints/last at step \d+", log), log[-3000:]


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
    job step's, and tests/unit/training/test_launch.py checks 32 CPUs / 4 processes = 8 threads."""
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
    threads = max(1, cpus // 4)
    assert f"launch: OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads} srun --overlap" in log
    manifest = json.loads((work / "results/train_model/transformer/manifest.json").read_text())
    assert manifest["world_size"] == 8



LAUNCH = f"{sys.executable} -m pipeline_lib.training.launch"
# what the plugin's jobstep does before its srun: drop the job's SLURM variables
JOBSTEP = "env -u SLURM_JOB_NUM_NODES -u SLURM_NNODES -u SLURM_JOB_NODELIST"


def _batch_job(state: Path, wrap: str, *sbatch: str, **env: str) -> tuple[dict, str]:
    """One job through the shim's sbatch, waited for: its final record and its log."""
    log = state / "job-%j.log"
    job = subprocess.run([str(SHIMS / "sbatch"), "--parsable", f"--output={log}", *sbatch,
                          "--wrap", wrap], env=_env(FAKE_SLURM_DIR=str(state), **env),
                         capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.time() + 120
    while _job(state, job)["state"] in ("PENDING", "RUNNING"):
        assert time.time() < deadline, f"job {job} still running"
        time.sleep(0.2)
    return _job(state, job), Path(str(log).replace("%j", job)).read_text()


def test_the_trainer_spans_the_configured_nodes_and_the_allocation_is_checked(tmp_path):
    """Issue 23, item 3, as reported: the plugin runs the rule in `srun -n1 --nodes=2`, which
    SLURM shrinks to one node, after its jobstep stripped the job's node variables, so the step
    looks like a one-node job and the launcher started `torchrun --standalone --nnodes=1` on half
    the GPUs. The node count is now the config's, checked against the controller's record of the
    allocation: a one-node allocation for a 2-node config fails loudly."""
    state = tmp_path / "fake_slurm"
    step = (f"{JOBSTEP} srun -n1 --nodes={{n}} {LAUNCH} --nodes 2 --gpus-per-node 4 --print-only "
            "-- --steps 1")
    job, log = _batch_job(state, step.format(n=2), "--nodes=2", "--gres=gpu:4", "-p", "gpu")
    assert "can't run 1 processes on 2 nodes, setting nnodes to 1" in log
    assert job["state"] == "COMPLETED", log
    assert "srun --overlap --nodes=2 --ntasks=2" in log and "--nnodes=2 --nproc_per_node=4" in log
    assert "--standalone" not in log

    job, log = _batch_job(state, step.format(n=1), "--nodes=1", "--gres=gpu:4", "-p", "gpu")
    assert job["state"] == "FAILED"
    assert (f"launch: error: config cluster.nodes = 2, but SLURM job {job['id']} holds 1 node(s) "
            "(fakenode1)") in log, log


@pytest.mark.parametrize("mode,requeue,require,end,said", [
    ("CANCEL", "--requeue", 1, "FAILED", "error: partition gpu pre-empts by PreemptMode=CANCEL"),
    ("REQUEUE", "--no-requeue", 1, "FAILED", "error: the job may not be requeued (Requeue=0"),
    ("CANCEL", "--requeue", 0, "COMPLETED", "warning: partition gpu pre-empts by PreemptMode=CANCEL"),
    ("REQUEUE", "--requeue", 1, "COMPLETED", None)])
def test_a_job_that_preemption_would_end_is_refused_at_start(tmp_path, mode, requeue, require,
                                                              end, said):
    """Issue 23, item 2: a job pre-empted by CANCEL, or one that may not be requeued, ends
    PREEMPTED, which the plugin polls for ever ("We leave it to SLURM to resume your job(s)").
    The training job refuses to start where that can happen (rule resource require_requeue=1),
    so the run ends within its retries, at once; with require_requeue=0 it only warns."""
    step = (f"{JOBSTEP} srun -n1 --nodes=1 {LAUNCH} --require-requeue {require} --print-only "
            "-- --steps 1")
    job, log = _batch_job(tmp_path / "fake_slurm", step, requeue, "-p", "gpu",
                          FAKE_SLURM_PREEMPT_MODE=mode)
    assert job["state"] == end, log
    if said is None:
        assert "launch: " in log and "error" not in log and "warning" not in log
    else:
        assert f"launch: {said}" in log and "require_requeue: 0" in log


# A job step that reports its run, and on SIGTERM asks `scontrol requeue` for its job (as the
# trainer does at a time limit) or, with STAY, keeps running into the limit.
TIME_LIMIT_STEP = r'''
import os, signal, subprocess, sys, time
print("run", os.environ.get("SLURM_RESTART_COUNT", "0"), flush=True)
if os.environ.get("SLURM_RESTART_COUNT", "0") != "0":
    sys.exit(0)
def on_term(signum, frame):
    if os.environ.get("STAY"):
        print("TERM: staying", flush=True)
        return
    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the requeue's own SIGTERM follows
    rc = subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]]).returncode
    print("requeue rc", rc, flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.1)
'''


@pytest.mark.parametrize("flags,env,end,said", [
    (("--requeue",), {}, "COMPLETED", ["run 0", "requeue rc 0", "run 1"]),
    (("--no-requeue",), {}, "FAILED", ["run 0", "presently disabled", "requeue rc 1"]),
    (("--requeue",), {"STAY": "1"}, "TIMEOUT", ["run 0", "TERM: staying"]),
])
def test_the_stand_in_keeps_time_limits_and_requeues_a_running_job(tmp_path, flags, env, end,
                                                                   said):
    """The stand-in as SLURM: `--signal=TERM@30` reaches the job step 30 s before `--time`,
    `scontrol requeue` of the running job ends it and runs it again under the same id (refused
    for --no-requeue), and a job still running at its limit ends TIMEOUT. One SLURM minute lasts
    6 s here (FAKE_SLURM_TIME_SCALE=0.1)."""
    script = tmp_path / "step.py"
    script.write_text(TIME_LIMIT_STEP)
    job, log = _batch_job(tmp_path / "fake_slurm", f"srun -n1 {sys.executable} {script}",
                          "--time=1", "--signal=TERM@30", "--open-mode=append", *flags,
                          FAKE_SLURM_TIME_SCALE="0.1", **env)
    assert job["state"] == end, log
    assert job["restarts"] == (1 if end == "COMPLETED" else 0)
    positions = [log.find(s) for s in said]
    assert -1 not in positions and positions == sorted(positions), log


TIME_LIMITS = 3   # the 1 + 2 submissions of the old behaviour outlived 2 at most


def test_a_training_longer_than_three_time_limits_requeues_itself_and_ends_as_one_run(
        upstream, tmp_path):
    """Issue 33, item 2: a job that reaches its time limit used to end FAILED after its save and
    use one of the profile's 2 retries, so a run needing 3 time limits or more failed. At each
    time-limit warning the trainer now saves and requeues its own job (`scontrol requeue`): one
    sbatch, one Snakemake attempt, SLURM's restarts only, and the weights of an uninterrupted
    run. One SLURM minute lasts 7.5 s here: `runtime: 6` with the rule's `--signal=TERM@120`
    signals 30 s after each start, of which start-up (the in-job Snakemake, the trainer) takes
    about 11 s on an idle 2-core machine and more beside another test (CI once needed over
    15 s, the margin this test had before: the signal then came before the trainer's handler
    and the job failed); a test hook lets each attempt make at most 20 updates, so the 70
    updates need at least 3 time limits."""
    train = {**_config({})["train"], "max_steps": 70, "log_every": 10}
    ref = _copy(upstream, tmp_path / "ref", train=train)
    # 2 threads, as the shims' job gets them: the same seed and threads give the same weights
    proc = subprocess.run(_snakemake(ref, "--cores", "2",
                                     "results/train_model/transformer/manifest.json"),
                          cwd=ref, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    work = _copy(upstream, tmp_path / "work", train=train)
    state = tmp_path / "fake_slurm"
    with _running(work, state, profile=_site_profile(tmp_path / "profile", runtime=6),
                  FAKE_SLURM_TIME_SCALE="0.125", DOCMT_TEST_UPDATES_PER_ATTEMPT="19") as proc:
        out, _ = proc.communicate(timeout=900)
    log = (work / "logs/train_model/transformer.log").read_text()
    assert proc.returncode == 0, out[-3000:] + log[-3000:]
    assert len(list((state / "jobs").glob("*.json"))) == 1, out[-3000:] + log[-3000:]
    job = _only_job(state)
    assert len(_calls(state, "sbatch")) == 1 and _job(state, job)["state"] == "COMPLETED"
    restarts = _job(state, job)["restarts"]
    assert restarts >= TIME_LIMITS, log[-3000:]
    assert re.findall(r"===== attempt (\d+): SLURM job", log) == ["1"] * (restarts + 1)
    assert len(re.findall(rf"requeued SLURM job {job} \(requeue \d+ of at most 20\)", log)) \
        == restarts, log[-3000:]
    attempts = json.loads((work / "results/train_model/transformer/manifest.json")
                          .read_text())["attempts"]
    assert [(a["slurm_restart"], a["end"]) for a in attempts] == [
        *((r, "signal 15") for r in range(restarts)), (restarts, "finished")]
    for name in ("best", "final", "last"):
        a = ckpt.load_state(ref / f"results/train_model/transformer/checkpoints/{name}")
        b = ckpt.load_state(work / f"results/train_model/transformer/checkpoints/{name}")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_sigterm_to_the_submitting_snakemake_cancels_its_jobs_and_unlocks(upstream, tmp_path):
    """Issue 33, item 3: SIGTERM to the Snakemake that submitted the jobs used to wait for the
    running ones ("Will exit after finishing currently running jobs"), and the SIGKILL that
    follows left them running and the folder locked. It now cancels them, as Ctrl-C does."""
    work = _copy(upstream, tmp_path / "work", train={**_config({})["train"], "max_steps": 100000})
    state = tmp_path / "fake_slurm"
    with _running(work, state) as proc:
        _wait_for_train_record(work / "results/train_model/transformer/metrics.jsonl", proc)
        job = _only_job(state)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        ended = _job(state, job)["state"]   # before leaving the block cancels what is left
    assert proc.returncode != 0 and "SIGTERM: cancelling this run's SLURM jobs" in out, out[-3000:]
    # by the run's job name, whatever the plugin's status thread held at that moment
    name = _job(state, job)["name"]
    assert ["--name=" + name] in _calls(state, "scancel") and name.startswith("docmt_")
    assert ended == "CANCELLED"
    assert not list((work / ".snakemake" / "locks").glob("*")), "the run left its lock"

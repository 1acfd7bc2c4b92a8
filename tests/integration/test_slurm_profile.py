"""profiles/slurm drives Snakemake's real SLURM executor against shim sbatch/sacct/srun on PATH.

The shims (tests/shims/, STYLE.md item 11) record every call and run each submitted job locally in
the background, so the plugin really submits, polls and collects. The assertions are on the sbatch
command lines: the partition, memory, time, CPUs, GPUs and pre-emption flags that profiles/slurm
gives each rule.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIMS = ROOT / "tests" / "shims"
#: the profile's site settings file in tests: none (a developer's own must not change them)
NO_SITE = ROOT / "tests" / "data" / "slurm_site_none.yaml"

# Rule names and shapes like the real workflow's: CPU parse shards fanned out, a GPU trainer that starts
# through pipeline_lib.training.launch, a GPU decoder, and a local `all`.
SNAKEFILE = textwrap.dedent("""
    from snakemake.exceptions import WorkflowError
    from pipeline_lib.training.slurm_extra import train_slurm_extra

    try:   # as workflow/rules/train.smk does
        TRAIN_SLURM_EXTRA = train_slurm_extra(workflow.resource_settings.overwrite_resources)
    except ValueError as e:
        raise WorkflowError(str(e)) from None

    localrules: all

    SHARDS = ["00000", "00001"]

    rule all:
        input: "decode/test.txt"

    rule parse_shard:
        output: "shards/shard-{shard}.txt"
        shell: "echo $SLURM_JOB_ID $SLURM_CPUS_PER_TASK > {output}"

    rule train_model:
        input: expand("shards/shard-{shard}.txt", shard=SHARDS)
        output: "train/launch.txt"
        resources: nodes=1, gres="gpu:4", slurm_extra=TRAIN_SLURM_EXTRA
        shell: "python -m pipeline_lib.training.launch --print-only --gpus-per-node 1 -- --steps 3 > {output}"

    rule decode_test:
        input: rules.train_model.output
        output: "decode/test.txt"
        shell: "echo gpus=$SLURM_GPUS_ON_NODE > {output}"
""")


def _shim_env(state: Path) -> dict[str, str]:
    """The submit host's environment: the shims first on PATH, this checkout importable, the
    stand-in's state in ``state``, no site settings file, and no SLURM_* of an enclosing job (a
    test run in one)."""
    env = {**os.environ,
           "PATH": os.pathsep.join([str(SHIMS), str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")]),
           "PYTHONPATH": str(ROOT), "FAKE_SLURM_DIR": str(state), "DOCMT_SLURM_SITE": str(NO_SITE)}
    return {k: v for k, v in env.items() if not k.startswith("SLURM_")}


def _sbatch_calls(state: Path) -> dict[str, list[str]]:
    """rule name -> sbatch argv (the plugin names the rule in --comment)."""
    calls = {}
    for line in (state / "calls.jsonl").read_text().splitlines():
        call = json.loads(line)
        if call["tool"] == "sbatch":
            argv = call["argv"]
            rule = argv[argv.index("--comment") + 1]
            calls[rule] = argv
    return calls


@pytest.mark.slow
def test_slurm_profile_submits_polls_and_collects_through_the_real_executor(tmp_path):
    state = tmp_path / "fake_slurm"
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    env = _shim_env(state)
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", str(ROOT / "profiles/slurm"),
           "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path),
           "--slurm-init-seconds-before-status-checks", "1", "--jobs", "4", "--retries", "0"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out

    calls = _sbatch_calls(state)
    assert set(calls) == {"rule_parse_shard_wildcards_00000", "rule_parse_shard_wildcards_00001",
                          "rule_train_model", "rule_decode_test"}, calls
    shard = " ".join(calls["rule_parse_shard_wildcards_00000"])
    assert "-p cpu" in shard and "--mem 16000" in shard and "-t 240" in shard
    assert "--cpus-per-task=8" in shard and "--gpus" not in shard and "--requeue" in shard

    train = " ".join(calls["rule_train_model"])
    assert "-p gpu" in train and "--gres=gpu:4" in train and "--mem 128000" in train
    assert "-t 2880" in train and "--nodes=1" in train and "--cpus-per-task=32" in train
    # Issue 33: separate arguments, as the shell split the plugin's call (the stand-in's sbatch
    # refuses a malformed one, as SLURM's does)
    assert {"--signal=TERM@120", "--open-mode=append", "--requeue"} <= set(
        calls["rule_train_model"])

    decode = " ".join(calls["rule_decode_test"])
    assert "--gpus=1" in decode and "-t 240" in decode

    # Issue 23, item 4: every job of the run carries the run's name (the plugin finds its jobs by
    # it) with the profile's prefix; squeue with the README's columns tells rule and wildcards
    # apart by the comment.
    names = {argv[argv.index("--job-name") + 1] for argv in calls.values()}
    assert len(names) == 1 and names.pop().startswith("docmt_")
    squeue = subprocess.run([str(SHIMS / "squeue"), "--me", "-O",
                             "JobID:10,Name:14,State:10,TimeUsed:12,Comment:60", "--states=all"],
                            env=env, capture_output=True, text=True, check=True).stdout
    rows = {line.split()[-1] for line in squeue.splitlines()[1:]}
    assert rows == set(calls), squeue
    # Item 5: the SLURM logs of successful jobs are kept (the plugin deleted them before)
    jobs = [json.loads(p.read_text()) for p in (state / "jobs").glob("*.json")]
    assert len(jobs) == 4 and all(j["state"] == "COMPLETED" for j in jobs)
    assert all((tmp_path / j["log"]).is_file() for j in jobs), [j["log"] for j in jobs]

    # The jobs ran inside their fake allocations: the launcher saw the 4 granted GPUs (not the 1
    # asked for on its command line) and chose torchrun with one process per GPU.
    launch = (tmp_path / "train/launch.txt").read_text()
    assert "torch.distributed.run" in launch and "--nproc_per_node=4" in launch, launch
    assert shlex.split(launch)[-2:] == ["--steps", "3"]
    assert (tmp_path / "decode/test.txt").read_text().strip() == "gpus=1"
    # ... and each job step went through srun, as the jobstep executor does on a real cluster.
    tools = [json.loads(line)["tool"] for line in (state / "calls.jsonl").read_text().splitlines()]
    assert tools.count("srun") == 4 and "sacct" in tools


def test_site_settings_come_from_a_file_of_ones_own(tmp_path):
    """Issue 35 item 6: partitions and account live in the user's own file
    ($DOCMT_SLURM_SITE, default ~/.config/docmt/slurm.yaml) that profiles/slurm reads, so a
    clone's tracked files stay untouched; the stand-in's sbatch parses them as SLURM's does. A
    misspelt key stops the run with the file named, nothing submitted."""
    state = tmp_path / "fake_slurm"
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    site = tmp_path / "slurm.yaml"
    site.write_text("cpu_partition: standard\ngpu_partition: a100q\naccount: testacct\n")
    # the stand-in cluster has these partitions (its sbatch refuses others, as SLURM does)
    env = {**_shim_env(state), "DOCMT_SLURM_SITE": str(site),
           "FAKE_SLURM_PARTITIONS": "standard,a100q"}
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", str(ROOT / "profiles/slurm"),
           "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path),
           "--slurm-init-seconds-before-status-checks", "1", "--jobs", "4", "--retries", "0"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _sbatch_calls(state)
    shard, train = calls["rule_parse_shard_wildcards_00000"], calls["rule_train_model"]
    assert shard[shard.index("-p") + 1] == "standard" and train[train.index("-p") + 1] == "a100q"
    decode = calls["rule_decode_test"]
    assert decode[decode.index("-p") + 1] == "a100q"
    assert all("--account=testacct" in argv or "-A testacct" in " ".join(argv)
               for argv in calls.values()), calls
    site.write_text("gpu_partiton: a100q\n")
    bad = subprocess.run([*cmd, "-n"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0 and str(site) in out and "gpu_partiton" in out, out


def test_an_own_slurm_extra_without_the_signal_is_refused_before_submitting(tmp_path):
    """Issue 27 item 7: the rule carries --signal=TERM@120 --open-mode=append, so a command-line
    --set-resources (which replaces the profile's whole block) keeps them; a train_model
    slurm_extra of one's own without them stops the run with one line, nothing submitted."""
    state = tmp_path / "fake_slurm"
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    env = _shim_env(state)
    base = [sys.executable, "-m", "snakemake", "--workflow-profile", str(ROOT / "profiles/slurm"),
            "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path), "-n"]
    bad = subprocess.run([*base, "--set-resources", "train_model:slurm_extra='--qos=high'"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert ("slurm_extra=\"'--qos=high'\" has no --signal; has no --open-mode=append: it needs "
            "--signal=TERM@120 --open-mode=append") in out, out
    assert "Traceback" not in out
    assert not (state / "calls.jsonl").exists() or not _sbatch_calls(state)
    good = subprocess.run([*base, "--set-resources", "train_model:slurm_extra='--qos=high "
                           "--signal TERM@600 --open-mode append'"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr


@pytest.mark.slow
def test_real_workflow_ingests_a_tiny_corpus_through_the_slurm_profile(tmp_path):
    """The project's own Snakefile, `--until ingest_corpus`, submitted through sbatch shims."""
    state = tmp_path / "fake_slurm"
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("Hello .\nHow are you ?\nGood bye .\nA second talk .\n")
    (data / "train.de").write_text("Hallo .\nWie geht es ?\nAuf Wiedersehen .\nEin zweiter Vortrag .\n")
    (data / "train.docids").write_text("d1\nd1\nd1\nd2\n")
    config = tmp_path / "tiny.yaml"
    config.write_text(textwrap.dedent(f"""
        results_dir: {tmp_path / 'results'}
        corpora:
          tiny:
            reader: plaintext
            splits:
              train: {{src: {data / 'train.en'}, tgt: {data / 'train.de'}, docids: {data / 'train.docids'}}}
    """))
    env = _shim_env(state)
    target = tmp_path / "results/ingest_corpus/tiny/manifest.json"
    # --cores caps the threads of local jobs; ingest_corpus runs with 1 thread either way.
    cmd = [sys.executable, "-m", "snakemake", str(target),
           "--workflow-profile", str(ROOT / "profiles/slurm"), "--configfile", str(config),
           "--slurm-init-seconds-before-status-checks", "1", "--retries", "0", "--jobs", "2",
           "--cores", "4"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = _sbatch_calls(state)
    assert list(calls) == ["rule_ingest_corpus_wildcards_tiny"]
    ingest = " ".join(calls["rule_ingest_corpus_wildcards_tiny"])
    assert "-p cpu" in ingest and "--mem 8000" in ingest and "-t 60" in ingest
    manifest = json.loads(target.read_text())
    assert manifest["stage"] == "ingest_corpus"


def test_local_profile_plans_the_real_workflow(tmp_path):
    """profiles/local is accepted by Snakemake 9 and applies its resources to the real rules."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "--workflow-profile", str(ROOT / "profiles/local"),
           "--config", f"results_dir={tmp_path / 'results'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # the profile's default-resources (mem_mb 2000, runtime 60) reach the real ingest rule
    assert re.search(r"rule ingest_corpus:\n(?:    .*\n)*?    resources: .*mem_mb=2000.*runtime=60",
                     out), out


@pytest.mark.slow
def test_preempted_training_job_is_resubmitted_and_resumes(tmp_path):
    """A job that saved its state and exited 143 (the trainer's answer to SIGTERM/SIGUSR1) is
    resubmitted by the profile's `retries` and resumes from what it saved."""
    state = tmp_path / "fake_slurm"
    (tmp_path / "Snakefile").write_text(textwrap.dedent("""
        rule train_model:
            output: "train/done.txt"
            shell:
                "if [ -e train/last ]; then echo resumed-from-step-$(cat train/last) > {output};"
                " else mkdir -p train && echo 500 > train/last && exit 143; fi"
    """))
    env = _shim_env(state)
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", str(ROOT / "profiles/slurm"),
           "--snakefile", str(tmp_path / "Snakefile"), "--directory", str(tmp_path),
           "--slurm-init-seconds-before-status-checks", "1"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sbatch = [c for c in map(json.loads, (state / "calls.jsonl").read_text().splitlines())
              if c["tool"] == "sbatch"]
    assert len(sbatch) == 2
    assert (tmp_path / "train/done.txt").read_text().strip() == "resumed-from-step-500"

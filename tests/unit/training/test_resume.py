"""When a start of the trainer resumes `checkpoints/last` and when it trains from scratch, and the
attempts record (pipeline_lib/training/resume.py; issue 23, items 1 and 5)."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline_lib.training.resume import (KILLED, AttemptLog, attempt_identity, clear_run, decide,
                                          run_changes)

MODEL = {"name": "transformer", "d_model": 32}
RECORD = {"lr": 1e-3, "max_steps": 60, "log_every": 10, "code_hash": "abc",
          "inputs": {"shards": "s1", "spm": "p1"}}
RESUMABLE = frozenset({"max_steps", "log_every"})
LAST = Path("checkpoints/last")


def test_the_same_run_differs_only_in_keys_that_pace_it():
    saved = {"model": MODEL, "train": RECORD}
    assert run_changes(saved, MODEL, {**RECORD, "max_steps": 300, "log_every": 5}, RESUMABLE) == []


def test_run_changes_name_what_differs():
    saved = {"model": MODEL, "train": RECORD}
    assert run_changes(saved, {**MODEL, "d_model": 64}, RECORD, RESUMABLE) == ["model"]
    assert run_changes(saved, MODEL, {**RECORD, "lr": 2e-3}, RESUMABLE) == ["train.lr"]
    assert run_changes(saved, MODEL, {**RECORD, "code_hash": "def"}, RESUMABLE) == [
        "training code"]
    moved = {**RECORD, "inputs": {"shards": "s2", "spm": "p1", "init_from": "b"}}
    assert run_changes(saved, MODEL, moved, RESUMABLE) == ["input init_from", "input shards"]
    # a checkpoint written before inputs were recorded is another run
    old = {"model": MODEL, "train": {k: v for k, v in RECORD.items() if k != "inputs"}}
    assert run_changes(old, MODEL, RECORD, RESUMABLE) == ["input shards", "input spm"]


def test_only_an_unfinished_run_of_the_same_configuration_is_resumed():
    assert decide(LAST, [], finished=False, step=24).resume
    fresh = [decide(None, [], False, 0), decide(LAST, ["train.lr"], False, 24),
             decide(LAST, [], finished=True, step=60)]
    assert not any(d.resume for d in fresh)
    assert "finished at step 60" in fresh[2].reason and "--forcerun" in fresh[2].reason
    assert "changed: train.lr" in fresh[1].reason


def test_a_retry_after_the_run_finished_writes_its_outputs_again():
    """A job killed after its trainer finished (at the time limit, while Snakemake checked its
    outputs) is retried as attempt 2: that is no new run, so `last` is resumed, not retrained."""
    again = decide(LAST, [], finished=True, step=60, attempt=2)
    assert again.resume and "no training" in again.reason
    assert not decide(LAST, ["train.lr"], finished=True, step=60, attempt=2).resume


def test_attempt_identity_names_snakemake_and_slurm():
    who = attempt_identity(2, {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"})
    assert who["attempt"] == 2 and who["slurm_job"] == "77" and who["slurm_restart"] == 1
    assert "slurm_job" not in attempt_identity(1, {})


def test_attempts_keep_every_start_of_a_run_and_a_fresh_run_forgets_them(tmp_path):
    log = AttemptLog(tmp_path, enabled=True)
    log.start({"attempt": 1}, step=0, resumed=False)
    log.update(20)                      # a checkpoint at step 20, then SIGKILL
    again = AttemptLog(tmp_path, enabled=True)
    again.start({"attempt": 2}, step=20, resumed=True)
    again.update(30, end="signal 15")
    third = AttemptLog(tmp_path, enabled=True)
    third.start({"attempt": 3}, step=30, resumed=True)
    third.update(60, end="finished")
    entries = json.loads((tmp_path / "attempts.json").read_text())
    assert [(e["attempt"], e["start_step"], e["step"], e["end"]) for e in entries] == [
        (1, 0, 20, KILLED), (2, 20, 30, "signal 15"), (3, 30, 60, "finished")]
    summary = third.summary()
    assert summary["attempt_seconds_total"] == round(sum(e["seconds"] for e in entries), 3)
    fresh = AttemptLog(tmp_path, enabled=True)
    fresh.start({"attempt": 1}, step=0, resumed=False)
    assert [e["attempt"] for e in fresh.summary()["attempts"]] == [1]


def test_clear_run_deletes_what_an_earlier_run_left(tmp_path):
    (tmp_path / "checkpoints" / "last").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "keep.txt").write_text("x")
    clear_run(tmp_path, ("checkpoints", "metrics.jsonl", "tb"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]

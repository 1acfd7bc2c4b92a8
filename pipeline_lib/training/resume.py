"""Whether a start of the trainer continues ``checkpoints/last`` or trains from scratch, and the
record of every attempt of a run (the training manifest's ``attempts``).

WHY a rule of its own: the same command starts the trainer in cases that must end differently.

========================================================  ====================================
start                                                     what ``checkpoints/last`` shows
========================================================  ====================================
Snakemake's retry after a pre-emption (attempt 2, 3...)   this run, unfinished: resume
SLURM requeue of the job (same job id, restart 1, 2...)   this run, unfinished: resume
a killed Snakemake run again (``--rerun-incomplete``)     this run, unfinished: resume
``--forcerun``, or raised ``max_steps``, after it ended   this run, *finished*: from scratch
Snakemake's retry of a job killed after its run finished  this run, *finished*, attempt 2...:
(at the time limit, while writing its outputs)             its outputs again, no update
changed model/train config, training code or inputs       another run: from scratch
========================================================  ====================================

So a start resumes exactly when ``last`` belongs to the same run (:func:`run_changes` finds no
difference in the model config, the train config except the keys that only pace logging and
checkpoints, the training code's hash, or the checksums of the inputs) and that run has not
finished. Snakemake deletes a job's declared outputs (``best``, ``final``, ``manifest.json``)
before it reruns or retries it, so whether the run finished is recorded in ``last`` itself
(``TrainerState.finished``), which is no output, and so are the best dev value and its step;
the best weights are kept in ``best-kept``, from which a resume re-creates ``best`` (train.py).
A finished run is never continued: whatever Snakemake reran it for (``--forcerun``, a new
``max_steps``, a touched input) asks for a run of its own, except a retry (attempt 2 or later of
one Snakemake run), which only means the job ended after the trainer did: its outputs are
written again from ``last`` (a training that ends in its time limit's last minutes would
otherwise start again from scratch). And an interrupted run that is
continued passes through the same states as an uninterrupted one
(tests/integration/test_train.py), so resuming never changes a result.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.atomic import write_text
from pipeline_lib.layout import ATTEMPTS_FILE

#: An attempt's ``end`` while it runs; one still "running" at the next start died unannounced.
RUNNING = "running"
KILLED = "killed"
FINISHED = "finished"
SIGNAL_END = "signal "   # + the signal number: the attempt saved and exited for requeue


@dataclass(frozen=True)
class StartDecision:
    """Resume ``checkpoints/last`` or not, and the sentence the log gets about why."""

    resume: bool
    reason: str


def run_changes(saved: Mapping[str, Any], model: Mapping[str, Any], record: Mapping[str, Any],
                resumable: frozenset[str]) -> list[str]:
    """What differs between the checkpoint metadata ``saved`` (``config.yaml``: ``model`` and the
    ``train`` record) and this run's ``model`` config and ``record`` (train config, ``code_hash``,
    ``inputs``), ignoring the train keys in ``resumable``; ``[]``: the same run."""
    changes = ["model"] if saved.get("model") != model else []
    before = saved.get("train", {})
    for key in sorted((set(before) | set(record)) - resumable - {"inputs"}):
        if before.get(key) != record.get(key):
            changes.append("training code" if key == "code_hash" else f"train.{key}")
    was, now = before.get("inputs", {}), record.get("inputs", {})
    changes += [f"input {role}" for role in sorted(set(was) | set(now)) if was.get(role) != now.get(role)]
    return changes


def decide(last: Path | None, changes: list[str], finished: bool, step: int,
           attempt: int = 1) -> StartDecision:
    """Resume ``last`` when it belongs to this run (no ``changes``) and the run did not finish,
    or finished and this is Snakemake's retry (``attempt`` > 1) of the job that ran it."""
    if last is None:
        return StartDecision(False, "no checkpoints/last: training from scratch")
    if changes:
        return StartDecision(False, f"{last} belongs to another run (changed: "
                                    f"{', '.join(changes)}): training from scratch")
    if finished and attempt > 1:
        return StartDecision(True, f"{last} is this run, finished at step {step} by an earlier "
                                   "attempt whose job ended before Snakemake saw it: writing its "
                                   "outputs again, no training")
    if finished:
        return StartDecision(False, f"{last} is a run that finished at step {step}; a new run "
                                    "of the job (--forcerun, a new max_steps, touched inputs) "
                                    "trains from scratch")
    return StartDecision(True, f"{last} is this run, interrupted at step {step}: resuming")


def attempt_identity(attempt: int, env: Mapping[str, str]) -> dict[str, Any]:
    """Who made an attempt: Snakemake's attempt, and SLURM's job and requeue count (a job that
    SLURM requeues runs again under the same Snakemake attempt and job id)."""
    who: dict[str, Any] = {"attempt": attempt, "host": socket.gethostname()}
    if env.get("SLURM_JOB_ID"):
        who["slurm_job"] = env["SLURM_JOB_ID"]
        who["slurm_restart"] = int(env.get("SLURM_RESTART_COUNT") or 0)
    return who


class AttemptLog:
    """``attempts.json`` beside the checkpoints: one entry per start of the run, updated whenever
    a checkpoint is saved and when the attempt ends.

    WHY a file of its own: Snakemake's benchmark file keeps only the last attempt, and a
    checkpoint cannot hold an attempt that died before it saved one. An attempt that dies without
    a word (SIGKILL, node failure) keeps the time and step of its last save, and the next start
    marks it ``killed``; the time it trained after that save is lost with its updates."""

    def __init__(self, out_dir: Path, enabled: bool) -> None:
        self.path = Path(out_dir) / ATTEMPTS_FILE
        self.enabled = enabled
        self.entries: list[dict[str, Any]] = []
        self.t0 = time.time()

    def start(self, identity: Mapping[str, Any], step: int, resumed: bool) -> None:
        """Open this attempt's entry; a fresh run forgets the attempts of the run it replaces."""
        if not self.enabled:
            return
        if resumed and self.path.exists():
            self.entries = json.loads(self.path.read_text())
            for e in self.entries:
                if e["end"] == RUNNING:
                    e["end"] = KILLED
        self.t0 = time.time()
        self.entries.append({**identity, "started": _stamp(self.t0), "start_step": step,
                             "step": step, "seconds": 0.0, "end": RUNNING})
        self._write()

    def update(self, step: int, end: str = RUNNING) -> None:
        """This attempt has reached ``step`` (saved, or how it ended)."""
        if not self.enabled or not self.entries:
            return
        now = time.time()
        self.entries[-1].update(step=step, seconds=round(now - self.t0, 3), last_seen=_stamp(now),
                                end=end)
        self._write()

    def interruptions(self) -> list[dict[str, int]]:
        """The attempts a signal ended (saved, then requeued or retried): their update and
        signal, for the manifest's ``stop`` record."""
        return [{"step": e["step"], "signal": int(e["end"].split()[1])}
                for e in self.entries if e["end"].startswith(SIGNAL_END)]

    def summary(self) -> dict[str, Any]:
        """The manifest's record: every attempt and the seconds they took together."""
        return {"attempts": self.entries,
                "attempt_seconds_total": round(sum(e["seconds"] for e in self.entries), 3)}

    def _write(self) -> None:
        write_text(self.path, json.dumps(self.entries, indent=1) + "\n")


def clear_run(out_dir: Path, names: tuple[str, ...]) -> None:
    """Delete what an earlier run left in ``out_dir`` (checkpoints, metrics, TensorBoard, its
    attempts and manifest), so a run from scratch is not mistaken for that one."""
    for name in names:
        p = Path(out_dir) / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            os.unlink(p)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))

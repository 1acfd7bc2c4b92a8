"""Requeue a training job that reaches its SLURM time limit, so that a time limit costs no retry.

WHY: a training run longer than the partition's time limit gets, ``--signal`` seconds before the
limit, the SIGTERM on which the trainer saves ``checkpoints/last``. Without more, the job then
ends (FAILED, or TIMEOUT at the limit) and Snakemake's ``retries`` (2 in profiles/slurm) submit
it again: a run needing more than three time limits fails although it saved and resumed
correctly. So after its save the trainer requeues its own job (``scontrol requeue
$SLURM_JOB_ID``: PyTorch Lightning's SLURM auto-requeue does the same). SLURM ends the job at
once, puts it back in the queue under the same id (PENDING, ``Restarts`` + 1) and runs its batch
script again, which resumes from ``last``; snakemake-executor-plugin-slurm sees the job pending
and running again, never failed, and Snakemake's attempt stays the same.

Which SIGTERM is the time limit's: pre-emption sends SIGTERM too (SLURM requeues a pre-empted
job itself, or it ends PREEMPTED: launch.py). The job's own clock tells them apart: the time
left (``TimeLimit`` - ``RunTime`` of ``scontrol show job``) is within the warning the rule asked
for (``--signal=TERM@N``: N, plus the 60 s SLURM may signal early). A pre-emption within that
window is treated as a time limit, which is harmless: the job is requeued either way.

A requeue is not asked for when it cannot help: outside SLURM; when the job may not be requeued
(``Requeue=0``: SLURM refuses, and the trainer says so); after ``cluster.max_requeues`` requeues
of the job (of any cause: SLURM's ``Restarts``), the bound on a run that never ends; and when the
attempt made no update (its time went to start-up, so another one would too). The job then ends
as before and Snakemake's retries take over.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline_lib.training.launch import scontrol_record

# SLURM checks time limits on an event clock and may send the --signal up to this much earlier.
SIGNAL_EARLY_S = 60


def slurm_seconds(text: str | None) -> int | None:
    """A SLURM duration (``[days-]hours:minutes:seconds``, ``minutes:seconds``) as seconds; None
    for ``UNLIMITED``, ``Partition_Limit``, ``N/A`` or anything else that is no duration."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def seconds_left(job: Mapping[str, str]) -> int | None:
    """Seconds until the job's time limit, from its ``scontrol show job`` record; None when it
    has no limit or the record shows none."""
    limit, run = slurm_seconds(job.get("TimeLimit")), slurm_seconds(job.get("RunTime"))
    return None if limit is None or run is None else limit - run


@dataclass(frozen=True)
class RequeuePolicy:
    """When the trainer requeues its own job after a save on SIGTERM."""

    warning_s: int      # the rule's --signal warning (slurm_extra.signal_warning_s)
    max_requeues: int   # config cluster.max_requeues

    def refusal(self, job: Mapping[str, str], progressed: bool) -> str | None:
        """Why this job is not requeued at this signal, or None to requeue it.

        ``job``: its ``scontrol show job`` record; ``progressed``: whether this attempt made
        an update."""
        if not job:
            return "scontrol shows no record of the job"
        left = seconds_left(job)
        if left is None:
            return f"the job has no time limit (TimeLimit={job.get('TimeLimit', '?')})"
        if left > self.warning_s + SIGNAL_EARLY_S:
            return (f"{left} s are left before the time limit: the signal is no time-limit "
                    "warning (pre-emption or scancel)")
        restarts = int(job.get("Restarts", "0") or 0)
        if restarts >= self.max_requeues:
            return (f"the job was requeued {restarts} times, cluster.max_requeues = "
                    f"{self.max_requeues}")
        if not progressed:
            return "this attempt made no update before the warning (start-up took its time)"
        return None


def requeue_job(job_id: str) -> str | None:
    """``scontrol requeue <job_id>``; None when SLURM took it, else why not (its message)."""
    try:
        proc = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip() or \
        f"scontrol exited {proc.returncode}"


def after_save(policy: RequeuePolicy, env: Mapping[str, str], progressed: bool) -> str:
    """Requeue this SLURM job if its signal was the time limit's (see the module docstring);
    returns what was done, for the training log. Called by the main rank after ``last`` is
    saved."""
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return "not a SLURM job: exiting for a retry"
    job = scontrol_record("job", job_id)
    why_not = policy.refusal(job, progressed)
    if why_not is None:
        error = requeue_job(job_id)
        if error is None:
            return (f"time limit in {seconds_left(job)} s: requeued SLURM job {job_id} "
                    f"(requeue {int(job.get('Restarts', '0') or 0) + 1} of at most "
                    f"{policy.max_requeues}); it resumes from last")
        why_not = f"scontrol requeue {job_id} failed: {error}"
    return f"not requeued ({why_not}): the job ends and Snakemake's retries resume it"

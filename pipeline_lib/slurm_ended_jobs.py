"""A SLURM job that ended PREEMPTED or NODE_FAIL, and that SLURM will not requeue, fails at the
executor's next status poll, with the reason on the console, instead of being polled for ever.

WHY: snakemake-executor-plugin-slurm (2.8) reports PREEMPTED as still running ("We leave it to
SLURM to resume your job(s)") and, with its ``requeue`` setting on (our profile's), NODE_FAIL
too ("Leaving it to SLURM to requeue the job"). Where SLURM does requeue the job that is right:
the job is PENDING again under the same id. Where it does not (a partition that pre-empts by
CANCEL, ``--no-requeue``, a cluster whose ``JobRequeue`` is 0, a node failure of a job SLURM
does not requeue), the job has ended for good and the run waits for ever (issue 33 item 3).

How: at the Snakefile's ``onstart`` the run's executor gets a wrapper around its
``check_active_jobs``. After the plugin's own poll, the jobs it still calls active are looked up
once more, all with one ``sacct`` of the run's job name; a job whose last record is PREEMPTED or
NODE_FAIL is then asked of the controller (``scontrol show job``), which knows whether SLURM has
put it back: PENDING, RUNNING, REQUEUED... keep it; PREEMPTED, NODE_FAIL, or no record any more
(older than MinJobAge) end it, as a job error with the reason. Snakemake then retries it like
any failed job (``retries`` of the profile): a new submission, and a training job resumes from
its ``checkpoints/last``. States mapped: PREEMPTED and NODE_FAIL only; every other state keeps
the plugin's handling (its ``fail_stati`` already fail BOOT_FAIL, CANCELLED, DEADLINE, FAILED,
OUT_OF_MEMORY, TIMEOUT; PENDING, RUNNING, SUSPENDED, REQUEUED... are alive).

WHY a wrapper on the run's executor object and not an executor plugin of our own: Snakemake
finds executor plugins only as installed top-level packages (not in an editable install of this
checkout) and names their settings after the plugin (``--docmt-slurm-requeue``), so a plugin
would rename every ``slurm-*`` key users and our profile set. The wrapper changes nothing else,
and when the plugin's executor has no ``check_active_jobs`` or ``run_uuid`` (another version)
it is not installed, with a warning.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator, Callable
from typing import Any

#: the states the plugin keeps polling though SLURM may never run the job again
ENDED_IF_NOT_REQUEUED = ("PREEMPTED", "NODE_FAIL")


def run_states(job_name: str) -> dict[str, str]:
    """Job id -> state of the last record of every job named ``job_name`` (``sacct -X``: the
    job, not its steps); empty when sacct cannot answer (then nothing is failed)."""
    try:
        out = subprocess.run(["sacct", "-X", "--parsable2", "--noheader",
                              "--format=JobIdRaw,State", f"--name={job_name}"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    states: dict[str, str] = {}
    for line in out.splitlines():
        job, _, state = line.partition("|")
        if job and state:
            states[job.strip()] = state.split()[0]    # "CANCELLED by 123" -> CANCELLED
    return states


def controller_state(job_id: str) -> str | None:
    """The job's state as the controller holds it now (``scontrol show job``), None when it no
    longer knows the job; "?" when scontrol cannot be asked (then nothing is failed)."""
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "?"
    if proc.returncode != 0:
        return None if "Invalid job id" in proc.stderr else "?"
    found = re.search(r"\bJobState=(\S+)", proc.stdout)
    return found.group(1) if found else "?"


def ended_for_good(job_id: str, state: str | None) -> str | None:
    """Why job ``job_id``, whose last sacct record says ``state``, will never run again, or None
    (alive, or not known to have ended)."""
    if state not in ENDED_IF_NOT_REQUEUED:
        return None
    live = controller_state(job_id)
    if live not in (None, state):
        return None          # requeued (PENDING, RUNNING...) or not known: keep polling
    what = "pre-empted" if state == "PREEMPTED" else "ended by a node failure (NODE_FAIL)"
    return (f"SLURM job {job_id} was {what} and SLURM does not requeue it (controller: "
            f"{'no record' if live is None else 'JobState=' + live}): failed now instead of "
            "being polled for ever; Snakemake retries it as a new job (a training job resumes "
            "from its checkpoints/last). Requeueing needs --requeue (our profile's "
            "slurm-requeue) and a partition that pre-empts by REQUEUE")


def fail_ended_jobs(executor: Any, warn: Callable[[str], None]) -> None:
    """Wrap ``executor.check_active_jobs`` (module docstring)."""
    poll = getattr(executor, "check_active_jobs", None)
    name = getattr(executor, "run_uuid", None)
    if poll is None or not name:
        warn("Warning: this executor has no check_active_jobs/run_uuid: jobs that SLURM ends "
             "PREEMPTED or NODE_FAIL without a requeue are polled for ever (docs/cluster.md: Running on "
             "SLURM)")
        return

    async def check_active_jobs(active_jobs: list) -> AsyncIterator[Any]:
        alive = [j async for j in poll(active_jobs)]
        states = run_states(name) if alive else {}
        for j in alive:
            job = str(j.external_jobid)
            # an array task (<job>_<task>) may be listed under its array's id
            state = states.get(job, states.get(job.split("_")[0]))
            reason = ended_for_good(job, state)
            if reason is None:
                yield j
            else:
                executor.report_job_error(j, msg=reason)

    executor.check_active_jobs = check_active_jobs

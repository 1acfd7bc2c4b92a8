"""SIGTERM to the Snakemake that submits SLURM jobs cancels them, as Ctrl-C does.

WHY: Snakemake's own SIGTERM handler (its scheduler's ``exit_gracefully``) only stops
submitting, then waits for the running jobs: days, for a training. The SIGKILL that usually
follows a SIGTERM (a login session's end, the time limit of a job that runs Snakemake itself)
then leaves the jobs running in SLURM with nobody watching them and the working directory
locked; a rerun submits the same jobs again, which write into the same folders as the orphans.
Ctrl-C (KeyboardInterrupt) makes Snakemake's scheduler cancel the active jobs through the
executor plugin (``scancel``) and release the lock; SIGTERM now does the same. Installed by the
Snakefile's ``onstart``, after Snakemake's scheduler has installed its own handler.

Before that, the handler cancels every job of the run by its name (``scancel --name``: the
plugin names them all ``<prefix>_<run id>``): the plugin's own cancel sees only the jobs that
its status thread is not checking at that moment (Snakemake's remote executor takes them out of
its list while it polls ``sacct``), so a Ctrl-C during a poll leaves jobs running.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable

CANCELLING = ("SIGTERM: cancelling this run's SLURM jobs (scancel), as Ctrl-C does; rerun the "
              "same command to resume (a training job resumes from its checkpoints/last)")


def cancel_on_sigterm(log: Callable[[str], None], job_name: str | None) -> None:
    """From now on the first SIGTERM cancels the jobs named ``job_name`` (None: only what
    Snakemake cancels) and interrupts the main thread as Ctrl-C does; later ones are noted and
    ignored, so they cannot cut the cancelling short."""

    def again(signum, frame) -> None:
        log("SIGTERM again: still cancelling the run's SLURM jobs")

    def first(signum, frame) -> None:
        signal.signal(signal.SIGTERM, again)
        log(CANCELLING)
        if job_name:
            try:
                subprocess.run(["scancel", f"--name={job_name}"], timeout=60, check=False)
            except (OSError, subprocess.SubprocessError) as e:
                log(f"scancel --name={job_name} failed ({e}): cancel the jobs yourself")
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, first)

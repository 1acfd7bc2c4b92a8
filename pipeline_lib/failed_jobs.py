"""The errors of failed jobs, on the console: Snakemake's ``onerror`` handler (Snakefile).

WHY: every rule sends its command's output to its log (``> {log} 2>&1``), so a failing stage's
one-line error ("train.es:12: <seg> opened here is never closed ...") would only be in
``logs/<rule>/<job>.log`` and the console would say "check log file(s)". At the end of a failed
run this reads the jobs' log paths from Snakemake's own log ("Error in rule ...", "log: ...")
and prints the last lines of each job log to stderr, where the person running Snakemake looks.

WHY not Snakemake's ``--show-failed-logs`` alone (issue 35 item 7): it prints every line of every
failed job's log (snakemake/logging.py ``show_logs``), and a training job's log holds thousands
of progress and metric lines, with the error at the end; it is also off unless a profile sets
it, and the main command (``snakemake --cores all``) reads no profile. The last lines are what
names the file and line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TextIO

TAIL_LINES = 5
_ERROR = re.compile(r"^Error in rule (\S+?):\s*$")
_LOG = re.compile(r"^\s+log: (.+?)(?: \(check log file\(s\) for error details\))?\s*$")


def failed_logs(snakemake_log: str | Path) -> list[tuple[str, list[str]]]:
    """``(rule, [job log paths])`` of every "Error in rule" block of a Snakemake log."""
    out: list[tuple[str, list[str]]] = []
    rule = None
    for line in Path(snakemake_log).read_text(errors="replace").splitlines():
        if m := _ERROR.match(line):
            rule = m.group(1)
            out.append((rule, []))
        elif rule is not None and (m := _LOG.match(line)):
            out[-1][1].extend(p.strip() for p in m.group(1).split(","))
            rule = None
    return out


def tail(path: str | Path, n: int = TAIL_LINES) -> list[str]:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-n:]


def report(snakemake_logs: str | Path | list | None, out: TextIO = sys.stderr) -> None:
    """Print the last lines of each failed job's log; ``snakemake_logs``: what Snakemake gives
    its ``onerror`` handler (a path, or a list of them in Snakemake 9)."""
    if isinstance(snakemake_logs, (str, Path)):
        snakemake_logs = [snakemake_logs]
    failed = [f for log in snakemake_logs or [] if log and Path(log).is_file()
              for f in failed_logs(log)]
    for rule, logs in failed:
        for path in logs:
            lines = tail(path)
            if lines:
                print(f"\n{rule} failed; the end of {path}:", *(f"  {x}" for x in lines),
                      sep="\n", file=out)
    out.flush()

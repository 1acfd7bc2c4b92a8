"""Rule train_model's ``slurm_extra``: the sbatch flags every training job needs, and the check of
a user's own value, read as sbatch will read it.

WHY a module of its own: snakemake-executor-plugin-slurm appends ``slurm_extra`` verbatim to an
sbatch command that it runs with ``shell=True``, so the value is shell text. The rule's own value
must be the flags themselves, not a quoted string: quoted, the shell hands sbatch one argument
``--signal=TERM@120 --open-mode=append``, whose ``@120 --open-mode=append`` SLURM's
``get_signal_opts`` (src/common/proc_args.c) refuses ("Invalid --signal specification"), and no
training job starts (issue 33). A value given with ``--set-resources`` (the profile's block or
the command line's) is a Python expression that Snakemake evaluates: ``"'--qos=x ...'"`` in YAML
becomes ``--qos=x ...``. Both are checked here as the shell splits them and as sbatch parses them.
"""

from __future__ import annotations

import ast
import os
import shlex
import signal
from collections.abc import Mapping

# SIGTERM 120 s before the time limit (the trainer saves and exits, see launch.py's
# Pre-emption), and a requeued job appends to its SLURM log instead of overwriting the pre-empted
# attempt's.
TRAIN_SBATCH = ("--signal=TERM@120", "--open-mode=append")
# Seconds torchrun gives its workers to save after SIGTERM before it SIGKILLs them.
SAVE_GRACE_S = 110
# The least warning time a --signal may give: the save grace and 10 s to exit. SLURM may send
# the signal up to 60 s earlier than asked (its event resolution), never later.
MIN_WARNING_S = SAVE_GRACE_S + 10
# sbatch's long options this module reads, by their short letters.
_SHORT = {"-p": "--partition", "-N": "--nodes"}


def resource_text(resource: object) -> str | None:
    """A set-resources entry as the job will get it: Snakemake keeps what was typed (``raw``) and
    evaluates it as a Python expression (a string literal loses its quotes; anything that is not
    an expression stays as typed), after expanding environment variables."""
    raw = getattr(resource, "raw", resource)
    if raw is None:
        return None
    text = os.path.expanduser(os.path.expandvars(str(raw)))
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return str(value)


def sbatch_values(text: str) -> dict[str, str]:
    """The sbatch options of shell text, by long name (last one wins, as sbatch keeps it):
    ``--name=value``, ``--name value``, ``-p value``/``-pvalue``; flags map to ""."""
    args = shlex.split(text)
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg[:2] in _SHORT:
            name, value = _SHORT[arg[:2]], arg[2:]
            if not value and i + 1 < len(args):
                i, value = i + 1, args[i + 1]
            out[name] = value
        elif arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and name in ("--signal", "--open-mode", "--partition", "--nodes") \
                    and i + 1 < len(args):
                i, value = i + 1, args[i + 1]
            out[name] = value
        i += 1
    return out


def signal_problem(value: str | None) -> str | None:
    """Why a ``--signal`` value would not let the trainer save before the time limit, or None.

    Read as SLURM's get_signal_opts reads ``[{R|B|RB}:]SIG[@N]`` (N defaults to 60, and must end
    the string): the signal must be TERM (the trainer's save; the job step's inner Snakemake dies
    at once on USR1), sent to the job's steps (``B:`` signals only the batch shell, which the
    trainer is not), at least :data:`MIN_WARNING_S` seconds ahead."""
    if value is None:
        return "has no --signal"
    upper = value.upper()
    prefix = next((p for p in ("RB:", "BR:", "R:", "B:") if upper.startswith(p)), "")
    if "B" in prefix:
        return f"--signal={value} signals only the batch shell (B:), not the trainer's job step"
    spec = value[len(prefix):]
    name, at, when = spec.partition("@")
    number = int(name) if name.isdigit() else getattr(
        signal, "SIG" + name.upper().removeprefix("SIG"), 0)
    if number != signal.SIGTERM:
        return f"--signal={value} is not SIGTERM, on which the trainer saves"
    if at and when and not when.strip().lstrip("+").isdigit():
        return f"--signal={value}: sbatch refuses it (the time after @ must be a whole number)"
    seconds = _warning(spec)
    if seconds < MIN_WARNING_S:
        return (f"--signal={value} warns {seconds} s before the time limit; the save needs "
                f"{MIN_WARNING_S} s")
    return None


def _warning(spec: str) -> int:
    """The seconds ahead of the time limit of ``SIG[@N]``: N, 60 without ``@`` (SLURM's
    default), 0 for an empty N (strtol reads "" as 0)."""
    _, at, when = spec.partition("@")
    return (int(when) if when else 0) if at else 60


def signal_warning_s(slurm_extra: str) -> int:
    """Seconds before its time limit at which SLURM signals a training job with this
    ``slurm_extra`` (one :func:`train_slurm_extra` accepted): how the trainer tells the time
    limit's SIGTERM from a pre-emption's (time_limit.py)."""
    return _warning(sbatch_values(slurm_extra)["--signal"].rpartition(":")[2])


def train_slurm_extra(overrides: Mapping[str, Mapping]) -> str:
    """Rule train_model's ``slurm_extra``: :data:`TRAIN_SBATCH`, unless ``overrides`` (Snakemake's
    ``set-resources``: the profile's block, or the command line's, which replaces it whole)
    gives the rule its own, which must then hold a SIGTERM warning that leaves the save time and
    ``--open-mode=append``, in any form sbatch accepts.

    WHY in the rule and not the profile: a command-line ``--set-resources`` for any rule drops
    the profile's whole block, and with it the flags; a job without ``--signal`` is killed at
    its time limit without a save. Refused with what to add (a ``WorkflowError`` one-liner in the
    Snakefile), before anything is submitted."""
    entry = (overrides.get("train_model") or {}).get("slurm_extra")
    given = resource_text(entry)
    if given is None:
        return " ".join(TRAIN_SBATCH)
    typed = getattr(entry, "raw", entry)
    try:
        values = sbatch_values(given)
    except ValueError as e:
        raise ValueError(f"set-resources train_model:slurm_extra={typed!r}: the shell cannot "
                         f"split it ({e})") from None
    problems = [p for p in (signal_problem(values.get("--signal")),) if p]
    if values.get("--open-mode", "").lower() not in ("a", "append"):
        problems.append("has no --open-mode=append")
    if problems:
        raise ValueError(f"set-resources train_model:slurm_extra={typed!r} "
                         f"{'; '.join(problems)}: it needs {' '.join(TRAIN_SBATCH)} or another "
                         f"SIGTERM at least {MIN_WARNING_S} s ahead (the trainer saves on "
                         "SIGTERM before the time limit, a requeued job appends to its log)")
    return given

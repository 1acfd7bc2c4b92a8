"""sbatch's command line read as SLURM's sbatch reads it, for the stand-in (tests only).

WHY its own parser, not the project's: the stand-in must refuse what the real sbatch refuses, or
a malformed flag that the project builds passes every test and fails every job on a cluster
(issue 33: a quoted ``slurm_extra`` reached sbatch as one argument,
``--signal=TERM@120 --open-mode=append``, which sbatch refuses). A parser shared with the code
under test would share its mistakes.

What is modelled, from SLURM's sources (src/sbatch/opt.c, src/common/slurm_opt.c,
src/common/proc_args.c):

* ``getopt_long`` with ``+`` (options stop at the first operand, the batch script): long options
  as ``--name=value`` or ``--name value``; an unambiguous prefix of a long name; short options as
  ``-p value``, ``-pvalue`` and clusters of flags; an optional argument only after ``=``.
* the sbatch options of SLURM 23.x (its man page's list, written out below) are known;
  anything else is ``unrecognized option``.
* values that sbatch itself checks before submitting: ``--signal`` (``get_signal_opts``:
  ``[{R|B|RB}:]SIG[@N]``, N a whole number to the end of the string), ``--open-mode``
  (``a``/``append``/``t``/``truncate``), ``--time``/``--time-min`` (``time_str2mins``), ``--mem``
  and ``--mem-per-cpu``/``--mem-per-gpu`` (number with a K/M/G/T suffix), ``--nodes``
  (``min[-max]``), the counts (``--ntasks``, ``--cpus-per-task``...), ``--gres`` and ``--gpus``.
* partitions: the controller refuses one it does not have (``FAKE_SLURM_PARTITIONS``).
"""

from __future__ import annotations

import re
import signal

# Long options: name -> "none" | "required" | "optional" (an optional value only after "=").
_REQUIRED = """account acctg-freq array batch bb bbf begin chdir cluster-constraint clusters
comment constraint container container-id core-spec cores-per-socket cpu-freq cpus-per-gpu
cpus-per-task deadline delay-boot dependency distribution error exclude export export-file
extra extra-node-info gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket gpus-per-task gres
gres-flags hint input job-name licenses mail-type mail-user mcs-label mem mem-bind mem-per-cpu
mem-per-gpu mincpus network nodefile nodelist nodes ntasks ntasks-per-core ntasks-per-gpu
ntasks-per-node ntasks-per-socket open-mode output partition power prefer priority profile qos
reservation resv-ports segment signal sockets-per-node switches thread-spec threads-per-core
time time-min tmp tres-bind tres-per-task uid wait-all-nodes wckey wrap""".split()
_NONE = """contiguous help hold ignore-pbs overcommit oversubscribe parsable quiet reboot
requeue no-requeue spread-job test-only usage use-min-nodes verbose version wait""".split()
_OPTIONAL = "exclusive get-user-env kill-on-invalid-dep nice no-kill propagate".split()
LONG = {**{n: "required" for n in _REQUIRED}, **{n: "none" for n in _NONE},
        **{n: "optional" for n in _OPTIONAL}}
# Short letters: letter -> long name (sbatch's "+A:a:B:b:C:c:D:d:e:F:G:hHi:J:kL:M:m:N:n:o:Op:q:Q..."
SHORT = {"A": "account", "a": "array", "B": "extra-node-info", "b": "begin", "C": "constraint",
         "c": "cpus-per-task", "D": "chdir", "d": "dependency", "e": "error", "F": "nodefile",
         "G": "gpus", "h": "help", "H": "hold", "i": "input", "J": "job-name", "k": "no-kill",
         "L": "licenses", "M": "clusters", "m": "distribution", "N": "nodes", "n": "ntasks",
         "o": "output", "O": "overcommit", "p": "partition", "q": "qos", "Q": "quiet",
         "s": "oversubscribe", "S": "core-spec", "t": "time", "V": "version", "v": "verbose",
         "W": "wait", "w": "nodelist", "x": "exclude"}
_SHORT_FLAGS = {"h", "H", "k", "O", "Q", "s", "V", "v", "W"}


class SbatchError(ValueError):
    """What sbatch prints before it exits 1 (``sbatch: error: ...``)."""


def _signal_ok(value: str) -> bool:
    """SLURM's get_signal_opts: ``[{R|B|RB|BR}:]SIG[@N]``; N read by strtol to the string's end."""
    if value[:2].upper() in ("RB", "BR"):
        value = value[3:]
    elif value[:2].upper() in ("R:", "B:"):
        value = value[2:]
    name, at, when = value.partition("@")
    if name.isdigit():
        number = int(name)
    else:
        sig = getattr(signal, "SIG" + name.upper().removeprefix("SIG"), None)
        number = int(sig) if isinstance(sig, signal.Signals) else 0
    if not 1 <= number <= 0xFFFF:
        return False
    if not at or not when:   # strtol reads "" as 0 and stops at the string's end
        return True
    return bool(re.fullmatch(r"\s*[+-]?\d+", when)) and 0 <= int(when) <= 0xFFFF


_TIME = re.compile(r"(\d+)|(\d+):(\d+)|(\d+):(\d+):(\d+)|(\d+)-(\d+)|(\d+)-(\d+):(\d+)"
                   r"|(\d+)-(\d+):(\d+):(\d+)")


def _time_ok(value: str) -> bool:
    """SLURM's time_str2mins: minutes, min:sec, h:m:s, d-h, d-h:m, d-h:m:s, -1, INFINITE,
    UNLIMITED."""
    return value.upper() in ("-1", "INFINITE", "UNLIMITED") or bool(_TIME.fullmatch(value))


def time_seconds(value: str) -> int | None:
    """A valid ``--time`` as seconds (time_str2mins' forms; a lone number is minutes), None for
    no limit."""
    if value.upper() in ("-1", "INFINITE", "UNLIMITED"):
        return None
    days, _, clock = value.rpartition("-") if "-" in value else ("", "", value)
    parts = [int(x) for x in clock.split(":")]
    if days:   # d-h, d-h:m, d-h:m:s
        h, m, sec = (parts + [0, 0])[:3]
        return ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def signal_spec(value: str) -> tuple[int, int, bool]:
    """A valid ``--signal`` as (signal number, seconds before the time limit, batch shell only)."""
    target = value[:3].upper() if value[:2].upper() in ("RB", "BR") else value[:2].upper()
    spec = value[len(target):] if target.endswith(":") else value
    name, at, when = spec.partition("@")
    number = int(name) if name.isdigit() else int(getattr(signal, "SIG" + name.upper()
                                                           .removeprefix("SIG")))
    return number, (int(when) if when.strip() else 0) if at else 60, "B" in target


def _count_ok(value: str) -> bool:
    return value.isdigit() and int(value) > 0


VALUE_CHECKS = {
    "signal": (_signal_ok, "Invalid --signal specification"),
    "open-mode": (lambda v: v.lower() in ("a", "append", "t", "truncate"),
                  "Invalid --open-mode argument"),
    "time": (_time_ok, "Invalid time limit specification"),
    "time-min": (_time_ok, "Invalid time-min specification"),
    "mem": (lambda v: bool(re.fullmatch(r"\d+[KMGTkmgt]?", v)), "Invalid --mem specification"),
    "mem-per-cpu": (lambda v: bool(re.fullmatch(r"\d+[KMGTkmgt]?", v)),
                    "Invalid --mem-per-cpu specification"),
    "mem-per-gpu": (lambda v: bool(re.fullmatch(r"\d+[KMGTkmgt]?", v)),
                    "Invalid --mem-per-gpu specification"),
    "nodes": (lambda v: bool(re.fullmatch(r"[1-9]\d*(-[1-9]\d*)?", v)), "invalid node count"),
    "ntasks": (_count_ok, "Invalid --ntasks argument"),
    "cpus-per-task": (_count_ok, "Invalid --cpus-per-task argument"),
    "cpus-per-gpu": (_count_ok, "Invalid --cpus-per-gpu argument"),
    "ntasks-per-node": (_count_ok, "Invalid --ntasks-per-node argument"),
    "ntasks-per-gpu": (_count_ok, "Invalid --ntasks-per-gpu argument"),
    "gres": (lambda v: all(re.fullmatch(r"[A-Za-z0-9_]+(:[A-Za-z0-9_.]+)?(:\d+[KMGT]?)?", g)
                           for g in v.split(",")), "Invalid generic resource (gres) specification"),
    "gpus": (lambda v: bool(re.fullmatch(r"([A-Za-z0-9_.]+:)?[1-9]\d*", v)),
             "Invalid --gpus specification"),
    "partition": (lambda v: bool(re.fullmatch(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*", v)),
                  "invalid partition specified"),
}


def _long_name(given: str) -> str:
    """getopt_long: the exact name, else the one long name it is a prefix of."""
    if given in LONG:
        return given
    matches = [n for n in LONG if n.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    raise SbatchError(f"option '--{given}' is ambiguous" if matches
                      else f"unrecognized option '--{given}'")


def parse(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(options in order as (long name, value), the script and its arguments: none means
    standard input), or SbatchError with sbatch's message. A repeated option is kept each time;
    the last one wins."""
    opts: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):
            given, eq, value = arg[2:].partition("=")
            name = _long_name(given)
            kind = LONG[name]
            if kind == "none" and eq:
                raise SbatchError(f"option '--{name}' doesn't allow an argument")
            if kind == "required" and not eq:
                if i + 1 >= len(argv):
                    raise SbatchError(f"option '--{name}' requires an argument")
                i += 1
                value = argv[i]
            opts.append((name, value))
        elif arg.startswith("-") and len(arg) > 1:
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter not in SHORT:
                    raise SbatchError(f"invalid option -- '{letter}'")
                if letter in _SHORT_FLAGS:
                    opts.append((SHORT[letter], ""))
                    j += 1
                    continue
                value = arg[j + 1:]
                if not value:
                    if i + 1 >= len(argv):
                        raise SbatchError(f"option requires an argument -- '{letter}'")
                    i += 1
                    value = argv[i]
                opts.append((SHORT[letter], value))
                break
        else:
            break   # "+": the first operand is the script; the rest are its arguments
        i += 1
    for name, value in opts:
        check = VALUE_CHECKS.get(name)
        if check and not check[0](value):
            raise SbatchError(f"{check[1]}: {value}" if name in ("partition", "nodes")
                              else check[1])
    rest = argv[i:]
    if any(n == "wrap" for n, _ in opts) and rest:
        raise SbatchError("script arguments not permitted with --wrap option")
    return opts, rest


def last(opts: list[tuple[str, str]]) -> dict[str, str]:
    """The options as sbatch keeps them: the last occurrence of each."""
    return dict(opts)

"""Rule train_model's slurm_extra as the shell splits it and sbatch parses it (issue 33 item 1).

The stand-in's own sbatch parser (tests/shims/sbatch_argv.py, written from SLURM's option table
and get_signal_opts) is the judge, not the project's reader of the same flags."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from snakemake.cli import parse_set_resources

from pipeline_lib.training.slurm_extra import TRAIN_SBATCH, train_slurm_extra

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shims"))
import sbatch_argv  # noqa: E402

# What snakemake-executor-plugin-slurm puts before slurm_extra (submit_string.py), shortened.
PLUGIN_CALL = ("--parsable --job-name docmt_x --output logs/%j.log --export=ALL "
               "--comment rule_train_model -p gpu -t 2880 --mem 128000 --nodes=1 --requeue "
               "--cpus-per-task=32")


def sbatch_accepts(extra: str) -> dict[str, str]:
    """The options sbatch keeps from the plugin's call with ``extra`` appended, split by a shell
    as the plugin's ``shell=True`` does; SbatchError where sbatch would exit 1."""
    opts, _ = sbatch_argv.parse(shlex.split(f"{PLUGIN_CALL} {extra} /dev/stdin"))
    return sbatch_argv.last(opts)


def test_the_rules_own_value_reaches_sbatch_as_separate_valid_flags():
    extra = train_slurm_extra({})
    opts = sbatch_accepts(extra)
    assert opts["signal"] == "TERM@120" and opts["open-mode"] == "append"
    assert shlex.split(extra) == list(TRAIN_SBATCH)


def test_the_quoted_form_of_issue_33_is_refused_as_sbatch_refuses_it():
    """Before the fix the rule's value was "'--signal=TERM@120 --open-mode=append'": one shell
    word, which get_signal_opts reads as TERM@"120 --open-mode=append" and refuses."""
    with pytest.raises(sbatch_argv.SbatchError, match="Invalid --signal specification"):
        sbatch_accepts("'" + " ".join(TRAIN_SBATCH) + "'")


@pytest.mark.parametrize("typed", [
    "'--qos=high --signal=TERM@600 --open-mode=append'",
    "'--signal TERM@120 --open-mode append'",
    "'--open-mode=a --signal=R:SIGTERM@300'",
    "'--signal=15@900 --open-mode=append --qos=long'",
])
def test_an_own_value_with_a_valid_early_sigterm_is_accepted_in_any_form_sbatch_reads(typed):
    given = train_slurm_extra(parse_set_resources([f"train_model:slurm_extra={typed}"]))
    assert given == typed.strip("'")          # what the job gets: Snakemake drops the quotes
    sbatch_accepts(given)


@pytest.mark.parametrize("typed, reason", [
    ("'--qos=high'", "has no --signal; has no --open-mode=append"),
    ("'--signal=TERM@60 --open-mode=append'", "warns 60 s before the time limit"),
    ("'--signal=TERM --open-mode=append'", "warns 60 s before"),
    ("'--signal=B:TERM@300 --open-mode=append'", "signals only the batch shell"),
    ("'--signal=USR1@300 --open-mode=append'", "is not SIGTERM"),
    ("'--signal=TERM@120 --open-mode=truncate'", "has no --open-mode=append"),
])
def test_an_own_value_that_would_lose_the_save_is_refused_with_the_reason(typed, reason):
    with pytest.raises(ValueError, match=reason):
        train_slurm_extra(parse_set_resources([f"train_model:slurm_extra={typed}"]))


def test_an_entry_without_slurm_extra_keeps_the_rules_flags():
    """Snakemake answers get() on a rule's entry without slurm_extra with an empty Resource."""
    profile = parse_set_resources(["train_model:mem_mb=128000", "train_model:runtime=2880"])
    assert train_slurm_extra(profile) == train_slurm_extra({}) == " ".join(TRAIN_SBATCH)
    assert train_slurm_extra({"parse_shard": {"mem_mb": 1}}) == " ".join(TRAIN_SBATCH)


@pytest.mark.parametrize("argv, message", [
    (["--signal=TERM@120 --open-mode=append", "x.sh"], "Invalid --signal specification"),
    (["--signal=TERM@12x", "x.sh"], "Invalid --signal specification"),
    (["--signal=NOPE@120", "x.sh"], "Invalid --signal specification"),
    (["--open-mode=appendx", "x.sh"], "Invalid --open-mode argument"),
    (["-t", "2 days", "x.sh"], "Invalid time limit specification"),
    (["--mem", "12X", "x.sh"], "Invalid --mem specification"),
    (["--nodes=0", "x.sh"], "invalid node count"),
    (["--cpus-per-task=-1", "x.sh"], "Invalid --cpus-per-task argument"),
    (["--no-such-flag", "x.sh"], "unrecognized option '--no-such-flag'"),
    (["--n=2", "x.sh"], "is ambiguous"),
    (["--requeue=yes", "x.sh"], "doesn't allow an argument"),
    (["--wrap=true", "x.sh"], "script arguments not permitted with --wrap option"),
    (["-Z", "x.sh"], "invalid option -- 'Z'"),
    (["--signal"], "requires an argument"),
])
def test_the_stand_ins_sbatch_refuses_what_sbatch_refuses(argv, message):
    with pytest.raises(sbatch_argv.SbatchError, match=message):
        sbatch_argv.parse(argv)


def test_the_stand_ins_sbatch_reads_what_sbatch_reads():
    opts, rest = sbatch_argv.parse(["-pgpu", "--part", "cpu", "-N", "2-4", "-t", "1-12:00",
                                    "--signal", "RB:USR1@30", "--signal=TERM@", "-Hv",
                                    "--exclusive", "--mem=4G", "job.sh", "--not-an-option"])
    kept = sbatch_argv.last(opts)
    assert kept["partition"] == "cpu" and kept["nodes"] == "2-4" and kept["time"] == "1-12:00"
    assert kept["signal"] == "TERM@" and "hold" in kept and "verbose" in kept
    assert rest == ["job.sh", "--not-an-option"]   # options stop at the script ("+")

"""The trainer's time-limit requeue (issue 33, item 2): which SIGTERM is a time limit's, and
when a requeue is not asked for. The requeue itself runs against the SLURM stand-in in
tests/integration/test_slurm_training.py."""

from __future__ import annotations

import pytest

from pipeline_lib.training.slurm_extra import signal_warning_s
from pipeline_lib.training.time_limit import RequeuePolicy, seconds_left, slurm_seconds


@pytest.mark.parametrize("text,seconds", [
    ("00:01:05", 65), ("2-00:00:00", 172800), ("1-02:03:04", 93784), ("05:00", 300),
    ("UNLIMITED", None), ("Partition_Limit", None), ("N/A", None), ("", None), (None, None)])
def test_slurm_durations(text, seconds):
    assert slurm_seconds(text) == seconds


def _job(run: str, limit: str = "00:30:00", restarts: str = "0") -> dict[str, str]:
    return {"JobId": "7", "RunTime": run, "TimeLimit": limit, "Restarts": restarts}


def test_a_signal_within_the_warning_is_the_time_limit_and_requeues():
    policy = RequeuePolicy(warning_s=120, max_requeues=3)
    assert seconds_left(_job("00:28:05")) == 115
    assert policy.refusal(_job("00:28:05"), progressed=True) is None
    # SLURM may signal up to 60 s early: 179 s left is still the warning of TERM@120
    assert policy.refusal(_job("00:27:01"), progressed=True) is None


@pytest.mark.parametrize("job,progressed,said", [
    (_job("00:10:00"), True, "1200 s are left before the time limit"),
    (_job("00:28:30", limit="UNLIMITED"), True, "no time limit (TimeLimit=UNLIMITED)"),
    (_job("00:28:30", restarts="3"), True, "requeued 3 times, cluster.max_requeues = 3"),
    (_job("00:28:30"), False, "made no update"),
    ({}, True, "no record"),
])
def test_no_requeue_where_it_cannot_help(job, progressed, said):
    assert said in RequeuePolicy(warning_s=120, max_requeues=3).refusal(job, progressed)


def test_max_requeues_zero_never_requeues():
    assert "cluster.max_requeues = 0" in RequeuePolicy(120, 0).refusal(_job("00:29:00"), True)


@pytest.mark.parametrize("extra,seconds", [
    ("--signal=TERM@120 --open-mode=append", 120), ("--open-mode a --signal R:TERM@600", 600),
    ("--signal=15@900 --signal=TERM@300 --open-mode=append", 300)])
def test_the_warning_is_read_from_the_rules_slurm_extra(extra, seconds):
    assert signal_warning_s(extra) == seconds

"""Which jobs the run fails after the SLURM plugin's poll (pipeline_lib/slurm_ended_jobs.py):
PREEMPTED and NODE_FAIL records only, and only where the controller has not put the job back;
the wrapper on the executor keeps the plugin's answer for every other job."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from pipeline_lib import slurm_ended_jobs as ended


@pytest.mark.parametrize("record, live, fails", [
    ("PREEMPTED", "PREEMPTED", True),       # PreemptMode=CANCEL, or no requeue allowed
    ("NODE_FAIL", "NODE_FAIL", True),       # a node failure SLURM does not requeue
    ("PREEMPTED", None, True),              # the controller forgot it (MinJobAge): ended
    ("PREEMPTED", "PENDING", False),        # requeued: SLURM runs it again under its id
    ("NODE_FAIL", "RUNNING", False),
    ("PREEMPTED", "?", False),              # scontrol could not be asked: keep polling
    ("RUNNING", None, False),               # other states: the plugin's own handling
    ("TIMEOUT", "TIMEOUT", False),
    (None, None, False),                    # not in sacct yet
])
def test_only_an_ended_preemption_or_node_failure_that_slurm_keeps_ended_fails(
        monkeypatch, record, live, fails):
    monkeypatch.setattr(ended, "controller_state", lambda job: live)
    reason = ended.ended_for_good("17", record)
    assert (reason is not None) == fails
    if fails:
        assert reason.startswith("SLURM job 17 was ") and "does not requeue it" in reason


def test_the_wrapper_fails_ended_jobs_and_yields_the_others(monkeypatch):
    jobs = [SimpleNamespace(external_jobid=i) for i in ("1", "2", "3_4")]
    errors = []

    async def plugin_poll(active):      # the plugin calls all three active
        for j in active:
            yield j

    executor = SimpleNamespace(check_active_jobs=plugin_poll, run_uuid="run-x",
                               report_job_error=lambda j, msg: errors.append((j, msg)))
    monkeypatch.setattr(ended, "run_states", lambda name: {
        "1": "RUNNING", "2": "PREEMPTED", "3": "NODE_FAIL"} if name == "run-x" else {})
    monkeypatch.setattr(ended, "controller_state", lambda job: {"2": None, "3_4": "PENDING"}[job])
    ended.fail_ended_jobs(executor, warn=pytest.fail)

    async def collect():
        return [j async for j in executor.check_active_jobs(jobs)]

    assert asyncio.run(collect()) == [jobs[0], jobs[2]]     # 3_4 read under its array id 3
    assert [(j.external_jobid, "pre-empted" in m) for j, m in errors] == [("2", True)]


def test_an_executor_without_the_hooks_is_left_alone_with_a_warning():
    warnings = []
    ended.fail_ended_jobs(SimpleNamespace(), warnings.append)
    assert "polled for ever" in warnings[0]


def test_sacct_and_scontrol_answers_are_read_as_slurm_prints_them(monkeypatch):
    def fake_run(argv, **kw):
        if argv[0] == "sacct":
            return SimpleNamespace(stdout="17|PREEMPTED\n18|CANCELLED by 0\n", returncode=0)
        if argv[-1] == "17":
            return SimpleNamespace(stdout="JobId=17 JobName=x JobState=PREEMPTED Requeue=0",
                                   stderr="", returncode=0)
        return SimpleNamespace(stdout="", returncode=1,
                               stderr="slurm_load_jobs error: Invalid job id specified")

    monkeypatch.setattr(ended.subprocess, "run", fake_run)
    assert ended.run_states("run-x") == {"17": "PREEMPTED", "18": "CANCELLED"}
    assert ended.controller_state("17") == "PREEMPTED"
    assert ended.controller_state("99") is None

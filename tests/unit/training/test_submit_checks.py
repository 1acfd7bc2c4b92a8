"""The submit host's checks before any SLURM job (issue 27 item 7, issue 33 item 4): what would
make every training job fail at its start stops the run once, with the reason."""

from __future__ import annotations

import pytest

import pipeline_lib.training.submit_checks as checks
from pipeline_lib.training.submit_checks import submit_problem

RECORDS = {"cpu": {"PartitionName": "cpu", "PreemptMode": "CANCEL"},
           "gpu": {"PartitionName": "gpu", "PreemptMode": "REQUEUE"},
           "short": {"PartitionName": "short", "PreemptMode": "CANCEL"}}


def test_a_training_job_sent_with_no_requeue_stops_the_run_before_submission():
    """Issue 27 item 7: a job the launcher would refuse at its start (Requeue=0) is refused
    once, with the reason, not submitted 1 + retries times; require_requeue 0 accepts it."""
    extra = "'--signal=TERM@120 --open-mode=append --no-requeue'"
    problem = submit_problem({"train_model": {"slurm_extra": extra}})
    assert problem and "--no-requeue in train_model's slurm_extra" in problem
    assert "slurm-no-requeue in the profile" in submit_problem({}, no_requeue=True)
    assert submit_problem({"train_model": {"slurm_extra": extra, "require_requeue": 0}}) is None
    assert submit_problem({}) is None   # no partition named, nothing known to refuse


def test_other_jobs_partitions_that_cancel_on_preemption_are_warned_about(monkeypatch):
    """Issue 27 item 7: a CPU job pre-empted by CANCEL ends PREEMPTED, which the SLURM plugin
    polls for ever; the run says so before its first job (train_model's partition is
    submit_problem's, refused, not warned about)."""
    import pipeline_lib.training.submit_checks as checks

    records = {"cpu": {"PartitionName": "cpu", "PreemptMode": "CANCEL"},
               "gpu": {"PartitionName": "gpu", "PreemptMode": "REQUEUE"},
               "short": {"PartitionName": "short", "PreemptMode": "CANCEL"}}
    monkeypatch.setattr(checks, "scontrol_record", lambda kind, name: records.get(name, {}))
    warnings = checks.partition_warnings({"slurm_partition": "cpu"},
                                         {"train_model": {"slurm_partition": "short"},
                                          "decode_test": {"slurm_partition": "gpu"}})
    assert len(warnings) == 1
    assert warnings[0].startswith("partition cpu pre-empts by PreemptMode=CANCEL")
    assert "(default-resources's slurm_partition)" in warnings[0]
    assert checks.partition_warnings({"slurm_partition": "gpu"}, {}) == []
    assert checks.partition_warnings(None, {"parse_shard": {"slurm_partition": "nowhere"}}) == []


@pytest.mark.parametrize("overrides, default_resources, cluster_default, where", [
    ({"train_model": {"slurm_partition": "short"}}, {"slurm_partition": "gpu"}, "gpu",
     "train_model's slurm_partition"),
    # a command-line --set-resources replaced the profile's block: default-resources decides
    ({"train_model": {"mem_mb": 1}}, {"slurm_partition": "cpu"}, "gpu",
     "default-resources' slurm_partition"),
    # nothing names one: sbatch sends the job to the cluster's default
    ({}, {}, "short", "the cluster's default partition"),
])
def test_train_models_partition_is_resolved_as_snakemake_and_slurm_will(
        monkeypatch, overrides, default_resources, cluster_default, where):
    monkeypatch.setattr(checks, "scontrol_record", lambda kind, name: RECORDS.get(name, {}))
    monkeypatch.setattr(checks, "default_partition", lambda: cluster_default)
    problem = submit_problem(overrides, default_resources=default_resources)
    assert problem and "pre-empts by PreemptMode=CANCEL" in problem and where in problem
    assert submit_problem({"train_model": {"slurm_partition": "gpu"}},
                          default_resources=default_resources) is None


def test_the_cluster_default_partition_is_read_from_scontrol(tmp_path, monkeypatch):
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'PartitionName=cpu AllowGroups=ALL Default=NO'\n"
                        "echo 'PartitionName=batch AllowGroups=ALL Default=YES PreemptMode=OFF'\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert checks.default_partition() == "batch"
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert checks.default_partition() is None


def test_a_node_count_other_than_cluster_nodes_is_refused_on_the_submit_host():
    problem = submit_problem({"train_model": {"nodes": 2}}, cluster_nodes=1)
    assert problem.startswith("train_model: set-resources nodes=2 but config cluster.nodes=1")
    assert submit_problem({"train_model": {"nodes": 1}}, cluster_nodes=1) is None
    # refused even where require_requeue 0 accepts pre-emption: the job could not start at all
    assert submit_problem({"train_model": {"nodes": "3", "require_requeue": 0}}, cluster_nodes=2)

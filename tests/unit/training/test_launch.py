"""The launcher's command line and environment for each process layout, from the SLURM
environment + config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline_lib.training.launch import (
    SAVE_GRACE_S,
    THREAD_VARS,
    AllocationMismatch,
    attempt_header,
    build_command,
    child_env,
    expand_hostlist,
    granted_gpus,
    launch_plan,
    preemption_problem,
)

ARGS = ["--config", "c.yaml", "--out-dir", "out"]


def test_cpu_workstation_runs_plain_python():
    cmd = build_command(ARGS, {}, launch_plan({}, nodes=1, gpus_per_node=0), python="py")
    assert cmd == ["py", "-m", "pipeline_lib.training.train", *ARGS]


def test_single_gpu_runs_plain_python():
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    cmd = build_command(ARGS, env, launch_plan(env, gpus_per_node=4), python="py")
    assert cmd == ["py", "-m", "pipeline_lib.training.train", *ARGS]


def test_one_node_four_gpus_granted_by_slurm_uses_torchrun():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4"}
    cmd = build_command(ARGS, env, launch_plan(env, nodes=1, gpus_per_node=8), python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                   "--nproc_per_node=4", "-m", "pipeline_lib.training.train", *ARGS]


def test_multi_node_starts_one_overlapping_task_per_node_with_rendezvous_on_first_host():
    """Two nodes x 4 GPUs inside the plugin's job step: a second step that does not overlap the
    first would wait for its CPUs forever (issue 11)."""
    env = {"SLURM_JOB_ID": "123", "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "32",
           "SLURM_JOB_NODELIST": "gpu[007-008]", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    cmd = build_command(ARGS, env, launch_plan(env, nodes=2, gpus_per_node=4), python="py")
    assert cmd[:7] == ["srun", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                       "--cpus-per-task=32", "--kill-on-bad-exit=1"]
    assert "--nnodes=2" in cmd and "--nproc_per_node=4" in cmd
    assert "--rdzv_id=123" in cmd and "--rdzv_endpoint=gpu007:29500" in cmd
    assert cmd[-len(ARGS) - 2:] == ["-m", "pipeline_lib.training.train", *ARGS]


def test_each_process_gets_its_share_of_the_node_cpus():
    """OMP_NUM_THREADS = the node's CPUs / its processes, not all the CPUs for each (issue 11)."""
    env = {"SLURM_JOB_ID": "123", "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "32",
           "SLURM_GPUS_ON_NODE": "4", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1",
           "SLURM_TRES_PER_TASK": "cpu:32", "SRUN_CPUS_PER_TASK": "32", "PATH": "/bin",
           "SLURM_JOB_NODELIST": "gpu[007-008]"}
    layout = launch_plan(env, nodes=2, gpus_per_node=4, cpus=64)
    assert layout.cpus_per_node == 32 and layout.threads_per_proc == 8
    out = child_env(env, build_command(ARGS, env, layout, python="py"), layout)
    assert out["OMP_NUM_THREADS"] == "8"
    # the trainer's step is shaped by its own flags, not by the step it is started from
    assert {k for k in out if k.startswith(("SLURM_", "SRUN_"))} == {"SLURM_JOB_ID"}
    assert out["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(SAVE_GRACE_S) and out["PATH"] == "/bin"
    # one process on a workstation: all the CPUs the rule was given (its threads)
    alone = launch_plan({}, cpus=6)
    assert child_env({}, build_command(ARGS, {}, alone, python="py"), alone) == \
        dict.fromkeys(THREAD_VARS, "6")
    one_node = launch_plan({"SLURM_GPUS_ON_NODE": "4"}, cpus=32)
    assert child_env({}, build_command(ARGS, {}, one_node, python="py"), one_node)[
        "OMP_NUM_THREADS"] == "8"


def test_every_thread_count_snakemake_sets_is_shared_per_process():
    """Issue 23, item 6: Snakemake's shell sets MKL_NUM_THREADS (and OpenBLAS', ...) to the
    node's CPUs like OMP_NUM_THREADS; each of 4 processes must get a quarter in all of them."""
    snakemake_shell = {var: "32" for var in THREAD_VARS}
    layout = launch_plan({"SLURM_GPUS_ON_NODE": "4"}, gpus_per_node=4, cpus=32)
    out = child_env(snakemake_shell, build_command(ARGS, {}, layout, python="py"), layout)
    assert {var: out[var] for var in THREAD_VARS} == dict.fromkeys(THREAD_VARS, "8")
    assert out["MKL_NUM_THREADS"] == "8"


def test_nodes_come_from_the_config_not_from_the_job_step():
    """Issue 23, item 3: the plugin's jobstep strips SLURM_JOB_NUM_NODES and real `srun -n1
    --nodes=2` shrinks its step to one node (SLURM_NNODES=1); the trainer of a 2-node job must
    still span both nodes of the allocation, not start `torchrun --standalone --nnodes=1`."""
    step = {"SLURM_JOB_ID": "9", "SLURM_NNODES": "1", "SLURM_NODELIST": "gpu007",
            "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_PER_TASK": "32"}
    layout = launch_plan(step, nodes=2, gpus_per_node=4, nodelist="gpu[007-008]")   # scontrol's NodeList
    assert layout.nodes == 2 and layout.hosts == ("gpu007", "gpu008")
    cmd = build_command(ARGS, step, layout, python="py")
    assert cmd[:3] == ["srun", "--overlap", "--nodes=2"] and "--standalone" not in cmd


@pytest.mark.parametrize("nodelist,nodes", [("gpu007", 2), ("gpu[007-009]", 2), ("", 2),
                                            ("gpu[1-2]", 3)])
def test_an_allocation_that_does_not_hold_the_configured_nodes_is_refused(nodelist, nodes):
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": nodelist}
    with pytest.raises(AllocationMismatch, match=f"{nodes}"):
        launch_plan(env, nodes=nodes, gpus_per_node=4)


def test_a_one_node_trainer_may_run_in_a_larger_allocation():
    layout = launch_plan({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]"}, nodes=1)
    assert layout.nodes == 1 and layout.hosts == ("n1", "n2")


@pytest.mark.parametrize("mode,requeue,problem", [
    ("OFF", "0", None), ("REQUEUE", "1", None), ("SUSPEND,GANG", "0", None),
    ("CANCEL", "1", "PreemptMode=CANCEL"), ("REQUEUE", "0", "Requeue=0")])
def test_a_preemption_that_would_not_requeue_the_job_is_named(mode, requeue, problem):
    """Issue 23, item 2: a PREEMPTED job that is not requeued is polled for ever by the plugin."""
    found = preemption_problem({"Requeue": requeue},
                               {"PartitionName": "gpu", "PreemptMode": mode})
    assert found is None if problem is None else problem in found


def test_attempt_header_names_the_attempt_and_the_slurm_job():
    line = attempt_header(2, {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"})
    assert line.startswith("===== attempt 2: SLURM job 77 (restart 1) on ")
    assert attempt_header(1, {}).startswith("===== attempt 1: ")


def test_multi_node_outside_slurm_is_refused():
    with pytest.raises(RuntimeError, match="not a SLURM job"):
        build_command(ARGS, {}, launch_plan({}, nodes=2, gpus_per_node=4))


@pytest.mark.parametrize("value,count", [("0,1,2", 3), ("4", 4), ("gpu:a100:2", 2), ("", 0),
                                         ("2(IDX:0-1)", 2)])
def test_granted_gpus_parses_slurm_and_cuda_forms(value, count):
    assert granted_gpus({"SLURM_GPUS_ON_NODE": value}, requested=0) == count


def test_granted_gpus_falls_back_to_config_off_cluster():
    assert granted_gpus({}, requested=3) == 3
    assert launch_plan({}, nodes=1, gpus_per_node=0).procs_per_node == 1


@pytest.mark.parametrize("nodelist,hosts", [
    ("node1", ["node1"]), ("gpu[003-004,010]", ["gpu003", "gpu004", "gpu010"]),
    ("a[9],b[1-2]", ["a9", "b1", "b2"]), ("n[12,14]", ["n12", "n14"]), ("", []),
    ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]), ("gpu[098-101]x", [
        "gpu098x", "gpu099x", "gpu100x", "gpu101x"])])
def test_expand_hostlist(nodelist, hosts):
    assert expand_hostlist(nodelist) == hosts


def test_cli_prints_the_command_without_running_it():
    out = subprocess.run([sys.executable, "-m", "pipeline_lib.training.launch", "--gpus-per-node", "2",
                          "--cpus", "6", "--attempt", "3", "--print-only", "--", "--steps", "5"],
                         capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."}, check=True)
    assert "--nproc_per_node=2" in out.stdout and out.stdout.strip().endswith("--attempt 3 --steps 5")
    assert out.stderr.startswith("===== attempt 3: ")
    assert "launch: OMP_NUM_THREADS=3 MKL_NUM_THREADS=3 " in out.stderr

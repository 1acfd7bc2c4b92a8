"""The launcher's command line for each process layout, from the SLURM environment + config."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline_lib.training.launch import build_command, first_host, granted_gpus, plan

ARGS = ["--config", "c.yaml", "--out-dir", "out"]


def test_cpu_workstation_runs_plain_python():
    cmd = build_command(ARGS, env={}, nodes=1, gpus_per_node=0, python="py")
    assert cmd == ["py", "-m", "pipeline_lib.training.train", *ARGS]


def test_single_gpu_runs_plain_python():
    cmd = build_command(ARGS, env={"CUDA_VISIBLE_DEVICES": "0"}, gpus_per_node=4, python="py")
    assert cmd == ["py", "-m", "pipeline_lib.training.train", *ARGS]


def test_one_node_four_gpus_granted_by_slurm_uses_torchrun():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1", "SLURM_GPUS_ON_NODE": "4"}
    cmd = build_command(ARGS, env, nodes=1, gpus_per_node=8, python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                   "--nproc_per_node=4", "-m", "pipeline_lib.training.train", *ARGS]


def test_multi_node_goes_through_srun_with_rendezvous_on_first_host():
    env = {"SLURM_JOB_ID": "123", "SLURM_JOB_NUM_NODES": "2",
           "SLURM_JOB_NODELIST": "gpu[007-008]", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    cmd = build_command(ARGS, env, nodes=2, gpus_per_node=4, python="py")
    assert cmd[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert "--nnodes=2" in cmd and "--nproc_per_node=4" in cmd
    assert "--rdzv_id=123" in cmd and "--rdzv_endpoint=gpu007:29500" in cmd
    assert cmd[-len(ARGS) - 2:] == ["-m", "pipeline_lib.training.train", *ARGS]


def test_multi_node_outside_slurm_is_refused():
    with pytest.raises(RuntimeError, match="not a SLURM job"):
        build_command(ARGS, env={}, nodes=2, gpus_per_node=4)


@pytest.mark.parametrize("value,count", [("0,1,2", 3), ("4", 4), ("gpu:a100:2", 2), ("", 0),
                                         ("2(IDX:0-1)", 2)])
def test_granted_gpus_parses_slurm_and_cuda_forms(value, count):
    assert granted_gpus({"SLURM_GPUS_ON_NODE": value}, requested=0) == count


def test_granted_gpus_falls_back_to_config_off_cluster():
    assert granted_gpus({}, requested=3) == 3
    assert plan({}, nodes=1, gpus_per_node=0).procs_per_node == 1


@pytest.mark.parametrize("nodelist,host", [("node1", "node1"), ("gpu[003-004,010]", "gpu003"),
                                           ("a[9],b[1-2]", "a9"), ("n[12,14]", "n12")])
def test_first_host(nodelist, host):
    assert first_host(nodelist) == host


def test_cli_prints_the_command_without_running_it():
    out = subprocess.run([sys.executable, "-m", "pipeline_lib.training.launch", "--gpus-per-node", "2",
                          "--print-only", "--", "--steps", "5"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."}, check=True)
    assert "--nproc_per_node=2" in out.stdout and out.stdout.strip().endswith("--steps 5")

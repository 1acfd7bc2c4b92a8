#!/usr/bin/env python3
"""A one-machine stand-in for SLURM's client commands, for tests only (STYLE.md item 11).

Each shim on PATH (``sbatch``, ``sacct``, ``squeue``, ``scancel``, ``srun``, ``sinfo``,
``scontrol``, ``sacctmgr``, ``sshare``) execs this file with its own name as first argument. Every
call is appended to ``$FAKE_SLURM_DIR/calls.jsonl`` (argv), so a test can assert on exactly what
snakemake-executor-plugin-slurm asked for. ``sbatch`` prints a job id as ``--parsable`` does and
runs the ``--wrap`` command in the background with the SLURM_* variables a real allocation sets;
``sacct``/``squeue`` report job states in the ``JobIdRaw|State`` format the plugin parses.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fake_slurm"))
JOBS = STATE / "jobs"
ACCOUNT = os.environ.get("FAKE_SLURM_ACCOUNT", "testacct")
# sacct blocks up to this long until some job finishes that it has not yet reported finished: a
# real accounting database lags too, and it keeps the plugin's growing poll interval (+10 s per
# poll that sees no finished job) out of test wall time.
SACCT_WAIT_S = float(os.environ.get("FAKE_SLURM_SACCT_WAIT_S", "15"))


def record(tool: str, argv: list[str]) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"tool": tool, "argv": argv}) + "\n")


def options(argv: list[str]) -> dict[str, str]:
    """``--key=value`` / ``--key value`` / ``-k value`` pairs of an sbatch call."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k] = v
        elif a.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[a.lstrip("-")] = argv[i + 1]
            i += 1
        elif a.startswith("-"):
            out[a.lstrip("-")] = ""
        i += 1
    return out


def next_job_id() -> str:
    JOBS.mkdir(parents=True, exist_ok=True)
    with open(STATE / "counter", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read() or "1000") + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
    return str(n)


def write_job(job_id: str, **fields) -> None:
    path = JOBS / f"{job_id}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(fields)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def jobs() -> list[dict]:
    out = []
    for p in sorted(JOBS.glob("*.json")) if JOBS.exists() else []:
        try:
            out.append(json.loads(p.read_text()))
        except json.JSONDecodeError:  # being replaced right now; next poll sees it
            continue
    return out


def sbatch(argv: list[str]) -> int:
    opts = options(argv)
    script = opts.get("wrap")
    if script is None:  # script file or /dev/stdin
        script = sys.stdin.read() if argv[-1] == "/dev/stdin" else Path(argv[-1]).read_text()
    job_id = next_job_id()
    log = opts.get("output", str(STATE / "slurm-%j.log")).replace("%j", job_id)
    gpus = opts.get("gpus", "0").split(":")[-1]
    env = {**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
           "SLURM_JOB_NAME": opts.get("job-name", ""), "SLURM_JOB_NUM_NODES": opts.get("nodes", "1"),
           "SLURM_JOB_NODELIST": "fakenode1", "SLURM_CPUS_PER_TASK": opts.get("cpus-per-task", "1"),
           "SLURM_SUBMIT_DIR": os.getcwd()}
    if gpus != "0":
        env["SLURM_GPUS"] = gpus
        env["SLURM_GPUS_ON_NODE"] = gpus
    write_job(job_id, id=job_id, name=opts.get("job-name", ""), state="PENDING", argv=argv)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, __file__, "_run", job_id, script],
                                cwd=opts.get("D", os.getcwd()), env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    write_job(job_id, pid=proc.pid)
    print(job_id)
    return 0


def run_job(job_id: str, script: str) -> int:
    write_job(job_id, state="RUNNING")
    rc = subprocess.call(["/bin/sh", "-c", script])
    write_job(job_id, state="COMPLETED" if rc == 0 else "FAILED", exit_code=rc)
    return rc


def _name_filter(argv: list[str]) -> str | None:
    return options(argv).get("name")


def sacct(argv: list[str]) -> int:
    opts = options(argv)
    if "format" in opts and "JobIdRaw" in opts["format"]:
        name = opts.get("name")
        reported_file = STATE / "sacct_reported_final.json"
        reported = set(json.loads(reported_file.read_text())) if reported_file.exists() else set()
        deadline = time.time() + SACCT_WAIT_S
        while True:
            mine = [j for j in jobs() if name is None or j["name"] == name]
            active = [j for j in mine if j["state"] in ("PENDING", "RUNNING")]
            news = [j for j in mine if j not in active and j["id"] not in reported]
            if not active or news or time.time() > deadline:
                break
            time.sleep(0.2)
        reported_file.write_text(json.dumps(sorted(reported | {j["id"] for j in news})))
        for j in mine:
            print(f"{j['id']}|{j['state']}")
    elif "o" in opts and opts["o"].startswith("Account"):
        print(ACCOUNT)
    # per-step Reason queries and node lists: nothing to report
    return 0


def squeue(argv: list[str]) -> int:
    name = _name_filter(argv)
    for j in jobs():
        if name is None or j["name"] == name:
            print(f"{j['id']}|{j['state']}")
    return 0


def scancel(argv: list[str]) -> int:
    ids = {a for arg in argv if not arg.startswith("-") for a in re.split(r"[,\s]+", arg) if a}
    for j in jobs():
        if j["id"] in ids and "pid" in j:
            try:
                os.killpg(j["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
            write_job(j["id"], state="CANCELLED")
    return 0


# srun options that take a separate value (everything else is --key=value or a flag)
SRUN_VALUE_OPTS = {"-n", "-N", "-c", "-J", "-G", "--ntasks", "--nodes", "--jobid", "-w"}


def srun(argv: list[str]) -> int:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in SRUN_VALUE_OPTS:
            i += 1
        i += 1
    cmd = argv[i:]
    # a job step sees its own share of the allocation, as real srun exports it
    opts = options(argv[:i])
    step_env = {"SLURM_CPUS_PER_TASK": opts.get("cpus-per-task", "1"),
                "SLURM_JOB_NUM_NODES": opts.get("nodes", "1"), "SLURM_NTASKS": "1",
                "SLURM_STEP_ID": "0"}
    if opts.get("gpus"):
        step_env["SLURM_GPUS_ON_NODE"] = opts["gpus"].split(":")[-1]
    os.environ.update(step_env)
    if not cmd:
        print("srun: no command", file=sys.stderr)
        return 2
    if cmd == ["sh", "-s"]:
        return subprocess.call(["/bin/sh", "-s"])
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    if tool == "_run":
        return run_job(argv[0], argv[1])
    record(tool, argv)
    if tool == "sbatch":
        return sbatch(argv)
    if tool == "sacct":
        return sacct(argv)
    if tool == "squeue":
        return squeue(argv)
    if tool == "scancel":
        return scancel(argv)
    if tool == "srun":
        return srun(argv)
    if tool == "sinfo":
        print("PARTITION\ncpu*\ngpu")
        return 0
    if tool == "scontrol":
        print("MinJobAge               = 300 sec\nMaxArraySize            = 1001")
        return 0
    if tool in ("sacctmgr", "sshare"):
        print(ACCOUNT)
        return 0
    print(f"fake_slurm: unknown tool {tool}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

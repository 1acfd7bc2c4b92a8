#!/usr/bin/env python3
"""A one-machine stand-in for SLURM's client commands, for tests only (STYLE.md item 11).

Each shim on PATH (``sbatch``, ``sacct``, ``squeue``, ``scancel``, ``srun``, ``sinfo``,
``scontrol``, ``sacctmgr``, ``sshare``) execs this file with its own name as first argument. Every
call is appended to ``$FAKE_SLURM_DIR/calls.jsonl`` (argv), so a test can assert on exactly what
snakemake-executor-plugin-slurm asked for. ``sbatch`` prints a job id as ``--parsable`` does and
runs the ``--wrap`` command in the background with the SLURM_* variables a real allocation sets;
``sacct``/``squeue`` report job states in the ``JobIdRaw|State`` format the plugin parses.

What the tests lean on, as real SLURM does it (all "nodes" are this machine):

* ``sbatch --nodes=N --gres=gpu:G`` asks for G GPUs on each node; ``--gpus=G`` for G in all,
  spread over the nodes (``SLURM_GPUS_ON_NODE`` = G / N).
* ``srun`` starts a job step: ``--ntasks`` tasks (default one per node), each in its own process
  group, in the caller's environment plus the step's own SLURM_* variables (``SLURM_PROCID``,
  ``SLURM_NODEID``, ``SLURM_NNODES`` and ``SLURM_NODELIST`` of the step...). Job-wide ones
  (``SLURM_JOB_NUM_NODES``, ``SLURM_JOB_NODELIST``) only if the caller had them: the plugin's
  jobstep executor strips them before its srun, and ``srun -n1 --nodes=2`` shrinks its step to
  one node, so only the controller (``scontrol show job``) still tells the allocation's nodes. A
  step gets all the job's GPUs of its nodes unless it asks for ``--gpus``. When a task ends, what is left of its
  process group is killed (slurmstepd ends the step's processes); when the job ends, every step
  left is killed. The srun client forwards the signals it receives to its tasks.
* A step started while another step of the job runs waits for that step's CPUs unless it passes
  ``--overlap``; here it fails at once with SLURM's message instead of hanging the test.
* ``scancel --signal=SIG ID`` signals every process of the job's steps but not the batch shell
  (``--batch``: only the batch shell; ``--full``: both), as ``sbatch --signal=SIG@T`` does T
  seconds before the time limit; plain ``scancel ID`` terminates everything. ``--name=NAME``
  selects the pending and running jobs of that name; finished jobs are left alone.
* Pre-emption (the controller's doing, so no client command: tests run ``fake_slurm.py _preempt
  ID``): SIGTERM to the job's steps (as ``scancel --signal=TERM`` does; a signalled batch shell
  would die at once and end the job), SIGKILL to what is left after ``FAKE_SLURM_GRACE_S``
  (GraceTime), then by the cluster's ``FAKE_SLURM_PREEMPT_MODE`` (default REQUEUE): REQUEUE and
  a requeueable job (``sbatch --requeue``, or no ``--no-requeue`` under
  ``FAKE_SLURM_JOB_REQUEUE`` = 1, SLURM's JobRequeue default) -> PENDING and run again under the
  same id with ``SLURM_RESTART_COUNT`` + 1 in the batch environment; otherwise the job ends
  PREEMPTED. ``scontrol requeue ID`` puts a finished requeueable job back the same way.
* ``scontrol -o show job ID`` / ``show partition NAME`` print the ``Key=Value`` records a real
  controller prints (JobState, Requeue, Restarts, Partition, NumNodes, NodeList, RunTime,
  TimeLimit; PreemptMode).
* Time limits (``sbatch --time``): ``--signal=[B:]SIG@N`` sends SIG N seconds before the limit to
  the job's steps (``B:``: the batch shell only; no ``--signal``: nothing); at the limit every
  process gets SIGTERM, SIGKILL after KillWait (``FAKE_SLURM_KILL_WAIT_S``, 30) and the job ends
  TIMEOUT. ``scontrol requeue ID`` of a running requeueable job ends it the same way (SIGTERM,
  SIGKILL after KillWait) and puts it back PENDING under the same id with ``Restarts`` + 1; a job
  with ``Requeue=0`` is refused. ``FAKE_SLURM_TIME_SCALE`` (real seconds per SLURM second, 1) makes
  a test's minutes short; a job keeps the scale it was submitted under.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sbatch_argv

STATE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fake_slurm"))
JOBS = STATE / "jobs"
ACCOUNT = os.environ.get("FAKE_SLURM_ACCOUNT", "testacct")
# sacct blocks up to this long until some job finishes that it has not yet reported finished: a
# real accounting database lags too, and it keeps the plugin's growing poll interval (+10 s per
# poll that sees no finished job) out of test wall time.
SACCT_WAIT_S = float(os.environ.get("FAKE_SLURM_SACCT_WAIT_S", "15"))
# The cluster's partitions (sbatch refuses any other) and its default (no -p).
PARTITIONS = os.environ.get("FAKE_SLURM_PARTITIONS", "cpu,gpu").split(",")
DEFAULT_PARTITION = PARTITIONS[0]
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


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


@contextmanager
def job_record(job_id: str) -> Iterator[dict]:
    """The job's JSON record, locked for a read-modify-write (srun, the job and scancel all
    update it)."""
    JOBS.mkdir(parents=True, exist_ok=True)
    path = JOBS / f"{job_id}.json"
    with open(JOBS / f"{job_id}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {}
        yield data
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)


def read_job(job_id: str) -> dict:
    with job_record(job_id) as data:
        return dict(data)


def jobs() -> list[dict]:
    out = []
    for p in sorted(JOBS.glob("*.json")) if JOBS.exists() else []:
        try:
            out.append(json.loads(p.read_text()))
        except json.JSONDecodeError:  # being replaced right now; next poll sees it
            continue
    return out


def _count(value: str) -> int:
    """``4``, ``gpu:4`` or ``gpu:a100:4`` -> 4."""
    return int(value.split(":")[-1]) if value else 0


def nodelist(nodes: int) -> str:
    return "fakenode1" if nodes == 1 else f"fakenode[1-{nodes}]"


def sbatch(argv: list[str]) -> int:
    """Refuses, as sbatch does (exit 1, nothing submitted), any argument vector its option
    parser or the controller would refuse (:mod:`sbatch_argv`), then starts the job."""
    try:
        parsed, rest = sbatch_argv.parse(argv)
    except sbatch_argv.SbatchError as e:
        print(f"sbatch: error: {e}", file=sys.stderr)
        return 1
    opts = sbatch_argv.last(parsed)
    partition = opts.get("partition", DEFAULT_PARTITION)
    if not set(partition.split(",")) <= set(PARTITIONS):
        print("sbatch: error: Batch job submission failed: Invalid partition name specified",
              file=sys.stderr)
        return 1
    script = opts.get("wrap")
    if script is None:  # the script file, or standard input when none is named
        script = Path(rest[0]).read_text() if rest else sys.stdin.read()
    job_id = next_job_id()
    log = opts.get("output", str(STATE / "slurm-%j.log")).replace("%j", job_id)
    nodes = int(opts.get("nodes", "1").split("-")[0])
    gres = opts.get("gres", "")
    gpus_per_node = (_count(gres) if gres.startswith("gpu") else
                     _count(opts.get("gpus", "0")) // nodes)
    cpus = opts.get("cpus-per-task", "1")
    slurm_env = {"SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
                 "SLURM_JOB_NAME": opts.get("job-name", ""), "SLURM_JOB_NUM_NODES": str(nodes),
                 "SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": nodelist(nodes),
                 "SLURM_CPUS_PER_TASK": cpus, "SLURM_SUBMIT_DIR": os.getcwd()}
    if gpus_per_node:
        slurm_env["SLURM_GPUS_ON_NODE"] = str(gpus_per_node)
        if "gpus" in opts:
            slurm_env["SLURM_GPUS"] = opts["gpus"]
    flags = [n for n, _ in parsed if n in ("requeue", "no-requeue")]   # the last one wins
    requeue = ({"requeue": "1", "no-requeue": "0"}[flags[-1]] if flags
               else os.environ.get("FAKE_SLURM_JOB_REQUEUE", "1"))
    with job_record(job_id) as job:
        job.update(id=job_id, name=opts.get("job-name", ""), state="PENDING", argv=argv,
                   nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_task=int(cpus), steps=[],
                   comment=opts.get("comment", ""), partition=partition,
                   requeue=requeue, restarts=0, script=script, cwd=opts.get("chdir", os.getcwd()),
                   log=log, append=opts.get("open-mode") == "append", slurm_env=slurm_env,
                   time_limit=sbatch_argv.time_seconds(opts["time"]) if "time" in opts else None,
                   signal=sbatch_argv.signal_spec(opts["signal"]) if "signal" in opts else None,
                   scale=float(os.environ.get("FAKE_SLURM_TIME_SCALE", "1")))
    start_job(job_id, truncate=not opts.get("open-mode") == "append")
    print(job_id)
    return 0


def start_job(job_id: str, truncate: bool) -> None:
    """Run the job's batch script in the background (``_run``), its output in the job's log."""
    job = read_job(job_id)
    Path(job["log"]).parent.mkdir(parents=True, exist_ok=True)
    with open(job["log"], "w" if truncate else "a") as out:
        subprocess.Popen([sys.executable, __file__, "_run", job_id], cwd=job["cwd"],
                         env={**os.environ, **job["slurm_env"]}, stdout=out,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_job(job_id: str) -> int:
    """The batch script, in a process group of its own (so that signals to it spare this
    supervisor), run again for as long as pre-emption requeues it."""
    while True:
        with job_record(job_id) as job:
            job["state"] = "RUNNING"
            env = dict(os.environ)
            if job["restarts"]:
                env["SLURM_RESTART_COUNT"] = str(job["restarts"])
            proc = subprocess.Popen(["/bin/sh", "-c", job["script"]], env=env,
                                    start_new_session=True)
            job.update(batch_pgid=proc.pid, start=time.time())
        rc = _watch(job_id, proc)
        _let_steps_end(job_id)
        with job_record(job_id) as job:
            for step in job["steps"]:   # the job's end ends every step still running
                for pgid in step["pgids"] if step["running"] else []:
                    _killpg(pgid, signal.SIGKILL)
                step["running"] = False
            _killpg(proc.pid, signal.SIGKILL)
            preempted = job.pop("preempting", None)
            ending = job.pop("ending", None)   # "requeue" (scontrol) or "timeout" (the limit)
            job.pop("kill_at", None)
            job.pop("term_at", None)
            requeued = (preempted == "REQUEUE" or ending == "requeue") and job["requeue"] == "1"
            if job["state"] == "CANCELLED":
                pass
            elif requeued:
                job.update(state="PENDING", restarts=job["restarts"] + 1, steps=[])
            else:
                job["state"] = ("PREEMPTED" if preempted else "TIMEOUT" if ending == "timeout"
                                else "COMPLETED" if rc == 0 else "FAILED")
            job.update(exit_code=rc, end=time.time())
        if not requeued:
            return rc
        time.sleep(0.5)   # pending again until the scheduler starts it


# Seconds from the controller's decision to the node's signals: `scontrol requeue` has returned
# by then, as the client of an RPC that the controller answers first.
NODE_LATENCY_S = 0.5


def _end_job(job: dict, why: str, latency: float = 0.0) -> None:
    """What slurmctld does to a job it ends (time limit, requeue): SIGTERM to every process of
    the job's steps and batch shell, SIGKILL after KillWait to what is left (the batch
    supervisor sends both: :func:`_watch`, :func:`run_job`)."""
    wait = float(os.environ.get("FAKE_SLURM_KILL_WAIT_S", "30")) * job["scale"]
    now = time.time()
    job.update(ending=why, term_at=now + latency, kill_at=now + latency + wait)


def _job_pgids(job: dict) -> list[int]:
    return [g for st in job["steps"] if st["running"] for g in st["pgids"]] + [job["batch_pgid"]]


def _watch(job_id: str, proc: subprocess.Popen) -> int:
    """Wait for the batch script while the job's clock runs: the ``--signal`` warning, the time
    limit, and SIGKILL once KillWait is over."""
    warned = False
    while True:
        try:
            return proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
        with job_record(job_id) as job:
            limit, spec = job["time_limit"], job["signal"]
            elapsed = (time.time() - job["start"]) / job["scale"]
            if spec and limit is not None and not warned and elapsed >= limit - spec[1]:
                warned = True
                pgids = ([job["batch_pgid"]] if spec[2] else
                         [g for st in job["steps"] if st["running"] for g in st["pgids"]])
                for pgid in pgids:
                    _killpg(pgid, spec[0])
            if limit is not None and elapsed >= limit and "ending" not in job:
                _end_job(job, "timeout")
            if "term_at" in job and time.time() >= job["term_at"]:
                del job["term_at"]
                for pgid in _job_pgids(job):
                    _killpg(pgid, signal.SIGTERM)
            if "kill_at" in job and time.time() >= job["kill_at"]:
                for pgid in _job_pgids(job):
                    _killpg(pgid, signal.SIGKILL)


def _let_steps_end(job_id: str) -> None:
    """A job that the controller ends (time limit, requeue) gives its steps KillWait after their
    SIGTERM, even once the batch shell has died of it; other jobs end their steps at once."""
    job = read_job(job_id)
    while "kill_at" in job and time.time() < job["kill_at"]:
        alive = []
        for pgid in [g for st in job["steps"] if st["running"] for g in st["pgids"]]:
            try:
                os.killpg(pgid, 0)
                alive.append(pgid)
            except (ProcessLookupError, PermissionError):
                pass
        if not alive:
            return
        time.sleep(0.1)
        job = read_job(job_id)


def _duration(seconds: float | None) -> str:
    """SLURM's ``[days-]HH:MM:SS``; UNLIMITED for None."""
    if seconds is None:
        return "UNLIMITED"
    days, rest = divmod(int(seconds), 86400)
    clock = time.strftime("%H:%M:%S", time.gmtime(rest))
    return f"{days}-{clock}" if days else clock


def preempt(argv: list[str]) -> int:
    """What slurmctld does to a pre-empted job: SIGTERM to its steps, SIGKILL after the grace
    time, then requeue or PREEMPTED (see the module docstring)."""
    job_id = argv[0]
    grace = float(os.environ.get("FAKE_SLURM_GRACE_S", "60"))
    with job_record(job_id) as job:
        if job.get("state") != "RUNNING":
            print(f"fake preempt: job {job_id} is not running", file=sys.stderr)
            return 1
        job["preempting"] = os.environ.get("FAKE_SLURM_PREEMPT_MODE", "REQUEUE").upper()
        run = job["restarts"]
        pgids = [g for st in job["steps"] if st["running"] for g in st["pgids"]]
    for pgid in pgids:
        _killpg(pgid, signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline:
        job = read_job(job_id)
        if job["state"] != "RUNNING" or job["restarts"] != run:
            break
        time.sleep(0.1)
    for pgid in [*pgids, job["batch_pgid"]]:
        _killpg(pgid, signal.SIGKILL)
    return 0


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
            news = [j for j in mine if j not in active
                    and f"{j['id']}:{j['state']}:{j['restarts']}" not in reported]
            if not active or news or time.time() > deadline:
                break
            time.sleep(0.2)
        reported_file.write_text(json.dumps(sorted(
            reported | {f"{j['id']}:{j['state']}:{j['restarts']}" for j in news})))
        for j in mine:
            print(f"{j['id']}|{j['state']}")
    elif "o" in opts and opts["o"].startswith("Account"):
        print(ACCOUNT)
    # per-step Reason queries and node lists: nothing to report
    return 0


SQUEUE_FIELDS = {"i": "id", "j": "name", "T": "state", "k": "comment", "P": "partition"}
SQUEUE_LONG = {"jobid": "id", "name": "name", "state": "state", "comment": "comment",
               "partition": "partition"}


def squeue(argv: list[str]) -> int:
    """``--format`` (``%.10i %j %T %k %P``, default ``%i|%T``) or ``-O``/``--Format``
    (``JobID:10,Name,State,Comment:60``); pending and running jobs unless ``--states=all``."""
    opts = options(argv)
    name = opts.get("name")
    shown = [j for j in jobs() if (name is None or j["name"] == name)
             and (opts.get("states", "").lower() == "all" or j["state"] in ("PENDING", "RUNNING"))]
    long = opts.get("O") or opts.get("Format")
    if long:
        cols = [(f.split(":")[0], int(f.split(":")[1]) if ":" in f else 20)
                for f in long.split(",")]
        rows = [[c.upper() for c, _ in cols]] if "noheader" not in opts else []
        rows += [[str(j.get(SQUEUE_LONG.get(c.lower(), ""), "")) for c, _ in cols] for j in shown]
        for row in rows:
            print("".join(v[:w].ljust(w) for v, (_, w) in zip(row, cols)).rstrip())
        return 0
    fmt = opts.get("format") or opts.get("o") or "%i|%T"
    for j in shown:
        print(re.sub(r"%\.?(\d*)([a-zA-Z])",
                     lambda m: str(j.get(SQUEUE_FIELDS.get(m.group(2), ""), "")).rjust(
                         int(m.group(1) or 0)), fmt))
    return 0


def scontrol(argv: list[str]) -> int:
    """``show config`` (MinJobAge), ``-o show job ID``, ``-o show partition NAME``,
    ``requeue ID``."""
    args = [a for a in argv if a not in ("-o", "--oneliner")]
    if args[:2] == ["show", "job"]:
        if not (JOBS / f"{args[2]}.json").exists():
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        j = read_job(args[2])
        run = (time.time() - j["start"]) / j["scale"] if j["state"] == "RUNNING" else 0
        print(f"JobId={j['id']} JobName={j['name']} JobState={j['state']} Requeue={j['requeue']} "
              f"Restarts={j['restarts']} BatchFlag=1 RunTime={_duration(run)} "
              f"TimeLimit={_duration(j['time_limit'])} Partition={j['partition']} "
              f"NumNodes={j['nodes']} NodeList={nodelist(j['nodes'])} Comment={j['comment']}")
        return 0
    if args[:2] == ["show", "partition"]:   # one named partition, or every one
        for name in args[2:3] or PARTITIONS:
            print(f"PartitionName={name} AllowGroups=ALL "
                  f"Default={'YES' if name == DEFAULT_PARTITION else 'NO'} State=UP "
                  f"PreemptMode={os.environ.get('FAKE_SLURM_PREEMPT_MODE', 'REQUEUE').upper()}")
        return 0
    if args[:1] == ["requeue"]:
        with job_record(args[1]) as job:
            if job.get("state") in (None, "PENDING") or "ending" in job:
                print(f"Job is pending execution or already ending for job {args[1]}",
                      file=sys.stderr)
                return 1
            if job["requeue"] != "1":
                print(f"Requested operation is presently disabled for job {args[1]}",
                      file=sys.stderr)
                return 1
            if job["state"] == "RUNNING":   # ended now; _watch and run_job run it again
                _end_job(job, "requeue", latency=NODE_LATENCY_S)
                return 0
            job.update(state="PENDING", restarts=job["restarts"] + 1, steps=[])
        start_job(args[1], truncate=not job["append"])
        return 0
    print("MinJobAge               = 300 sec\nMaxArraySize            = 1001")
    return 0


def scancel(argv: list[str]) -> int:
    opts = options(argv)
    sig_name = opts.get("signal") or opts.get("s")
    ids = {i for a in argv for i in a.split(",") if i.isdigit()}
    name = opts.get("name") or opts.get("n")
    for j in jobs():
        if j["id"] not in ids and not (name and j["name"] == name):
            continue
        if j["state"] not in ("PENDING", "RUNNING"):   # scancel leaves finished jobs alone
            continue
        sig = getattr(signal, "SIG" + sig_name.upper().removeprefix("SIG")) if sig_name \
            else signal.SIGTERM
        to_batch = not sig_name or "batch" in opts or "b" in opts or "full" in opts or "f" in opts
        to_steps = not sig_name or not ("batch" in opts or "b" in opts)
        with job_record(j["id"]) as job:
            if to_steps:
                for step in job["steps"]:
                    for pgid in step["pgids"] if step["running"] else []:
                        _killpg(pgid, sig)
            if to_batch and "batch_pgid" in job:
                _killpg(job["batch_pgid"], sig)
            if not sig_name:
                job["state"] = "CANCELLED"
    return 0


# srun options that take a value: short letter -> long name, and long names
SRUN_SHORT = {"n": "ntasks", "N": "nodes", "c": "cpus-per-task", "G": "gpus", "J": "job-name",
              "w": "nodelist", "K": "kill-on-bad-exit"}
SRUN_SHORT_FLAGS = {"K"}
SRUN_LONG_VALUES = {"ntasks", "nodes", "cpus-per-task", "gpus", "job-name", "nodelist",
                    "ntasks-per-node", "jobid", "cpu-bind", "export"}


def srun_options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """srun's options (long names) and the command after them: ``-n1``, ``-n 1``, ``--ntasks=1``
    and ``--ntasks 1`` alike."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a.startswith("--"):
            key, eq, value = a[2:].partition("=")
            if not eq and key in SRUN_LONG_VALUES:
                i, value = i + 1, argv[i + 1]
            opts[key] = value
        elif a[1] in SRUN_SHORT_FLAGS:
            opts[SRUN_SHORT[a[1]]] = ""
        else:
            value = a[2:]
            if not value:
                i, value = i + 1, argv[i + 1]
            opts[SRUN_SHORT.get(a[1], a[1])] = value
        i += 1
    return opts, argv[i:]


def srun(argv: list[str]) -> int:
    opts, cmd = srun_options(argv)
    if not cmd:
        print("srun: no command", file=sys.stderr)
        return 2
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id or not (JOBS / f"{job_id}.json").exists():
        print("fake srun: only job steps inside an sbatch job are supported", file=sys.stderr)
        return 2
    job = read_job(job_id)
    nodes = int(opts.get("nodes", "1"))
    per_node = int(opts.get("ntasks-per-node", "1"))
    ntasks = int(opts.get("ntasks", nodes * per_node))
    if ntasks < nodes:
        print(f"srun: Warning: can't run {ntasks} processes on {nodes} nodes, setting nnodes to "
              f"{ntasks}", file=sys.stderr)
        nodes = ntasks
    if nodes > job["nodes"]:
        print(f"srun: error: Only allocated {job['nodes']} nodes asked for {nodes}",
              file=sys.stderr)
        return 1
    gpus = (_count(opts["gpus"]) // nodes) if opts.get("gpus") else job["gpus_per_node"]
    with job_record(job_id) as rec:
        busy = [s["id"] for s in rec["steps"] if s["running"]]
        if busy and "overlap" not in opts:
            print(f"srun: Job {job_id} step creation temporarily disabled, retrying (Requested "
                  f"nodes are busy)\nfake srun: would wait forever for step(s) {busy}; "
                  "pass --overlap to share their resources", file=sys.stderr)
            return 1
        step_id = len(rec["steps"])
        tasks_per_node = -(-ntasks // nodes)
        procs = []
        for rank in range(ntasks):
            node = rank // tasks_per_node
            env = {**os.environ, "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
                   "SLURM_STEP_ID": str(step_id), "SLURM_STEP_NODELIST": nodelist(nodes),
                   "SLURM_NODELIST": nodelist(nodes), "SLURM_STEP_NUM_NODES": str(nodes),
                   "SLURM_NNODES": str(nodes), "SLURM_NTASKS": str(ntasks),
                   "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_PROCID": str(rank),
                   "SLURM_NODEID": str(node), "SLURM_LOCALID": str(rank % tasks_per_node),
                   "SLURMD_NODENAME": f"fakenode{node + 1}",
                   "SLURM_CPUS_PER_TASK": opts.get("cpus-per-task", "1")}
            if gpus:
                env["SLURM_GPUS_ON_NODE"] = str(gpus)
            # `sh -s` (the plugin's pass-command-as-script) reads the script from our stdin
            stdin = None if rank == 0 else subprocess.DEVNULL
            procs.append(subprocess.Popen(cmd, env=env, stdin=stdin, start_new_session=True))
        rec["steps"].append({"id": step_id, "argv": argv, "running": True,
                             "pgids": [p.pid for p in procs]})

    def forward(signum, frame) -> None:
        for p in procs:
            _killpg(p.pid, signum)

    for s in FORWARDED:
        signal.signal(s, forward)
    codes: dict[int, int] = {}
    while len(codes) < len(procs):
        for p in procs:
            if p.pid in codes or p.poll() is None:
                continue
            rc = p.returncode
            codes[p.pid] = 128 - rc if rc < 0 else rc
            _killpg(p.pid, signal.SIGKILL)   # the task ended: so does what is left of it
            if rc != 0 and "kill-on-bad-exit" in opts:
                for other in procs:
                    _killpg(other.pid, signal.SIGKILL)
        time.sleep(0.05)
    with job_record(job_id) as rec:
        rec["steps"][step_id]["running"] = False
    return max(codes.values())


def main() -> int:
    tool, argv = sys.argv[1], sys.argv[2:]
    if tool == "_run":
        return run_job(argv[0])
    record(tool, argv)
    if tool == "_preempt":
        return preempt(argv)
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
        print("PARTITION\n" + "\n".join(p + "*" * (p == DEFAULT_PARTITION) for p in PARTITIONS))
        return 0
    if tool == "scontrol":
        return scontrol(argv)
    if tool in ("sacctmgr", "sshare"):
        print(ACCOUNT)
        return 0
    print(f"fake_slurm: unknown tool {tool}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

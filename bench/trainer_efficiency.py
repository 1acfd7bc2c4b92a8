"""How close the real trainer runs to the speed of its own update, per data mode: trainer / update.

    .venv/bin/python bench/trainer_efficiency.py [--modes sentence,context,stream,...]
        [--jobs results/gpu/gpu_check.json] [--size tiny] [--max-tokens 4096] [--device cpu]
        [--threads 1] [--updates 96 | --epochs 2] [--rounds 12] [--num-workers 0] [--compile]
        [--warm-pass] [--phase-times] [--profile 20] [--clock wall|cpu] [--smoke]

One row per data mode (sentence: transformer, heads: dbsa, context: doct, stream: cache,
document: crosstask on parallel documents, restore: crosstask_pretrain on restoration
instances; the last two with aux_ratio 1, so every update reads that stream). The jobs come
from ``--jobs`` (bench/gpu_prepare.py writes them for a GPU machine without snakemake), or else
from the default config's plan with the ``--size`` entry of ``model_sizes`` (the default run's
shards under results/: ``snakemake --cores all --until make_shards make_head_shards``). A mode
whose shards are missing is skipped with a line saying so.

Per mode, the real :class:`pipeline_lib.training.train.Trainer` (its loader, loop, logging and
update: no validation or checkpoint in the timed updates) trains ``--updates`` updates, or with
``--epochs N`` as many as N epochs of the stream its updates read (counted from its own loader
first; rounds then lie in epoch 1 or later, and a round that spans two is left out of both).
Each mode keeps its job's batch (``max_tokens`` and ``update_freq``, e.g. the GPU profile's
cache at 4 x 4,096) unless ``--max-tokens`` sets one batch of that size per update for all. In
the same process and on the same device the benchmark's update (bench/train_throughput.py
``Updater``: forward, label-smoothed loss, backward, Adam, the micro-batches already on the
device) then trains a copy of the same model on exactly the batches the trainer drew. The two
alternate in ``--rounds`` rounds (the trainer's next updates, then the update on those
batches: on CUDA a first pass that meets their shapes, untimed, then a timed one;
``--warm-pass`` says whether), so machine load that drifts hits both alike; the trainer's clock
runs from the start of a round's first update to the start of the next round's (everything the
loop does in between, reading and collating batches included) and stops while the update runs.
The first round is a warm-up for both and not counted. ``--clock cpu`` counts this process's
CPU time instead of wall time (a CPU shared with other jobs; 0 workers).

Prints per round the trainer's and the update's target tokens/s and the round's epoch, then per
mode the medians and the ratio trainer / update (1.0 = the loop costs nothing beyond its update;
the goal is >= 0.9), with ``--epochs`` also the ratio in epoch 1 and in later epochs apart (a
first epoch pays first sight of every shape on CUDA, and loader start-up), and last the lowest
ratio over the modes. ``--phase-times``: the trainer runs with
``train.phase_times`` (a device synchronisation at each phase boundary, so its rate drops) and
each mode also prints where the trainer's time went (pipeline_lib/training/phases.py).
``--profile N``: afterwards, ``N`` more trainer updates under ``torch.profiler`` and the top
entries by self time. On CUDA every round also prints the peak GPU memory per 1,000 batch
tokens. ``--smoke`` (CI): two rounds of one update each on CPU (with ``--epochs``: those epochs in
six rounds), tiny sizes, 512 tokens or the job file's own batches, ``--profile`` at most 2 updates.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from train_throughput import Updater  # noqa: E402

from pipeline_lib.batch import Batch  # noqa: E402
from pipeline_lib.training.train_config import TrainConfig  # noqa: E402
from pipeline_lib.training.train import Trainer  # noqa: E402
from pipeline_lib.vocab import PAD_ID  # noqa: E402

MODES = ["sentence", "heads", "context", "stream", "document", "restore"]


class Recorder:
    """Wraps a trainer's ``next_batch`` and ``step``: keeps every batch it draws with its
    stream's epoch and the time each update starts (on ``clock``), and runs ``between(k)``
    before update ``k`` starts its clock."""

    def __init__(self, trainer: Trainer, between, clock) -> None:
        self.batches: list[Batch] = []
        self.epochs: list[int] = []
        self.starts: list[float] = []
        self.between = between
        next_batch, step = trainer.next_batch, trainer.step

        def recording_next_batch(aux: bool) -> Batch:
            b = next_batch(aux)
            self.batches.append(b)
            self.epochs.append((trainer.state.aux_position if aux else trainer.state.position).epoch)
            return b

        def timed_step(window) -> None:
            self.between(len(self.starts))
            self.starts.append(clock())
            step(window)

        trainer.next_batch, trainer.step = recording_next_batch, timed_step


def tokens(batches: list[Batch]) -> int:
    return sum(int(b.tgt_out.ne(PAD_ID).sum()) for b in batches)


def epoch_batches(trainer: Trainer) -> int:
    """Batches in one epoch of the stream the trainer's updates read (the aux stream when every
    update reads it), planned by its own loader without collating."""
    streams = trainer.streams
    loader = streams.aux if streams.aux is not None and trainer.tcfg.aux_ratio >= 1 else streams.main
    return sum(len(planned) for _, _, _, planned in
               itertools.takewhile(lambda c: c[0] == 0, loader.dataset.chunks(0)))


def epoch_of(epochs: list[int]) -> str:
    """A round's label: "epoch 1", "later" (epoch 2 on) or "epochs 1-2" (it spans both, and
    counts for neither)."""
    first = {e == 0 for e in epochs}
    return "epochs 1-2" if len(first) > 1 else "epoch 1" if first == {True} else "later"


def update_rate(upd: Updater, updates: list[list[Batch]], dev: torch.device, clock) -> float:
    """Target tokens/s of the benchmark's update over ``updates`` (micro-batches each)."""
    counts = [tokens(u) for u in updates]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = clock()
    for u, n in zip(updates, counts):
        upd.accumulate(u, n)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return sum(counts) / (clock() - t)


def default_jobs(size: str) -> dict:
    """The mode jobs of the default config's plan, at ``model_sizes[size]`` (needs snakemake)."""
    from gpu_prepare import mode_jobs

    from pipeline_lib.plan import Plan
    from pipeline_lib.run_config import load_config

    cfg = load_config(ROOT / "config" / "config.yaml")
    plan = Plan(cfg)
    return {"spm": plan.results.train_bpe().model,
            "modes": {m: {**s, "model": {**s["model"], **cfg["model_sizes"][size]}}
                      for m, s in mode_jobs(plan).items()}}


def measure(mode: str, spec: dict, spm: str, a: argparse.Namespace, device: str) -> float | None:
    """One mode's rounds; returns its median trainer / update (None: no shards)."""
    if not Path(spec["shards"]).is_dir():
        print(f"mode={mode}: skipped, no shards at {spec['shards']}", flush=True)
        return None
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    train = {k: v for k, v in spec["train"].items() if k in TrainConfig.__dataclass_fields__}
    if a.max_tokens:           # one batch of that size per update, every mode alike
        train.update(max_tokens=a.max_tokens, update_freq=1)
    uf = int(train.get("update_freq", 1))
    tcfg = TrainConfig.from_dict({
        **train, "max_steps": 10**9, "warmup": 4000, "lr": 1e-4, "validate_every": 10**9,
        "save_every": 10**9, "log_every": 25, "dev_bleu": False, "patience": 0,
        "num_workers": a.num_workers, "compile": a.compile, "device": device,
        "phase_times": a.phase_times, "init_from": None})
    out = Path(tempfile.mkdtemp(prefix=f"trainer-efficiency-{mode}-"))
    trainer = Trainer(spec["model"], tcfg, spec["shards"], spec["dev_shards"], spm, out,
                      spec.get("aux_shards"))
    updates = a.updates
    if a.epochs:               # the run's length once its own loader has counted an epoch
        updates = a.epochs * -(-epoch_batches(trainer) // uf)
    per_round = max(1, -(-updates // a.rounds))
    total = per_round * a.rounds + a.profile
    trainer.tcfg = dataclasses.replace(trainer.tcfg, max_steps=total)
    trainer.rule = trainer.tcfg.stop_rule()
    dev = trainer.device
    upd = Updater(copy.deepcopy(trainer.model), dev, a.compile)
    print(f"mode={mode} job={spec['job']} d_model={trainer.mcfg.d_model} device={dev} "
          f"threads={torch.get_num_threads()} max_tokens={tcfg.max_tokens} update_freq={uf} "
          f"workers={a.num_workers} compile={a.compile} phase_times={a.phase_times} "
          f"updates/round={per_round} rounds={a.rounds}"
          + (f" epochs={a.epochs} ({updates} updates)" if a.epochs else ""), flush=True)
    rates: list[tuple[float, float, str]] = []
    profiler = None

    def between(k: int) -> None:
        """Before trainer update k: at a round's end, the update on that round's batches."""
        nonlocal profiler
        if k == 0 or k % per_round or k > per_round * a.rounds:
            return
        r = k // per_round - 1
        trainer_s = clock() - rec.starts[r * per_round]   # updates r*per_round..k-1
        batches = rec.batches[r * per_round * uf:k * uf]
        when = epoch_of(rec.epochs[r * per_round * uf:k * uf])
        n = tokens(batches)
        on_dev = [b.to(dev) for b in batches]
        groups = [on_dev[i:i + uf] for i in range(0, len(on_dev), uf)]
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if a.warm_pass if a.warm_pass is not None else dev.type == "cuda":
            for g in groups:                                       # first sight of the shapes
                upd.accumulate(g, tokens(g))
        rate = update_rate(upd, groups, dev, clock)
        rates.append((n / trainer_s, rate, when))
        mem = ""
        if dev.type == "cuda":
            cells = sum(b.src.numel() + b.tgt_in.numel() for b in on_dev) / len(groups)
            peak = torch.cuda.max_memory_allocated() / 2**20
            mem = f"  peak GPU memory {peak:,.0f} MiB ({peak / (cells / 1000):,.1f} MiB per 1,000 batch tokens)"
        print(f"  round {r}{' (warm-up)' if r == 0 else ''}{f', {when}' if a.epochs else ''}: "
              f"trainer {n / trainer_s:,.0f}  update {rate:,.0f} target tokens/s  "
              f"({n / len(groups):,.0f} per update){mem}", flush=True)
        if k == per_round * a.rounds and a.profile:
            profiler = start_profiler(dev)

    rec = Recorder(trainer, between, clock)
    finish = trainer.finish

    def stop_then_finish(*args, **kwargs) -> None:
        between(len(rec.starts))     # the last round ends with the last update
        if profiler is not None:
            profiler.stop()
        finish(*args, **kwargs)

    trainer.finish = stop_then_finish
    trainer.run()
    if profiler is not None:
        sort = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        print(profiler.key_averages().table(sort_by=sort, row_limit=25))
    timed = rates[1:] or rates
    tr, up = statistics.median(r[0] for r in timed), statistics.median(r[1] for r in timed)
    ratio = statistics.median(t / u for t, u, _ in timed)
    if a.phase_times:
        phases = trainer.phases.totals()
        spent = sum(phases.values()) or 1.0
        print("  phases: " + "  ".join(f"{k} {v:.2f} s ({100 * v / spent:.0f} %)"
                                       for k, v in phases.items()))
    split = ""
    if a.epochs:
        apart = {w: [t / u for t, u, e in timed if e == w] for w in ("epoch 1", "later")}
        split = "  " + "  ".join(f"{w} {statistics.median(v):.3f}" if v else f"{w} -"
                                 for w, v in apart.items())
    print(f"mode={mode}: median target tokens/s trainer {tr:,.0f}  update {up:,.0f}  "
          f"trainer/update {ratio:.3f}{split}", flush=True)
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="sentence", help=f"comma-separated, of {MODES}, or all")
    ap.add_argument("--jobs", type=Path, help="gpu_check.json of bench/gpu_prepare.py")
    ap.add_argument("--size", default="tiny", help="model_sizes entry without --jobs")
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="one batch of this many tokens per update in every mode (0: each job's "
                         "own max_tokens and update_freq)")
    ap.add_argument("--updates", type=int, default=96, help="trainer updates in all")
    ap.add_argument("--epochs", type=int, default=0,
                    help="instead of --updates: this many epochs of each mode's data (2 or more "
                         "report epoch 1 and later epochs apart)")
    ap.add_argument("--rounds", type=int, default=12, help="rounds (the first is a warm-up)")
    ap.add_argument("--warm-pass", action=argparse.BooleanOptionalAction, default=None,
                    help="an untimed first pass of the update over each round's batches "
                         "(default: on CUDA, where a new shape costs once)")
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="train.compile (and the update's)")
    ap.add_argument("--phase-times", action="store_true", help="train.phase_times")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--profile", type=int, default=0, help="profile N more trainer updates")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (CPU devices; a machine shared with other "
                         "jobs then slows neither side, and 0 workers keep all loading in it)")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: 2 rounds of 1 update (or --epochs in 6 rounds) on CPU, tiny, "
                         "--profile at most 2")
    a = ap.parse_args()
    if a.smoke:   # with --epochs: the epochs, in 6 rounds; a job file keeps its own batches
        a.updates, a.rounds, a.device, a.size = 2, 6 if a.epochs else 2, "cpu", "tiny"
        a.profile = min(a.profile, 2)   # the profiler's table from 2 updates per mode
        a.max_tokens = a.max_tokens or (0 if a.jobs else 512)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    if a.clock == "cpu" and (device == "cuda" or a.num_workers):
        raise SystemExit("--clock cpu: a CPU device and 0 workers (their time is elsewhere)")
    jobs = json.loads(a.jobs.read_text()) if a.jobs else default_jobs(a.size)
    modes = MODES if a.modes == "all" else a.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {unknown}; one of {MODES}")
    ratios = {m: r for m in modes
              if (r := measure(m, jobs["modes"][m], jobs["spm"], a, device)) is not None}
    if not ratios:
        raise SystemExit("no mode had shards to train on")
    worst = min(ratios, key=ratios.get)
    print(f"trainer/update: {ratios[worst]:.3f} (lowest, mode {worst}; "
          + ", ".join(f"{m} {r:.3f}" for m, r in ratios.items()) + ")")


def start_profiler(device: torch.device):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    p = profile(activities=acts)
    p.start()
    return p


if __name__ == "__main__":
    main()

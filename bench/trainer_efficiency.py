"""How close the real trainer runs to the speed of its own update, per data mode: trainer / update.

    .venv/bin/python bench/trainer_efficiency.py [--modes sentence,context,stream,...]
        [--jobs results/gpu/gpu_check.json] [--size tiny] [--max-tokens 4096] [--device cpu]
        [--threads 1] [--updates 96 --rounds 12] [--num-workers 0] [--compile] [--warm-pass]
        [--phase-times] [--profile 20] [--clock wall|cpu] [--smoke]

One row per data mode (sentence: transformer, heads: dbsa, context: doct, stream: cache,
document: crosstask on parallel documents, restore: crosstask_pretrain on restoration
instances; the last two with aux_ratio 1, so every update reads that stream). The jobs come
from ``--jobs`` (bench/gpu_prepare.py writes them for a GPU machine without snakemake), or else
from the default config's plan with the ``--size`` entry of ``model_sizes`` (the default run's
shards under results/: ``snakemake --cores all --until make_shards make_head_shards``). A mode
whose shards are missing is skipped with a line saying so.

Per mode, the real :class:`pipeline_lib.training.train.Trainer` (its loader, loop, logging and
update: no validation or checkpoint in the timed updates) trains ``--updates`` updates. In the
same process and on the same device the benchmark's update (bench/train_throughput.py
``Updater``: forward, label-smoothed loss, backward, Adam, the batch already on the device)
then trains a copy of the same model on exactly the batches the trainer drew. The two
alternate in ``--rounds`` rounds (the trainer's next updates, then the update on those
batches: on CUDA a first pass that meets their shapes, untimed, then a timed one;
``--warm-pass`` says whether), so machine load that drifts hits both alike; the trainer's clock
runs from the start of a round's first update to the start of the next round's (everything the
loop does in between, reading and collating batches included) and stops while the update runs.
The first round is a warm-up for both and not counted. ``--clock cpu`` counts this process's
CPU time instead of wall time (a CPU shared with other jobs; 0 workers).

Prints per round the trainer's and the update's target tokens/s, then per mode the medians and
the ratio trainer / update (1.0 = the loop costs nothing beyond its update; the goal is >= 0.9),
and last the lowest ratio over the modes. ``--phase-times``: the trainer runs with
``train.phase_times`` (a device synchronisation at each phase boundary, so its rate drops) and
each mode also prints where the trainer's time went (pipeline_lib/training/phases.py).
``--profile N``: afterwards, ``N`` more trainer updates under ``torch.profiler`` and the top
entries by self time. On CUDA every round also prints the peak GPU memory per 1,000 batch
tokens. ``--smoke`` (CI): two rounds of one update each on CPU, tiny sizes, 512 tokens.
"""

from __future__ import annotations

import argparse
import copy
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
    """Wraps a trainer's ``next_batch`` and ``step``: keeps every batch it draws and the time
    each update starts (on ``clock``), and runs ``between(k)`` before update ``k`` starts its
    clock."""

    def __init__(self, trainer: Trainer, between, clock) -> None:
        self.batches: list[Batch] = []
        self.starts: list[float] = []
        self.between = between
        next_batch, step = trainer.next_batch, trainer.step

        def recording_next_batch(aux: bool) -> Batch:
            b = next_batch(aux)
            self.batches.append(b)
            return b

        def timed_step(window) -> None:
            self.between(len(self.starts))
            self.starts.append(clock())
            step(window)

        trainer.next_batch, trainer.step = recording_next_batch, timed_step


def tokens(batches: list[Batch]) -> int:
    return sum(int(b.tgt_out.ne(PAD_ID).sum()) for b in batches)


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
    per_round = a.updates // a.rounds
    total = per_round * a.rounds + a.profile
    train = {k: v for k, v in spec["train"].items() if k in TrainConfig.__dataclass_fields__}
    tcfg = TrainConfig.from_dict({
        **train, "max_tokens": a.max_tokens or train.get("max_tokens", 4096),
        "max_steps": total, "warmup": 4000, "lr": 1e-4, "validate_every": 10**9,
        "save_every": 10**9, "log_every": 25, "dev_bleu": False, "patience": 0,
        "num_workers": a.num_workers, "compile": a.compile, "device": device,
        "phase_times": a.phase_times, "init_from": None, "update_freq": 1})
    out = Path(tempfile.mkdtemp(prefix=f"trainer-efficiency-{mode}-"))
    trainer = Trainer(spec["model"], tcfg, spec["shards"], spec["dev_shards"], spm, out,
                      spec.get("aux_shards"))
    dev = trainer.device
    upd = Updater(copy.deepcopy(trainer.model), dev, a.compile)
    print(f"mode={mode} job={spec['job']} d_model={trainer.mcfg.d_model} device={dev} "
          f"threads={torch.get_num_threads()} max_tokens={tcfg.max_tokens} "
          f"workers={a.num_workers} compile={a.compile} phase_times={a.phase_times} "
          f"updates/round={per_round} rounds={a.rounds}", flush=True)
    rates: list[tuple[float, float]] = []
    profiler = None

    def between(k: int) -> None:
        """Before trainer update k: at a round's end, the update on that round's batches."""
        nonlocal profiler
        if k == 0 or k % per_round or k > per_round * a.rounds:
            return
        r = k // per_round - 1
        trainer_s = clock() - rec.starts[r * per_round]   # updates r*per_round..k-1
        batches = rec.batches[r * per_round:k]
        n = tokens(batches)
        on_dev = [b.to(dev) for b in batches]
        if dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if a.warm_pass if a.warm_pass is not None else dev.type == "cuda":
            for b in on_dev:                                       # first sight of the shapes
                upd.update(b)
        if dev.type == "cuda":
            rate = upd.rate(on_dev, len(on_dev))
        else:
            t = clock()
            for b in on_dev:
                upd.update(b)
            rate = n / (clock() - t)
        rates.append((n / trainer_s, rate))
        mem = ""
        if dev.type == "cuda":
            cells = sum(b.src.numel() + b.tgt_in.numel() for b in on_dev) / len(on_dev)
            peak = torch.cuda.max_memory_allocated() / 2**20
            mem = f"  peak GPU memory {peak:,.0f} MiB ({peak / (cells / 1000):,.1f} MiB per 1,000 batch tokens)"
        print(f"  round {r}{' (warm-up)' if r == 0 else ''}: trainer {n / trainer_s:,.0f}  update "
              f"{rate:,.0f} target tokens/s  ({n / len(batches):,.0f} per update){mem}", flush=True)
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
    ratio = statistics.median(t / u for t, u in timed)
    if a.phase_times:
        phases = trainer.phases.totals()
        spent = sum(phases.values()) or 1.0
        print("  phases: " + "  ".join(f"{k} {v:.2f} s ({100 * v / spent:.0f} %)"
                                       for k, v in phases.items()))
    print(f"mode={mode}: median target tokens/s trainer {tr:,.0f}  update {up:,.0f}  "
          f"trainer/update {ratio:.3f}", flush=True)
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="sentence", help=f"comma-separated, of {MODES}, or all")
    ap.add_argument("--jobs", type=Path, help="gpu_check.json of bench/gpu_prepare.py")
    ap.add_argument("--size", default="tiny", help="model_sizes entry without --jobs")
    ap.add_argument("--max-tokens", type=int, default=0, help="0: the job's train.max_tokens")
    ap.add_argument("--updates", type=int, default=96, help="trainer updates in all")
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
    ap.add_argument("--smoke", action="store_true", help="CI: 2 rounds of 1 update on CPU, tiny")
    a = ap.parse_args()
    if a.smoke:
        a.updates, a.rounds, a.device, a.size = 2, 2, "cpu", "tiny"
        a.max_tokens = a.max_tokens or 512
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

"""How close the real trainer runs to the speed of its own update: the ratio trainer / update.

    .venv/bin/python bench/trainer_efficiency.py --size tiny --max-tokens 4096 --device cpu \
        --threads 1 [--updates 96 --rounds 12] [--model transformer] [--num-workers 0]
        [--compile] [--warm-pass] [--profile 20] [--shards results/make_shards/bible/sent/train]

The real :class:`pipeline_lib.training.train.Trainer` (its loader, loop, logging and update:
no validation or checkpoint in the timed updates) trains ``--updates`` updates on real shards
(the default run's Bible shards; ``snakemake --until make_shards`` writes them). In the same
process and on the same device the benchmark's update (bench/train_throughput.py ``Updater``:
forward, label-smoothed loss, backward, Adam, the batch already on the device) then trains a
copy of the same model on exactly the batches the trainer drew. The two alternate in
``--rounds`` rounds (the trainer's next updates, then the update on those batches: on CUDA a
first pass that meets their shapes, untimed, then a timed one; ``--warm-pass`` says whether),
so machine load that drifts hits both alike;
the trainer's clock runs from the start of a round's first update to the start of the next
round's (everything the loop does in between, reading and collating batches included) and stops
while the update runs. The first round is a warm-up for both and not counted. ``--clock cpu``
counts this process's CPU time instead of wall time: on a CPU shared with other jobs, their load
then slows neither side (with 0 workers every part of the loop runs in this process).

Prints per round the trainer's and the update's target tokens/s, then the medians and, last, the
ratio trainer / update (1.0 = the loop costs nothing beyond its update; the goal is >= 0.9).
``--profile N``: afterwards, ``N`` more trainer updates under ``torch.profiler``, and the top
entries by self CPU time (and CUDA time on a GPU), with the trainer's own phases
(``trainer.next_batch``, ``trainer.forward``, ``trainer.backward``, ``trainer.optimizer``).
On CUDA every round also prints the peak GPU memory per 1,000 batch tokens.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from train_throughput import Updater

from pipeline_lib.plan import load_config
from pipeline_lib.batch import Batch
from pipeline_lib.vocab import PAD_ID
from pipeline_lib.training.train import TrainConfig, Trainer

SHARDS = ROOT / "results" / "make_shards" / "bible"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="transformer", help="registry name")
    ap.add_argument("--size", default="tiny", help="model_sizes entry (tiny, base, big)")
    ap.add_argument("--config", nargs="*", default=[],
                    help="config files, merged in order (default config/config.yaml)")
    ap.add_argument("--shards", type=Path, default=SHARDS / "sent" / "train")
    ap.add_argument("--dev-shards", type=Path, default=SHARDS / "sent" / "dev")
    ap.add_argument("--spm", type=Path, default=ROOT / "results" / "train_bpe" / "spm.model")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--updates", type=int, default=96, help="trainer updates in all")
    ap.add_argument("--rounds", type=int, default=12, help="rounds (the first is a warm-up)")
    ap.add_argument("--warm-pass", action=argparse.BooleanOptionalAction, default=None,
                    help="an untimed first pass of the update over each round's batches "
                         "(default: on CUDA, where a new shape costs once)")
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="train.compile (and the update's)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--profile", type=int, default=0, help="profile N more trainer updates")
    ap.add_argument("--extras", default="{}", help="model extras as JSON")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (CPU devices; a machine shared with other "
                         "jobs then slows neither side, and 0 workers keep all loading in it)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    preset = load_config(*a.config)["model_sizes"][a.size]
    model = {**preset, "name": a.model, "extras": json.loads(a.extras)}
    if a.clock == "cpu" and (device == "cuda" or a.num_workers):
        raise SystemExit("--clock cpu: a CPU device and 0 workers (their time is elsewhere)")
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    per_round = a.updates // a.rounds
    total = per_round * a.rounds + a.profile
    tcfg = TrainConfig(max_tokens=a.max_tokens, max_steps=total, warmup=4000, lr=1e-4,
                       validate_every=10**9, save_every=10**9, log_every=25, dev_bleu=False,
                       num_workers=a.num_workers, compile=a.compile, device=device)
    out = Path(tempfile.mkdtemp(prefix="trainer-efficiency-"))
    trainer = Trainer(model, tcfg, a.shards, a.dev_shards, a.spm, out)
    dev = trainer.device
    upd = Updater(copy.deepcopy(trainer.model), dev, a.compile)
    print(f"model={a.model} size={a.size} device={dev} threads={torch.get_num_threads()} "
          f"max_tokens={a.max_tokens} workers={a.num_workers} compile={a.compile} "
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
        print(f"round {r}{' (warm-up)' if r == 0 else ''}: trainer {n / trainer_s:,.0f}  update "
              f"{rate:,.0f} target tokens/s  ({n / len(batches):,.0f} per update){mem}", flush=True)
        if k == per_round * a.rounds and a.profile:
            profiler = start_profiler(dev)

    rec = Recorder(trainer, between, clock)
    finish = trainer.finish

    def stop_then_finish(validated: bool) -> None:
        between(len(rec.starts))     # the last round ends with the last update
        if profiler is not None:
            profiler.stop()
        finish(validated)

    trainer.finish = stop_then_finish
    trainer.run()
    if profiler is not None:
        sort = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        events = profiler.key_averages()
        print(events.table(sort_by=sort, row_limit=25))
        total = sum(e.self_cpu_time_total for e in events)
        for e in sorted((e for e in events if e.key.startswith("trainer.")),
                        key=lambda e: -e.cpu_time_total):
            print(f"{e.key:22s} {e.cpu_time_total / 1e6:8.2f} s CPU total "
                  f"({100 * e.cpu_time_total / total:5.1f} % of the profiled time)")
    timed = rates[1:] or rates
    tr, up = statistics.median(r[0] for r in timed), statistics.median(r[1] for r in timed)
    ratio = statistics.median(t / u for t, u in timed)
    print(f"median target tokens/s: trainer {tr:,.0f}  update {up:,.0f}")
    print(f"trainer/update: {ratio:.3f}")


def start_profiler(device: torch.device):
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    p = profile(activities=acts)
    p.start()
    return p


if __name__ == "__main__":
    main()

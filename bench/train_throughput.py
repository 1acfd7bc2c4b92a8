"""Throughput of one training update (forward, label-smoothed loss, backward, Adam step).

    python bench/train_throughput.py --size tiny --tokens 4096 [--compile] [--device cpu]
    python bench/train_throughput.py --size tiny --tokens 4096 --reference [--rounds 5]
    python bench/train_throughput.py --smoke [--reference]

Random token batches of ``--tokens`` target tokens (``--seq-len`` per sentence, source and
target alike), the model sizes of config/config.yaml ``model_sizes``, bf16 autocast on CUDA as
in training. Prints target tokens/s, the figure that matters, on the last line. The paper-size
target is 32k tokens per update (``--tokens 32768``, the default); CPUs want far fewer.

``--reference``: the same against ``torch.nn.Transformer`` configured like ours
(bench/torch_reference.py says what is matched). Both get the same loss, optimiser and schedule
(pipeline_lib/training/optim.py) and the same batches; after checking that the parameter counts
are equal and that with our weights copied the logits agree, they alternate, ``--steps``
updates each per round (ours, reference, ours, ...), so that drifting machine load hits both
alike. Prints each round, both medians and, last, the ratio ours / reference (> 1: ours faster).

``--smoke`` (CI): the same on CPU (1 thread) at the smallest counts: one batch of 256 target
tokens (16 per sentence), a 1,000-piece vocabulary, 1 warm-up and 1 timed update, 1 round;
flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch


from pipeline_lib.run_config import load_config
from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.registry import build_model
from pipeline_lib.training.validation import autocast
from pipeline_lib.training.optim import build_optimizer, build_scheduler, label_smoothed_nll

LR, WARMUP = 1e-4, 4000
SMOKE = {"tokens": 256, "seq_len": 16, "vocab": 1000, "steps": 1, "warmup_steps": 1,
         "rounds": 1, "batches": 1, "device": "cpu", "threads": 1}


def random_batch(n_tokens: int, seq_len: int, vocab: int, device: torch.device) -> Batch:
    rows = max(1, n_tokens // seq_len)
    y = torch.randint(4, vocab, (rows, seq_len - 1))
    x = torch.randint(4, vocab, (rows, seq_len - 1))
    eos = torch.full((rows, 1), EOS_ID)
    return Batch(src=torch.cat([x, eos], 1), tgt_in=torch.cat([torch.full((rows, 1), BOS_ID), y], 1),
                 tgt_out=torch.cat([y, eos], 1)).to(device)


class Updater:
    """One model with the trainer's optimiser (over its trainable parameters) and schedule.
    Its forward returns a ModelOutput (ours; an aux loss is weighted per token, as the trainer
    does) or a logits tensor (the reference)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, compile_: bool) -> None:
        self.model, self.device = model, device
        self.step_fn = torch.compile(model) if compile_ else model
        self.opt = build_optimizer(model.parameters(), LR)
        self.sched = build_scheduler(self.opt, WARMUP)

    def update(self, batch: Batch) -> None:
        """One update on one batch, divided by its target tokens (counted on the device)."""
        self.accumulate([batch], None)

    def accumulate(self, batches: list[Batch], tokens: int | None) -> None:
        """One update over micro-batches, as the trainer's ``update_freq`` makes it: gradients
        summed over them and divided by ``tokens``, their target tokens (counted on the host, so
        no step waits for the device; None: each batch's own count, one batch)."""
        self.opt.zero_grad(set_to_none=True)
        for batch in batches:
            with autocast(self.device):
                out = self.step_fn(batch)
            logits, aux = (out, None) if isinstance(out, torch.Tensor) else (out.logits, out.aux_loss)
            loss, _, n = label_smoothed_nll(logits, batch.tgt_out, 0.1)
            if aux is not None:
                loss = loss + aux.float() * n
            (loss / (n if tokens is None else tokens)).backward()
        self.opt.step()
        self.sched.step()

    def rate(self, batches: list[Batch], steps: int, clock=time.perf_counter) -> float:
        """Target tokens/s over ``steps`` updates, cycling through ``batches`` (counted on the
        host beforehand: reading the loss's count back would wait for the device every step).
        ``clock``: ``time.process_time`` measures CPU time (a CPU shared with other jobs)."""
        counts = [int(b.tgt_out.ne(PAD_ID).sum()) for b in batches]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t, n = clock(), 0
        for k in range(steps):
            self.update(batches[k % len(batches)])
            n += counts[k % len(batches)]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        return n / (clock() - t)


def check_reference(model: torch.nn.Module, ref: torch.nn.Module, batch: Batch) -> None:
    """Equal parameter counts, then our weights copied into the reference: the largest logit
    difference (eval mode with autograd on, i.e. the kernels training runs, without dropout)."""
    from torch_reference import copy_weights

    ours_n, ref_n = model.num_parameters(), ref.num_parameters()
    print(f"parameters: ours {ours_n:,}  reference {ref_n:,}")
    if ours_n != ref_n:
        raise SystemExit("parameter counts differ: the reference is not the same model")
    copy_weights(model, ref)
    model.eval()
    ref.eval()
    diff = float((model(batch).logits - ref(batch)).detach().abs().max())
    model.train()
    ref.train()
    print(f"logits, weights copied: max abs diff {diff:.3e}")
    if diff > 1e-3:
        raise SystemExit("logits differ: the reference is not the same function")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="tiny", help="model_sizes entry (tiny, base, big)")
    ap.add_argument("--config", nargs="*", default=[],
                    help="config files, merged in order (default config/config.yaml)")
    ap.add_argument("--tokens", type=int, default=32768, help="target tokens per update")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--steps", type=int, default=10, help="timed updates (per model and round)")
    ap.add_argument("--warmup-steps", type=int, default=3, help="untimed updates first")
    ap.add_argument("--reference", action="store_true",
                    help="alternate with torch.nn.Transformer configured like ours")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds with --reference")
    ap.add_argument("--batches", type=int, default=4, help="distinct batches, cycled")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model(s)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): smoke defaults, see the module docstring")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(**SMOKE)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    preset = load_config(*a.config)["model_sizes"][a.size]
    cfg = ModelConfig.from_dict({**preset, "vocab_size": a.vocab})
    torch.manual_seed(0)
    model = build_model(cfg).to(device).train()
    batches = [random_batch(a.tokens, a.seq_len, a.vocab, device) for _ in range(a.batches)]
    head = (f"size={a.size} params={model.num_parameters()} device={device} "
            f"compile={a.compile} tokens/update={int(batches[0].tgt_out.numel())} "
            f"threads={torch.get_num_threads()}")
    ours = Updater(model, device, a.compile)
    if not a.reference:
        for k in range(a.warmup_steps):
            ours.update(batches[k % len(batches)])
        rate = ours.rate(batches, a.steps)
        print(f"{head} updates/s={rate / batches[0].tgt_out.numel():.2f}")
        print(f"train tokens/s: {rate:.0f}")
        return
    from torch_reference import TorchReference

    warnings.filterwarnings("ignore", module="torch.nn.modules.transformer")
    ref_model = TorchReference(cfg).to(device)
    print(head)
    check_reference(model, ref_model, batches[0])
    ref = Updater(ref_model, device, a.compile)
    for k in range(a.warmup_steps):
        ours.update(batches[k % len(batches)])
        ref.update(batches[k % len(batches)])
    rates: dict[str, list[float]] = {"ours": [], "reference": []}
    for r in range(a.rounds):
        rates["ours"].append(ours.rate(batches, a.steps))
        rates["reference"].append(ref.rate(batches, a.steps))
        print(f"round {r + 1}: ours {rates['ours'][-1]:,.0f}  reference "
              f"{rates['reference'][-1]:,.0f} target tokens/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"median target tokens/s: ours {med['ours']:,.0f}  reference {med['reference']:,.0f}")
    print(f"ours/reference: {med['ours'] / med['reference']:.3f}")


if __name__ == "__main__":
    main()

"""Throughput of one training update (forward, label-smoothed loss, backward, Adam step).

    python bench/train_throughput.py --preset tiny --tokens 4096 [--compile] [--device cpu]

Random token batches of ``--tokens`` target tokens (``--seq-len`` per sentence, source and
target alike), the model sizes of config/config.yaml ``model_presets``, bf16 autocast on CUDA as
in training. Prints target tokens/s, the figure that matters, on the last line. The paper-size
target is 32k tokens per update (``--tokens 32768``, the default); CPUs want far fewer.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_lib.batch import Batch  # noqa: E402
from pipeline_lib.constants import BOS_ID, EOS_ID  # noqa: E402
from pipeline_lib.models.config import ModelConfig  # noqa: E402
from pipeline_lib.models.registry import build_model  # noqa: E402
from pipeline_lib.training.optim import build_optimizer, label_smoothed_nll  # noqa: E402
from pipeline_lib.training.evaluation import autocast  # noqa: E402


def random_batch(n_tokens: int, seq_len: int, vocab: int, device: torch.device) -> Batch:
    rows = max(1, n_tokens // seq_len)
    y = torch.randint(4, vocab, (rows, seq_len - 1))
    x = torch.randint(4, vocab, (rows, seq_len - 1))
    eos = torch.full((rows, 1), EOS_ID)
    return Batch(src=torch.cat([x, eos], 1), tgt_in=torch.cat([torch.full((rows, 1), BOS_ID), y], 1),
                 tgt_out=torch.cat([y, eos], 1)).to(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="tiny", help="model_presets entry (tiny, base, big)")
    ap.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--tokens", type=int, default=32768, help="target tokens per update")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--steps", type=int, default=10, help="timed updates")
    ap.add_argument("--warmup-steps", type=int, default=3, help="untimed updates first")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    preset = yaml.safe_load(Path(a.config).read_text())["model_presets"][a.preset]
    cfg = ModelConfig.from_dict({**preset, "vocab_size": a.vocab})
    model = build_model(cfg).to(device).train()
    step_fn = torch.compile(model) if a.compile else model
    opt = build_optimizer(model.parameters(), 1e-4)
    batch = random_batch(a.tokens, a.seq_len, a.vocab, device)

    def update() -> int:
        opt.zero_grad(set_to_none=True)
        with autocast(device):
            out = step_fn(batch)
        loss, _, n = label_smoothed_nll(out.logits, batch.tgt_out, 0.1)
        (loss / n).backward()
        opt.step()
        return n

    for _ in range(a.warmup_steps):
        update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t, n = time.perf_counter(), 0
    for _ in range(a.steps):
        n += update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"preset={a.preset} params={model.num_parameters()} device={device} "
          f"compile={a.compile} tokens/update={n // a.steps} threads={torch.get_num_threads()} "
          f"updates/s={a.steps / dt:.2f}")
    print(f"train tokens/s: {n / dt:.0f}")


if __name__ == "__main__":
    main()

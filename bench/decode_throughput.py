"""Decoding speed: sentences/s of beam 4 at batch sizes 1 and 64, beside greedy search.

Uses a trained checkpoint and dev shards when given; otherwise a freshly initialised model of a
``model_presets`` size on synthetic sources (Bible-verse-like lengths). An untrained model rarely
emits EOS, so the synthetic figure is a worst case: every hypothesis runs to its max length.

    .venv/bin/python bench/decode_throughput.py [--checkpoint DIR --shards DIR] [--preset tiny]
        [--sentences 256] [--device cpu|cuda] [--threads 2]

The last line printed is the headline figure: beam-4 sentences/s at batch size 64.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline_lib.evaluate.decode import read_shards, translate_sentences  # noqa: E402
from pipeline_lib.models.search import BeamConfig  # noqa: E402
from pipeline_lib.models import ModelConfig, build_model  # noqa: E402


def load(args: argparse.Namespace) -> tuple[torch.nn.Module, list[list[int]]]:
    if args.checkpoint:
        from pipeline_lib.training.checkpoint import load_model

        model, cfg = load_model(args.checkpoint, device=args.device)
    else:
        presets = yaml.safe_load(Path(args.config).read_text())["model_presets"]
        cfg = ModelConfig.from_dict({**presets[args.preset], "vocab_size": args.vocab, "dropout": 0.0})
        torch.manual_seed(0)
        model = build_model(cfg).to(args.device)
    if args.shards:
        srcs = [list(r["src_ids"])[: cfg.max_len - 1] for r in read_shards(Path(args.shards))]
    else:
        rng = random.Random(0)
        srcs = [[rng.randrange(4, cfg.vocab_size) for _ in range(rng.randint(10, 60))]
                for _ in range(args.sentences)]
    return model.eval(), srcs[: args.sentences]


def timed(model: torch.nn.Module, srcs: list[list[int]], cfg: BeamConfig, device: str) -> tuple[float, float]:
    """(sentences/s, output tokens/s) of one pass over ``srcs``."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    hyps = translate_sentences(model, srcs, cfg, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    s = time.perf_counter() - t0
    return len(srcs) / s, sum(len(h[0].tokens) for h in hyps) / s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="trained checkpoint directory (default: untrained preset)")
    ap.add_argument("--shards", help="dev shard directory with index.parquet (default: synthetic)")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--vocab", type=int, default=8000, help="vocabulary of the untrained model")
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads; 1 avoids OpenMP spin contention on a shared 2-core machine")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, srcs = load(args)
    print(f"device={args.device} threads={args.threads} sentences={len(srcs)} "
          f"params={model.num_parameters()} source={'shards' if args.shards else 'synthetic'}")
    timed(model, srcs[:8], BeamConfig(beam=4, batch_size=8), args.device)       # warm-up
    results = {}
    for name, cfg, n in [("greedy bs64", BeamConfig(greedy=True, batch_size=64), len(srcs)),
                         ("beam4 bs1", BeamConfig(beam=4, batch_size=1), min(len(srcs), 32)),
                         ("beam4 bs64", BeamConfig(beam=4, batch_size=64), len(srcs))]:
        sent_s, tok_s = timed(model, srcs[:n], cfg, args.device)
        results[name] = sent_s
        print(f"{name:12s} {n:5d} sentences  {sent_s:9.2f} sentences/s  {tok_s:10.1f} tokens/s")
    print(f"beam4_bs64_sentences_per_s={results['beam4 bs64']:.2f}")


if __name__ == "__main__":
    main()

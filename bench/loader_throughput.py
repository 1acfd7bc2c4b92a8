"""Target tokens/s the training loader delivers, per data mode and worker count.

    .venv/bin/python bench/loader_throughput.py [--rows 200000] [--workers 0 2 4]
        [--max-tokens 4096] [--batches 300] [--warmup 20] [--work DIR] [--smoke]

The GPU goal (issue 13) is ~470k target tokens/s for the base Transformer on one H100; with a 3x
margin the loader must deliver ~1.4M target tokens/s, or it sits on the critical path. Synthetic
shards in the make_shards layout (documents of 25 sentences, 5-40 ids per side; the
loader_memory.py writer) are read through ``TrainLoader`` exactly as the trainer reads them: the
sentence loader (transformer, dbsa), context (DocT: two previous sentences), document streams
(cache: a thread reads ahead) and sub-documents (cross-task). Special piece ids come from a
synthetic SpecialIds (no sentencepiece model needed). For each (mode, workers) the first
``--batches`` batches after a warm-up of ``--warmup`` are timed; target tokens = non-pad
``tgt_out`` cells. Prints one line per pair and, last, the best sentence-mode figure and the
workers it took. ``--smoke`` (CI): every mode on 2,000 rows with 0 and 1 workers, 1,024 tokens
per batch, 1 warm-up and 2 timed batches; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


from loader_memory import write_shards

from pipeline_lib.vocab import PAD_ID
from pipeline_lib.models import ModelConfig, build_model
from pipeline_lib.models.inputs import SpecialIds
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader

MODELS = {"sentence": ("transformer", {}), "context": ("doct", {"context_sentences": 2}),
          "stream": ("cache", {}), "document": ("crosstask", {"max_sentences": 30})}
SPECIAL = SpecialIds(sent_break=4, src_tag=5, tgt_tag=6)


def inputs_of(name: str, extras: dict):
    model = build_model(ModelConfig(vocab_size=8000, d_model=8, n_heads=2, d_ff=8, enc_layers=1,
                                    dec_layers=1, max_len=1024, name=name, extras=extras))
    return model.inputs(SPECIAL)


def measure(shards: Path, mode: str, workers: int, max_tokens: int, batches: int,
            warmup: int = 20) -> float:
    name, extras = MODELS[mode]
    inputs = inputs_of(name, extras)
    cfg = LoaderConfig(max_tokens=max_tokens, num_workers=workers, inputs=inputs)
    it = TrainLoader(shards, cfg).iterate(DataPosition(0, 0))
    for _ in range(warmup):
        next(it)
    tokens, t0 = 0, time.perf_counter()
    for k, (_, b) in enumerate(it):
        tokens += int(b.tgt_out.ne(PAD_ID).sum())
        if k + 1 >= batches:
            break
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4])
    ap.add_argument("--modes", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20, help="untimed batches first")
    ap.add_argument("--work", type=Path, default=Path("/tmp/docmt-bench-loader"))
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): 2000 rows, workers 0 1, 2 batches")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(rows=2000, workers=[0, 1], max_tokens=1024, batches=2, warmup=1)
    a = ap.parse_args()
    shards = a.work / f"rows{a.rows}"
    write_shards(shards, a.rows)
    best = (0.0, 0)
    for mode in a.modes:
        for w in a.workers:
            rate = measure(shards, mode, w, a.max_tokens, a.batches, a.warmup)
            print(f"{mode:9s} workers {w}: {rate:,.0f} target tokens/s", flush=True)
            if mode == "sentence" and rate > best[0]:
                best = (rate, w)
    if "sentence" in a.modes:
        print(f"sentence loader: {best[0]:,.0f} target tokens/s with {best[1]} workers")


if __name__ == "__main__":
    main()

"""Distinct batch shapes a training epoch meets, rows left to the token budget against rows cut to
a multiple (issue 33 item 6).

    .venv/bin/python bench/batch_shapes.py [--shards results/make_shards/bible/sent/train]
        [--mode sentence|context] [--max-tokens 16384] [--multiple 8] [--epochs 3] [--smoke]

WHY: on CUDA every new (rows, source length, target length) shape costs first-sight work (kernel
choice, cuDNN attention graphs, a ``torch.compile`` guard) that a CPU never shows, so an epoch
whose batches each have a shape of their own pays it on nearly every update. Lengths are padded
up to ``train.pad_multiple`` (8 on CUDA); this counts what cutting the rows to the same multiple
(``pipeline_lib.training.batching.rows_cut``) adds. Both settings pad lengths to ``--multiple``:
"rows by budget" loads with ``pad_multiple`` 1 and rounds each batch's lengths up here, "rows
cut" loads with ``pad_multiple`` ``--multiple``, as the trainer does on CUDA.

Prints per setting the batches of an epoch, the distinct shapes of epoch 1 and the shapes new in
later epochs, then one line: ``batch_shapes: <cut> shapes in epoch 1 with rows cut to <m> (<by
budget> with rows by budget) at <T> tokens``. ``--smoke`` (CI): two epochs of the tiny run's shards
at 512 tokens.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_lib.batch import Batch  # noqa: E402
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader  # noqa: E402

Shape = tuple[int, int, int]


def shape(b: Batch, multiple: int) -> Shape:
    """(rows, source length, target length), lengths rounded up to ``multiple``."""
    up = lambda n: -(-n // multiple) * multiple  # noqa: E731
    return len(b.doc_id), up(b.src.shape[1]), up(b.tgt_in.shape[1])


def epochs(shards: Path, cfg: LoaderConfig, n: int, multiple: int) -> list[list[Shape]]:
    """The shapes of each of ``n`` epochs' batches, in training order."""
    loader = TrainLoader(shards, cfg)
    return [[shape(b, multiple) for _, b in loader.iterate(DataPosition(e, 0))] for e in range(n)]


def inputs_of(mode: str):
    """The loader inputs of a mode: the baseline's sentences, or DocT's rows with context."""
    from pipeline_lib.models import ModelConfig, build_model
    from pipeline_lib.models.inputs import ModelInputs, SpecialIds

    if mode == "sentence":
        return ModelInputs()
    cfg = ModelConfig(vocab_size=64, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                      max_len=1024, name="doct")
    return build_model(cfg).inputs(SpecialIds(sent_break=60, src_tag=61, tgt_tag=62))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=Path, default=ROOT / "results/make_shards/bible/sent/train")
    ap.add_argument("--mode", choices=["sentence", "context"], default="sentence")
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--multiple", type=int, default=8, help="train.pad_multiple on CUDA")
    ap.add_argument("--epochs", type=int, default=3, help="at least 2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="CI: two epochs at 512 tokens")
    a = ap.parse_args()
    if a.smoke:
        a.epochs, a.max_tokens = 2, 512
    if a.epochs < 2:
        raise SystemExit("--epochs: at least 2 (the later epochs' new shapes are the point)")
    if not a.shards.is_dir():
        raise SystemExit(f"{a.shards}: no shards (snakemake --cores all --until make_shards)")
    inputs = inputs_of(a.mode)
    found = {}
    for label, pad in (("rows by budget", 1), (f"rows cut to {a.multiple}", a.multiple)):
        cfg = LoaderConfig(max_tokens=a.max_tokens, seed=a.seed, inputs=inputs, pad_multiple=pad)
        eps = epochs(a.shards, cfg, a.epochs, a.multiple)
        first = set(eps[0])
        new = len(set().union(*eps[1:]) - first)
        rows = sum(s[0] for s in eps[0]) / len(eps[0])
        print(f"{label}: {len(eps[0])} batches an epoch ({rows:,.1f} rows a batch), "
              f"{len(first)} shapes in epoch 1, {len({s[0] for s in first})} row counts, "
              f"{new} new shapes in epochs 2-{a.epochs}", flush=True)
        found[pad] = len(first)
    print(f"batch_shapes: {found[a.multiple]} shapes in epoch 1 with rows cut to {a.multiple} "
          f"({found[1]} with rows by budget) at {a.max_tokens} tokens")


if __name__ == "__main__":
    main()

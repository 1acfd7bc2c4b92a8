"""Peak CPU RAM of the training data loader as the corpus grows: it must stay flat.

    .venv/bin/python bench/loader_memory.py [--sizes 100000 1000000 10000000] [--work DIR]
        [--max-tokens 4096] [--batches 0] [--smoke]

For each size, synthetic sentence shards in the make_shards layout (20,000 rows per shard,
2,000 per row group, 5-40 token ids per side) are written once under ``--work`` and reused. One
epoch of ``pipeline_lib.training.data.TrainLoader`` (SENTENCE mode, the baseline's loader) then runs in a
fresh subprocess, so its peak RSS (VmHWM) is the loader's own; ``--batches N`` stops after N
batches (0: the whole epoch). Prints one line per size and, last, the ratio of the largest
size's peak RSS to the smallest's (1.0 = flat). ``--smoke`` (CI): sizes 2,000 and 4,000,
1,024 tokens per batch, 2 batches; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


ROWS_PER_SHARD = 20_000
ROW_GROUP = 2_000
VOCAB = 8_000


def _ids(rng: np.random.Generator, n: int, like: pa.ListArray | None = None) -> pa.Array:
    """``n`` sentences of 5-40 random ids; ``like``: lengths follow that side's (x 0.8-1.25,
    within 5-40), as a translation's follow its source's."""
    if like is None:
        lengths = rng.integers(5, 41, n)
    else:
        ratio = rng.uniform(0.8, 1.25, n)
        lengths = np.clip(np.rint(np.diff(like.offsets.to_numpy()) * ratio), 5, 40).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(4, VOCAB, int(offsets[-1]), dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _heads(rng: np.random.Generator, ids: pa.ListArray) -> pa.Array:
    """A random head position inside its sentence for every id of ``ids`` (subword heads)."""
    lengths = np.diff(ids.offsets.to_numpy())
    values = (rng.random(int(lengths.sum())) * np.repeat(lengths, lengths)).astype(np.int32)
    return pa.ListArray.from_arrays(ids.offsets, pa.array(values))


def write_shards(directory: Path, n_rows: int, seed: int = 0, heads: bool = False,
                 paired: bool = False) -> None:
    """Shards of ``n_rows`` pairs in documents of 25 sentences, written shard by shard (never
    the whole corpus in memory). ``heads``: with ``src_heads``/``tgt_heads`` columns (random
    positions inside each sentence, for parse-supervised models). ``paired``: target lengths
    follow the source's; otherwise both sides' lengths are drawn independently, which pads
    length-sorted batches' targets far more than parallel text does."""
    if (directory / "index.parquet").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    index = []
    for k, start in enumerate(range(0, n_rows, ROWS_PER_SHARD)):
        n = min(ROWS_PER_SHARD, n_rows - start)
        rows = np.arange(start, start + n)
        src = _ids(rng, n)
        tgt = _ids(rng, n, like=src if paired else None)
        columns = {"doc_id": pa.array([f"d{r // 25}" for r in rows]),
                   "sent_idx": pa.array(rows % 25, pa.int32()), "src_ids": src, "tgt_ids": tgt}
        if heads:
            columns.update(src_heads=_heads(rng, src), tgt_heads=_heads(rng, tgt))
        table = pa.table(columns)
        name = f"shard-{k:05d}.parquet"
        pq.write_table(table, directory / name, row_group_size=ROW_GROUP)
        index.append({"file": name, "rows": n})
    pq.write_table(pa.Table.from_pylist(index), directory / "index.parquet")


def measure(directory: Path, max_tokens: int, max_batches: int) -> dict:
    """One epoch of the loader in this process; returns batches, rows/s and peak RSS (MiB)."""
    import torch

    from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader

    torch.set_num_threads(1)
    loader = TrainLoader(directory, LoaderConfig(max_tokens=max_tokens, seed=1))
    t0 = time.perf_counter()
    batches = rows = 0
    for _, batch in loader.iterate(DataPosition(0, 0)):
        batches += 1
        rows += batch.src.size(0)
        if max_batches and batches >= max_batches:
            break
    seconds = time.perf_counter() - t0
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM"))
    return {"batches": batches, "rows": rows, "seconds": round(seconds, 1),
            "rows_per_s": round(rows / seconds), "peak_rss_mib": int(hwm.split()[1]) // 1024}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    p.add_argument("--work", type=Path, default=Path("/tmp/docmt_bench_loader"))
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batches", type=int, default=0, help="stop after N batches (0: full epoch)")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true",
                   help="smallest real run (CI): sizes 2000 4000, max tokens 1024, 2 batches")
    if p.parse_known_args()[0].smoke:
        p.set_defaults(max_tokens=1024, batches=2)
    a = p.parse_args()
    if a.smoke:   # the sizes are the smoke's even when given (README's command + --smoke)
        a.sizes = [2000, 4000]
    if a.child:
        print(json.dumps(measure(a.child, a.max_tokens, a.batches)))
        return
    peaks = []
    for n in a.sizes:
        directory = a.work / f"rows{n}"
        t0 = time.perf_counter()
        write_shards(directory, n)
        written = time.perf_counter() - t0
        out = subprocess.run([sys.executable, __file__, "--child", str(directory), "--max-tokens",
                              str(a.max_tokens), "--batches", str(a.batches)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        peaks.append(r["peak_rss_mib"])
        print(f"{n:>10,} pairs (shards written in {written:.0f}s): {r['batches']:,} batches, "
              f"{r['rows_per_s']:,} rows/s, peak RSS {r['peak_rss_mib']} MiB")
    print(f"peak RSS ratio {a.sizes[-1]:,} vs {a.sizes[0]:,} pairs: {peaks[-1] / peaks[0]:.2f}")


if __name__ == "__main__":
    main()

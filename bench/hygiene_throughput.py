"""Throughput and memory of the corpus hygiene pass (pipeline_lib.ingest.hygiene.clean): the two
passes over a reader's output, repeats through bucket files, overlap with dev/test, copies,
length ratio and, with ``--langid on``, py3langid on every side of at least 40 characters.

For each size (default 100k and 1M pairs) a reader output is synthesised from the embedded
Bible ingest (``results/ingest_corpus/bible/docs.parquet``): its train verses repeated in
25-verse documents, each round after the first marked with its number (so rounds are new pairs
and only the Bible's own repeats stay repeats), every 100th pair a copy of one of the first 50
test verses (overlap to remove; all of them would make the test split a copy of train, an
error), and the Bible's dev and test verses as the held-out splits. The timed pass runs in a
fresh subprocess, so its peak RSS (VmHWM) is the pass's own and pairs per CPU-second is a
per-core figure. Peak memory must not grow with the corpus: the last line compares it.

    .venv/bin/python bench/hygiene_throughput.py [--sizes 100000 1000000] [--langid on|off]
                                                  [--docs DOCS] [--work DIR] [--smoke]

``--smoke`` (CI): the same passes at sizes 200 and 400 pairs, given ``--sizes`` or not; other flags
given explicitly still win.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib.ingest.hygiene import HygieneConfig, clean
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import Sentence, doc_writer, quarantine_writer

BIBLE = ROOT / "results" / "ingest_corpus" / "bible" / "docs.parquet"
DOC_LEN = 25
OVERLAP_EVERY = 100


def _rows(path: Path) -> int | None:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, pa.ArrowInvalid):
        return None


def synthesise(n: int, out: Path, docs: Path) -> None:
    """A reader output of ``n`` train pairs plus the seed's dev and test (see the docstring)."""
    seed = pq.read_table(docs, columns=["split", "src", "tgt"]).to_pylist()
    train = [(r["src"], r["tgt"][0]) for r in seed if r["split"] == "train"]
    held = [r for r in seed if r["split"] in ("dev", "test")]
    tests = [(r["src"], r["tgt"][0]) for r in held if r["split"] == "test"][:50]
    with doc_writer(out / "read.parquet") as w:
        for i in range(n):
            k, rnd = i % len(train), i // len(train)
            src, tgt = train[k]
            if rnd:
                src, tgt = f"{src} ({rnd})", f"{tgt} ({rnd})"
            if i % OVERLAP_EVERY == OVERLAP_EVERY - 1:
                src, tgt = tests[(i // OVERLAP_EVERY) % len(tests)]
            w.write(Sentence("bench", "train", f"doc{i // DOC_LEN}", i % DOC_LEN, src, [tgt],
                             True, "bench", i + 1))
        for j, r in enumerate(held):
            w.write(Sentence("bench", r["split"], f"{r['split']}{j // DOC_LEN}", j % DOC_LEN,
                             r["src"], [r["tgt"][0]], True, "bench", n + j + 1))


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited from the parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_pass(work: Path, langid: bool) -> dict:
    """The timed part (called in a fresh subprocess)."""
    raw = work / "read.parquet"
    n = _rows(raw)
    out = work / f"out_{'lid' if langid else 'nolid'}"
    out.mkdir(exist_ok=True)
    manifest = Manifest(stage="bench")
    t0, c0 = time.perf_counter(), time.process_time()
    with doc_writer(out / "docs.parquet") as kept, quarantine_writer(out / "q.parquet") as bad:
        record = clean("bench", raw, n, HygieneConfig(langid=langid), ("es", "en"), out, kept,
                       bad, manifest)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"pairs": n, "wall_s": wall, "cpu_s": cpu, "pairs_per_cpu_s": n / cpu,
            "kept": kept.count, "removed": record["removed"],
            "kept_in_documents": record["kept_in_documents"], "langid": record["langid"],
            "peak_rss_mib": peak_rss_mib()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--langid", choices=["on", "off"], default="on")
    ap.add_argument("--docs", type=Path, default=BIBLE, help="seed corpus (the Bible's ingest)")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--_stage", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="smallest real run (CI): sizes 200 400")
    args = ap.parse_args()
    if args.smoke:   # the sizes are the smoke's even when given (README's command + --smoke)
        args.sizes = [200, 400]
    langid = args.langid == "on"
    if args._stage:
        print(json.dumps(run_pass(args._stage, langid)))
        return 0
    if not args.docs.is_file():
        sys.exit(f"{args.docs}: no seed corpus; run the Bible's ingest first "
                 "(snakemake --cores 1 results/ingest_corpus/bible/manifest.json) or give --docs")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_hygiene_"))
    print(f"seed corpus: {args.docs}; work dir {work}; langid {args.langid}", flush=True)
    results = []
    for n in args.sizes:
        d = work / f"n{n}"
        d.mkdir(parents=True, exist_ok=True)
        if (_rows(d / "read.parquet") or 0) < n:
            synthesise(n, d, args.docs)
        proc = subprocess.run([sys.executable, __file__, "--_stage", str(d), "--langid",
                               args.langid], capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{r['pairs']:>9} pairs: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
              f"{r['pairs_per_cpu_s']:.0f} pairs/CPU-s, peak RSS {r['peak_rss_mib']:.0f} MiB; "
              f"removed {r['removed']}; repeats kept in documents {r['kept_in_documents']}",
              flush=True)
    last = results[-1]
    growth = last["peak_rss_mib"] / results[0]["peak_rss_mib"]
    print(f"hygiene_throughput: {last['pairs_per_cpu_s']:.0f} pairs/s per core at "
          f"{last['pairs']} pairs (langid {args.langid}); peak RSS {last['peak_rss_mib']:.0f} MiB "
          f"({growth:.2f}x the {results[0]['pairs']}-pair run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

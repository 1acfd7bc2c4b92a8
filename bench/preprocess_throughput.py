"""Throughput and memory of the preprocessing hot path: BPE encoding + subword-head projection
(pipeline_lib.preprocess.bpe.encode_corpus with parse files) + restoration noising (pipeline_lib.preprocess.noise).

For each size (default 100k and 1M sentences) a corpus is synthesised by repeating the embedded
Bible ingest (``results/ingest_corpus/bible/docs.parquet``; synthetic Spanish-like text when it
is not there) under new document ids, with parse files whose words are the whitespace tokens and
whose trees are right-branching chains. The timed stages run in a fresh single-threaded
subprocess, so its peak RSS (VmHWM) is the stages' own and sentences per CPU-second is a
per-core figure. Synthesised inputs already in ``--work`` are reused. Streaming means the peak RSS must not grow with corpus size: the last line compares it.
The BPE model (``--vocab-size``) is trained on a ``--seed-sentences`` corpus synthesised the
same way.

    .venv/bin/python bench/preprocess_throughput.py [--sizes 100000 1000000] [--work DIR]
        [--docs DOCS] [--vocab-size 8000] [--seed-sentences 60000] [--smoke]

``--smoke`` (CI): sizes 200 and 400 sentences, a 500-piece BPE model trained on 2,000
sentences; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib.preprocess import bpe, noise
from pipeline_lib.tables import Sentence, doc_writer

BIBLE = ROOT / "results" / "ingest_corpus" / "bible" / "docs.parquet"
PARSE_SCHEMA = pa.schema([
    ("corpus", pa.string()), ("split", pa.string()), ("doc_id", pa.string()),
    ("sent_idx", pa.int32()), ("words", pa.list_(pa.string())), ("upos", pa.list_(pa.string())),
    ("heads", pa.list_(pa.int32())), ("deprels", pa.list_(pa.string())),
])


def _seed_pairs(docs: Path | None, limit: int = 40_000) -> list[tuple[str, str]]:
    if docs is not None and docs.is_file():
        t = pq.read_table(docs, columns=["split", "src", "tgt"]).slice(0, limit).to_pylist()
        return [(r["src"], r["tgt"][0]) for r in t if r["split"] == "train" and r["tgt"]]
    rng = random.Random(0)
    syll = ["ca", "sa", "pe", "rro", "di", "jo", "el", "la", "que", "de", "tie", "rra", "mar"]
    word = lambda: "".join(rng.choice(syll) for _ in range(rng.randint(1, 4)))  # noqa: E731
    return [(" ".join(word() for _ in range(rng.randint(5, 30))) + ".",
             " ".join(word() for _ in range(rng.randint(5, 30))) + ".") for _ in range(20_000)]


def _parse_row(key: dict, text: str) -> dict:
    words = text.split()
    heads = [i + 2 for i in range(len(words) - 1)] + [0]     # each word -> its right neighbour
    return {**key, "words": words, "upos": ["X"] * len(words), "heads": heads,
            "deprels": ["dep"] * len(words)}


def _rows(path: Path) -> int | None:
    """Rows of a complete Parquet file, None when it is missing or was cut short."""
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, pa.ArrowInvalid):
        return None


def synthesise(n: int, out: Path, docs: Path | None) -> None:
    """docs.parquet + src/tgt parse files of ``n`` sentences in 25-sentence documents."""
    pairs = _seed_pairs(docs)
    parse_w = {s: pq.ParquetWriter(str(out / f"{s}.parquet"), PARSE_SCHEMA) for s in ("src", "tgt")}
    buf: dict[str, list] = {"src": [], "tgt": []}
    with doc_writer(out / "docs.parquet") as w:
        for i in range(n):
            src, tgt = pairs[i % len(pairs)]
            doc, idx = f"doc{i // 25}", i % 25
            w.write(Sentence("bench", "train", doc, idx, src, [tgt], True, "bench", i + 1))
            key = {"corpus": "bench", "split": "train", "doc_id": doc, "sent_idx": idx}
            buf["src"].append(_parse_row(key, src))
            buf["tgt"].append(_parse_row(key, tgt))
            if len(buf["src"]) >= 50_000 or i == n - 1:
                for s in buf:
                    parse_w[s].write_table(pa.Table.from_pylist(buf[s], schema=PARSE_SCHEMA))
                    buf[s].clear()
    for pw in parse_w.values():
        pw.close()


def peak_rss_mib() -> float:
    """This process's peak RSS. Linux VmHWM belongs to the address space, so unlike ru_maxrss
    (kept across fork+exec) it excludes the parent that spawned us."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stages(work: Path, model: Path) -> dict:
    """The timed part (called in a fresh subprocess): encode + heads, then noise."""
    t0, c0 = time.perf_counter(), time.process_time()
    enc = bpe.encode_corpus(work / "docs.parquet", model, work / "enc", work / "src.parquet",
                            work / "tgt.parquet", threads=1)
    t1 = time.perf_counter()
    nz = noise.make_restore(work / "enc" / bpe.ENCODED_FILE, model, work / "noise",
                            noise.NoiseConfig())
    t2, c2 = time.perf_counter(), time.process_time()
    n = enc["counts"]["sentences"]
    return {"sentences": n, "encode_heads_s": t1 - t0, "noise_s": t2 - t1, "wall_s": t2 - t0,
            "cpu_s": c2 - c0, "sent_per_cpu_s": n / (c2 - c0),
            "heads_src": enc["counts"]["src_heads"], "restore_rows": nz["counts"]["sentences"],
            "peak_rss_mib": peak_rss_mib()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--docs", type=Path, default=BIBLE, help="seed corpus (document Parquet)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--_stage", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed-sentences", type=int, default=60_000,
                    help="sentences of the corpus the BPE model is trained on")
    ap.add_argument("--_model", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): sizes 200 400, vocab 500, 2000 seed sentences")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(vocab_size=500, seed_sentences=2000)
    args = ap.parse_args()
    if args.smoke:   # the sizes are the smoke's even when given (README's command + --smoke)
        args.sizes = [200, 400]
    if args._stage:
        print(json.dumps(run_stages(args._stage, args._model)))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_preprocess_"))
    seed_docs = args.docs if args.docs.is_file() else None
    print(f"seed corpus: {seed_docs or 'synthetic text'}; work dir {work}", flush=True)
    (work / "seed").mkdir(parents=True, exist_ok=True)
    synthesise(args.seed_sentences, work / "seed", seed_docs)
    bpe.train([work / "seed" / "docs.parquet"], work / "model",
              bpe.BpeConfig(vocab_size=args.vocab_size), "es", "en")
    results = []
    for n in args.sizes:
        d = work / f"n{n}"
        d.mkdir(exist_ok=True)
        if _rows(d / "docs.parquet") != n or _rows(d / "tgt.parquet") != n:
            synthesise(n, d, seed_docs)
        proc = subprocess.run([sys.executable, __file__, "--_stage", str(d), "--_model",
                               str(work / "model" / "spm.model")],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{n:>9} sentences: encode+heads {r['encode_heads_s']:.1f}s, noise "
              f"{r['noise_s']:.1f}s, {r['sent_per_cpu_s']:.0f} sentences/CPU-s, "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
    last = results[-1]
    growth = last["peak_rss_mib"] / results[0]["peak_rss_mib"]
    print(f"preprocess_throughput: {last['sent_per_cpu_s']:.0f} sentences/s per core at "
          f"{last['sentences']} sentences; peak RSS {last['peak_rss_mib']:.0f} MiB "
          f"({growth:.2f}x the {results[0]['sentences']}-sentence run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

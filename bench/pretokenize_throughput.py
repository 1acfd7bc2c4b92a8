"""Throughput of the papers' pre-tokenization (pipeline_lib.preprocess.pretokenize), the stage a
preset runs over every sentence before BPE: sacremoses' Moses tokenizer on the Spanish side, and
Moses tokenization + truecasing on the English side (its truecaser trained on the train split
first, timed apart), as Jiang et al.'s preset does, on the embedded Bible's verses
(``results/ingest_corpus/bible/docs.parquet``). One process, one core: sentences per second.
jieba and MeCab are not measured here (no Chinese or Japanese text ships with the repository).

    .venv/bin/python bench/pretokenize_throughput.py [--docs DOCS] [--sentences N] [--smoke]

``--smoke`` (CI): 200 sentences.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from pipeline_lib.preprocess.pretokenize import train_truecaser
from pipeline_lib.tokenization import Pretokenizer

ROOT = Path(__file__).resolve().parents[1]
BIBLE = ROOT / "results" / "ingest_corpus" / "bible" / "docs.parquet"


def _rate(tokenize: Pretokenizer, lines: list[str]) -> float:
    tokenize(lines[0])                  # the segmenter's set-up is not per sentence
    start = time.process_time()
    for line in lines:
        tokenize(line)
    return len(lines) / max(time.process_time() - start, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=Path, default=BIBLE)
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    n = 200 if a.smoke else a.sentences
    rows = pq.read_table(a.docs, columns=["split", "src", "tgt"]).to_pylist()
    train = [r for r in rows if r["split"] == "train"][:n]
    src, tgt = [r["src"] for r in train], [r["tgt"][0] for r in train]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "truecase.model"
        start = time.process_time()
        train_truecaser(tgt, Pretokenizer("en", ("moses",)), model)
        trained = len(tgt) / max(time.process_time() - start, 1e-9)
        es = _rate(Pretokenizer("es", ("moses",)), src)
        en = _rate(Pretokenizer("en", ("moses", "truecase"), model), tgt)
    print(f"truecaser training: {trained:,.0f} sentences/s")
    print(f"pretokenize_throughput: {es:,.0f} sentences/s per core (moses es), {en:,.0f} "
          f"(moses + truecase en) at {len(train):,} sentences")


if __name__ == "__main__":
    main()

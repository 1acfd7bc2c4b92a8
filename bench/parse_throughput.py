"""Parsing throughput of a stanza model descriptor on this machine (sizes parse.max_sentences_per_split).

``python bench/parse_throughput.py --model results/stanza_models/es/model.json
[--docs results/ingest_corpus/bible/docs.parquet --side src | --conllu UD_test.conllu]
[--sentences 2000] [--threads 1] [--batch-size 256] [--smoke]``

Sentences come from the docs Parquet (tokenised as the parse stage does) or, without one, from a
CoNLL-U file's gold words. Prints details first and one figure last: sentences/s. ``--smoke``
(CI): 16 sentences in batches of 8; flags given explicitly still win.

Budget arithmetic for the default config: parse time ~= 2 sides x 2 splits x cap / (shards x
sentences/s per 1-thread job), plus model training (stanza_models manifest: tagger_seconds,
parser_seconds) for both languages.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


from pipeline_lib.parse.dependencies import ParseSettings, _text, select_rows, tokenize
from pipeline_lib.parse.stanza_models import load_pipeline, read_gold


def sentences(args: argparse.Namespace) -> list[list[str]]:
    if args.docs:
        table = select_rows(args.docs, args.side, ParseSettings(splits=("train",),
                                                                max_sentences_per_split=args.sentences))
        out = [tokenize(_text(r, args.side) or "") for r in table.to_pylist()]
        return [s for s in out if s]
    return [g["words"] for g in read_gold(args.conllu)][:args.sentences]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="model.json (stanza_models output)")
    ap.add_argument("--docs", type=Path, default=None)
    ap.add_argument("--side", choices=("src", "tgt"), default="src")
    ap.add_argument("--conllu", type=Path, default=None)
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): 16 sentences, batches of 8")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(sentences=16, batch_size=8)
    args = ap.parse_args()
    if not args.docs and not args.conllu:
        ap.error("give --docs or --conllu")
    sents = sentences(args)
    nlp = load_pipeline(args.model, threads=args.threads, batch_size=args.batch_size)
    nlp(sents[:8])  # warm-up: first-call allocations are not throughput
    t0 = time.perf_counter()
    for i in range(0, len(sents), args.batch_size):
        nlp(sents[i:i + args.batch_size])
    seconds = time.perf_counter() - t0
    words = sum(map(len, sents))
    print(f"sentences={len(sents)} words={words} words/sentence={words / len(sents):.1f} "
          f"threads={args.threads} batch={args.batch_size} seconds={seconds:.1f}")
    print(f"{len(sents) / seconds:.1f}")


if __name__ == "__main__":
    main()

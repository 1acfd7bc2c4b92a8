"""``python -m pipeline_lib.preprocess.pretokenize``: the papers' tokenization of a corpus
before BPE (issue 37, item 1; the steps: ``pipeline_lib.tokenization``).

Sub-commands: ``train`` (Moses' truecaser for one language, from document Parquet files, on the
text segmented as the run segments it), ``apply`` (document Parquet -> document Parquet, each
side by its language's steps, with a manifest counting the rows).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.manifest import Manifest
from pipeline_lib.stage_options import json_value
from pipeline_lib.tokenization import SEGMENTERS, Pretokenizer

log = logging.getLogger("pretokenize")


def pretokenizers(spec: dict, langs: tuple[str, str],
                  truecasers: dict[str, Path] | None = None) -> tuple[Pretokenizer, Pretokenizer]:
    """Source and target pretokenizers from config ``tokenize`` (language -> steps)."""
    truecasers = truecasers or {}
    return tuple(Pretokenizer(lang, tuple(spec.get(lang) or ()),
                              truecasers.get(lang) if "truecase" in (spec.get(lang) or ()) else None)
                 for lang in langs)


def train_truecaser(texts: Iterable[str], segmenter: Pretokenizer, out: Path) -> int:
    """Moses' truecaser from ``texts`` segmented as the run segments them; returns sentences."""
    from sacremoses import MosesTruecaser

    tokens = [segmenter.segment(t).split() for t in texts if t and t.strip()]
    if not tokens:
        raise ValueError(f"{out}: no sentence to train a truecaser on")
    with atomic_output(out) as tmp:
        MosesTruecaser().train(tokens, save_to=str(tmp))
    return len(tokens)


def _side_texts(docs: list[Path], side: str, splits: set[str]) -> Iterable[str]:
    for path in docs:
        table = pq.read_table(path, columns=["split", side]).to_pydict()
        for split, value in zip(table["split"], table[side]):
            if split in splits:
                yield from (value if isinstance(value, list) else [value])


def apply(docs: Path, out: Path, src: Pretokenizer, tgt: Pretokenizer) -> dict:
    """``docs`` with each source sentence and every reference tokenized by its side's steps,
    one record batch at a time (a WMT-sized corpus is never held whole)."""
    rows = references = 0
    source = pq.ParquetFile(docs, pre_buffer=False)
    schema = source.schema_arrow
    with atomic_output(out) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for batch in source.iter_batches(batch_size=10_000):
            tgt_col = [None if refs is None else [tgt(r) for r in refs]
                       for refs in batch.column("tgt").to_pylist()]
            columns = {"src": pa.array([src(t) for t in batch.column("src").to_pylist()],
                                       schema.field("src").type),
                       "tgt": pa.array(tgt_col, schema.field("tgt").type)}
            writer.write_batch(pa.record_batch(
                [columns.get(name, batch.column(name)) for name in schema.names], schema=schema))
            rows += batch.num_rows
            references += sum(len(r) for r in tgt_col if r)
    return {"rows": rows, "references": references}


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="a truecaser for one language")
    tr.add_argument("--docs", nargs="+", required=True, type=Path, help="document Parquet files")
    tr.add_argument("--side", choices=["src", "tgt"], required=True)
    tr.add_argument("--lang", required=True)
    tr.add_argument("--steps", type=json_value, required=True, help="the language's steps (JSON)")
    tr.add_argument("--splits", nargs="+", default=["train", "mono"])
    tr.add_argument("--out", required=True, type=Path)
    ap_ = sub.add_parser("apply", help="tokenize a corpus's documents")
    ap_.add_argument("--docs", required=True, type=Path)
    ap_.add_argument("--langs", nargs=2, required=True, metavar=("SRC", "TGT"))
    ap_.add_argument("--tokenize", type=json_value, required=True,
                     help="config tokenize (language -> steps) as JSON")
    ap_.add_argument("--truecaser", nargs=2, action="append", default=[], metavar=("LANG", "MODEL"))
    ap_.add_argument("--out-dir", required=True, type=Path)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if args.command == "train":
            segmenter = Pretokenizer(args.lang, tuple(s for s in args.steps if s in SEGMENTERS))
            n = train_truecaser(_side_texts(args.docs, args.side, set(args.splits)), segmenter,
                                args.out)
            manifest = Manifest(stage="train_truecaser", params={"lang": args.lang})
            for d in args.docs:
                manifest.add_input(d)
            manifest.counts = {"sentences": n}
            manifest.write(args.out.with_name("manifest.json"))
            log.info("truecaser for %s from %d sentences", args.lang, n)
        else:
            src, tgt = pretokenizers(args.tokenize, tuple(args.langs),
                                     {lang: Path(p) for lang, p in args.truecaser})
            manifest = Manifest(stage="tokenize_corpus",
                                params={"tokenize": args.tokenize, "langs": args.langs})
            manifest.add_input(args.docs)
            manifest.counts = apply(args.docs, args.out_dir / "docs.parquet", src, tgt)
            manifest.write(args.out_dir / "manifest.json")
            log.info("%s: %s", args.docs, manifest.counts)
    except (OSError, ValueError) as e:
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m pipeline_lib.ingest``: read one configured corpus into document Parquet.

Writes ``docs.parquet`` (kept rows), ``quarantine.parquet`` (rejected records with reasons) and
``manifest.json`` (input checksums, counts per split, rejections by reason, time).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from pathlib import Path

from pipeline_lib.ingest import InputError, Limits, reader_module
from pipeline_lib.manifest import Manifest
from pipeline_lib.schema import Rejected, doc_writer, quarantine_writer

log = logging.getLogger("ingest")


def ingest(corpus: str, spec: dict, limits: Limits, out_dir: Path) -> dict:
    reader = reader_module(spec["reader"])
    manifest = Manifest(stage="ingest_corpus", params={"corpus": corpus, **spec, "limits": vars(limits)})
    for path in reader.input_files(spec):
        manifest.add_input(path)
    per_split: Counter = Counter()
    docs: set = set()
    with doc_writer(out_dir / "docs.parquet") as kept, quarantine_writer(out_dir / "quarantine.parquet") as bad:
        for item in reader.read(corpus, spec, limits):
            if isinstance(item, Rejected):
                bad.write(item)
                manifest.reject(item.reason)
            else:
                kept.write(item)
                per_split[item.split] += 1
                docs.add((item.split, item.doc_id))
    manifest.counts = {
        "sentences": dict(per_split),
        "documents": dict(Counter(split for split, _ in docs)),
        "kept": kept.count,
        "quarantined": bad.count,
    }
    record = manifest.write(out_dir / "manifest.json")
    log.info("%s: kept %d sentences, quarantined %d %s", corpus, kept.count, bad.count,
             dict(manifest.rejected) if bad.count else "")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", required=True, help="corpus name (key of config `corpora`)")
    ap.add_argument("--spec", required=True, help="the corpus's config entry as JSON")
    ap.add_argument("--max-line-chars", type=int, default=Limits.max_line_chars)
    ap.add_argument("--out-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        ingest(args.corpus, json.loads(args.spec), Limits(args.max_line_chars), args.out_dir)
    except InputError as e:
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m pipeline_lib.ingest``: read one configured corpus into document Parquet.

Writes ``docs.parquet`` (kept rows), ``quarantine.parquet`` (rejected records with reasons) and
``manifest.json`` (input checksums, counts per split, rejections by reason, repairs, time). The
two Parquet files are renamed into place only when the whole corpus has been read and the
manifest is written last, so a failed run leaves no output that looks finished.

A split that keeps no sentence is an error naming the split and its files (empty or truncated
input, a glob that matched the wrong files, a corpus quarantined whole), unless its config says
``allow_empty: true``. Exit status: 0 done, 2 unreadable input or unusable corpus entry.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

from pipeline_lib.constants import DOCS_FILE, MANIFEST_FILE, NAME_PATTERN, QUARANTINE_FILE, Split
from pipeline_lib.ingest import InputError, Limits, SpecError, reader_module
from pipeline_lib.ingest.lines import ALLOW_EMPTY, counting_repairs
from pipeline_lib.ingest.union import parts as union_parts
from pipeline_lib.manifest import Manifest
from pipeline_lib.schema import Rejected, doc_writer, quarantine_writer

log = logging.getLogger("ingest")


def _flat(value) -> list[str]:
    """The paths of a split key (a path, a list, or ldc_doc's list of lists)."""
    if isinstance(value, list):
        return [p for v in value for p in _flat(v)]
    return [value] if isinstance(value, str) else []


def _parts(spec: dict) -> Iterator[tuple[dict, dict[str, tuple[list[str], bool]]]]:
    """The entry cut into what is read in one go, each with the splits it must fill:
    ``(spec to read, {split: (its files, may it be empty)})``. One split at a time where the
    entry has ``splits``, so that an empty split is told apart from its quarantined records."""
    if spec.get("reader") == "union":   # read whole: a split must be filled by some part
        expected: dict[str, tuple[list[str], bool]] = {}
        for part in union_parts(spec):
            for _, splits in _parts(part):
                for name, (files, may_be_empty) in splits.items():
                    before, allowed = expected.get(name, ([], True))
                    expected[name] = (before + files, allowed and may_be_empty)
        yield spec, expected
        return
    if "splits" not in spec:  # bible: splits come from book lists
        files = [spec.get("src_module", ""), spec.get("tgt_module", "")]
        names = [Split.TRAIN.value] + [Split.DEV.value] * bool(spec.get("dev_books")) \
            + [Split.TEST.value] * bool(spec.get("test_books"))
        yield spec, {name: (files, False) for name in names}
        return
    for name, sub in spec["splits"].items():
        yield ({**spec, "splits": {name: sub}},
               {name: ([p for k in ("src", "tgt", "docids", "file") for p in _flat(sub.get(k))],
                       bool(sub.get(ALLOW_EMPTY, False)))})


def ingest(corpus: str, spec: dict, limits: Limits, out_dir: Path) -> dict:
    if not re.match(NAME_PATTERN, corpus):
        raise SpecError(f"corpus name {corpus!r} must match {NAME_PATTERN} (it names files)")
    if not isinstance(spec, dict):
        raise SpecError(f"the entry of corpus {corpus!r} must be a mapping, got {spec!r}")
    reader = reader_module(spec.get("reader"))
    manifest = Manifest(stage="ingest_corpus", params={"corpus": corpus, **spec, "limits": vars(limits)})
    for path in reader.input_files(spec):  # also checks the entry before anything is read
        manifest.add_input(path)
    per_split: Counter = Counter()
    docs: set = set()
    with counting_repairs() as repaired, doc_writer(out_dir / DOCS_FILE) as kept, \
            quarantine_writer(out_dir / QUARANTINE_FILE) as bad:
        for part, expected in _parts(spec):
            read_before = kept.count + bad.count
            reasons: Counter = Counter()
            for item in reader_module(part.get("reader")).read(corpus, part, limits):
                if isinstance(item, Rejected):
                    bad.write(item)
                    manifest.reject(item.reason)
                    reasons[item.reason] += 1
                else:
                    kept.write(item)
                    per_split[item.split] += 1
                    docs.add((item.split, item.doc_id))
            n_read = kept.count + bad.count - read_before
            for split, (files, may_be_empty) in expected.items():
                if per_split[split] == 0 and not may_be_empty:
                    what = (f"all {n_read} records were quarantined ({dict(reasons)})" if n_read
                            else "no record was read")
                    raise InputError(", ".join(files), None,
                                     f"split {split!r} of corpus {corpus!r} keeps no sentence: "
                                     f"{what}; set `{ALLOW_EMPTY}: true` on the split if that "
                                     "is expected")
    manifest.counts = {
        "sentences": dict(per_split),
        "documents": dict(Counter(split for split, _ in docs)),
        "kept": kept.count,
        "quarantined": bad.count,
    }
    manifest.extra = {"repaired": dict(repaired)}
    record = manifest.write(out_dir / MANIFEST_FILE)
    log.info("%s: kept %d sentences, quarantined %d %s%s", corpus, kept.count, bad.count,
             dict(manifest.rejected) if bad.count else "",
             f", repaired {dict(repaired)}" if repaired else "")
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="corpus name (key of config `corpora`)")
    ap.add_argument("--spec", required=True, help="the corpus's config entry as JSON")
    ap.add_argument("--max-line-chars", type=int, default=Limits.max_line_chars)
    ap.add_argument("--out-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        spec = json.loads(args.spec)
    except json.JSONDecodeError as e:
        log.error("--spec is not JSON: %s", e)
        return 2
    try:
        ingest(args.corpus, spec, Limits(args.max_line_chars), args.out_dir)
    except InputError as e:
        log.error("%s", e)
        return 2
    except SpecError as e:
        log.error("corpus %s: %s", args.corpus, e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

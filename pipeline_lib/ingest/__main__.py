"""``python -m pipeline_lib.ingest``: read one configured corpus into document Parquet, then
clean it (``hygiene``).

Writes ``docs.parquet`` (kept rows), ``quarantine.parquet`` (rejected records with reasons: the
reader's, stage ``ingest``, and the hygiene pass's, stage ``hygiene``) and ``manifest.json``
(input checksums, counts per split read and kept, rejections by reason, repairs, what hygiene
removed and found, time). The reader's rows go to a scratch file first, which the hygiene pass
reads twice (pipeline_lib/ingest/hygiene.py); the two Parquet files are renamed into place only
when the whole corpus has been read and cleaned, and the manifest is written last, so a failed
run leaves no output that looks finished.

Every input must be a readable regular file (a SWORD module may be a folder): a named pipe would
block the run for ever and an unreadable file would fail without saying which one. A split that
keeps no sentence is an error naming the split and its files (empty or truncated input, a glob
that matched the wrong files, a corpus quarantined or filtered whole), unless its config says
``allow_empty: true``. So is a file of which more than ``ingest.max_quarantined_share`` of the
lines were quarantined, with what its bytes look like (``lines.check_files``). Exit status: 0
done, 2 unreadable input or unusable corpus entry (the message names the file and line; it is
logged and, run by Snakemake, shown on the console).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Iterator

from pipeline_lib import stage_options
from pipeline_lib.stage_options import json_value
from pipeline_lib.atomic import exits_on_full_disk, scratch_dir
from pipeline_lib.layout import (DOCS_FILE, MANIFEST_FILE, NAME_MAX_LEN, NAME_PATTERN,
                                 QUARANTINE_FILE)
from pipeline_lib.tables import Split
from pipeline_lib.ingest import InputError, Limits, SpecError, long_documents, reader_module
from pipeline_lib.ingest.hygiene import HygieneConfig, clean
from pipeline_lib.ingest.lines import (ALLOW_EMPTY, SET_ASIDE, check_files, check_input,
                                       counting_files, counting_repairs)
from pipeline_lib.ingest.union import parts as union_parts
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import Rejected, Sentence, doc_writer, quarantine_writer

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


# readers of one sentence per line, in which a tab between text means columns (lines.check_files)
SENTENCE_LINES = ("plaintext", "ldc_sent", "mono_text")


def sentence_files(spec: dict) -> set[str]:
    """The files of ``spec`` (or of its union's parts) that a ``SENTENCE_LINES`` reader reads."""
    parts = union_parts(spec) if spec.get("reader") == "union" else [spec]
    return {f for p in parts if p.get("reader") in SENTENCE_LINES
            for f in reader_module(p["reader"]).input_files(p)}


class _Counted:
    """The kept rows' writer, counting sentences per split and per document as they pass, and
    the files each split's rows came from."""

    def __init__(self, writer):
        self.writer = writer
        self.sentences: Counter = Counter()
        self.docs: dict[str, Counter] = {}
        self.files: dict[str, set[str]] = {}

    def write(self, s: Sentence) -> None:
        self.writer.write(s)
        self.sentences[s.split] += 1
        self.docs.setdefault(s.split, Counter())[s.doc_id] += 1
        self.files.setdefault(s.split, set()).add(s.origin_file)

    def long_documents(self, corpus: str) -> dict[str, dict]:
        """Splits whose documents look like unsplit files (``long_documents``), warned of."""
        found = {}
        for split, lengths in self.docs.items():
            if f := long_documents.finding(lengths):
                found[split] = {**f, "files": sorted(self.files[split])}
                log.warning("%s: split %s (%s): %s; %s", corpus, split,
                            ", ".join(found[split]["files"]), f["finding"], long_documents.ADVICE)
        return found


def check_name(corpus: str) -> None:
    if not re.fullmatch(NAME_PATTERN, corpus) or len(corpus) > NAME_MAX_LEN:
        raise SpecError(f"corpus name {corpus!r} must match {NAME_PATTERN} and have at most "
                        f"{NAME_MAX_LEN} characters (it names files)")


def ingest(corpus: str, spec: dict, limits: Limits, out_dir: Path,
           hygiene: HygieneConfig | None = None, langs: tuple[str, str] | None = None) -> dict:
    """Read ``spec`` into ``out_dir``; ``hygiene`` (overridden by the entry's own ``hygiene``)
    cleans the rows, ``langs`` (source, target) for its language check; None reads only."""
    check_name(corpus)
    if not isinstance(spec, dict):
        raise SpecError(f"the entry of corpus {corpus!r} must be a mapping, got {spec!r}")
    reader = reader_module(spec.get("reader"))
    cfg = HygieneConfig.from_dicts(asdict(hygiene), spec.get("hygiene")) if hygiene else \
        HygieneConfig(enabled=False)
    manifest = Manifest(stage="ingest_corpus", params={"corpus": corpus, **spec, "limits": vars(limits)})
    for path in reader.input_files(spec):  # also checks the entry before anything is read
        check_input(path)
        try:
            manifest.add_input(path)
        except OSError as e:
            raise InputError(path, None, f"cannot read: {e.strerror or e}") from None
    read: Counter = Counter()
    expected: dict[str, tuple[list[str], bool]] = {}
    out_dir = Path(out_dir)
    per_file: dict[str, Counter] = {}   # file -> reasons of its quarantined records
    with counting_repairs() as repaired, counting_files(), \
            quarantine_writer(out_dir / QUARANTINE_FILE) as bad, \
            scratch_dir(out_dir / "hygiene") as work:
        with doc_writer(work / DOCS_FILE) as raw:
            for part, splits in _parts(spec):
                expected.update(splits)
                read_before = raw.count + bad.count
                reasons: Counter = Counter()
                for item in reader_module(part.get("reader")).read(corpus, part, limits):
                    if isinstance(item, Rejected):
                        bad.write(item)
                        manifest.reject(item.reason)
                        reasons[item.reason] += 1
                        if item.reason not in SET_ASIDE:
                            per_file.setdefault(item.origin_file, Counter())[item.reason] += 1
                    else:
                        raw.write(item)
                        read[item.split] += 1
                n_read = raw.count + bad.count - read_before
                # before the empty-split check: a file quarantined whole gets its diagnosis
                check_files(per_file, limits.max_quarantined_share, sentence_files(part))
                for split, (files, may_be_empty) in splits.items():
                    if read[split] == 0 and not may_be_empty:
                        what = (f"all {n_read} records were quarantined ({dict(reasons)})" if n_read
                                else "no record was read")
                        raise InputError(", ".join(files), None,
                                         f"split {split!r} of corpus {corpus!r} keeps no sentence: "
                                         f"{what}; set `{ALLOW_EMPTY}: true` on the split if that "
                                         "is expected")
        n_read_rows = raw.count
        with doc_writer(out_dir / DOCS_FILE) as docs:
            kept = _Counted(docs)
            hygiene_record = clean(corpus, work / DOCS_FILE, n_read_rows, cfg, langs, work, kept,
                                   bad, manifest)
            for split, (files, may_be_empty) in expected.items():
                if read[split] and not kept.sentences[split] and not may_be_empty:
                    removed = {reason: n[split] for reason, n in hygiene_record["removed"].items()
                               if split in n}
                    raise InputError(", ".join(files), None,
                                     f"split {split!r} of corpus {corpus!r} keeps no sentence: "
                                     f"hygiene removed all {read[split]} pairs ({removed}); set "
                                     f"`{ALLOW_EMPTY}: true` on the split if that is expected")
    manifest.counts = {
        "read": dict(read),
        "sentences": dict(kept.sentences),
        "documents": {split: len(docs) for split, docs in kept.docs.items()},
        "kept": docs.count,
        "quarantined": bad.count,
    }
    manifest.extra = {"repaired": dict(repaired), "hygiene": hygiene_record,
                      "long_documents": kept.long_documents(corpus)}
    record = manifest.write(out_dir / MANIFEST_FILE)
    log.info("%s: kept %d sentences, quarantined %d %s%s", corpus, docs.count, bad.count,
             dict(manifest.rejected) if bad.count else "",
             f", repaired {dict(repaired)}" if repaired else "")
    return record


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="corpus name (key of config `corpora`)")
    ap.add_argument("--spec", required=True, type=json_value,
                    help="the corpus's config entry as JSON")
    ap.add_argument("--max-line-chars", type=int, default=Limits.max_line_chars)
    ap.add_argument("--max-quarantined-share", type=float, default=Limits.max_quarantined_share,
                    help="config ingest.max_quarantined_share")
    ap.add_argument("--hygiene", default="{}", type=json_value,
                    help="config section `hygiene` as JSON (the corpus's own `hygiene` entry in "
                         "--spec overrides it); default: the schema's defaults")
    ap.add_argument("--src-lang", help="config src_lang (hygiene's language check)")
    ap.add_argument("--tgt-lang", help="config tgt_lang")
    ap.add_argument("--out-dir", required=True, type=Path)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    langs = (args.src_lang, args.tgt_lang) if args.src_lang and args.tgt_lang else None
    try:
        ingest(args.corpus, args.spec, Limits(args.max_line_chars, args.max_quarantined_share),
               args.out_dir, HygieneConfig.from_dicts(args.hygiene), langs)
    except InputError as e:
        log.error("%s", e)
        return 2
    except SpecError as e:
        log.error("corpus %s: %s", args.corpus, e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

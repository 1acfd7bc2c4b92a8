"""Dependency parses of the source and target side of a corpus with stanza (the parser of record).

Two commands, one per Snakemake rule:

``python -m pipeline_lib.parse.dependencies shard --docs docs.parquet --side src --model model.json
--shard 0 --num-shards 2 --splits train dev --max-sentences-per-split 4000 --threads 2 --out-dir D``
  parses the ``shard``-th of ``num-shards`` equal, contiguous ranges of the *selected* rows (see
  below) and writes ``D/parse.parquet``, ``D/quarantine.parquet``, ``D/manifest.json``.

``python -m pipeline_lib.parse.dependencies merge --src-shards D0 D1 --tgt-shards D0 D1 --out-dir OUT``
  concatenates the shards in order (they are contiguous ranges, so document order is kept) into
  the output contract below.

Output contract, ``results/parse_corpus/{corpus}/``:

``src.parquet`` / ``tgt.parquet`` (PARSE_SCHEMA), one row per parsed sentence, in the row order of
``docs.parquet`` (a merge join against it needs no sort; sentences without a parse have no row):

==========  ============  ===================================================================
column      type          meaning
==========  ============  ===================================================================
corpus      string        as in docs.parquet
split       string        as in docs.parquet
doc_id      string        as in docs.parquet
sent_idx    int32         as in docs.parquet: (corpus, split, doc_id, sent_idx) names the row
words       list<string>  words of the sentence (the tokens of ``tokenize`` below)
upos        list<string>  universal POS tag per word
heads       list<int32>   head of each word: 1-based word index, 0 = root (CoNLL-U / stanza)
deprels     list<string>  dependency relation per word
==========  ============  ===================================================================

``tgt`` is the first reference (``tgt[0]``); rows without a target (``mono``) are skipped.
``quarantine.parquet`` (QUARANTINE_SCHEMA, stage ``parse_corpus``; ``origin_file`` is
``src``/``tgt`` plus the docs.parquet origin, ``record`` the sentence text) holds sentences that are
empty, too long (``parse.max_words``), that stanza cannot parse, or whose parse is not a tree
(reasons: :class:`ParseReason`). ``manifest.json`` counts them per side and split.

Which rows are parsed: the splits in ``parse.splits`` (default train and dev), each capped at its
first ``parse.max_sentences_per_split`` rows in document order (null = all). The cap exists for
the 60-minute budget of the embedded default: rows without a parse simply get no dependency
supervision downstream (null heads in encode_bpe), which the models already handle.

Tokenisation: the input is fed to stanza **pretokenized** by ``tokenize`` (a regular expression:
word characters, English clitics ``n't``/``'s`` split as in UD EWT, every other non-space
character alone), so one docs row is always exactly one stanza sentence and no tokenizer has to
be trained offline. Japanese and Chinese have no spaces: a run of word characters is cut where
the script changes between Han, Hiragana, Katakana and the rest (``本研究では手法を提案する`` ->
本研究 では 手法 を 提案 する), close to UD Japanese's short units (noun, particle, Sino-Japanese
verb stem, ``する``) without a segmenter; Deguchi et al. (2019) segment with KyTea instead. UD multi-word tokens (Spanish ``del`` = ``de el``) are not expanded; the
subword head projection aligns words to pieces by characters, so this only costs parse accuracy.
Lemmas are not needed for heads and are not produced (processors ``tokenize,pos,depparse``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.layout import MANIFEST_FILE, PARSE_FILE, QUARANTINE_FILE
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import Rejected, quarantine_writer
from pipeline_lib.parse.stanza_models import load_pipeline

log = logging.getLogger("parse")

STAGE = "parse_corpus"
SIDES = ("src", "tgt")

PARSE_SCHEMA = pa.schema(
    [
        ("corpus", pa.string()),
        ("split", pa.string()),
        ("doc_id", pa.string()),
        ("sent_idx", pa.int32()),
        ("words", pa.list_(pa.string())),
        ("upos", pa.list_(pa.string())),
        ("heads", pa.list_(pa.int32())),
        ("deprels", pa.list_(pa.string())),
    ]
)

_TOKEN = re.compile(r"\w+(?=n't\b)|n't\b|'\w+|\w+|[^\w\s]")
# A run of one script inside a word: Han (with the iteration mark), Hiragana, Katakana (with the
# prolonged sound mark), or anything else (Latin, digits, ...).
_SCRIPT_RUN = re.compile(r"[\u3005\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[\u3041-\u309f]+"
                         r"|[\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f]+"
                         r"|[^\u3005\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3041-\u30ff"
                         r"\u31f0-\u31ff\uff66-\uff9f]+")


class ParseReason(str, Enum):
    """Why the parse stage quarantined a sentence (quarantine ``reason`` column, manifest keys)."""

    EMPTY = "empty_sentence"           # no token after tokenisation
    TOO_LONG = "too_long"              # more words than parse.max_words (parsing is quadratic)
    PARSE_FAILED = "parse_failed"      # stanza raised on this sentence alone
    INVALID_TREE = "invalid_tree"      # not exactly one root, or a head out of range


def tokenize(text: str) -> list[str]:
    """The documented pretokenisation (module docstring): ``"Don't stop."`` -> Do n't stop .;
    ``"本研究では手法を提案する。"`` -> 本研究 では 手法 を 提案 する 。"""
    return [run for token in _TOKEN.findall(text) for run in _SCRIPT_RUN.findall(token)]


@dataclass(frozen=True)
class ParseSettings:
    """The ``parse`` config section as used by one shard."""

    splits: tuple[str, ...] = ("train", "dev")
    max_sentences_per_split: int | None = None
    max_words: int = 200
    batch_size: int = 256


def valid_tree(heads: Sequence[int]) -> bool:
    """Exactly one root and every head a word index (0 = root) of the sentence."""
    n = len(heads)
    return n > 0 and sum(h == 0 for h in heads) == 1 and all(0 <= h <= n for h in heads)


def select_rows(docs: Path, side: str, settings: ParseSettings) -> pa.Table:
    """Rows to parse, in document order: chosen splits, each capped (module docstring)."""
    cols = ["corpus", "split", "doc_id", "sent_idx", "origin_file", "origin_line", side]
    try:
        table = pq.read_table(str(docs), columns=cols)
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"{docs}: cannot read document Parquet: {e}") from e
    keep: list[int] = []
    seen: Counter = Counter()
    cap = settings.max_sentences_per_split
    for i, split in enumerate(table.column("split").to_pylist()):
        if split in settings.splits and (cap is None or seen[split] < cap):
            seen[split] += 1
            keep.append(i)
    return table.take(pa.array(keep, type=pa.int64()))


def _text(row: dict, side: str) -> str | None:
    if side == "src":
        return row["src"]
    refs = row["tgt"]
    return refs[0] if refs else None


class ShardParser:
    """Parses token lists in batches; a failing batch is retried sentence by sentence."""

    def __init__(self, nlp, batch_size: int) -> None:
        self.nlp = nlp
        self.batch_size = batch_size

    def _parse(self, batch: list[list[str]]) -> list[tuple[list, list, list, list]]:
        doc = self.nlp(batch)
        if len(doc.sentences) != len(batch):
            raise RuntimeError(f"stanza returned {len(doc.sentences)} sentences for {len(batch)}")
        return [([w.text for w in s.words], [w.upos for w in s.words], [int(w.head) for w in s.words],
                 [w.deprel for w in s.words]) for s in doc.sentences]

    def parse(self, sentences: list[list[str]]) -> list[tuple | Exception]:
        out: list[tuple | Exception] = []
        for i in range(0, len(sentences), self.batch_size):
            batch = sentences[i:i + self.batch_size]
            try:
                out.extend(self._parse(batch))
            except Exception as e:  # stanza raises many types; isolate the bad sentence
                log.warning("batch at %d failed (%s); retrying sentence by sentence", i, e)
                for sent in batch:
                    try:
                        out.extend(self._parse([sent]))
                    except Exception as e1:
                        out.append(e1)
        return out


def parse_shard(docs: Path, side: str, model: Path | dict, shard: int, num_shards: int,
                settings: ParseSettings, out_dir: Path, threads: int = 1, nlp=None) -> dict:
    """Parse one shard of one side into ``out_dir`` (parse.parquet, quarantine, manifest)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, not {side!r}")
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} not in [0, {num_shards})")
    manifest = Manifest(stage=STAGE, params={"side": side, "shard": shard, "num_shards": num_shards,
                                             **settings.__dict__, "threads": threads})
    manifest.add_input(docs)
    if not isinstance(model, dict):
        manifest.add_input(model)
    table = select_rows(docs, side, settings)
    lo, hi = shard * table.num_rows // num_shards, (shard + 1) * table.num_rows // num_shards
    rows = table.slice(lo, hi - lo).to_pylist()
    out_dir.mkdir(parents=True, exist_ok=True)
    todo: list[tuple[dict, list[str]]] = []
    counts: Counter = Counter()
    with quarantine_writer(out_dir / QUARANTINE_FILE) as bad:
        def reject(row: dict, reason: ParseReason, text: str) -> None:
            bad.write(Rejected(STAGE, row["corpus"], f"{side}:{row['origin_file']}",
                               row["origin_line"], row["doc_id"], reason.value, text))
            manifest.reject(f"{side}:{reason.value}")

        for row in rows:
            text = _text(row, side)
            if text is None:
                counts["no_text"] += 1
                continue
            words = tokenize(text)
            if not words:
                reject(row, ParseReason.EMPTY, text)
            elif len(words) > settings.max_words:
                reject(row, ParseReason.TOO_LONG, text)
            else:
                todo.append((row, words))
        if nlp is None and todo:
            nlp = load_pipeline(model, threads=threads, batch_size=settings.batch_size)
        t0 = time.time()
        results = ShardParser(nlp, settings.batch_size).parse([w for _, w in todo]) if todo else []
        seconds = time.time() - t0
        columns: dict[str, list] = {name: [] for name in PARSE_SCHEMA.names}
        for (row, words), res in zip(todo, results):
            text = _text(row, side)
            if isinstance(res, Exception):
                log.warning("%s %s/%s: %s", side, row["doc_id"], row["sent_idx"], res)
                reject(row, ParseReason.PARSE_FAILED, text)
                continue
            p_words, upos, heads, deprels = res
            if not valid_tree(heads):
                reject(row, ParseReason.INVALID_TREE, text)
                continue
            for name in ("corpus", "split", "doc_id", "sent_idx"):
                columns[name].append(row[name])
            for name, val in zip(("words", "upos", "heads", "deprels"), (p_words, upos, heads, deprels)):
                columns[name].append(val)
            counts[f"parsed:{row['split']}"] += 1
        with atomic_output(out_dir / PARSE_FILE) as tmp:
            pq.write_table(pa.table(columns, schema=PARSE_SCHEMA), str(tmp), compression="zstd")
        counts["quarantined"] = bad.count
    parsed = len(columns["words"])
    manifest.counts = {"selected_rows": [lo, hi], "parsed": parsed, **counts,
                       "parse_seconds": round(seconds, 2),
                       "sentences_per_s": round(len(todo) / seconds, 1) if seconds > 0 else None}
    record = manifest.write(out_dir / MANIFEST_FILE)
    log.info("%s shard %d/%d: parsed %d, quarantined %d in %.1fs", side, shard, num_shards, parsed,
             counts["quarantined"], seconds)
    return record


def merge(shards: dict[str, list[Path]], out_dir: Path) -> dict:
    """Concatenate shard outputs (in the given order) into the output contract."""
    manifest = Manifest(stage=STAGE, params={side: [str(d) for d in dirs] for side, dirs in shards.items()})
    out_dir.mkdir(parents=True, exist_ok=True)
    per_split: dict[str, Counter] = {}
    shard_manifests = []
    # every output is renamed into place when the block ends, none if a shard cannot be read
    with ExitStack() as outputs, quarantine_writer(out_dir / QUARANTINE_FILE) as bad:
        for side, dirs in shards.items():
            tmp = outputs.enter_context(atomic_output(out_dir / f"{side}.parquet"))
            with pq.ParquetWriter(str(tmp), PARSE_SCHEMA, compression="zstd") as w:
                for d in dirs:
                    part = pq.read_table(str(d / PARSE_FILE))
                    w.write_table(part)
                    per_split.setdefault(side, Counter()).update(part.column("split").to_pylist())
                    for row in pq.read_table(str(d / QUARANTINE_FILE)).to_pylist():
                        bad.write(Rejected(**row))
                    rec = json.loads((d / MANIFEST_FILE).read_text())
                    shard_manifests.append({"side": side, "dir": str(d), "counts": rec["counts"]})
                    for reason, n in rec["rejected"].items():
                        manifest.reject(reason, n)
                    manifest.inputs.update(rec["inputs"])
    manifest.counts = {"parsed": {side: dict(c) for side, c in per_split.items()},
                       "quarantined": bad.count}
    manifest.extra = {"shards": shard_manifests}
    return manifest.write(out_dir / MANIFEST_FILE)


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shard", help="parse one shard of one side")
    s.add_argument("--docs", type=Path, required=True)
    s.add_argument("--side", choices=SIDES, required=True)
    s.add_argument("--model", type=Path, required=True, help="model.json from stanza_models")
    s.add_argument("--shard", type=int, default=0)
    s.add_argument("--num-shards", type=int, default=1)
    s.add_argument("--splits", nargs="+", default=list(ParseSettings.splits))
    s.add_argument("--max-sentences-per-split", type=int, default=None, help="<= 0 means no cap")
    s.add_argument("--max-words", type=int, default=ParseSettings.max_words)
    s.add_argument("--batch-size", type=int, default=ParseSettings.batch_size)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out-dir", type=Path, required=True)
    m = sub.add_parser("merge", help="merge shards into src/tgt.parquet")
    m.add_argument("--src-shards", type=Path, nargs="*", default=[])
    m.add_argument("--tgt-shards", type=Path, nargs="*", default=[])
    m.add_argument("--out-dir", type=Path, required=True)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.cmd == "merge":
        merge({"src": args.src_shards, "tgt": args.tgt_shards}, args.out_dir)
        return 0
    cap = args.max_sentences_per_split
    settings = ParseSettings(tuple(args.splits), cap if cap and cap > 0 else None, args.max_words,
                             args.batch_size)
    try:
        parse_shard(args.docs, args.side, args.model, args.shard, args.num_shards, settings,
                    args.out_dir, args.threads)
    except ValueError as e:
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training shards: fixed-size zstd Parquet files per task and split, with a token index.

``python -m pipeline_lib.preprocess.shards make --encoded encoded.parquet --restore restore.parquet
--out-dir results/make_shards/<corpus> [--tasks sent doc]`` writes
``<out-dir>/<task>/<split>/shard-XXXXX.parquet`` (rule make_head_shards writes the ``sent`` task
alone, from the encoding with subword dependency heads):

* ``sent``: sentence pairs (SHARD_SCHEMA), cut every ``rows_per_shard`` rows;
* ``doc``: the same columns, documents contiguous and in order and **never split** across shards
  (a shard is closed after the document that reaches ``rows_per_shard``, so it can be longer by
  less than one document);
* ``restore``: restoration instances (pipeline_lib.preprocess.noise.RESTORE_SCHEMA), sub-documents never split.

Monolingual rows (no target) only feed ``restore``. Sentence pairs with an empty side or a side
longer than ``max_len`` pieces cannot be trained on: they go to ``quarantine.parquet`` (reasons
``empty_side`` / ``too_long``, and ``no_parse`` with ``--require-heads``, the head shards that
hold only the parsed subset; origin_file = the encoded file, origin_line = 1-based row) and are
counted in the manifest; a document keeps its other sentences (a gap in ``sent_idx``).
Each shard has row groups of ``row_group_rows`` rows so a loader can stream it. Every
``<task>/<split>/`` has ``index.parquet`` (INDEX_SCHEMA: file, rows, src_tokens, tgt_tokens) for
the trainer's token-budget batching.

``python -m pipeline_lib.preprocess.shards verify --shard-dir D --out manifest.json`` re-reads every shard
and checks it against its index (the Snakemake rule after the checkpoint).

SHARD_SCHEMA (sent/doc; a trainer relies on exactly these names): corpus, split, doc_id,
sent_idx, src_ids list<int32>, tgt_ids list<int32> (no BOS/EOS), src_heads, tgt_heads
list<int32> (0-based piece positions, -1 = none; null where no parse), src_text, tgt_text
(first reference, detokenised).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.preprocess.bpe import ENCODED_SCHEMA
from pipeline_lib.layout import MANIFEST_FILE, QUARANTINE_FILE
from pipeline_lib.tables import Split
from pipeline_lib.manifest import Manifest
from pipeline_lib.tables import Rejected, quarantine_writer
from pipeline_lib.preprocess.noise import RESTORE_SCHEMA, iter_units

log = logging.getLogger("shards")

INDEX_FILE = "index.parquet"
SHARD_PATTERN = "shard-{:05d}.parquet"
TASK_SENT, TASK_DOC, TASK_RESTORE = "sent", "doc", "restore"
TASKS = (TASK_SENT, TASK_DOC, TASK_RESTORE)

SHARD_SCHEMA = pa.schema([f for f in ENCODED_SCHEMA if f.name != "has_context"])
INDEX_SCHEMA = pa.schema(
    [("file", pa.string()), ("rows", pa.int64()), ("src_tokens", pa.int64()),
     ("tgt_tokens", pa.int64())]
)


@dataclass(frozen=True)
class ShardConfig:
    """Config section ``shards`` (see the schema for each key's meaning)."""

    rows_per_shard: int = 20_000
    row_group_rows: int = 2_000
    max_len: int = 250


@dataclass
class ShardWriter:
    """Writes one ``<task>/<split>/`` directory; only closes shards where ``unit_done`` allows."""

    directory: Path
    schema: pa.Schema
    cfg: ShardConfig
    index: list[dict] = field(default_factory=list)
    _buf: list[dict] = field(default_factory=list)
    _writer: pq.ParquetWriter | None = None
    _rows: int = 0
    _src: int = 0
    _tgt: int = 0

    def add(self, row: dict) -> None:
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            name = SHARD_PATTERN.format(len(self.index))
            self._writer = pq.ParquetWriter(str(self.directory / name), self.schema,
                                            compression="zstd")
        self._buf.append(row)
        self._rows += 1
        self._src += len(row["src_ids"] or ())
        self._tgt += len(row["tgt_ids"] or ())
        if len(self._buf) >= self.cfg.row_group_rows:
            self._flush()

    def unit_done(self) -> None:
        """Called after each row (sent) or document (doc/restore): a shard may end here."""
        if self._rows >= self.cfg.rows_per_shard:
            self._close_shard()

    def _flush(self) -> None:
        if self._buf:
            self._writer.write_table(pa.Table.from_pylist(self._buf, schema=self.schema))
            self._buf.clear()

    def _close_shard(self) -> None:
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self.index.append({"file": SHARD_PATTERN.format(len(self.index)), "rows": self._rows,
                           "src_tokens": self._src, "tgt_tokens": self._tgt})
        self._writer, self._rows, self._src, self._tgt = None, 0, 0, 0

    def close(self) -> None:
        self._close_shard()
        if self.index:
            pq.write_table(pa.Table.from_pylist(self.index, schema=INDEX_SCHEMA),
                           str(self.directory / INDEX_FILE))


def _unusable(row: dict, max_len: int, require_heads: bool = False) -> str | None:
    """Why a sentence pair cannot be a training row, or None."""
    if not row["src_ids"] or not row["tgt_ids"]:
        return "empty_side"
    if max(len(row["src_ids"]), len(row["tgt_ids"])) > max_len:
        return "too_long"
    if require_heads and (row["src_heads"] is None or row["tgt_heads"] is None):
        return "no_parse"
    return None


def make_shards(encoded: Path, restore: Path | None, out_dir: Path, cfg: ShardConfig,
                tasks: tuple[str, ...] = (TASK_SENT, TASK_DOC), require_heads: bool = False
                ) -> dict:
    """Write the shard directories of ``tasks`` (and ``restore`` ones) under ``out_dir`` and a
    manifest with per-directory counts.

    The whole tree is built under a partial name and renamed to ``out_dir`` when complete, so a
    failure leaves no shard directory that a trainer could take for a finished one.
    """
    with atomic_output(out_dir) as tmp:
        return _make_shards(encoded, restore, tmp, cfg, tasks, require_heads)


def _make_shards(encoded: Path, restore: Path | None, out_dir: Path, cfg: ShardConfig,
                 tasks: tuple[str, ...], require_heads: bool) -> dict:
    manifest = Manifest(stage="make_shards", params={**asdict(cfg), "tasks": list(tasks),
                                                     "require_heads": require_heads})
    manifest.add_input(encoded)
    writers: dict[tuple[str, str], ShardWriter] = {}

    def writer(task: str, split: str, schema: pa.Schema) -> ShardWriter:
        if (task, split) not in writers:
            writers[(task, split)] = ShardWriter(out_dir / task / split, schema, cfg)
        return writers[(task, split)]

    line = 0
    with quarantine_writer(out_dir / QUARANTINE_FILE) as bad:
        for doc in iter_units(encoded, ("corpus", "split", "doc_id")):
            split = doc[0]["split"]
            line += len(doc)
            if split == Split.MONO.value:
                continue
            sent_w = writer(TASK_SENT, split, SHARD_SCHEMA) if TASK_SENT in tasks else None
            doc_w = writer(TASK_DOC, split, SHARD_SCHEMA) if TASK_DOC in tasks else None
            for i, row in enumerate(doc):
                reason = _unusable(row, cfg.max_len, require_heads)
                if reason:
                    manifest.reject(reason)
                    bad.write(Rejected("make_shards", row["corpus"], str(encoded),
                                       line - len(doc) + i + 1, row["doc_id"], reason,
                                       f"sent_idx={row['sent_idx']} src={row['src_text']!r}"))
                    continue
                row = {name: row[name] for name in SHARD_SCHEMA.names}
                if sent_w is not None:
                    sent_w.add(row)
                    sent_w.unit_done()
                if doc_w is not None:
                    doc_w.add(row)
            if doc_w is not None:
                doc_w.unit_done()
    if restore is not None:
        manifest.add_input(restore)
        for sub in iter_units(restore, ("corpus", "split", "doc_id")):
            w = writer(TASK_RESTORE, sub[0]["split"], RESTORE_SCHEMA)
            for row in sub:
                w.add(row)
            w.unit_done()
    counts = {}
    for (task, split), w in sorted(writers.items()):
        w.close()
        counts[f"{task}/{split}"] = {
            "shards": len(w.index), "rows": sum(i["rows"] for i in w.index),
            "src_tokens": sum(i["src_tokens"] for i in w.index),
            "tgt_tokens": sum(i["tgt_tokens"] for i in w.index)}
    manifest.counts = counts
    return manifest.write(out_dir / MANIFEST_FILE)


def shard_dirs(root: Path) -> list[Path]:
    """Every ``<task>/<split>/`` directory under ``root`` that has an index."""
    return sorted(p.parent for p in Path(root).glob(f"*/*/{INDEX_FILE}"))


def verify(root: Path) -> dict:
    """Re-read every shard: rows and tokens match the index, no document spans two shards."""
    report = {}
    for d in shard_dirs(root):
        index = pq.read_table(str(d / INDEX_FILE)).to_pylist()
        seen_docs: set = set()
        for entry in index:
            t = pq.read_table(str(d / entry["file"]), columns=["doc_id", "src_ids", "tgt_ids"])
            got = {"rows": t.num_rows,
                   "src_tokens": int(pc.sum(pc.list_value_length(t["src_ids"])).as_py() or 0),
                   "tgt_tokens": int(pc.sum(pc.list_value_length(t["tgt_ids"])).as_py() or 0)}
            for k, v in got.items():
                if entry[k] != v:
                    raise ValueError(f"{d / entry['file']}: index says {k}={entry[k]}, file {v}")
            docs = set(t["doc_id"].to_pylist())
            if d.parent.name != TASK_SENT and docs & seen_docs:
                raise ValueError(f"{d / entry['file']}: documents {sorted(docs & seen_docs)[:3]} "
                                 "continue from the previous shard")
            seen_docs |= docs
        report[str(d.relative_to(root))] = {"shards": len(index),
                                            "rows": sum(e["rows"] for e in index)}
    return report


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write shards and indexes")
    m.add_argument("--encoded", type=Path, required=True)
    m.add_argument("--restore", type=Path, default=None)
    m.add_argument("--out-dir", type=Path, required=True)
    m.add_argument("--rows-per-shard", type=int, default=ShardConfig.rows_per_shard)
    m.add_argument("--row-group-rows", type=int, default=ShardConfig.row_group_rows)
    m.add_argument("--max-len", type=int, default=ShardConfig.max_len)
    m.add_argument("--tasks", nargs="+", choices=[TASK_SENT, TASK_DOC], default=[TASK_SENT, TASK_DOC],
                   help="sentence-pair tasks to write (restore comes with --restore)")
    m.add_argument("--require-heads", action="store_true",
                   help="keep only pairs with subword heads on both sides (the parsed subset); "
                        "the others go to quarantine as no_parse")
    v = sub.add_parser("verify", help="check shards against their indexes")
    v.add_argument("--shard-dir", type=Path, required=True)
    v.add_argument("--out", type=Path, required=True)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.cmd == "make":
        for p in (args.encoded, args.restore):
            if p is not None and not p.is_file():
                log.error("input file %s does not exist", p)
                return 2
        rec = make_shards(args.encoded, args.restore, args.out_dir,
                          ShardConfig(args.rows_per_shard, args.row_group_rows, args.max_len),
                          tuple(args.tasks), args.require_heads)
        log.info("make_shards: %s", rec["counts"])
        return 0
    manifest = Manifest(stage="verify_shards")
    try:
        manifest.counts = verify(args.shard_dir)
    except ValueError as e:
        log.error("%s", e)
        return 1
    manifest.write(args.out)
    log.info("verify_shards: %s", json.dumps(manifest.counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Joint source+target sentencepiece BPE: training (``train``) and encoding to ids (``encode``).

``python -m pipeline_lib.preprocess.bpe train --docs a/docs.parquet [b/docs.parquet ...] --out-dir D``
  trains one model on the **training split only** (plus ``mono`` documents when present) of every
  corpus, so that dev/test text never shapes the vocabulary. Ids are fixed to
  pad=0 unk=1 bos=2 eos=3 (pipeline_lib.vocab) and every symbol a model needs
  (``<mask1>``, ``<mask2>``, language tags, ``####``, ``<doc>``) is a user-defined symbol, i.e.
  always exactly one piece.

``python -m pipeline_lib.preprocess.bpe encode --docs docs.parquet --model spm.model --out-dir D
[--parse-src src.parquet --parse-tgt tgt.parquet]`` encodes every split to int32 id lists and
projects dependency heads onto the pieces (pipeline_lib.preprocess.subword_heads). Output
``encoded.parquet`` (ENCODED_SCHEMA below), one row per sentence in document order.

ENCODED_SCHEMA:

===========  ============  ==================================================================
column       type          meaning
===========  ============  ==================================================================
corpus...    as docs       corpus, split, doc_id, sent_idx copied from the document Parquet
src_ids      list<int32>   source pieces, no BOS/EOS (the loader adds them)
tgt_ids      list<int32>   first reference's pieces, no BOS/EOS; null for ``mono``
src_heads    list<int32>   0-based head piece per src piece (no BOS/EOS offset), -1 = none;
                           null when the sentence has no parse
tgt_heads    list<int32>   same for the target
src_text     string        source text as read (detokenised: ``decode(src_ids)`` up to
                           sentencepiece normalisation)
tgt_text     string        first reference as read; null for ``mono``
has_context  bool          copied from the document Parquet
===========  ============  ==================================================================

Parse files (pipeline_lib.parse.dependencies output) must list sentences in the same order as the document
Parquet; missing sentences are allowed (no parse -> null heads). Both files are streamed with a
merge join, so neither is held in memory; a parse file in another order is an error.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import sentencepiece as spm

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.layout import ENCODED_FILE, MANIFEST_FILE, QUARANTINE_FILE, SPM_PREFIX
from pipeline_lib.tables import Split
from pipeline_lib.vocab import (BOS_ID, DOC_SEP, EOS_ID, MASK_GAP, MASK_TOKEN, PAD_ID, SENT_BREAK,
                                UNK_ID, lang_tag)
from pipeline_lib.manifest import Manifest, sha256_file
from pipeline_lib.tables import Rejected, quarantine_writer
from pipeline_lib.preprocess.subword_heads import project_heads

log = logging.getLogger("bpe")

SCRATCH_DIR = ".spm-training"   # inside the output folder, removed after training

ENCODED_SCHEMA = pa.schema(
    [
        ("corpus", pa.string()),
        ("split", pa.string()),
        ("doc_id", pa.string()),
        ("sent_idx", pa.int32()),
        ("src_ids", pa.list_(pa.int32())),
        ("tgt_ids", pa.list_(pa.int32())),
        ("src_heads", pa.list_(pa.int32())),
        ("tgt_heads", pa.list_(pa.int32())),
        ("src_text", pa.string()),
        ("tgt_text", pa.string()),
        ("has_context", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class BpeConfig:
    """Config section ``bpe`` (see the schema for each key's meaning)."""

    vocab_size: int = 8000
    character_coverage: float = 1.0
    input_sentence_size: int = 2_000_000
    seed: int = 1234
    threads: int = 1


def user_symbols(src_lang: str, tgt_lang: str) -> list[str]:
    """Every symbol a model inserts into a sequence; each must stay one piece."""
    return [MASK_GAP, MASK_TOKEN, lang_tag(src_lang), lang_tag(tgt_lang), SENT_BREAK, DOC_SEP]


def stream_batches(path: Path, columns: Sequence[str] | None = None,
                   batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file, holding one row group's column chunks at a time.

    pyarrow's ParquetFile pre-buffers by default: iter_batches then reads the chunks of every
    row group up front and keeps them until the reader is dropped, so memory grows with the file
    (189 MiB more peak RSS at 1M sentence pairs than at 100k in bench/preprocess_throughput.py).
    """
    pf = pq.ParquetFile(str(path), pre_buffer=False)
    yield from pf.iter_batches(batch_size=batch_size, columns=columns)


def iter_training_text(docs_paths: Sequence[Path]) -> Iterator[str]:
    """Source and first-reference lines of the train split, and the mono text, streamed."""
    wanted = {Split.TRAIN.value, Split.MONO.value}
    for path in docs_paths:
        for batch in stream_batches(path, ["split", "src", "tgt"]):
            for split, src, tgt in zip(*(batch.column(i).to_pylist() for i in range(3))):
                if split not in wanted:
                    continue
                if src and src.strip():
                    yield src
                if tgt and tgt[0] and tgt[0].strip():
                    yield tgt[0]


def train(docs_paths: Sequence[Path], out_dir: Path, cfg: BpeConfig, src_lang: str,
          tgt_lang: str) -> dict:
    """Train ``out_dir/spm.model`` (+ ``.vocab``) and write its manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(stage="train_bpe", params={**vars(cfg), "src_lang": src_lang,
                                                    "tgt_lang": tgt_lang})
    for p in docs_paths:
        manifest.add_input(p)
    symbols = user_symbols(src_lang, tgt_lang)
    n_lines = 0
    # A fixed scratch folder, not a random temporary name: sentencepiece records its input and
    # output paths in the model (trainer_spec), so a random name would make every spm.model
    # differ in bytes, and with it the input checksum of every later stage.
    tmp = out_dir / SCRATCH_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        text = tmp / "train.txt"
        with open(text, "w", encoding="utf-8") as f:
            for line in iter_training_text(docs_paths):
                # sentencepiece reads one sentence per line: inner newlines would split it.
                f.write(" ".join(line.split()) + "\n")
                n_lines += 1
        if n_lines == 0:
            raise ValueError(f"no training sentences in {[str(p) for p in docs_paths]}")
        # Sentence sampling (input_sentence_size) is random: seed it for reproducible models.
        spm.set_random_generator_seed(cfg.seed)
        spm.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(tmp / SPM_PREFIX), model_type="bpe",
            vocab_size=cfg.vocab_size, character_coverage=cfg.character_coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            user_defined_symbols=symbols, input_sentence_size=cfg.input_sentence_size,
            shuffle_input_sentence=True, seed_sentencepiece_size=1_000_000,
            num_threads=cfg.threads, minloglevel=2,
            # Small corpora (tests, smoke runs) cannot always fill the vocabulary.
            hard_vocab_limit=False,
        )
        # trained in the scratch folder, renamed into place only once both files are complete
        for suffix in (".model", ".vocab"):
            (tmp / f"{SPM_PREFIX}{suffix}").replace(out_dir / f"{SPM_PREFIX}{suffix}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sp = spm.SentencePieceProcessor(model_file=str(out_dir / f"{SPM_PREFIX}.model"))
    manifest.counts = {"training_lines": n_lines, "vocab_size": sp.get_piece_size()}
    manifest.extra = {"user_symbols": {s: sp.piece_to_id(s) for s in symbols},
                      "model_sha256": sha256_file(out_dir / f"{SPM_PREFIX}.model")}
    return manifest.write(out_dir / MANIFEST_FILE)


class Encoder:
    """sentencepiece ids plus the surface of each piece (needed to align pieces with words)."""

    def __init__(self, model: Path | str, threads: int = 1) -> None:
        self.sp = spm.SentencePieceProcessor(model_file=str(model))
        self.threads = threads

    def encode(self, texts: list[str]) -> list[tuple[list[int], list[str]]]:
        protos = self.sp.encode(texts, return_type="proto", num_threads=self.threads)
        return [([p.id for p in t.pieces], [p.surface for p in t.pieces]) for t in protos]


class _ParseCursor:
    """Merge-join cursor over a parse Parquet file in document order (see module docstring)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._rows = self._iter() if path is not None else iter(())
        self._next = next(self._rows, None)

    def _iter(self) -> Iterator[tuple[tuple, list[str], list[int]]]:
        for batch in stream_batches(self.path, ["split", "doc_id", "sent_idx", "words", "heads"],
                                    batch_size=4096):
            cols = [batch.column(i).to_pylist() for i in range(5)]
            for split, doc, idx, words, heads in zip(*cols):
                yield (split, doc, idx), words, heads

    def take(self, key: tuple) -> tuple[list[str], list[int]] | None:
        if self._next is not None and self._next[0] == key:
            _, words, heads = self._next
            self._next = next(self._rows, None)
            return words, heads
        return None

    def check_exhausted(self) -> None:
        if self._next is not None:
            raise ValueError(f"{self.path}: parse row {self._next[0]} does not follow the "
                             "document Parquet order (or names a sentence that is not there)")


def _heads(parse: tuple[list[str], list[int]] | None, surfaces: list[str]) -> list[int] | None:
    if parse is None or not parse[0]:
        return None
    return project_heads(parse[0], parse[1], surfaces)


def encode_corpus(docs: Path, model: Path, out_dir: Path, parse_src: Path | None = None,
                  parse_tgt: Path | None = None, threads: int = 1,
                  batch_rows: int = 2000) -> dict:
    """Stream ``docs`` in batches of ``batch_rows`` into ``out_dir/encoded.parquet``
    (ENCODED_SCHEMA), one row group per batch."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(stage="encode_bpe", params={"threads": threads})
    for p in (docs, model, parse_src, parse_tgt):
        if p is not None:
            manifest.add_input(p)
    enc = Encoder(model, threads)
    cursors = {"src": _ParseCursor(parse_src), "tgt": _ParseCursor(parse_tgt)}
    counts = {"sentences": 0, "src_tokens": 0, "tgt_tokens": 0, "src_heads": 0, "tgt_heads": 0,
              "src_unk": 0, "tgt_unk": 0}
    cols = ["corpus", "split", "doc_id", "sent_idx", "src", "tgt", "has_context",
            "origin_file", "origin_line"]
    with atomic_output(out_dir / ENCODED_FILE) as encoded, \
            pq.ParquetWriter(str(encoded), ENCODED_SCHEMA, compression="zstd") as writer, \
            quarantine_writer(out_dir / QUARANTINE_FILE) as bad:
        # Small batches: sentencepiece protos are ~1 kB per sentence, so memory stays flat.
        for batch in stream_batches(docs, cols, batch_size=batch_rows):
            rows = batch.to_pylist()
            src_text = [r["src"] or "" for r in rows]
            tgt_text = [r["tgt"][0] if r["tgt"] else None for r in rows]
            src_enc = enc.encode(src_text)
            tgt_enc = enc.encode([t or "" for t in tgt_text])
            out = {name: [] for name in ENCODED_SCHEMA.names}
            for r, s_txt, t_txt, (s_ids, s_surf), (t_ids, t_surf) in zip(
                    rows, src_text, tgt_text, src_enc, tgt_enc):
                key = (r["split"], r["doc_id"], r["sent_idx"])
                heads = {}
                for side, surf in (("src", s_surf), ("tgt", t_surf)):
                    parse = cursors[side].take(key)
                    try:
                        heads[side] = _heads(parse, surf) if (side == "src" or t_txt) else None
                    except ValueError as e:
                        heads[side] = None
                        reason = f"bad_parse_{side}"
                        manifest.reject(reason)
                        bad.write(Rejected("encode_bpe", r["corpus"], r["origin_file"] or "",
                                           r["origin_line"] or 0, r["doc_id"], reason,
                                           f"{key}: {e}"))
                    if heads[side] is not None:
                        counts[f"{side}_heads"] += 1
                counts["sentences"] += 1
                counts["src_tokens"] += len(s_ids)
                counts["src_unk"] += s_ids.count(UNK_ID)
                if t_txt is not None:
                    counts["tgt_tokens"] += len(t_ids)
                    counts["tgt_unk"] += t_ids.count(UNK_ID)
                for name in ("corpus", "split", "doc_id", "sent_idx", "has_context"):
                    out[name].append(r[name])
                out["src_ids"].append(s_ids)
                out["tgt_ids"].append(t_ids if t_txt is not None else None)
                out["src_heads"].append(heads["src"])
                out["tgt_heads"].append(heads["tgt"])
                out["src_text"].append(s_txt)
                out["tgt_text"].append(t_txt)
            writer.write_table(pa.table(out, schema=ENCODED_SCHEMA))
        for c in cursors.values():  # inside the block: a failed check leaves no output
            c.check_exhausted()
    manifest.counts = counts
    return manifest.write(out_dir / MANIFEST_FILE)


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train the joint sentencepiece model")
    t.add_argument("--docs", nargs="+", type=Path, required=True)
    t.add_argument("--out-dir", type=Path, required=True)
    t.add_argument("--src-lang", required=True)
    t.add_argument("--tgt-lang", required=True)
    t.add_argument("--vocab-size", type=int, default=BpeConfig.vocab_size)
    t.add_argument("--character-coverage", type=float, default=BpeConfig.character_coverage)
    t.add_argument("--input-sentence-size", type=int, default=BpeConfig.input_sentence_size)
    t.add_argument("--seed", type=int, default=BpeConfig.seed)
    t.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("encode", help="encode a document Parquet to ids and subword heads")
    e.add_argument("--docs", type=Path, required=True)
    e.add_argument("--model", type=Path, required=True)
    e.add_argument("--out-dir", type=Path, required=True)
    e.add_argument("--parse-src", type=Path, default=None)
    e.add_argument("--parse-tgt", type=Path, default=None)
    e.add_argument("--threads", type=int, default=1)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    needed = args.docs if args.cmd == "train" else [args.docs, args.model]
    for p in needed:
        if not p.is_file():
            log.error("input file %s does not exist", p)
            return 2
    if args.cmd == "train":
        cfg = BpeConfig(args.vocab_size, args.character_coverage, args.input_sentence_size,
                        args.seed, args.threads)
        rec = train(args.docs, args.out_dir, cfg, args.src_lang, args.tgt_lang)
    else:
        rec = encode_corpus(args.docs, args.model, args.out_dir, args.parse_src, args.parse_tgt,
                            args.threads)
    log.info("%s: %s", rec["stage"], rec["counts"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

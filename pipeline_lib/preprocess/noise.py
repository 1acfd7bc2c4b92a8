"""Noised documents for document restoration pre-training (Chen et al. 2021, "Breaking the Corpus
Bottleneck for Context-Aware Neural Machine Translation with Cross-Task Pre-training", Sec. 2.1).

``python -m pipeline_lib.preprocess.noise --encoded encoded.parquet --model spm.model --out-dir D`` reads
the source side of the monolingual documents (split ``mono``), or, when a corpus has none (the
embedded Bible), the source side of the **training** documents, splits every document into
sub-documents of at most ``max_sentences`` sentences (balanced sizes) and noises each:

* **CA-GSR** (gap sentence restoration): ``floor(gap_ratio * N)`` gap sentences, never the first
  or the last, never two adjacent (uniform over all such sets). A gap sentence's input is
  ``left neighbour <mask1> right neighbour``; its output the original sentence. The gap
  sentence itself never appears in any input.
* **The document-level input** is the noised document, i.e. every sentence's noised input in
  order (Sec. 2.1, Figure 2: the document-level input S of a document X_1..X_6 with gaps X_3,
  X_5 is X^_1, X^_2, X_2 [mask1] X_4, X^_4, X_4 [mask1] X_6, X^_6), so at a gap the document
  holds the gap's input ``left <mask1> right`` (``gap_document_input: sentence``, the default),
  never the gap sentence or its masked version ("in case the document context contains obvious
  hints"). ``gap_document_input: mask`` (a lone ``<mask1>`` where the gap sentence was) is an
  option the paper does not use.
* **CA-MSR** (masked sentence restoration): every other sentence is masked BERT-style: each token
  is chosen with probability ``mask_rate``; a chosen token becomes ``<mask2>`` (80%), a random
  regular token (10%) or stays unchanged (10%). Output: the original sentence.

Randomness comes from a generator seeded by (seed, crc32(doc_id), sub-document index), so the
output does not depend on processing order and reruns are identical.

RESTORE_SCHEMA, one row per sentence; the rows of a sub-document are contiguous and in order:

=============  ============  ===============================================================
column         type          meaning
=============  ============  ===============================================================
corpus         string        corpus name
split          string        the split the text came from (``mono`` or ``train``)
doc_id         string        sub-document id ``<doc_id>#<k>`` (k = 0-based chunk index)
sent_idx       int32         0-based position in the sub-document
orig_sent_idx  int32         position in the original document
task           string        ``gsr`` (gap sentence) or ``msr`` (masked sentence)
src_ids        list<int32>   sentence-level input (gsr: left <mask1> right; msr: masked)
tgt_ids        list<int32>   restoration target: the original sentence
ctx_ids        list<int32>   this sentence's part of the document-level input (its noised
                             input; [<mask1>] for a gap with gap_document_input: mask);
                             concatenating a
                             sub-document's ctx_ids (with separators of the loader's choice)
                             gives the document-level input
=============  ============  ===============================================================

No BOS/EOS anywhere (the loader adds them). ``manifest.json`` records the achieved gap ratio and
mask rates next to the configured values.
"""

from __future__ import annotations

import argparse
import logging
import sys
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sentencepiece import sentencepiece_model_pb2

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.preprocess.bpe import stream_batches
from pipeline_lib.layout import MANIFEST_FILE, RESTORE_FILE
from pipeline_lib.tables import Split
from pipeline_lib.vocab import MASK_GAP, MASK_TOKEN
from pipeline_lib.documents import split_document
from pipeline_lib.manifest import Manifest

log = logging.getLogger("noise")

RESTORE_SCHEMA = pa.schema(
    [
        ("corpus", pa.string()),
        ("split", pa.string()),
        ("doc_id", pa.string()),
        ("sent_idx", pa.int32()),
        ("orig_sent_idx", pa.int32()),
        ("task", pa.string()),
        ("src_ids", pa.list_(pa.int32())),
        ("tgt_ids", pa.list_(pa.int32())),
        ("ctx_ids", pa.list_(pa.int32())),
    ]
)

TASK_GSR = "gsr"
TASK_MSR = "msr"
#: what the document-level input holds at a gap: the gap's sentence-level input, or <mask1> alone
GAP_DOCUMENT_INPUTS = ("sentence", "mask")


@dataclass(frozen=True)
class NoiseConfig:
    """Config section ``noise`` (see the schema for each key's meaning)."""

    gap_ratio: float = 0.2
    mask_rate: float = 0.15
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    max_sentences: int = 30
    seed: int = 1
    gap_document_input: str = "sentence"

    def __post_init__(self) -> None:
        if self.gap_document_input not in GAP_DOCUMENT_INPUTS:
            raise ValueError(f"noise.gap_document_input={self.gap_document_input!r}; choose one "
                             f"of {list(GAP_DOCUMENT_INPUTS)}")


@dataclass(frozen=True)
class Vocab:
    """What masking needs from the sentencepiece model."""

    gap_id: int
    mask_id: int
    regular_lo: int       # random replacements are drawn from [regular_lo, size)
    size: int

    @classmethod
    def from_model(cls, model: Path | str) -> "Vocab":
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(Path(model).read_bytes())
        normal = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
        ids = {p.piece: i for i, p in enumerate(proto.pieces)}
        for sym in (MASK_GAP, MASK_TOKEN):
            if sym not in ids:
                raise ValueError(f"{model}: no piece {sym} (train it as a user-defined symbol)")
        first = next(i for i, p in enumerate(proto.pieces) if p.type == normal)
        return cls(ids[MASK_GAP], ids[MASK_TOKEN], first, len(proto.pieces))


def gap_count(n: int, ratio: float) -> int:
    """floor(ratio*n), capped at ceil((n-2)/2), the most non-adjacent interior positions."""
    m = n - 2
    if m <= 0:
        return 0
    return max(min(int(np.floor(ratio * n + 1e-9)), (m + 1) // 2), 0)


def choose_gaps(n: int, ratio: float, rng: np.random.Generator) -> list[int]:
    """floor(ratio*n) positions in 1..n-2, no two adjacent, uniformly over all such sets.

    Stars and bars: k non-adjacent positions among m = n-2 interior ones correspond one-to-one
    to k sorted distinct picks c_0 < ... < c_{k-1} from m-k+1 slots via g_i = c_i + i (+1 to
    skip the first sentence). k is capped at the largest feasible count, ceil(m/2).
    """
    k = gap_count(n, ratio)
    if k == 0:
        return []
    picks = np.sort(rng.choice(n - 2 - k + 1, size=k, replace=False))
    return [int(c) + i + 1 for i, c in enumerate(picks)]


@dataclass
class MaskStats:
    tokens: int = 0
    chosen: int = 0
    to_mask: int = 0
    to_random: int = 0
    kept: int = 0


def mask_tokens(ids: Sequence[int], cfg: NoiseConfig, vocab: Vocab, rng: np.random.Generator,
                stats: MaskStats) -> list[int]:
    """BERT-style masking of one sentence (CA-MSR); updates ``stats``."""
    arr = np.asarray(ids, dtype=np.int64)
    n = len(arr)
    chosen = rng.random(n) < cfg.mask_rate
    kind = rng.random(n)
    to_mask = chosen & (kind < cfg.mask_token_prob)
    to_random = chosen & (kind >= cfg.mask_token_prob) & (
        kind < cfg.mask_token_prob + cfg.random_token_prob)
    out = arr.copy()
    out[to_mask] = vocab.mask_id
    n_rand = int(to_random.sum())
    if n_rand:
        out[to_random] = rng.integers(vocab.regular_lo, vocab.size, size=n_rand)
    stats.tokens += n
    stats.chosen += int(chosen.sum())
    stats.to_mask += int(to_mask.sum())
    stats.to_random += n_rand
    stats.kept += int(chosen.sum()) - int(to_mask.sum()) - n_rand
    return out.tolist()


def noise_subdocument(sents: Sequence[Sequence[int]], cfg: NoiseConfig, vocab: Vocab,
                      rng: np.random.Generator, stats: MaskStats) -> list[dict]:
    """Rows (task, src_ids, tgt_ids, ctx_ids) for one sub-document, in order."""
    gaps = set(choose_gaps(len(sents), cfg.gap_ratio, rng))
    rows = []
    for i, ids in enumerate(sents):
        if i in gaps:
            src = list(sents[i - 1]) + [vocab.gap_id] + list(sents[i + 1])
            rows.append({"task": TASK_GSR, "src_ids": src, "tgt_ids": list(ids),
                         "ctx_ids": src if cfg.gap_document_input == "sentence"
                         else [vocab.gap_id]})
        else:
            masked = mask_tokens(ids, cfg, vocab, rng, stats)
            rows.append({"task": TASK_MSR, "src_ids": masked, "tgt_ids": list(ids),
                         "ctx_ids": masked})
    return rows


def iter_units(path: Path, key_cols: Sequence[str], columns: Sequence[str] | None = None,
               batch_rows: int = 4096) -> Iterator[list[dict]]:
    """Runs of consecutive rows sharing ``key_cols`` (documents), read ``batch_rows`` at a time.

    Small batches: rows of id lists cost ~1 kB each as Python objects, and a 64k-row batch
    would dominate the memory of every stage."""
    unit: list[dict] = []
    key = None
    for batch in stream_batches(path, columns, batch_size=batch_rows):
        for row in batch.to_pylist():
            k = tuple(row[c] for c in key_cols)
            if key is not None and k != key:
                yield unit
                unit = []
            key = k
            unit.append(row)
    if unit:
        yield unit


def source_split(encoded: Path) -> str:
    """``mono`` when the corpus has monolingual documents, else ``train`` (streamed check)."""
    for batch in stream_batches(encoded, ["split"]):
        if Split.MONO.value in set(batch.column(0).to_pylist()):
            return Split.MONO.value
    return Split.TRAIN.value


def iter_restore_rows(encoded: Path, split: str, cfg: NoiseConfig, vocab: Vocab,
                      stats: MaskStats, counts: dict) -> Iterator[dict]:
    """Stream the noised rows of every document of ``split``, one document at a time."""
    cols = ["corpus", "split", "doc_id", "sent_idx", "src_ids"]
    for doc in iter_units(encoded, ("corpus", "split", "doc_id"), cols):
        if doc[0]["split"] != split:
            continue
        doc = [r for r in doc if r["src_ids"]]        # empty sentences carry nothing to restore
        for k, (a, b) in enumerate(split_document(len(doc), cfg.max_sentences)):
            sub_id = f"{doc[0]['doc_id']}#{k}"
            rng = np.random.default_rng([cfg.seed, zlib.crc32(sub_id.encode()), k])
            rows = noise_subdocument([r["src_ids"] for r in doc[a:b]], cfg, vocab, rng, stats)
            counts["subdocuments"] += 1
            counts["sentences"] += b - a
            counts["expected_gaps"] += gap_count(b - a, cfg.gap_ratio)
            for i, row in enumerate(rows):
                counts["gaps"] += row["task"] == TASK_GSR
                yield {"corpus": doc[0]["corpus"], "split": split, "doc_id": sub_id,
                       "sent_idx": i, "orig_sent_idx": doc[a + i]["sent_idx"], **row}


def make_restore(encoded: Path, model: Path, out_dir: Path, cfg: NoiseConfig,
                 row_group_rows: int = 5000) -> dict:
    """Write ``out_dir/restore.parquet`` and its manifest (achieved rates vs config)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(stage="noise_docs", params=asdict(cfg))
    manifest.add_input(encoded)
    manifest.add_input(model)
    vocab = Vocab.from_model(model)
    split = source_split(encoded)
    stats = MaskStats()
    counts = {"subdocuments": 0, "sentences": 0, "gaps": 0, "expected_gaps": 0}
    buf: list[dict] = []
    with atomic_output(out_dir / RESTORE_FILE) as tmp, \
            pq.ParquetWriter(str(tmp), RESTORE_SCHEMA, compression="zstd") as w:
        for row in iter_restore_rows(encoded, split, cfg, vocab, stats, counts):
            buf.append(row)
            if len(buf) >= row_group_rows:
                w.write_table(pa.Table.from_pylist(buf, schema=RESTORE_SCHEMA))
                buf.clear()
        if buf:
            w.write_table(pa.Table.from_pylist(buf, schema=RESTORE_SCHEMA))
    n = max(counts["sentences"], 1)
    chosen = max(stats.chosen, 1)
    manifest.counts = {**counts, "source_split": split, "msr_tokens": stats.tokens}
    manifest.extra = {"achieved": {
        "gap_ratio": counts["gaps"] / n,
        # floor(ratio*N) per sub-document: below the configured ratio for short documents.
        "gap_ratio_floor_expected": counts["expected_gaps"] / n,
        "mask_rate": stats.chosen / max(stats.tokens, 1),
        "mask_token_share": stats.to_mask / chosen,
        "random_token_share": stats.to_random / chosen,
        "unchanged_share": stats.kept / chosen,
    }}
    return manifest.write(out_dir / MANIFEST_FILE)


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--encoded", type=Path, required=True, help="encode_bpe output")
    ap.add_argument("--model", type=Path, required=True, help="spm.model")
    ap.add_argument("--out-dir", type=Path, required=True)
    d = NoiseConfig()
    ap.add_argument("--gap-ratio", type=float, default=d.gap_ratio)
    ap.add_argument("--mask-rate", type=float, default=d.mask_rate)
    ap.add_argument("--mask-token-prob", type=float, default=d.mask_token_prob)
    ap.add_argument("--random-token-prob", type=float, default=d.random_token_prob)
    ap.add_argument("--max-sentences", type=int, default=d.max_sentences)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--gap-document-input", choices=GAP_DOCUMENT_INPUTS,
                    default=d.gap_document_input)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for p in (args.encoded, args.model):
        if not p.is_file():
            log.error("input file %s does not exist", p)
            return 2
    cfg = NoiseConfig(args.gap_ratio, args.mask_rate, args.mask_token_prob,
                      args.random_token_prob, args.max_sentences, args.seed,
                      args.gap_document_input)
    rec = make_restore(args.encoded, args.model, args.out_dir, cfg)
    log.info("noise_docs: %s %s", rec["counts"], rec["achieved"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

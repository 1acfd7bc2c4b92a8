"""Rows -> batches: token-budget packing (sentence and context rows by length, document streams
in lanes, whole sub-documents first fit) and vectorised collation into ``Batch``es.

WHY its own module: packing and collation work on rows in hand, whatever read them, and know
nothing of files, ranks or epochs; the loader (``data.py``) plans its chunks' batches with
them and collates them, the dev batches too, and the model tests build their batches from rows
with them, without shards (``shards.py`` reads those).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pipeline_lib.batch import Batch
from pipeline_lib.batch import EXTRA_DOC_START, EXTRA_LANE, EXTRA_LANES
from pipeline_lib.vocab import BOS_ID, EOS_ID, NO_HEAD, PAD_ID
from pipeline_lib.models.inputs import CTX_KEY, ModelInputs
from pipeline_lib.documents import split_document
from pipeline_lib.training.shards import DOC_SENT, Columns


def _row_len(row: dict) -> int:
    """Tokens a sentence pair costs the budget: the longer of src+EOS and BOS+tgt."""
    return max(len(row["src_ids"]), len(row["tgt_ids"])) + 1


def _ctx_len(row: dict) -> int:
    """Padded size of a row's context: its ids, or slots x the longest slot (context given as
    one slot per previous sentence)."""
    ctx = row.get(CTX_KEY)
    if not ctx:
        return 0
    return len(ctx) * max(len(c) for c in ctx) if isinstance(ctx[0], list) else len(ctx)


def usable(row: dict, max_len: int) -> bool:
    """Pairs with an empty side or longer than the model's positions cannot be trained on; the
    shard stage already quarantines them, this only guards a smaller ``max_len``."""
    return bool(row["src_ids"]) and bool(row["tgt_ids"]) and _row_len(row) <= max_len


def rows_cut(first: int, k: int, multiple: int) -> int:
    """Where a batch of rows ``first..k-1`` that cannot take row ``k`` ends: at the largest
    multiple of ``multiple`` rows (the rows left over start the next batch), or at ``k`` when it
    has fewer rows than that.

    WHY rows too: lengths are padded up to ``pad_multiple``, but a token budget still gave nearly
    every batch its own row count, so nearly every batch of an epoch had a (rows, length) shape of
    its own; on CUDA a new shape costs first-sight work (kernel choice, attention graphs) the
    later epochs never repay. Rows cut to multiples of 8 (fairseq's
    ``--required-batch-size-multiple``) leave the shapes of a small set (issue 33 item 6)."""
    rows = (k - first) // multiple * multiple
    return first + rows if rows else k


def pack_by_tokens(rows: list[dict], max_tokens: int, max_context_tokens: int | None = None,
                   rows_multiple: int = 1) -> list[list[dict]]:
    """Sort ``rows`` by length (then context length) and cut into batches whose rows' tokens
    (:func:`_row_len`) sum to at most ``max_tokens``; with ``max_context_tokens``, also rows *
    longest context <= that cap; each batch's rows cut to a multiple of ``rows_multiple``
    (:func:`rows_cut`) but a chunk's last.

    A single row over a budget forms a batch of its own (the budget cannot be met otherwise;
    ``max_len`` filtering upstream keeps such rows rare)."""
    rows = sorted(rows, key=lambda r: (_row_len(r), _ctx_len(r), len(r["src_ids"])))
    lens = [_row_len(r) for r in rows]
    ctxs = [_ctx_len(r) for r in rows]
    batches: list[list[dict]] = []
    first = tokens = ctx_max = 0
    k = 0
    while k < len(rows):
        n, c = lens[k], ctxs[k]
        if k > first and (tokens + n > max_tokens or (max_context_tokens is not None and
                                                      max(ctx_max, c) * (k - first + 1)
                                                      > max_context_tokens)):
            cut = rows_cut(first, k, rows_multiple)
            batches.append(rows[first:cut])
            first, tokens, ctx_max = cut, sum(lens[cut:k]), max(ctxs[cut:k], default=0)
            continue           # row k again, after the rows carried over
        tokens, ctx_max, k = tokens + n, max(ctx_max, c), k + 1
    if first < len(rows):
        batches.append(rows[first:])
    return batches


def pack_columns(cols: Columns, max_tokens: int, max_len: int,
                 rows_multiple: int = 1) -> list[np.ndarray]:
    """:func:`pack_by_tokens` on :class:`Columns`: the usable rows (as :func:`usable` says,
    tags included) sorted by (tokens, source length), stably, and cut into batches of row
    indices whose tokens sum to at most ``max_tokens`` and whose rows, but a chunk's last
    batch's, are a multiple of ``rows_multiple``."""
    tagged = 0 if cols.tag is None else (cols.tag >= 0).astype(np.int64)
    src, tgt = cols.lengths("src_ids") + tagged, cols.lengths("tgt_ids") + tagged
    row = np.maximum(src, tgt) + 1
    usable = np.flatnonzero((src > 0) & (tgt > 0) & (row <= max_len))
    order = usable[np.lexsort((src[usable], row[usable]))]
    lens = row[order].tolist()
    batches, first, tokens, k = [], 0, 0, 0
    while k < len(lens):
        if k > first and tokens + lens[k] > max_tokens:
            cut = rows_cut(first, k, rows_multiple)
            batches.append(order[first:cut])
            first, tokens = cut, sum(lens[cut:k])
            continue           # row k again, after the rows carried over
        tokens, k = tokens + lens[k], k + 1
    if len(order) > first:
        batches.append(order[first:])
    return batches


def collate_columns(cols: Columns, idx: np.ndarray, pad_multiple: int = 1,
                    max_len: int | None = None) -> Batch:
    """Rows ``idx`` of :class:`Columns` -> the ``Batch`` :func:`collate` builds from them as dict
    rows (tags, EOS/BOS, heads aligned, lengths rounded up to ``pad_multiple``)."""
    B = len(idx)
    tag = None if cols.tag is None else cols.tag[idx]
    has = np.zeros(B, np.int64) if tag is None else (tag >= 0).astype(np.int64)
    rows = np.arange(B)
    src_ids, src_len = cols.gather("src_ids", idx)
    tgt_ids, tgt_len = cols.gather("tgt_ids", idx)
    S = _round_up(int((src_len + has).max()) + 1, pad_multiple, max_len)
    T = _round_up(int((tgt_len + has).max()) + 1, pad_multiple, max_len)
    src = _fill(src_ids, src_len, PAD_ID, has, S)
    src[rows, has + src_len] = EOS_ID
    tgt_in = _fill(tgt_ids, tgt_len, PAD_ID, 1 + has, T)
    tgt_in[:, 0] = BOS_ID
    tgt_out = _fill(tgt_ids, tgt_len, PAD_ID, has, T)
    tgt_out[rows, has + tgt_len] = EOS_ID
    if tag is not None:
        tagged = has.astype(bool)
        for x, col in ((src, 0), (tgt_in, 1), (tgt_out, 0)):
            x[tagged, col] = tag[tagged]
    b = Batch(src=torch.from_numpy(src), tgt_in=torch.from_numpy(tgt_in),
              tgt_out=torch.from_numpy(tgt_out), doc_id=cols.doc_id[idx].tolist(),
              sent_idx=cols.sent_idx[idx].tolist())
    for side, width, start in (("src_heads", S, 0), ("tgt_heads", T, 1)):
        if side in cols.sides and cols.valid[side][idx].any():
            heads, n = cols.gather(side, idx)
            setattr(b, side, torch.from_numpy(_fill(heads, n, NO_HEAD, start, width)))
    return b


def _round_up(n: int, multiple: int, limit: int | None) -> int:
    """``n`` rounded up to ``multiple``, but not past ``limit`` (the model's positions)."""
    r = -(-n // multiple) * multiple
    return r if limit is None else max(n, min(r, limit))


def _fill(flat: np.ndarray, lengths: np.ndarray, value: int, start: np.ndarray | int,
          width: int) -> np.ndarray:
    """(B, width) array, row b holding ``lengths[b]`` ids of ``flat`` (rows concatenated) from
    column ``start`` (per row, or one for all) on, ``value`` elsewhere: one numpy fill for the
    whole batch. A tensor per row (``torch.as_tensor`` 3 x B times per batch) was the collate's
    cost on a GPU host, where the loop waits for it."""
    out = np.full((len(lengths), width), value, dtype=np.int64)
    start = np.broadcast_to(np.asarray(start, np.int64), lengths.shape)[:, None]
    cols = np.arange(width)
    out[(cols >= start) & (cols < start + lengths[:, None])] = flat      # row-major order
    return out


def padded(seqs: Sequence[Sequence[int]], value: int = PAD_ID, before: int | None = None,
           after: int | None = None, width: int | None = None, multiple: int = 1,
           limit: int | None = None) -> torch.Tensor:
    """(B, W) long tensor whose row b is ``[before] + seqs[b] + [after]`` right-padded with
    ``value``; W = ``width``, or the longest row rounded up to ``multiple`` (not past ``limit``)."""
    lengths = np.fromiter((len(s) for s in seqs), np.int64, len(seqs))
    flat = np.fromiter(itertools.chain.from_iterable(seqs), np.int64, int(lengths.sum()))
    lead = int(before is not None)
    if width is None:
        width = _round_up(int(lengths.max(initial=0)) + lead + int(after is not None), multiple,
                          limit)
    out = _fill(flat, lengths, value, lead, width)
    if before is not None:
        out[:, 0] = before
    if after is not None:
        out[np.arange(len(seqs)), lead + lengths] = after
    return torch.from_numpy(out)


def _heads(heads: Sequence[int] | None, n: int) -> Sequence[int]:
    """A row's subword heads, or ``n`` times NO_HEAD for a row without a parse."""
    return heads if heads is not None else [NO_HEAD] * n


def collate(rows: list[dict], inputs: ModelInputs = ModelInputs(), pad_multiple: int = 1,
            max_len: int | None = None) -> Batch:
    """Rows -> ``Batch``: src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS (PAD_ID padded,
    lengths rounded up to ``pad_multiple`` within ``max_len``).

    Heads (when read) are padded with -1; ``tgt_heads`` gets a leading -1 for the BOS position so
    it is aligned to ``tgt_in`` (values are the shard's, unchanged). A row without a parse (null
    heads: beyond ``parse.max_sentences_per_split``, or quarantined by the parse stage) gets -1
    everywhere, i.e. no supervision for that row only; the other rows of the batch stay
    supervised. Rows with a context (CONTEXT mode) add what the model's context rule builds."""
    srcs, tgts = [r["src_ids"] for r in rows], [r["tgt_ids"] for r in rows]
    src = padded(srcs, after=EOS_ID, multiple=pad_multiple, limit=max_len)
    tgt_in = padded(tgts, before=BOS_ID, multiple=pad_multiple, limit=max_len)
    tgt_out = padded(tgts, after=EOS_ID, width=tgt_in.size(1))
    b = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out,
              doc_id=[r.get("doc_id") for r in rows], sent_idx=[r.get("sent_idx") for r in rows])
    if any(r.get("src_heads") is not None for r in rows):
        b.src_heads = padded([_heads(r.get("src_heads"), len(r["src_ids"])) for r in rows],
                             NO_HEAD, after=NO_HEAD, width=src.size(1))
    if any(r.get("tgt_heads") is not None for r in rows):
        b.tgt_heads = padded([_heads(r.get("tgt_heads"), len(r["tgt_ids"])) for r in rows],
                             NO_HEAD, before=NO_HEAD, width=tgt_in.size(1))
    if rows and CTX_KEY in rows[0]:
        b.ctx_src, extra = inputs.context_tensors(rows)
        if b.ctx_src is not None and pad_multiple > 1:
            width = _round_up(b.ctx_src.size(1), pad_multiple, max_len)
            b.ctx_src = F.pad(b.ctx_src, (0, width - b.ctx_src.size(1)), value=PAD_ID)
        b.extra.update(extra)
    return b


def collate_documents(subdocs: list[list[dict]], inputs: ModelInputs, pad_multiple: int = 1,
                      max_len: int | None = None) -> Batch:
    """Sub-documents -> a document-level ``Batch``: the rows of every sub-document, plus the
    ``extra`` tensors the model's document rule builds from the sub-documents' sentences, each
    row's sub-document and each row's own sentence (a row whose sentence is one of its
    sub-document's needs no encoding of its own: the model reuses the document's)."""
    rows = [r for d in subdocs for r in d]
    b = collate(rows, pad_multiple=pad_multiple, max_len=max_len)
    b.extra.update(inputs.documents.collate([[r[DOC_SENT] for r in d] for d in subdocs],
                                            [n for n, d in enumerate(subdocs) for _ in d],
                                            [r["src_ids"] for r in rows]))
    return b


@dataclass(frozen=True)
class StreamBatch:
    """One batch of document lanes: ``lanes`` in all; per row its lane, whether it starts a
    document, and the row."""

    lanes: int
    items: list[tuple[int, bool, dict]]


def collate_stream(batch: StreamBatch, pad_multiple: int = 1, max_len: int | None = None) -> Batch:
    """A stream batch -> ``Batch`` with ``extra["lane"]`` (B,) long, ``extra["lanes"]`` (int)
    and ``extra["doc_start"]`` (B,) bool."""
    b = collate([r for _, _, r in batch.items], pad_multiple=pad_multiple, max_len=max_len)
    b.extra[EXTRA_DOC_START] = torch.tensor([s for _, s, _ in batch.items], dtype=torch.bool)
    b.extra[EXTRA_LANE] = torch.tensor([lane for lane, _, _ in batch.items], dtype=torch.long)
    b.extra[EXTRA_LANES] = batch.lanes
    return b


#: Parallel lanes of document streams: this many times the rows of an average batch (at most
#: one per document), so that each batch can choose sentences of similar length among them.
LANE_CHOICE = 8
#: Lanes whose sentences left reach this quantile of all lanes' are served first, so that lanes
#: drain together and a shard does not end in a tail of short batches.
BEHIND = 0.9


def stream_batches(docs: list[list[dict]], max_tokens: int) -> list[StreamBatch]:
    """Document streams: ``docs`` (in the given order) dealt to P lanes, each to the lane with
    the fewest sentences; each batch takes the next sentence of the lanes furthest behind (the
    most sentences left: the ``BEHIND`` quantile and up), then of the other lanes, in each group
    those whose next sentence is closest in length to that of the lane with the most left
    first, while their tokens (:func:`_row_len`) fit ``max_tokens``. Every sentence comes after
    its document's previous one, in an earlier batch.

    On the Bible's doc shards (``max_tokens`` 4096) this carries 0.99 of the sentence batches'
    target tokens per update with 55-76 % of the cells real; lanes sized by a shard's longest
    row, the t-th sentences side by side, carried 0.28 at 49 %, and choosing by length alone
    0.87 (long lanes were left for a tail of short batches)."""
    if not any(docs):
        return []
    lengths = [_row_len(r) for d in docs for r in d]
    per_batch = max_tokens / (sum(lengths) / len(lengths))
    P = max(1, min(len(docs), round(LANE_CHOICE * per_batch)))
    lanes: list[list[tuple[bool, dict]]] = [[] for _ in range(P)]
    sizes: list[list[int]] = [[] for _ in range(P)]
    for d in docs:
        k = min(range(P), key=lambda j: (len(lanes[j]), j))
        lanes[k].extend((i == 0, r) for i, r in enumerate(d))
        sizes[k].extend(_row_len(r) for r in d)
    head = np.zeros(P, np.int64)
    left = np.array([len(lane) for lane in lanes], np.int64)          # sentences left per lane
    width = np.array([n[0] if n else 0 for n in sizes], np.int64)     # tokens of each next row
    ids = np.arange(P)
    out: list[StreamBatch] = []
    while left.any():
        anchor = int(np.argmax(left))                 # the most left; the lowest index on ties
        live = ids[left > 0]
        ahead = left[live] < np.quantile(left[live], BEHIND)
        # lanes behind first (the anchor first among them), then by closeness in length
        order = live[np.lexsort((live, -left[live], np.abs(width[live] - width[anchor]), ahead))]
        chosen, tokens = [], 0
        for k, n in zip(order.tolist(), width[order].tolist()):
            if not chosen or tokens + n <= max_tokens:
                chosen.append(k)
                tokens += n
        chosen.sort()
        out.append(StreamBatch(P, [(k, *lanes[k][head[k]]) for k in chosen]))
        for k in chosen:
            head[k] += 1
            left[k] -= 1
            width[k] = sizes[k][head[k]] if left[k] else 0
    return out


#: Open batches a sub-document may join (the last ones: they hold sub-documents of its width).
OPEN_BATCHES = 4


def pack_documents(subdocs: list[list[dict]], max_tokens: int) -> list[list[list[dict]]]:
    """Sub-documents (kept whole) sorted by width (longest row) and packed first-fit into the
    last ``OPEN_BATCHES`` batches whose rows' tokens stay within ``max_tokens``; a sub-document
    over the budget forms a batch of its own. Whole sub-documents cannot be cut at an exact
    budget, so first fit rather than a cut in sorted order (which left a batch short by up to
    a sub-document, a fifth of the budget on the Bible)."""
    order = sorted(subdocs, key=lambda d: (max(_row_len(r) for r in d), len(d)))
    batches: list[list[list[dict]]] = []
    tokens: list[int] = []
    for d in order:
        n = sum(_row_len(r) for r in d)
        for k in range(max(0, len(batches) - OPEN_BATCHES), len(batches)):
            if tokens[k] + n <= max_tokens:
                batches[k].append(d)
                tokens[k] += n
                break
        else:
            batches.append([d])
            tokens.append(n)
    return batches


def subdocuments(docs: list[list[dict]], max_sentences: int) -> list[list[dict]]:
    return [d[a:b] for d in docs for a, b in split_document(len(d), max_sentences)]

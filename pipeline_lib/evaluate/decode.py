"""Decoding: batched beam search with incremental caching, greedy search, document-order decoding.

Settings of the seed papers: beam 4, GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha with
alpha = 0.6 (Wu et al. 2016, Eq. 14), |Y| counting the final EOS; max output length
``max_len_a * src_len + max_len_b`` tokens before EOS. A sentence stops when ``beam`` hypotheses
have ended (fairseq's criterion) or at its max length, and is then dropped from the batch so the
rest runs on fewer rows.

Two ways to walk a test set:

* sentence mode (:func:`translate_sentences`): sorted by length, batched, for models that
  translate sentences independently;
* document mode (:func:`translate_documents`): sentence ``i`` of a batch of documents at a time,
  in order, calling the model's ``start_documents`` / ``finish_sentences`` hooks so that a cache
  model can record the 1-best history; used when ``model.needs_history``.

Context-aware inputs are built by pipeline_lib.training.context from the *source* document, exactly as
the loader builds them in training (the model's ``data_mode``): CONTEXT models get
``ctx_src`` / ``extra["ctx_sents"]`` from each sentence's previous source sentences (batching
still mixes documents); DOCUMENT (cross-task) models translate tagged sentences either with
their sub-document (``--unit document``, ``extra["doc_src"]``/``doc_index``, several
sub-documents per batch) or alone (``--unit sentence``), and the language tag is stripped from
the hypotheses.

CLI::

    python -m pipeline_lib.evaluate.decode --checkpoint DIR --shards DIR --spm MODEL --output FILE \
        --beam 4 --lenpen 0.6 --max-len-a 1.2 --max-len-b 10 --batch-size 64 --nbest 1 \
        [--unit document|sentence]
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.constants import BOS_ID, EOS_ID, MANIFEST_FILE, PAD_ID, DataMode
from pipeline_lib.training.context import CTX_KEY, ContextSpec, add_context, context_tensors, tagged
from pipeline_lib.preprocess.noise import split_document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BeamConfig:
    """Search settings (config.yaml ``decode`` section)."""

    beam: int = 4
    lenpen: float = 0.6
    max_len_a: float = 1.2
    max_len_b: int = 10
    batch_size: int = 64      # sentences (sentence mode) or documents (document mode) per batch
    nbest: int = 1
    greedy: bool = False

    def __post_init__(self) -> None:
        if self.beam < 1 or not 1 <= self.nbest <= self.beam:
            raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={self.beam} nbest={self.nbest}")


@dataclass
class Hypothesis:
    tokens: list[int]     # generated ids, without BOS/EOS
    score: float          # log P(Y|X) / lp(|Y|)
    logprob: float        # log P(Y|X), EOS included


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty, Wu et al. (2016) Eq. 14: ((5 + |Y|) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def source_batch(srcs: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Batch:
    """Right-padded (B, S) source ids, each ending with EOS; empty target tensors."""
    S = max(len(s) for s in srcs) + 1
    src = torch.full((len(srcs), S), PAD_ID, dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        src[i, len(s)] = EOS_ID
    empty = torch.zeros(len(srcs), 0, dtype=torch.long)
    return Batch(src=src, tgt_in=empty, tgt_out=empty).to(device)


def _max_lengths(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> torch.Tensor:
    """(B,) longest output (tokens before EOS) per sentence, within the model's positions."""
    src_len = batch.src.ne(PAD_ID).sum(1).float()
    limit = model.cfg.max_len - 1
    return (cfg.max_len_a * src_len + cfg.max_len_b).long().clamp(1, limit)


def _mask_specials(lp: torch.Tensor, force_eos: torch.Tensor) -> torch.Tensor:
    """No PAD/BOS ever; only EOS on rows that reached their max length. lp: (R, V), force_eos: (R,)."""
    lp[:, PAD_ID] = -math.inf
    lp[:, BOS_ID] = -math.inf
    if force_eos.any():
        eos_only = torch.full_like(lp, -math.inf)
        eos_only[:, EOS_ID] = lp[:, EOS_ID]
        lp = torch.where(force_eos[:, None], eos_only, lp)
    return lp


@torch.inference_mode()
def greedy_search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    """Arg-max decoding with the same caching, max length and scoring as :func:`beam_search`."""
    B = batch.src.size(0)
    max_len = _max_lengths(model, batch, cfg)
    state = model.init_state(model.encode(batch))
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=batch.src.device)
    hist = torch.zeros(B, 0, dtype=torch.long, device=batch.src.device)
    total = torch.zeros(B, device=batch.src.device)
    active = torch.arange(B, device=batch.src.device)
    out: list[list[Hypothesis]] = [[] for _ in range(B)]
    for step in range(int(max_len.max()) + 1):
        lp, state = model.decode_step(tokens, state, step)
        lp = _mask_specials(lp, step >= max_len[active])
        best, tok = lp.max(dim=1)                                          # (n,)
        total = total + best
        hist = torch.cat([hist, tok[:, None]], dim=1)
        done = tok.eq(EOS_ID)
        for i in done.nonzero().flatten().tolist():
            out[int(active[i])] = [Hypothesis(hist[i, :-1].tolist(),
                                              float(total[i]) / length_penalty(step + 1, cfg.lenpen),
                                              float(total[i]))]
        if done.all():
            break
        keep = (~done).nonzero().flatten()
        if keep.numel() < done.numel():
            state = state.reorder(keep)
            active, hist, total = active[keep], hist[keep], total[keep]
        tokens = hist[:, -1:]
    return out


@torch.inference_mode()
def beam_search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    """Batched beam search; returns per sentence the ``cfg.nbest`` best hypotheses, best first.

    Each step takes the top 2K of the (n, K*V) candidates: EOS candidates among the first K end a
    hypothesis; the first K non-EOS candidates continue, so every live beam stays full.
    """
    K, dev = cfg.beam, batch.src.device
    B = batch.src.size(0)
    max_len = _max_lengths(model, batch, cfg)
    state = model.init_state(model.encode(batch).reorder(torch.arange(B, device=dev).repeat_interleave(K)))
    tokens = torch.full((B * K, 1), BOS_ID, dtype=torch.long, device=dev)
    hist = torch.zeros(B * K, 0, dtype=torch.long, device=dev)          # (n*K, step)
    scores = torch.full((B, K), -math.inf, device=dev)
    scores[:, 0] = 0.0                      # all beams start identical: expand only the first
    active = torch.arange(B, device=dev)    # sentence index of each live row group
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    order = torch.arange(2 * K, device=dev)
    for step in range(int(max_len.max()) + 1):
        n = active.numel()
        lp, state = model.decode_step(tokens, state, step)                 # (n*K, V)
        at_max = step >= max_len[active]                                   # (n,)
        lp = _mask_specials(lp, at_max.repeat_interleave(K))
        V = lp.size(1)
        cand = (scores[:, :, None] + lp.view(n, K, V)).view(n, K * V)
        top_s, top_i = cand.topk(min(2 * K, K * V), dim=1)                  # (n, 2K)
        beam_i, tok = top_i // V, top_i % V
        is_eos = tok.eq(EOS_ID)
        ended = is_eos[:, :K] & top_s[:, :K].isfinite()
        lp_norm = length_penalty(step + 1, cfg.lenpen)
        for i, j in ended.nonzero().tolist():
            sent = int(active[i])
            if len(finished[sent]) < K:
                row = i * K + int(beam_i[i, j])
                finished[sent].append(Hypothesis(hist[row].tolist(), float(top_s[i, j]) / lp_norm,
                                                 float(top_s[i, j])))
        # first K non-EOS candidates continue (EOS ones sort after all non-EOS ones)
        cont = (is_eos.long() * 2 * K + order[: top_s.size(1)]).topk(K, dim=1, largest=False).indices
        scores = top_s.gather(1, cont)
        next_tok = tok.gather(1, cont)
        rows = (torch.arange(n, device=dev)[:, None] * K + beam_i.gather(1, cont))   # (n, K)
        done = at_max | torch.tensor([len(finished[int(s)]) >= K for s in active.tolist()], device=dev)
        if done.all():
            break
        keep = (~done).nonzero().flatten()
        rows, scores, next_tok, active = rows[keep], scores[keep], next_tok[keep], active[keep]
        rows = rows.reshape(-1)
        state = state.reorder(rows)
        hist = torch.cat([hist[rows], next_tok.reshape(-1, 1)], dim=1)
        tokens = next_tok.reshape(-1, 1)
    return [sorted(f, key=lambda h: -h.score)[: cfg.nbest] for f in finished]


def search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    return greedy_search(model, batch, cfg) if cfg.greedy else beam_search(model, batch, cfg)


def strip_tag(tokens: list[int], tag: int | None) -> list[int]:
    """A cross-task hypothesis without its leading language tag (other models: unchanged)."""
    return tokens[1:] if tag is not None and tokens[:1] == [tag] else tokens


def translate_sentences(model: torch.nn.Module, srcs: Sequence[Sequence[int]], cfg: BeamConfig,
                        device: torch.device | str = "cpu", contexts: Sequence | None = None,
                        spec: ContextSpec = ContextSpec()) -> list[list[Hypothesis]]:
    """Translate sentences (ids without EOS), sorted by length and batched; input order out.
    ``contexts[i]``: sentence i's context (pipeline_lib.training.context layout for ``spec``), for
    models whose context is fixed by the source document (no history needed)."""
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    out: list[list[Hypothesis]] = [[] for _ in srcs]
    for start in range(0, len(order), cfg.batch_size):
        idx = order[start:start + cfg.batch_size]
        batch = source_batch([srcs[i] for i in idx])
        if contexts is not None:
            batch.ctx_src, extra = context_tensors([{CTX_KEY: contexts[i]} for i in idx], spec)
            batch.extra.update(extra)
        for i, hyps in zip(idx, search(model, batch.to(device), cfg)):
            out[i] = hyps
    return out


def translate_subdocuments(model: torch.nn.Module, documents: Sequence[Sequence[Sequence[int]]],
                           max_sentences: int, cfg: BeamConfig,
                           device: torch.device | str = "cpu") -> list[list[list[Hypothesis]]]:
    """Cross-task document mode: every sentence with its sub-document as ``doc_src`` (sentences
    are tagged ids without EOS). Sub-documents (``split_document``, as in training) are sorted
    by length and packed whole into batches of about ``cfg.batch_size`` sentences."""
    from pipeline_lib.models.crosstask import document_extra

    subs = [(d, a, b) for d, doc in enumerate(documents) for a, b in split_document(len(doc), max_sentences)]
    subs.sort(key=lambda x: max(len(s) for s in documents[x[0]][x[1]:x[2]]))
    out: list[list[list[Hypothesis]]] = [[[] for _ in doc] for doc in documents]
    group: list[tuple[int, int, int]] = []

    def run(group: list[tuple[int, int, int]]) -> None:
        sents = [documents[d][i] for d, a, b in group for i in range(a, b)]
        batch = source_batch(sents)
        batch.extra.update(document_extra([documents[d][a:b] for d, a, b in group],
                                          [n for n, (_, a, b) in enumerate(group) for _ in range(a, b)]))
        found = iter(search(model, batch.to(device), cfg))
        for d, a, b in group:
            for i in range(a, b):
                out[d][i] = next(found)

    for sub in subs:
        if group and sum(b - a for _, a, b in group) + sub[2] - sub[1] > cfg.batch_size:
            run(group)
            group = []
        group.append(sub)
    if group:
        run(group)
    return out


def translate_documents(model: torch.nn.Module, documents: Sequence[Sequence[Sequence[int]]],
                        cfg: BeamConfig, device: torch.device | str = "cpu") -> list[list[list[Hypothesis]]]:
    """Translate documents in sentence order, ``cfg.batch_size`` documents side by side.

    Before a group: ``model.start_documents(n)``. For sentence index i: one search over the
    documents that still have an i-th sentence (their slots in ``batch.extra["doc_slot"]``, also
    ``batch.sent_idx``), then ``model.finish_sentences(1-best ids, slots)``. Documents are grouped by
    length so few slots idle. Returns hypotheses per document and sentence, in input order.
    """
    order = sorted(range(len(documents)), key=lambda d: -len(documents[d]))
    out: list[list[list[Hypothesis]]] = [[[] for _ in doc] for doc in documents]
    for start in range(0, len(order), cfg.batch_size):
        group = order[start:start + cfg.batch_size]
        model.start_documents(len(group))
        for i in range(max(len(documents[d]) for d in group)):
            slots = [s for s, d in enumerate(group) if len(documents[d]) > i]
            batch = source_batch([documents[group[s]][i] for s in slots], device)
            batch.doc_id = [str(group[s]) for s in slots]
            batch.sent_idx = [i] * len(slots)
            batch.extra["doc_slot"] = torch.tensor(slots, dtype=torch.long, device=device)
            hyps = search(model, batch, cfg)
            model.finish_sentences([h[0].tokens for h in hyps], slots)
            for s, h in zip(slots, hyps):
                out[group[s]][i] = h
    return out


# --- CLI -----------------------------------------------------------------------------------
def read_shards(shard_dir: Path) -> list[dict]:
    """Rows (doc_id, sent_idx, src_ids) of the shards listed in ``index.parquet``, file order."""
    import pyarrow.parquet as pq

    index_path = shard_dir / "index.parquet"
    if not index_path.exists():
        raise FileNotFoundError(f"{index_path}: shard index not found")
    rows: list[dict] = []
    for name in pq.read_table(index_path, columns=["file"]).column("file").to_pylist():
        path = shard_dir / Path(name).name
        try:
            table = pq.read_table(path, columns=["doc_id", "sent_idx", "src_ids"])
        except Exception as e:  # noqa: BLE001 - any unreadable shard is fatal, named
            raise RuntimeError(f"{path}: cannot read shard: {e}") from e
        rows.extend(table.to_pylist())
    return rows


def group_documents(rows: list[dict]) -> tuple[list[str], list[list[dict]]]:
    """Documents in order of first appearance, sentences by ``sent_idx``."""
    docs: dict[str, list[dict]] = {}
    for r in rows:
        docs.setdefault(r["doc_id"], []).append(r)
    return list(docs), [sorted(d, key=lambda r: r["sent_idx"]) for d in docs.values()]


def decode_file(model: torch.nn.Module, rows: list[dict], cfg: BeamConfig, spm_path: Path,
                output: Path, device: str, document_mode: bool, unit: str = "document",
                seed: int = 1) -> dict:
    """Translate ``rows`` and write the hypothesis Parquet; returns the speed/count record.

    ``document_mode``: document-order decoding with history (cache). Otherwise the model's
    ``data_mode`` decides the input: CONTEXT models read their source context, DOCUMENT models
    their sub-document (``unit="document"``) or the tagged sentence alone (``unit="sentence"``).
    ``seed``: the CAMN random-context draw (the training seed reproduces training's draw)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    limit = model.cfg.max_len - 1
    truncated = sum(len(r["src_ids"]) > limit for r in rows)
    doc_ids, docs = group_documents(rows)
    spec = ContextSpec.for_model(model, spm_path)
    mode = spec.mode if not document_mode else DataMode.STREAM
    if spec.tags:   # room for the tag within the model's positions
        srcs = [[tagged(list(r["src_ids"])[:limit - 1], spec.tag) for r in d] for d in docs]
    else:
        srcs = [[list(r["src_ids"])[:limit] for r in d] for d in docs]
    contexts = None
    if mode is DataMode.CONTEXT:
        enriched = [[{"doc_id": r["doc_id"], "sent_idx": r["sent_idx"], "src_ids": s}
                     for r, s in zip(d, ds)] for d, ds in zip(docs, srcs)]
        add_context(enriched, spec, model.cfg.max_len, seed)
        contexts = [r[CTX_KEY] for d in enriched for r in d]
    t0 = time.perf_counter()
    if mode is DataMode.STREAM:
        hyps = translate_documents(model, srcs, cfg, device)
    elif mode is DataMode.DOCUMENT and unit == "document":
        hyps = translate_subdocuments(model, srcs, spec.max_sentences, cfg, device)
    else:
        flat = translate_sentences(model, [s for d in srcs for s in d], cfg, device, contexts, spec)
        it = iter(flat)
        hyps = [[next(it) for _ in d] for d in srcs]
    seconds = time.perf_counter() - t0
    tag = spec.tag
    cols: dict[str, list] = {"doc_id": [], "sent_idx": [], "hyp": [], "score": [], "nbest": []}
    n_tokens = 0
    for doc_id, doc, doc_hyps in zip(doc_ids, docs, hyps):
        for r, h in zip(doc, doc_hyps):
            cols["doc_id"].append(doc_id)
            cols["sent_idx"].append(int(r["sent_idx"]))
            cols["hyp"].append(sp.decode(strip_tag(h[0].tokens, tag)))
            cols["score"].append(h[0].score)
            cols["nbest"].append([sp.decode(strip_tag(x.tokens, tag)) for x in h])
            n_tokens += len(strip_tag(h[0].tokens, tag))
    if cfg.nbest == 1:
        del cols["nbest"]
    table = pa.table({**cols, "sent_idx": pa.array(cols["sent_idx"], pa.int32())})
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(output.suffix + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(output)
    n = len(cols["hyp"])
    return {"sentences": n, "documents": len(docs), "hyp_tokens": n_tokens, "truncated_sources": truncated,
            "decode_seconds": round(seconds, 3),
            "sentences_per_s": round(n / seconds, 2) if seconds else None,
            "tokens_per_s": round(n_tokens / seconds, 2) if seconds else None,
            "mode": "document" if document_mode else "sentence", "data_mode": spec.mode.value,
            "unit": unit if spec.mode is DataMode.DOCUMENT else None}


def main(argv: Sequence[str] | None = None) -> None:
    from pipeline_lib.training.checkpoint import load_model, read_config, resolve_checkpoint
    from pipeline_lib.manifest import Manifest

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory (load_model)")
    p.add_argument("--shards", type=Path, required=True, help="shard directory with index.parquet")
    p.add_argument("--spm", type=Path, required=True, help="sentencepiece model for detokenisation")
    p.add_argument("--output", type=Path, required=True, help="hypothesis Parquet to write")
    p.add_argument("--manifest", type=Path, help="manifest path (default: <output stem>.manifest.json)")
    d = BeamConfig()
    p.add_argument("--beam", type=int, default=d.beam)
    p.add_argument("--lenpen", type=float, default=d.lenpen)
    p.add_argument("--max-len-a", type=float, default=d.max_len_a)
    p.add_argument("--max-len-b", type=int, default=d.max_len_b)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--nbest", type=int, default=d.nbest)
    p.add_argument("--greedy", action="store_true", help="arg-max search instead of beam search")
    p.add_argument("--mode", choices=["auto", "sentence", "document"], default="auto",
                   help="auto: document mode iff the model needs the history of earlier sentences")
    p.add_argument("--unit", choices=["document", "sentence"], default="document",
                   help="cross-task models: translate with the sub-document (doc_src) or alone")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = BeamConfig(beam=a.beam, lenpen=a.lenpen, max_len_a=a.max_len_a, max_len_b=a.max_len_b,
                     batch_size=a.batch_size, nbest=a.nbest, greedy=a.greedy)
    manifest = Manifest(stage="decode_test", params={**asdict(cfg), "mode": a.mode, "unit": a.unit,
                                                     "device": a.device})
    for path in (a.checkpoint, a.shards / "index.parquet", a.spm):
        manifest.add_input(path)
    model, model_cfg = load_model(a.checkpoint, device=a.device)
    model.eval()
    document_mode = a.mode == "document" or (a.mode == "auto" and getattr(model, "needs_history", False))
    rows = read_shards(a.shards)
    log.info("decoding %d sentences with %s (%d parameters)", len(rows), model_cfg.name, model.num_parameters())
    # the training seed, so the CAMN random-context ablation draws the memory it was trained with
    seed = int(read_config(resolve_checkpoint(a.checkpoint)).get("train", {}).get("seed", 1))
    manifest.counts = decode_file(model, rows, cfg, a.spm, a.output, a.device, document_mode,
                                  a.unit, seed)
    manifest.extra["model"] = model_cfg.to_dict()
    manifest.write(a.manifest or a.output.with_name(f"{a.output.stem}.{MANIFEST_FILE}"))
    log.info("%s", manifest.counts)


if __name__ == "__main__":
    main()

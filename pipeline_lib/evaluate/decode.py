"""Test-set decoding: sentence, context and document-order translation of shard files.

The search itself (beam, greedy, length penalty) is pipeline_lib.models.search.

Two ways to walk a test set:

* sentence mode (:func:`translate_sentences`): sorted by length, batched, for models that
  translate sentences independently;
* document mode (:func:`translate_documents`): sentence ``i`` of a batch of documents at a time,
  in order, calling the model's ``start_documents`` / ``finish_sentences`` hooks so that a model
  with translation history can record the 1-best; used when the model's inputs say
  ``in_document_order``.

Context-aware inputs are built from the *source* document by the model's own rules
(pipeline_lib/models/inputs.py), exactly as the loader builds them in training: CONTEXT models
get their context from each sentence's document (batching still mixes documents); DOCUMENT
models translate tagged sentences either with their sub-document (``--unit document``, several
sub-documents per batch) or alone (``--unit sentence``), and the tag is stripped from the
hypotheses.

CLI::

    python -m pipeline_lib.evaluate.decode --checkpoint DIR --shards DIR --spm MODEL --output FILE \
        --beam 4 --lenpen 0.6 --max-len-a 1.2 --max-len-b 10 --batch-size 64 --nbest 1 \
        [--unit document|sentence]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm import tqdm

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.batch import DataMode
from pipeline_lib.layout import MANIFEST_FILE
from pipeline_lib.context_conditions import CONTEXT_CONDITIONS
from pipeline_lib.mixed_documents import regroup
from pipeline_lib.progress import progress_interval
from pipeline_lib.models.inputs import (CTX_KEY, ModelInputs, inputs_for, with_context,
                                        within_document)
from pipeline_lib.models.search import BeamConfig, Hypothesis, search, source_batch
from pipeline_lib.documents import split_document

log = logging.getLogger(__name__)


def translate_sentences(model: torch.nn.Module, srcs: Sequence[Sequence[int]], cfg: BeamConfig,
                        device: torch.device | str = "cpu", contexts: Sequence | None = None,
                        inputs: ModelInputs = ModelInputs(),
                        progress: bool = False) -> list[list[Hypothesis]]:
    """Translate sentences (ids without EOS), sorted by length and batched; input order out.
    ``contexts[i]``: sentence i's context (built by ``inputs.context``), for models whose
    context is fixed by the source document (no history needed)."""
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    out: list[list[Hypothesis]] = [[] for _ in srcs]
    for start in tqdm(range(0, len(order), cfg.batch_size), desc="translate", unit="batch",
                      disable=not progress, mininterval=progress_interval()):
        idx = order[start:start + cfg.batch_size]
        batch = source_batch([srcs[i] for i in idx])
        if contexts is not None:
            batch.ctx_src, extra = inputs.context_tensors([{CTX_KEY: contexts[i]} for i in idx])
            batch.extra.update(extra)
        for i, hyps in zip(idx, search(model, batch.to(device), cfg)):
            out[i] = hyps
    return out


def translate_subdocuments(model: torch.nn.Module, documents: Sequence[Sequence[Sequence[int]]],
                           inputs: ModelInputs, cfg: BeamConfig, device: torch.device | str = "cpu",
                           progress: bool = False) -> list[list[list[Hypothesis]]]:
    """DOCUMENT-mode models: every sentence with its sub-document (sentences are tagged ids
    without EOS; the model's document rule builds the tensors). Sub-documents
    (``split_document``, as in training) are sorted by length and packed whole into batches of
    about ``cfg.batch_size`` sentences."""
    max_sentences = inputs.max_sentences
    subs = [(d, a, b) for d, doc in enumerate(documents) for a, b in split_document(len(doc), max_sentences)]
    subs.sort(key=lambda x: max(len(s) for s in documents[x[0]][x[1]:x[2]]))
    out: list[list[list[Hypothesis]]] = [[[] for _ in doc] for doc in documents]
    group: list[tuple[int, int, int]] = []

    def run(group: list[tuple[int, int, int]]) -> None:
        sents = [documents[d][i] for d, a, b in group for i in range(a, b)]
        batch = source_batch(sents)
        batch.extra.update(inputs.documents.collate(
            [documents[d][a:b] for d, a, b in group],
            [n for n, (_, a, b) in enumerate(group) for _ in range(a, b)], sents))
        found = iter(search(model, batch.to(device), cfg))
        for d, a, b in group:
            for i in range(a, b):
                out[d][i] = next(found)

    for sub in tqdm(subs, desc="translate", unit="sub-document", disable=not progress,
                    mininterval=progress_interval()):
        if group and sum(b - a for _, a, b in group) + sub[2] - sub[1] > cfg.batch_size:
            run(group)
            group = []
        group.append(sub)
    if group:
        run(group)
    return out


#: Documents open side by side in document-order decoding, per sentence of a search: each
#: search picks among them the next sentences of similar length.
DOC_LANES = 4


def translate_documents(model: torch.nn.Module, documents: Sequence[Sequence[Sequence[int]]],
                        cfg: BeamConfig, device: torch.device | str = "cpu",
                        progress: bool = False) -> list[list[list[Hypothesis]]]:
    """Translate documents in sentence order, up to ``cfg.batch_size`` sentences per search.

    Documents (longest first) are decoded in groups of ``DOC_LANES`` x ``batch_size``, side by
    side: before a group ``model.start_documents(n)``; then each search takes the next sentence
    of the document with the most sentences left and the next sentences closest to it in
    length (one per document, their slots in ``batch.extra["doc_slot"]``, also
    ``batch.sent_idx``), then ``model.finish_sentences(1-best ids, slots)``. A document's
    sentences go in order, each after the one before it was finished; similar lengths in a
    search waste few beam steps (a search of the i-th sentences of fixed documents ran as long
    as the longest of them), and documents drain together. Returns hypotheses per document and
    sentence, in input order.
    """
    order = sorted(range(len(documents)), key=lambda d: -len(documents[d]))
    out: list[list[list[Hypothesis]]] = [[[] for _ in doc] for doc in documents]
    size = DOC_LANES * cfg.batch_size
    bar = tqdm(total=sum(map(len, documents)), desc="translate", unit="sentence",
               disable=not progress, mininterval=progress_interval())
    for start in range(0, len(order), size):
        group = [documents[d] for d in order[start:start + size]]
        model.start_documents(len(group))
        head = [0] * len(group)
        while live := [s for s, doc in enumerate(group) if head[s] < len(doc)]:
            anchor = max(live, key=lambda s: (len(group[s]) - head[s], -s))
            width = len(group[anchor][head[anchor]])
            slots = sorted(sorted(live, key=lambda s: (abs(len(group[s][head[s]]) - width),
                                                       head[s] - len(group[s]), s))[:cfg.batch_size])
            batch = source_batch([group[s][head[s]] for s in slots], device)
            batch.doc_id = [str(order[start + s]) for s in slots]
            batch.sent_idx = [head[s] for s in slots]
            batch.extra["doc_slot"] = torch.tensor(slots, dtype=torch.long, device=device)
            hyps = search(model, batch, cfg)
            model.finish_sentences([h[0].tokens for h in hyps], slots)
            for s, h in zip(slots, hyps):
                out[order[start + s]][head[s]] = h
                head[s] += 1
            bar.update(len(slots))
    bar.close()
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


@dataclass
class Translation:
    """The detokenised n-best list of one input row (best first), with the search's scores."""

    doc_id: str
    sent_idx: int
    hyps: list[str]
    scores: list[float]
    tokens: int          # pieces of the best hypothesis (without a model's tag)


def translate_rows(model: torch.nn.Module, rows: list[dict], cfg: BeamConfig, spm_path: Path,
                   device: str, document_mode: bool, unit: str = "document", seed: int = 1,
                   progress: bool = False, context: str = "true") -> tuple[list[Translation], dict]:
    """Translate ``rows`` (doc_id, sent_idx, src_ids) the way the model's inputs say, in
    document order; returns the translations and the speed/count record.

    ``document_mode``: document-order decoding with history. Otherwise the model's inputs decide:
    CONTEXT models read their source context, DOCUMENT models their sub-document
    (``unit="document"``) or the tagged sentence alone (``unit="sentence"``). ``seed``: the data
    seed of context rules that draw at random (the training seed reproduces training's draw).
    ``context``: ``random`` or ``empty`` replace a CONTEXT model's true context, or regroup a
    document reader's documents (``mixed_documents.regroup``; an ablation: does the model
    translate better with its document's context than with any?).
    Test-set decoding (:func:`decode_file`) and ``translate`` both come through here, so a text
    translated by hand gets exactly the pipeline's hypotheses."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    limit = model.cfg.max_len - 1
    truncated = sum(len(r["src_ids"]) > limit for r in rows)
    doc_ids, docs = group_documents(rows)
    inputs = with_context(inputs_for(model, spm_path), context, model.cfg.name)
    if within_document(inputs, docs):
        log.warning("context random: one document, so its own sentences outside each "
                    "sentence's true context, not other documents'")
        context = "random_within_document"
    mode = inputs.mode if not document_mode else DataMode.STREAM
    room = limit - (inputs.tag is not None)   # the tag stays within the model's positions
    srcs = [[inputs.tag_sentence(list(r["src_ids"])[:room]) for r in d] for d in docs]
    contexts = None
    if mode is DataMode.CONTEXT:
        enriched = [[{"doc_id": r["doc_id"], "sent_idx": r["sent_idx"], "src_ids": s}
                     for r, s in zip(d, ds)] for d, ds in zip(docs, srcs)]
        inputs.add_context(enriched, seed)
        contexts = [r[CTX_KEY] for d in enriched for r in d]
    t0 = time.perf_counter()
    whole = mode is DataMode.STREAM or (mode is DataMode.DOCUMENT and unit == "document")
    if whole and inputs.documents_from != "true":
        # the documents regrouped from other documents' sentences (or one sentence each), and
        # the hypotheses put back in their own documents' places
        where = regroup([[(d, i) for i in range(len(doc))] for d, doc in enumerate(srcs)],
                        inputs.documents_from, seed)
        srcs_in = [[srcs[d][i] for d, i in g] for g in where]
    else:
        where, srcs_in = None, srcs
    if mode is DataMode.STREAM:
        hyps = translate_documents(model, srcs_in, cfg, device, progress)
    elif mode is DataMode.DOCUMENT and unit == "document":
        hyps = translate_subdocuments(model, srcs_in, inputs, cfg, device, progress)
    else:
        flat = translate_sentences(model, [s for d in srcs for s in d], cfg, device, contexts,
                                   inputs, progress=progress)
        it = iter(flat)
        hyps = [[next(it) for _ in d] for d in srcs]
    if where is not None:
        back: list[list] = [[None] * len(d) for d in srcs]
        for g, hs in zip(where, hyps):
            for (d, i), h in zip(g, hs):
                back[d][i] = h
        hyps = back
    seconds = time.perf_counter() - t0
    out: list[Translation] = []
    for doc_id, doc, doc_hyps in zip(doc_ids, docs, hyps):
        for r, h in zip(doc, doc_hyps):
            out.append(Translation(doc_id, int(r["sent_idx"]),
                                   [sp.decode(inputs.strip_tag(x.tokens)) for x in h],
                                   [x.score for x in h], len(inputs.strip_tag(h[0].tokens))))
    n, n_tokens = len(out), sum(t.tokens for t in out)
    record = {"sentences": n, "documents": len(docs), "hyp_tokens": n_tokens,
              "truncated_sources": truncated, "decode_seconds": round(seconds, 3),
              "sentences_per_s": round(n / seconds, 2) if seconds else None,
              "tokens_per_s": round(n_tokens / seconds, 2) if seconds else None,
              "mode": "document" if document_mode else "sentence",
              "data_mode": inputs.mode.value,
              "unit": unit if inputs.mode is DataMode.DOCUMENT else None, "context": context}
    return out, record


def decode_file(model: torch.nn.Module, rows: list[dict], cfg: BeamConfig, spm_path: Path,
                output: Path, device: str, document_mode: bool, unit: str = "document",
                seed: int = 1, context: str = "true", progress: bool = False,
                detokenize: Callable[[str], str] | None = None) -> dict:
    """Translate ``rows`` (:func:`translate_rows`) and write the hypothesis Parquet (columns
    doc_id, sent_idx, hyp, score, and nbest when ``cfg.nbest`` > 1); returns the speed/count
    record. ``detokenize``: a model trained on pre-tokenized text (config ``tokenize``) writes
    running text (pretokenize.detokenizer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    translations, record = translate_rows(model, rows, cfg, spm_path, device, document_mode,
                                          unit, seed, progress, context)
    text = detokenize or (lambda line: line)
    cols: dict[str, list] = {"doc_id": [t.doc_id for t in translations],
                             "sent_idx": pa.array([t.sent_idx for t in translations], pa.int32()),
                             "hyp": [text(t.hyps[0]) for t in translations],
                             "score": [t.scores[0] for t in translations]}
    if cfg.nbest > 1:
        cols["nbest"] = [[text(h) for h in t.hyps] for t in translations]
    with atomic_output(output) as tmp:
        pq.write_table(pa.table(cols), tmp)
    return record


@exits_on_full_disk
def main(argv: Sequence[str] | None = None) -> int:
    from pipeline_lib.checkpoint import DamagedCheckpoint, load_model, training_seed
    from pipeline_lib.manifest import Manifest

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory (load_model)")
    p.add_argument("--shards", type=Path, required=True, help="shard directory with index.parquet")
    p.add_argument("--spm", type=Path, required=True, help="sentencepiece model for detokenisation")
    p.add_argument("--output", type=Path, required=True, help="hypothesis Parquet to write")
    p.add_argument("--manifest", type=Path, help="manifest path (default: <output stem>.manifest.json)")
    BeamConfig.add_arguments(p)
    p.add_argument("--greedy", action="store_true", help="arg-max search instead of beam search")
    p.add_argument("--static", choices=["auto", "on", "off"], default="auto",
                   help="beam search in fixed shapes, replayed as a CUDA graph (auto: on CUDA)")
    p.add_argument("--mode", choices=["auto", "sentence", "document"], default="auto",
                   help="auto: document mode iff the model needs the history of earlier sentences")
    p.add_argument("--unit", choices=["document", "sentence"], default="document",
                   help="document-level models: translate with the sub-document or alone")
    p.add_argument("--context", choices=CONTEXT_CONDITIONS, default="true",
                   help="context models (doct, camn, cache, crosstask): their document's "
                        "context, other documents' sentences (random) or none (empty): a "
                        "test-time ablation")
    p.add_argument("--detokenize", type=stage_options.json_value, default=None, metavar="JSON",
                   help="{\"lang\": target, \"steps\": [...]}: the model was trained on text "
                        "pre-tokenized so (config tokenize); write running text")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    a = stage_options.parse_args(p, argv)
    if problems := BeamConfig.flag_problems(a):
        p.error("; ".join(problems))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = BeamConfig(beam=a.beam, lenpen=a.lenpen, max_len_a=a.max_len_a, max_len_b=a.max_len_b,
                     batch_size=a.batch_size, nbest=a.nbest, greedy=a.greedy,
                     static={"auto": None, "on": True, "off": False}[a.static])
    manifest = Manifest(stage="decode_test", params={**asdict(cfg), "mode": a.mode, "unit": a.unit,
                                                     "device": a.device, "context": a.context})
    for path in (a.checkpoint, a.shards / "index.parquet", a.spm):
        manifest.add_input(path)
    try:
        model, model_cfg = load_model(a.checkpoint, device=a.device, spm_model=a.spm)
    except (FileNotFoundError, DamagedCheckpoint) as e:
        p.exit(2, f"decode: error: {e}\n")
    model.eval()
    try:    # refused before any decoding: a context condition needs a context rule
        with_context(inputs_for(model, a.spm), a.context, model_cfg.name)
    except ValueError as e:
        p.exit(2, f"decode: error: {a.checkpoint}: {e}\n")
    document_mode = a.mode == "document" or (a.mode == "auto" and inputs_for(model, a.spm).in_document_order)
    rows = read_shards(a.shards)
    log.info("decoding %d sentences with %s (%d parameters)", len(rows), model_cfg.name, model.num_parameters())
    # the training seed, so a context rule that draws at random draws what training drew
    seed = training_seed(a.checkpoint)
    # progress with its rate and time left in the job's log (progress_interval)
    detokenize = None
    if a.detokenize:   # imported only then: the GPU machine has no sacremoses
        from pipeline_lib.tokenization import detokenizer

        detokenize = detokenizer(a.detokenize["lang"], a.detokenize["steps"])
    manifest.counts = decode_file(model, rows, cfg, a.spm, a.output, a.device, document_mode,
                                  a.unit, seed, a.context, progress=True, detokenize=detokenize)
    manifest.extra["model"] = model_cfg.to_dict()
    manifest.write(a.manifest or a.output.with_name(f"{a.output.stem}.{MANIFEST_FILE}"))
    log.info("%s", manifest.counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())

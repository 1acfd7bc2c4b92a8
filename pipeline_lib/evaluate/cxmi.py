"""Does a model use its context? Forced decoding of the test references under the true, a
random (other documents') and an empty context.

WHY beside BLEU: a context model can beat its control for reasons that have nothing to do with
context (more parameters, more updates, a regulariser: Kim et al. 2019; Li et al. 2020, where
multi-encoder gains persist with random context). Conditional cross-mutual information
(Fernandes et al. 2021, "Measuring and Increasing Context Usage in Context-Aware Machine
Translation", Sec. 3) measures the use directly on the model's own probabilities:

    CXMI(C -> Y | X) = H(Y | X) - H(Y | X, C)
                     ~ (1/N) sum_i [log q(y_i | x_i, C_i) - log q(y_i | x_i)]

with the same model scoring each reference once with its context and once without (here: the
context a document's first sentence gets). Positive: the true context makes the references more
likely. ``true_vs_random`` asks the second question: whether it is *this document's* context that
helps, or any sentences in that place (the random-context twin's question at test time).

Intervals: a percentile bootstrap of the mean difference, resampling whole documents (their
sentences' errors are correlated; Bible chapters here) and, beside it, single sentences.

Which models: CONTEXT-mode models (DocT, CAMN), whose context rule is swapped
(:meth:`~pipeline_lib.models.inputs.ModelInputs.ablated`). A sentence-level model reads no context,
so every condition feeds it the same batches and its CXMI is 0 by construction (a check of the
measure). STREAM (the cache's translation history) and DOCUMENT (cross-task's sub-documents)
models are reported as not measured, with the reason: their context is not a per-sentence input
that a rule can swap (choice written down here; the cache's would need forced decoding of
reference histories). Their use of context is measured in BLEU instead, by decoding them on
documents regrouped from other documents' sentences and by their random-context twins
(pipeline_lib/mixed_documents.py).

CLI::

    python -m pipeline_lib.evaluate.cxmi --checkpoint DIR --shards DIR --spm MODEL --output JSON \
        [--max-tokens 4096 --draws 1000 --seed 1 --threads 1]
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output
from pipeline_lib.batch import Batch, DataMode
from pipeline_lib.evaluate.resample import statistic_interval
from pipeline_lib.models.inputs import ModelInputs, inputs_for, pad_2d
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID

log = logging.getLogger(__name__)

CONDITIONS = ("true", "random", "empty")
# (with, without): the differences reported, each a mean over sentences of log q(y|with) -
# log q(y|without)
CONTRASTS = {"true_vs_empty": ("true", "empty"), "true_vs_random": ("true", "random"),
             "random_vs_empty": ("random", "empty")}


def read_pairs(shard_dir: Path) -> list[list[dict]]:
    """The test set's documents (rows doc_id, sent_idx, src_ids, tgt_ids), in file order,
    sentences by ``sent_idx``."""
    import pyarrow.parquet as pq

    from pipeline_lib.evaluate.decode import group_documents

    index = shard_dir / "index.parquet"
    if not index.exists():
        raise FileNotFoundError(f"{index}: shard index not found")
    rows: list[dict] = []
    for name in pq.read_table(index, columns=["file"]).column("file").to_pylist():
        path = shard_dir / Path(name).name
        try:
            rows.extend(pq.read_table(path, columns=["doc_id", "sent_idx", "src_ids",
                                                     "tgt_ids"]).to_pylist())
        except Exception as e:  # noqa: BLE001 - any unreadable shard is fatal, named
            raise RuntimeError(f"{path}: cannot read shard: {e}") from e
    return group_documents(rows)[1]


@torch.no_grad()
def sentence_logprobs(model: torch.nn.Module, docs: Sequence[Sequence[dict]],
                      inputs: ModelInputs, seed: int, max_tokens: int, limit: int,
                      device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """log q(y | x, C) of every reference (summed over its pieces and EOS) and its piece count,
    in document order, with the contexts ``inputs`` builds. Sources and references longer than
    the model's positions keep their first ``limit`` pieces, as decoding does."""
    rows = [{"doc_id": r["doc_id"], "sent_idx": r["sent_idx"],
             "src_ids": list(r["src_ids"])[:limit], "tgt_ids": list(r["tgt_ids"])[:limit]}
            for d in docs for r in d]
    if inputs.mode is DataMode.CONTEXT:
        it = iter(rows)
        inputs.add_context([[next(it) for _ in d] for d in docs], seed)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["tgt_ids"]))
    logp, ntok = np.zeros(len(rows)), np.zeros(len(rows), dtype=np.int64)
    start = 0
    while start < len(order):
        stop = start + 1
        while stop < len(order) and (stop - start + 1) * (len(rows[order[stop]]["tgt_ids"]) + 1) \
                <= max_tokens:
            stop += 1
        idx = order[start:stop]
        batch = teacher_forced([rows[i] for i in idx], inputs).to(device)
        out = torch.log_softmax(model(batch).logits.float(), dim=-1)
        gold = batch.tgt_out
        token = out.gather(-1, gold.unsqueeze(-1)).squeeze(-1).masked_fill(gold.eq(PAD_ID), 0.0)
        logp[idx] = token.sum(-1).cpu().numpy()
        ntok[idx] = gold.ne(PAD_ID).sum(-1).cpu().numpy()
        start = stop
    return logp, ntok


def teacher_forced(rows: Sequence[dict], inputs: ModelInputs) -> Batch:
    """The training layout of a batch (src = x + EOS, tgt_in = BOS + y, tgt_out = y + EOS) with
    the contexts ``inputs`` built; the loader's collate lives in training, which evaluation
    does not import (the stage layering)."""
    b = Batch(src=pad_2d([list(r["src_ids"]) + [EOS_ID] for r in rows]),
              tgt_in=pad_2d([[BOS_ID] + list(r["tgt_ids"]) for r in rows]),
              tgt_out=pad_2d([list(r["tgt_ids"]) + [EOS_ID] for r in rows]),
              doc_id=[r["doc_id"] for r in rows], sent_idx=[r["sent_idx"] for r in rows])
    if inputs.mode is DataMode.CONTEXT:
        b.ctx_src, b.extra = inputs.context_tensors(rows)
    return b


def bootstrap_interval(diff: np.ndarray, groups: Sequence, draws: int, seed: int,
                       level: float = 0.95) -> list[float]:
    """Percentile interval of the mean of ``diff`` when whole groups (documents, or each
    sentence its own) are resampled with replacement, ``draws`` times."""
    stats = np.stack([diff, np.ones_like(diff)], axis=1)
    return statistic_interval(stats, groups, lambda s: s[0] / s[1], draws, seed, level)


def measure(model: torch.nn.Module, docs: Sequence[Sequence[dict]], inputs: ModelInputs,
            seed: int, max_tokens: int, draws: int, device: str = "cpu") -> dict:
    """The record of one model: per condition the mean log-likelihood of a reference, and per
    contrast (:data:`CONTRASTS`) the mean difference (nats per sentence and per target piece)
    with its document and sentence bootstrap intervals; or why it is not measured."""
    sentences = sum(len(d) for d in docs)
    record: dict = {"data_mode": inputs.mode.value, "sentences": sentences,
                    "documents": len(docs)}
    if inputs.mode not in (DataMode.SENTENCE, DataMode.CONTEXT) or inputs.in_document_order:
        record["not_measured"] = (
            f"{inputs.mode.value} mode: the context is the model's translation history or its "
            "sub-document, not a per-sentence input a rule can swap (pipeline_lib/evaluate/"
            "cxmi.py); its ablated decodes and twin measure it in BLEU")
        return record
    if inputs.tag is not None:
        record["not_measured"] = "the model reads language tags; forced decoding of tagged " \
                                 "references is not written (pipeline_lib/evaluate/cxmi.py)"
        return record
    limit = model.cfg.max_len - 1
    # another document's sentences need another document
    conditions = CONDITIONS if len(docs) > 1 else ("true", "empty")
    if len(docs) == 1:
        record["random_not_measured"] = "one document: no other document to draw context from"
    scored = {c: sentence_logprobs(model, docs, inputs.ablated(c), seed, max_tokens, limit,
                                   device) for c in conditions}
    tokens = scored["true"][1]
    groups = np.array([str(r["doc_id"]) for d in docs for r in d])
    record["target_tokens"] = int(tokens.sum())
    record["loglik_per_sentence"] = {c: round(float(lp.mean()), 4) for c, (lp, _) in scored.items()}
    record["reads_context"] = inputs.mode is DataMode.CONTEXT
    record["contrasts"] = {}
    for name, (with_c, without_c) in CONTRASTS.items():
        if with_c not in scored or without_c not in scored:
            continue
        diff = scored[with_c][0] - scored[without_c][0]
        record["contrasts"][name] = {
            "nats_per_sentence": round(float(diff.mean()), 4),
            "nats_per_token": round(float(diff.sum() / tokens.sum()), 5),
            # one document resamples to itself: no interval
            "ci_documents": (bootstrap_interval(diff, groups, draws, seed)
                             if len(docs) > 1 else None),
            "ci_sentences": bootstrap_interval(diff, np.arange(len(diff)), draws, seed),
            "sentences_better": int((diff > 0).sum()),
        }
    return record


def main(argv: Sequence[str] | None = None) -> None:
    from pipeline_lib.checkpoint import DamagedCheckpoint, load_model, training_seed

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint directory")
    p.add_argument("--shards", type=Path, required=True, help="test shards with index.parquet")
    p.add_argument("--spm", type=Path, required=True, help="the model's sentencepiece model")
    p.add_argument("--output", type=Path, required=True, help="JSON record to write")
    p.add_argument("--max-tokens", type=int, default=4096, help="target pieces per batch")
    p.add_argument("--draws", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = stage_options.parse_args(p, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for flag, value in (("--max-tokens", a.max_tokens), ("--draws", a.draws)):
        if value < 1:
            p.error(f"{flag} must be at least 1, not {value}")
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        model, model_cfg = load_model(a.checkpoint, device=a.device, spm_model=a.spm)
    except (FileNotFoundError, DamagedCheckpoint) as e:
        p.exit(2, f"cxmi: error: {e}\n")
    # the training seed: the random condition draws with it, as a random-context rule would
    seed = training_seed(a.checkpoint)
    torch.manual_seed(seed)
    record = {"model": model_cfg.name, "checkpoint": str(a.checkpoint), "seed": seed,
              "draws": a.draws, **measure(model, read_pairs(a.shards), inputs_for(model, a.spm),
                                          seed, a.max_tokens, a.draws, a.device)}
    with atomic_output(a.output) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
    log.info("%s", json.dumps(record.get("contrasts", record.get("not_measured"))))


if __name__ == "__main__":
    main()

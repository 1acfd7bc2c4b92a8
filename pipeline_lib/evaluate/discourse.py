"""``python -m pipeline_lib.evaluate.discourse``: discourse phenomena that BLEU does not see.

Two measures:

**Contrastive test suites** (``contrastive`` command): every candidate of every example is scored
by its log-probability under the checkpoint (:class:`CheckpointScorer`); reading the suites, the
official decision rules (Voita et al. 2019: argmin, first of ties wins; ContraPro: strictly
best), the groups and the direction check are in pipeline_lib.evaluate.suites. The command
refuses suites whose language pair is not ``--lang-pair``.

**Lexical consistency** (``consistency`` command), which needs no external suite. Defined as:

1. Tokens are ``\\w+`` matches, lowercased. On each side of a test set the *function words* are
   the ``stop_top_k`` most frequent tokens of that side (source: the source sentences; target:
   the references, so that every model is judged against the same list); *content words* are the
   other purely alphabetic tokens of at least ``min_chars`` characters.
2. A *repeated term* is a source content word that occurs in at least two sentences of a
   document; each such (document, word) pair is one item.
3. Alignment is Dice association over the sentence pairs of the whole test set (source vs. the
   system's output): ``dice(w, t) = 2 c(w, t) / (c(w) + c(t))`` with sentence-level counts. The
   *translation* of ``w`` in a sentence is the output content word of that sentence with the
   highest Dice score with ``w`` (ties: alphabetical first); no output content word means no
   translation (the item is then inconsistent).
4. An item is *consistent* when all its sentences have the same translation. Lexical consistency
   = consistent items / items. The same procedure applied to the references gives the
   human-translation figure shown next to the models.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import pyarrow.parquet as pq

from pipeline_lib import stage_options
from pipeline_lib.stage_options import json_value
from pipeline_lib.batch import DataMode
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.evaluate.suites import (check_suite_directions, evaluate_suite, read_suite,
                                            suite_format)
from pipeline_lib.models.inputs import ModelInputs, inputs_for
from pipeline_lib.manifest import Manifest

if TYPE_CHECKING:
    import torch

log = logging.getLogger("discourse")


# ------------------------------------------------------------------------------------------------
# contrastive suites: the model's scores (the suites themselves: pipeline_lib.evaluate.suites)
# ------------------------------------------------------------------------------------------------

class CheckpointScorer:
    """``score_fn`` over a trained model: sum of target log-probabilities (EOS included).

    The source context is built by the model's own rules exactly as the model was trained
    (``inputs``, the model's :meth:`inputs`, pipeline_lib/models/inputs.py): a CONTEXT-mode
    model gets its context rule applied to (context sentences + current sentence) as one
    document; a DOCUMENT-mode model reads the tagged sentence with its document (context +
    current) through its document rule. Sentence-level and stream models get no context. The
    target context is not used: no model here reads target-side history in a teacher-forced
    pass. Ablations that replace the context by random sentences are scored with the true
    context (``true_context``: the suites test what the context changes). ``encode`` maps text
    to subword ids (no BOS/EOS).
    """

    def __init__(self, model: "torch.nn.Module", encode: Callable[[str], list[int]],
                 device: str = "cpu", max_len: int = 256, inputs: ModelInputs = ModelInputs()):
        self.model = model.eval()
        self.encode = encode
        self.device = device
        self.max_len = max_len
        self.inputs = (inputs if inputs.context is None
                       else replace(inputs, context=inputs.context.true_context()))

    @classmethod
    def from_checkpoint(cls, checkpoint: Path, device: str = "cpu") -> "CheckpointScorer":
        """The model and the ``spm.model`` of a checkpoint directory (pipeline_lib.checkpoint)."""
        import sentencepiece as spm

        from pipeline_lib.checkpoint import SPM_FILE, load_model

        model, cfg = load_model(checkpoint, device=device)
        spm_path = Path(checkpoint) / SPM_FILE
        sp = spm.SentencePieceProcessor(model_file=str(spm_path))
        return cls(model, sp.encode, device, cfg.max_len, inputs_for(model, spm_path))

    def _ids(self, text: str) -> list[int]:
        return list(self.encode(text))[: self.max_len - 2]   # room for EOS and a language tag

    def __call__(self, src_context: list[str], src: str, tgt_context: list[str],
                 candidates: list[str]) -> list[float]:
        import torch

        from pipeline_lib.batch import Batch

        n = len(candidates)
        ys = [self.inputs.tag_sentence(self._ids(c)) for c in candidates]
        T = max(len(y) for y in ys) + 1

        def padded(rows: list[list[int]], width: int):
            return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], device=self.device)

        doc = [self.inputs.tag_sentence(self._ids(t)) for t in src_context + [src]]
        x = doc[-1] + [EOS_ID]
        batch = Batch(
            src=padded([x] * n, len(x)),
            tgt_in=padded([[BOS_ID] + y for y in ys], T),
            tgt_out=padded([y + [EOS_ID] for y in ys], T),
            doc_id=["contrastive"] * n, sent_idx=[len(src_context)] * n,
        )
        if self.inputs.mode is DataMode.CONTEXT:
            rows = [{"doc_id": "contrastive", "sent_idx": i, "src_ids": s} for i, s in enumerate(doc)]
            self.inputs.add_context([rows], 0)
            ctx_src, extra = self.inputs.context_tensors([rows[-1]] * n)
            batch.ctx_src = None if ctx_src is None else ctx_src.to(self.device)
            batch.extra.update({k: v.to(self.device) for k, v in extra.items()})
        elif self.inputs.mode is DataMode.DOCUMENT:
            extra = self.inputs.documents.collate([doc], [0] * n)
            batch.extra.update({k: v.to(self.device) for k, v in extra.items()})
        with torch.no_grad():
            logits = self.model(batch).logits                          # (n, T, V)
            logp = torch.log_softmax(logits.float(), dim=-1)
            tok = logp.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)   # (n, T)
            tok = tok.masked_fill(batch.tgt_out == PAD_ID, 0.0)
        return tok.sum(-1).tolist()


# ------------------------------------------------------------------------------------------------
# lexical consistency
# ------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class ConsistencyConfig:
    stop_top_k: int = 100
    min_chars: int = 3


def tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


def function_words(sentences: Iterable[str], top_k: int) -> set[str]:
    """The ``top_k`` most frequent tokens (ties broken alphabetically, so it is reproducible)."""
    counts = Counter(t for s in sentences for t in tokens(s))
    return {w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]}


def content_words(text: str, stop: set[str], min_chars: int) -> set[str]:
    return {t for t in tokens(text) if t.isalpha() and len(t) >= min_chars and t not in stop}


def lexical_consistency(docs: list[list[tuple[str, str]]], src_stop: set[str],
                        tgt_stop: set[str], cfg: ConsistencyConfig) -> dict:
    """Share of repeated source terms translated the same way (module docstring, steps 2-4).

    ``docs``: documents as lists of (source, translation) sentence pairs.
    """
    pairs = [(content_words(s, src_stop, cfg.min_chars), content_words(t, tgt_stop, cfg.min_chars))
             for doc in docs for s, t in doc]
    c_src, c_tgt, c_joint = Counter(), Counter(), Counter()
    for ws, ts in pairs:
        c_src.update(ws)
        c_tgt.update(ts)
        c_joint.update((w, t) for w in ws for t in ts)

    def translation(w: str, ts: set[str]) -> str | None:
        if not ts:
            return None
        return min(ts, key=lambda t: (-2 * c_joint[(w, t)] / (c_src[w] + c_tgt[t]), t))

    items = consistent = 0
    k = 0
    for doc in docs:
        doc_pairs = pairs[k: k + len(doc)]
        k += len(doc)
        occurrences: dict[str, list[set[str]]] = defaultdict(list)
        for ws, ts in doc_pairs:
            for w in ws:
                occurrences[w].append(ts)
        for w, tsets in occurrences.items():
            if len(tsets) < 2:
                continue
            items += 1
            chosen = {translation(w, ts) for ts in tsets}
            consistent += len(chosen) == 1 and None not in chosen
    return {"consistency": round(100 * consistent / items, 2) if items else None,
            "consistent": consistent, "items": items}


def consistency_all(refs: dict[str, Path], hyps: list[tuple[str, str, str, Path]],
                    cfg: ConsistencyConfig, manifest: Manifest) -> dict:
    """Lexical consistency of the references and of every model, per test set."""
    out: dict = {"config": {"stop_top_k": cfg.stop_top_k, "min_chars": cfg.min_chars},
                 "results": {}}
    tables: dict[tuple[str, str], list[dict]] = {}
    for model, corpus, split, path in hyps:
        if (corpus, split) not in tables:
            rows = [r for r in pq.read_table(refs[corpus], columns=["split", "doc_id", "sent_idx",
                                                                    "src", "tgt"]).to_pylist()
                    if r["split"] == split]
            tables[(corpus, split)] = rows
            manifest.add_input(refs[corpus])
        rows = tables[(corpus, split)]
        name = f"{corpus}/{split}"
        src_stop = function_words((r["src"] for r in rows), cfg.stop_top_k)
        tgt_stop = function_words((r["tgt"][0] for r in rows if r["tgt"]), cfg.stop_top_k)
        hyp = {(h["doc_id"], int(h["sent_idx"])): h["hyp"] or ""
               for h in pq.read_table(path, columns=["doc_id", "sent_idx", "hyp"]).to_pylist()}
        manifest.add_input(path)
        missing = sum((r["doc_id"], r["sent_idx"]) not in hyp for r in rows)
        if missing:
            manifest.reject(f"missing_hypothesis:{path}", missing)
        res = out["results"].setdefault(name, {})
        res[model] = lexical_consistency(_group(rows, lambda r: hyp.get((r["doc_id"],
                                                                          r["sent_idx"]), "")),
                                         src_stop, tgt_stop, cfg)
        if "reference" not in res:
            res["reference"] = lexical_consistency(
                _group(rows, lambda r: r["tgt"][0] if r["tgt"] else ""), src_stop, tgt_stop, cfg)
    return out


def _group(rows: list[dict], target: Callable[[dict], str]) -> list[list[tuple[str, str]]]:
    docs: list[list[tuple[str, str]]] = []
    current = None
    for r in rows:
        if r["doc_id"] != current:
            docs.append([])
            current = r["doc_id"]
        docs[-1].append((r["src"], target(r)))
    return docs


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------

def lang_pair(text: str) -> tuple[str, str]:
    """``--lang-pair es-en`` -> ("es", "en")."""
    if not re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a language pair like es-en")
    src, tgt = text.split("-")
    return src, tgt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("contrastive", help="accuracy of one checkpoint on the configured suites")
    c.add_argument("--checkpoint", required=True, type=Path, help="checkpoint directory")
    c.add_argument("--suites", required=True, type=json_value,
                   help="JSON: suite name -> {format, path, [direction], [context_src, "
                        "context_tgt, context_size], [phenomenon]}")
    c.add_argument("--lang-pair", required=True, type=lang_pair, metavar="SRC-TGT",
                   help="the model's language pair (config src_lang-tgt_lang), e.g. es-en; "
                        "a suite in another direction is refused")
    c.add_argument("--max-examples", type=int, default=0, help="first N examples per suite (0=all)")
    c.add_argument("--output", required=True, type=Path)
    k = sub.add_parser("consistency", help="lexical consistency of references and models")
    k.add_argument("--refs", nargs=2, action="append", required=True, metavar=("CORPUS", "DOCS"))
    k.add_argument("--hyp", nargs=4, action="append", required=True,
                   metavar=("MODEL", "CORPUS", "SPLIT", "PARQUET"))
    k.add_argument("--stop-top-k", type=int, default=ConsistencyConfig.stop_top_k)
    k.add_argument("--min-chars", type=int, default=ConsistencyConfig.min_chars)
    k.add_argument("--output", required=True, type=Path)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage=f"discourse_{args.command}")
    try:
        if args.command == "contrastive":
            suites = args.suites
            check_suite_directions(suites, *args.lang_pair)
            manifest.params = {"suites": suites, "max_examples": args.max_examples,
                               "lang_pair": "-".join(args.lang_pair)}
            manifest.add_input(args.checkpoint)
            scorer = CheckpointScorer.from_checkpoint(args.checkpoint)
            result: dict = {"suites": {}}
            for name, spec in suites.items():
                examples = read_suite(name, spec)
                for key in ("path", "context_src", "context_tgt"):
                    if spec.get(key):
                        manifest.add_input(spec[key])
                if args.max_examples:
                    examples = examples[: args.max_examples]
                log.info("suite %s: %d examples", name, len(examples))
                result["suites"][name] = evaluate_suite(examples, scorer,
                                                        suite_format(name, spec).decision)
                manifest.counts[name] = len(examples)
        else:
            cfg = ConsistencyConfig(args.stop_top_k, args.min_chars)
            manifest.params = {"stop_top_k": cfg.stop_top_k, "min_chars": cfg.min_chars}
            result = consistency_all({c: Path(p) for c, p in args.refs},
                                     [(m, c, s, Path(p)) for m, c, s, p in args.hyp], cfg,
                                     manifest)
    except (OSError, ValueError, KeyError) as e:
        log.error("%s", e)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    manifest.write(args.output.parent / "manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

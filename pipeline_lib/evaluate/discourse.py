"""``python -m pipeline_lib.evaluate.discourse``: discourse phenomena that BLEU does not see.

Two measures:

**Contrastive test suites** (``contrastive`` command). Each example has a source sentence with
its context and several candidate translations that differ only in a context-dependent word; the
model scores every candidate by its log-probability and the example counts as correct when the
reference candidate scores strictly best (ties count as wrong). Readers for the two public
formats:

* Voita, Sennrich and Titov (2019), "When a Good Translation is Wrong in Context", En-Ru suites
  ``deixis_test.json``, ``lex_cohesion_test.json``, ``ellipsis_infl.json``, ``ellipsis_vp.json``
  (repository lena-voita/good-translation-wrong-in-context): a JSON list of
  ``{"src": "c1 _eos c2 _eos c3 _eos s", "dst": [candidate, ...], "true_ind": i, "ctx_dist": d}``
  where every candidate is the target context and current sentence joined by `` _eos ``.
  Accuracy is reported per phenomenon (the suite) and per ``ctx_dist`` where present.
* Müller et al. (2018), ContraPro En-De pronouns (repository ZurichNLP/ContraPro):
  ``contrapro.json``, a list of ``{"src segment", "ref segment", "src pronoun", "ref pronoun",
  "ante distance", "errors": [{"contrastive": ...}, ...]}``. The context sentences are not in the
  JSON (they come from OpenSubtitles); give the ``contrapro.context.{en,de}`` files that the
  repository's ``json2text_and_context.pl --context 1`` writes (one line per scored line:
  the example's reference line, then one per error) to score with context. Accuracy per
  reference pronoun and per antecedent distance (0, 1, 2, 3, >3, as in ContraPro's evaluate.py).

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

from pipeline_lib.constants import BOS_ID, EOS_ID, PAD_ID, DataMode
from pipeline_lib.models.inputs import ModelInputs, inputs_for
from pipeline_lib.manifest import Manifest

if TYPE_CHECKING:
    import torch

log = logging.getLogger("discourse")

VOITA_SEP = " _eos "
ScoreFn = Callable[[list[str], str, list[str], list[str]], list[float]]


# ------------------------------------------------------------------------------------------------
# contrastive suites
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContrastiveExample:
    """One contrastive example: candidates share the context; ``true_index`` is the reference."""

    phenomenon: str
    src_context: list[str]
    src: str
    tgt_context: list[str]
    candidates: list[str]
    true_index: int
    distance: str | None = None


class SuiteFormatError(ValueError):
    """A suite file that cannot be read; the message names the file and the record."""


def _load_json_list(path: Path) -> list:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SuiteFormatError(f"{path}:{e.lineno}: not JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise SuiteFormatError(f"{path}:1: expected a JSON list of examples")
    return data


def read_voita(path: Path, phenomenon: str) -> list[ContrastiveExample]:
    """Read a Voita et al. (2019) consistency suite (``*.json``)."""
    out = []
    for i, rec in enumerate(_load_json_list(path)):
        try:
            src = rec["src"].split(VOITA_SEP)
            cands = [c.split(VOITA_SEP) for c in rec["dst"]]
            true = int(rec["true_ind"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        contexts = {tuple(c[:-1]) for c in cands}
        if len(contexts) != 1:
            raise SuiteFormatError(f"{path}: example {i}: candidates differ in their context")
        dist = rec.get("ctx_dist")
        out.append(ContrastiveExample(phenomenon, src[:-1], src[-1], list(cands[0][:-1]),
                                      [c[-1] for c in cands], true,
                                      None if dist is None else str(dist)))
    return out


def _ante_bucket(d) -> str | None:
    if d is None:
        return None
    return ">3" if int(d) > 3 else str(int(d))


def read_contrapro(path: Path, context_src: Path | None = None,
                   context_tgt: Path | None = None) -> list[ContrastiveExample]:
    """Read ContraPro (Müller et al. 2018), optionally with its extracted one-sentence context."""
    data = _load_json_list(path)
    ctx_lines = {side: Path(f).read_text(encoding="utf-8").split("\n")
                 for side, f in (("src", context_src), ("tgt", context_tgt)) if f is not None}
    line = 0
    out = []
    for i, rec in enumerate(data):
        try:
            cands = [rec["ref segment"]] + [e["contrastive"] for e in rec["errors"]]
            pron = rec["ref pronoun"].lower()
            dist = _ante_bucket(rec.get("ante distance"))
            src = rec["src segment"]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        context = {"src": [], "tgt": []}
        for side, lines in ctx_lines.items():
            if line >= len(lines):
                raise SuiteFormatError(f"{context_src if side == 'src' else context_tgt}:"
                                       f"{len(lines)}: too few lines for example {i}")
            # the line of the reference candidate; its error lines repeat the same context
            context[side] = [lines[line]] if lines[line].strip() else []
        src_ctx, tgt_ctx = context["src"], context["tgt"]
        out.append(ContrastiveExample(pron, src_ctx, src, tgt_ctx, cands, 0, dist))
        line += len(cands)
    return out


def read_suite(spec: dict) -> list[ContrastiveExample]:
    """A suite from its config entry: ``{format: voita|contrapro, path, [context_src, context_tgt],
    [phenomenon]}``."""
    fmt = spec.get("format")
    if fmt == "voita":
        return read_voita(Path(spec["path"]), spec.get("phenomenon", Path(spec["path"]).stem))
    if fmt == "contrapro":
        opt = {k: Path(spec[k]) for k in ("context_src", "context_tgt") if spec.get(k)}
        return read_contrapro(Path(spec["path"]), **opt)
    raise SuiteFormatError(f"{spec.get('path')}: unknown suite format {fmt!r}")


def evaluate_suite(examples: Iterable[ContrastiveExample], score_fn: ScoreFn) -> dict:
    """Accuracy overall, per phenomenon and per context/antecedent distance."""
    total = Counter()
    correct = Counter()
    for ex in examples:
        scores = score_fn(ex.src_context, ex.src, ex.tgt_context, ex.candidates)
        best = scores[ex.true_index]
        ok = all(best > s for j, s in enumerate(scores) if j != ex.true_index)
        keys = ["all", f"phenomenon:{ex.phenomenon}"]
        if ex.distance is not None:
            keys.append(f"distance:{ex.distance}")
        for key in keys:
            total[key] += 1
            correct[key] += ok

    def acc(prefix: str) -> dict:
        return {k.split(":", 1)[1]: {"accuracy": round(100 * correct[k] / total[k], 2),
                                     "correct": correct[k], "total": total[k]}
                for k in sorted(total) if k.startswith(prefix)}

    return {"accuracy": round(100 * correct["all"] / total["all"], 2) if total["all"] else None,
            "correct": correct["all"], "total": total["all"],
            "by_phenomenon": acc("phenomenon:"), "by_distance": acc("distance:")}


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
        """The model and the ``spm.model`` of a checkpoint directory (pipeline_lib.training.checkpoint)."""
        import sentencepiece as spm

        from pipeline_lib.training.checkpoint import load_model

        model, cfg = load_model(checkpoint, device=device)
        spm_path = Path(checkpoint) / "spm.model"
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

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("contrastive", help="accuracy of one checkpoint on the configured suites")
    c.add_argument("--checkpoint", required=True, type=Path, help="checkpoint directory")
    c.add_argument("--suites", required=True,
                   help="JSON: suite name -> {format, path, [context_src, context_tgt]}")
    c.add_argument("--max-examples", type=int, default=0, help="first N examples per suite (0=all)")
    c.add_argument("--output", required=True, type=Path)
    k = sub.add_parser("consistency", help="lexical consistency of references and models")
    k.add_argument("--refs", nargs=2, action="append", required=True, metavar=("CORPUS", "DOCS"))
    k.add_argument("--hyp", nargs=4, action="append", required=True,
                   metavar=("MODEL", "CORPUS", "SPLIT", "PARQUET"))
    k.add_argument("--stop-top-k", type=int, default=ConsistencyConfig.stop_top_k)
    k.add_argument("--min-chars", type=int, default=ConsistencyConfig.min_chars)
    k.add_argument("--output", required=True, type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage=f"discourse_{args.command}")
    try:
        if args.command == "contrastive":
            suites = json.loads(args.suites)
            manifest.params = {"suites": suites, "max_examples": args.max_examples}
            manifest.add_input(args.checkpoint)
            scorer = CheckpointScorer.from_checkpoint(args.checkpoint)
            result: dict = {"suites": {}}
            for name, spec in suites.items():
                examples = read_suite(spec)
                manifest.add_input(spec["path"])
                if args.max_examples:
                    examples = examples[: args.max_examples]
                log.info("suite %s: %d examples", name, len(examples))
                result["suites"][name] = evaluate_suite(examples, scorer)
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

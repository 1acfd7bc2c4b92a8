"""``python -m pipeline_lib.evaluate.discourse``: discourse phenomena that BLEU does not see.

Two measures:

**Contrastive test suites** (``contrastive`` command). Each example has a source sentence with
its context and several candidate translations that differ only in a context-dependent word; the
model scores every candidate by its log-probability (higher is better; the official scripts read
losses, lower is better, which is the same order). Each suite is scored by its authors' rule, so
the accuracies equal those of the official scripts on the same scores, ties included:

* Voita, Sennrich and Titov (2019), "When a Good Translation is Wrong in Context", En-Ru suites
  ``deixis_test.json``, ``lex_cohesion_test.json``, ``ellipsis_infl.json``, ``ellipsis_vp.json``
  (repository lena-voita/good-translation-wrong-in-context): a JSON list of
  ``{"dst": [candidate, ...], "true_ind": i, "src": "c1 _eos c2 _eos c3 _eos s", "ctx_dist": d}``
  where every candidate is the target context and current sentence joined by `` _eos ``.
  ``scripts/evaluate_consistency.py`` (``get_scores``) cuts the loss file into one group per
  example and counts it correct when ``np.argmin(losses) == true_ind``: among tied best
  candidates the first wins (:attr:`Decision.FIRST_BEST`). This matters: the real
  ``ellipsis_vp`` and ``ellipsis_infl`` list the reference string twice in some groups, so with
  ties counted as wrong even an oracle stays below 100 %. Accuracy per phenomenon (the suite) and
  per ``ctx_dist``.
* Müller et al. (2018), ContraPro En-De pronouns (repository ZurichNLP/ContraPro):
  ``contrapro.json``, a list of ``{"src segment", "ref segment", "src pronoun", "ref pronoun",
  "ante distance", "errors": [{"contrastive": ...}, ...]}``. ``evaluate.py`` (``count_errors``)
  counts an example correct when the reference is strictly better than every contrastive
  candidate (``lt``/``gt``; a tie is wrong, :attr:`Decision.STRICT`) and groups by the category
  ``"<src pronoun>:<ref pronoun>"`` lowercased (``it:er``) and by antecedent distance (0, 1, 2,
  3, >3). The context sentences are not in the JSON (they come from OpenSubtitles):
  ``conversion_scripts/json2text_and_context.pl --context N`` writes ``contrapro.context.{en,de}``
  with N lines (oldest first; an empty line before the document start) for every scored line,
  i.e. for the reference and again for each contrastive candidate, each ended by ``\\n`` and
  nothing else. Lines are therefore split on ``\\n`` only (a lone ``\\r`` inside an
  OpenSubtitles line is text), and the line count must be N x scored lines (``context_size``).

Every suite declares its language pair (``direction``, default en-ru for voita and en-de for
contrapro); :func:`check_suite_directions` refuses a suite whose pair differs from the model's.

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
import math
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import pyarrow.parquet as pq

from pipeline_lib.constants import BOS_ID, EOS_ID, PAD_ID, DataMode
from pipeline_lib.training.context import ContextSpec, add_context, context_tensors, tagged
from pipeline_lib.manifest import Manifest

if TYPE_CHECKING:
    import torch

log = logging.getLogger("discourse")

VOITA_SEP = " _eos "
ScoreFn = Callable[[list[str], str, list[str], list[str]], list[float]]


# ------------------------------------------------------------------------------------------------
# contrastive suites
# ------------------------------------------------------------------------------------------------

class Decision(Enum):
    """When an example counts as correct; each suite format keeps its authors' rule."""

    FIRST_BEST = "first_best"  # Voita et al.: np.argmin(losses) == true_ind, first of ties wins
    STRICT = "strict"          # ContraPro: reference strictly better than every contrastive


class SuiteFormat(Enum):
    """The two public suite formats, with the language pair and decision rule of each."""

    VOITA = "voita"
    CONTRAPRO = "contrapro"

    @property
    def direction(self) -> str:
        return {SuiteFormat.VOITA: "en-ru", SuiteFormat.CONTRAPRO: "en-de"}[self]

    @property
    def decision(self) -> Decision:
        return {SuiteFormat.VOITA: Decision.FIRST_BEST,
                SuiteFormat.CONTRAPRO: Decision.STRICT}[self]


@dataclass(frozen=True)
class ContrastiveExample:
    """One contrastive example: candidates share the context; ``true_index`` is the reference.

    ``phenomenon`` is the group the official script reports: the suite name (Voita) or the
    ``src:ref`` pronoun category (ContraPro).
    """

    phenomenon: str
    src_context: list[str]
    src: str
    tgt_context: list[str]
    candidates: list[str]
    true_index: int
    distance: str | None = None


class SuiteFormatError(ValueError):
    """A suite file that cannot be read; the message names the file and the record."""


class SuiteConfigError(ValueError):
    """A suite entry that does not fit the run (format, direction); the message names the suite."""


def _load_json_list(path: Path) -> list:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SuiteFormatError(f"{path}:{e.lineno}: not JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise SuiteFormatError(f"{path}:1: expected a JSON list of examples")
    return data


def read_voita(path: Path, phenomenon: str) -> list[ContrastiveExample]:
    """Read a Voita et al. (2019) consistency suite (``consistency_testsets/*.json``)."""
    out = []
    for i, rec in enumerate(_load_json_list(path)):
        try:
            src = rec["src"].split(VOITA_SEP)
            cands = [c.split(VOITA_SEP) for c in rec["dst"]]
            true = int(rec["true_ind"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        if not 0 <= true < len(cands):
            raise SuiteFormatError(f"{path}: example {i}: true_ind {true} outside its "
                                   f"{len(cands)} candidates")
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


def read_context_lines(path: Path) -> list[str]:
    """The lines of a ``contrapro.context.*`` file, split on ``\\n`` only.

    json2text_and_context.pl ends every line with ``\\n``; universal-newline reading would also
    split at a lone ``\\r`` inside an OpenSubtitles line and shift every later context.
    """
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()   # the newline that ends the last line
    return lines


def _context_blocks(path: Path, lines: list[str], context_size: int,
                    groups: list[int]) -> list[list[str]]:
    """One context (``context_size`` lines, oldest first) per example of ``groups`` (its scored
    lines), checking the layout json2text_and_context.pl writes: ``context_size`` lines for every
    scored line, the same lines repeated for the reference and each contrastive candidate."""
    scored = sum(groups)
    if len(lines) != context_size * scored:
        hint = (f"; it looks extracted with --context {len(lines) // scored}"
                if scored and len(lines) % scored == 0 else "")
        raise SuiteFormatError(
            f"{path}: {len(lines)} lines, expected {context_size * scored} = context_size "
            f"{context_size} x {scored} scored lines (reference + contrastive candidates of "
            f"{len(groups)} examples){hint}")
    out = []
    first = 0
    for i, n in enumerate(groups):
        block = lines[first: first + context_size]
        for j in range(1, n):
            at = first + j * context_size
            if lines[at: at + context_size] != block:
                raise SuiteFormatError(f"{path}:{at + 1}: context of example {i} candidate {j} "
                                       "differs from its reference's: file and JSON out of step")
        out.append([c for c in block if c.strip()])   # empty line = before the document start
        first += n * context_size
    return out


def read_contrapro(path: Path, context_src: Path | None = None, context_tgt: Path | None = None,
                   context_size: int = 1) -> list[ContrastiveExample]:
    """Read ContraPro (Müller et al. 2018), optionally with the context files that
    ``json2text_and_context.pl --context <context_size>`` extracted."""
    if context_size < 1:
        raise SuiteConfigError(f"{path}: context_size must be at least 1, not {context_size}")
    out = []
    for i, rec in enumerate(_load_json_list(path)):
        try:
            cands = [rec["ref segment"]] + [e["contrastive"] for e in rec["errors"]]
            category = f"{rec['src pronoun'].lower()}:{rec['ref pronoun'].lower()}"
            dist = _ante_bucket(rec.get("ante distance"))
            src = rec["src segment"]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        out.append(ContrastiveExample(category, [], src, [], cands, 0, dist))
    groups = [len(ex.candidates) for ex in out]
    for side, f in (("src_context", context_src), ("tgt_context", context_tgt)):
        if f is not None:
            blocks = _context_blocks(f, read_context_lines(f), context_size, groups)
            out = [replace(ex, **{side: ctx}) for ex, ctx in zip(out, blocks)]
    return out


def suite_format(name: str, spec: dict) -> SuiteFormat:
    try:
        return SuiteFormat(spec.get("format"))
    except ValueError:
        raise SuiteConfigError(f"suite {name}: unknown format {spec.get('format')!r} (one of "
                               f"{', '.join(f.value for f in SuiteFormat)})") from None


def suite_direction(name: str, spec: dict) -> str:
    """The suite's language pair ``src-tgt``: its ``direction``, else its format's default."""
    return spec.get("direction") or suite_format(name, spec).direction


def check_suite_directions(suites: dict[str, dict], src_lang: str, tgt_lang: str) -> None:
    """Refuse suites whose language pair is not the model's (``src_lang``-``tgt_lang``).

    The suites are En-Ru and En-De; scoring them with, say, a Zh-En model gives numbers without
    meaning, so this is a configuration error, raised before anything runs (workflow planning
    calls it as well as the ``contrastive`` command). Every mismatch is named at once.
    """
    pair = f"{src_lang}-{tgt_lang}"
    wrong = [f"suite {name} is {d}" for name, spec in suites.items()
             if (d := suite_direction(name, spec)) != pair]
    if wrong:
        raise SuiteConfigError(f"contrastive suites in the wrong direction: {'; '.join(wrong)}; "
                               f"the configured language pair (src_lang-tgt_lang) is {pair}. "
                               "Remove them from score.discourse_suites or set their direction.")


def read_suite(name: str, spec: dict) -> list[ContrastiveExample]:
    """A suite from its config entry: ``{format: voita|contrapro, path, [direction],
    [context_src, context_tgt, context_size], [phenomenon]}``."""
    fmt = suite_format(name, spec)
    path = Path(spec["path"])
    if fmt is SuiteFormat.VOITA:
        return read_voita(path, spec.get("phenomenon", path.stem))
    opt = {k: Path(spec[k]) for k in ("context_src", "context_tgt") if spec.get(k)}
    return read_contrapro(path, **opt, context_size=int(spec.get("context_size", 1)))


def is_correct(scores: list[float], true_index: int, decision: Decision) -> bool:
    """The official decision on one example's scores (higher is better)."""
    if any(math.isnan(s) for s in scores):
        raise ValueError(f"NaN among the candidate scores {scores}")
    if decision is Decision.FIRST_BEST:
        return scores.index(max(scores)) == true_index     # np.argmin over losses
    return all(scores[true_index] > s for j, s in enumerate(scores) if j != true_index)


def evaluate_suite(examples: Iterable[ContrastiveExample], score_fn: ScoreFn,
                   decision: Decision) -> dict:
    """Accuracy overall, per phenomenon and per context/antecedent distance."""
    total = Counter()
    correct = Counter()
    for i, ex in enumerate(examples):
        scores = score_fn(ex.src_context, ex.src, ex.tgt_context, ex.candidates)
        try:
            ok = is_correct(list(scores), ex.true_index, decision)
        except ValueError as e:
            raise ValueError(f"example {i} ({ex.src!r}): {e}") from e
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
            "correct": correct["all"], "total": total["all"], "decision": decision.value,
            "by_phenomenon": acc("phenomenon:"), "by_distance": acc("distance:")}


class CheckpointScorer:
    """``score_fn`` over a trained model: sum of target log-probabilities (EOS included).

    The source context is built by pipeline_lib.training.context exactly as the model was trained
    (``spec``, :meth:`ContextSpec.for_model`): ``Batch.ctx_src`` (previous k sentences joined by
    the ``####`` piece, ending in EOS; a lone BOS without context) or CAMN's
    ``extra["ctx_sents"]``; cross-task models read the tagged sentence with its document
    (context + current) as ``extra["doc_src"]``. Sentence-level and cache models get no context
    (``spec.special is None``). The target context is not used: no model here reads target-side
    history in a teacher-forced pass. CAMN's random-context ablation is scored with the true
    context (the suites test what the context changes). ``encode`` maps text to subword ids
    (no BOS/EOS).
    """

    def __init__(self, model: "torch.nn.Module", encode: Callable[[str], list[int]],
                 device: str = "cpu", max_len: int = 256, spec: ContextSpec = ContextSpec()):
        self.model = model.eval()
        self.encode = encode
        self.device = device
        self.max_len = max_len
        self.spec = replace(spec, random_context=False)

    @classmethod
    def from_checkpoint(cls, checkpoint: Path, device: str = "cpu") -> "CheckpointScorer":
        """The model and the ``spm.model`` of a checkpoint directory (pipeline_lib.training.checkpoint)."""
        import sentencepiece as spm

        from pipeline_lib.training.checkpoint import load_model

        model, cfg = load_model(checkpoint, device=device)
        spm_path = Path(checkpoint) / "spm.model"
        sp = spm.SentencePieceProcessor(model_file=str(spm_path))
        return cls(model, sp.encode, device, cfg.max_len, ContextSpec.for_model(model, spm_path))

    def _ids(self, text: str) -> list[int]:
        return list(self.encode(text))[: self.max_len - 2]   # room for EOS and a language tag

    def __call__(self, src_context: list[str], src: str, tgt_context: list[str],
                 candidates: list[str]) -> list[float]:
        import torch

        from pipeline_lib.batch import Batch

        n = len(candidates)
        tag = self.spec.tag
        ys = [self._ids(c) if tag is None else tagged(self._ids(c), tag) for c in candidates]
        T = max(len(y) for y in ys) + 1

        def padded(rows: list[list[int]], width: int):
            return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], device=self.device)

        doc = [self._ids(t) if tag is None else tagged(self._ids(t), tag) for t in src_context + [src]]
        x = doc[-1] + [EOS_ID]
        batch = Batch(
            src=padded([x] * n, len(x)),
            tgt_in=padded([[BOS_ID] + y for y in ys], T),
            tgt_out=padded([y + [EOS_ID] for y in ys], T),
            doc_id=["contrastive"] * n, sent_idx=[len(src_context)] * n,
        )
        if self.spec.mode is DataMode.CONTEXT:
            rows = [{"doc_id": "contrastive", "sent_idx": i, "src_ids": s} for i, s in enumerate(doc)]
            add_context([rows], self.spec, self.max_len, 0)
            ctx_src, extra = context_tensors([rows[-1]] * n, self.spec)
            batch.ctx_src = None if ctx_src is None else ctx_src.to(self.device)
            batch.extra.update({k: v.to(self.device) for k, v in extra.items()})
        elif self.spec.mode is DataMode.DOCUMENT:
            from pipeline_lib.models.crosstask import document_extra

            batch.extra.update(document_extra([doc], [0] * n, device=self.device))
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
    c.add_argument("--suites", required=True,
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
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage=f"discourse_{args.command}")
    try:
        if args.command == "contrastive":
            suites = json.loads(args.suites)
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

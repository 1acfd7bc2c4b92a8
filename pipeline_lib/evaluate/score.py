"""``python -m pipeline_lib.evaluate.score``: BLEU, METEOR, d-BLEU, chrF and TER of every model on
every test set, with paired bootstrap significance against the baseline (not for METEOR).

Every BLEU, chrF and TER number comes from sacreBLEU's Python API (Post, 2018) and is stored
with its signature, so that a score in the report can be reproduced with the ``sacrebleu`` CLI.
Nothing of those is re-implemented here: this module only lines hypotheses up with their
references. METEOR's word alignment is NLTK's; its corpus aggregation is ours
(:mod:`pipeline_lib.evaluate.meteor`), and it has a signature of its own.

* Sentence-level scores are corpus BLEU / chrF / TER over the sentences of a test set; where a
  test set has several references per sentence (``tgt`` is a list in the document Parquet) all of
  them are used, padded with ``None`` where a sentence has fewer (sacreBLEU ignores ``None``).
* Tokenized BLEU (``score.tokenized_bleu``, a preset's): multi-bleu.perl on Moses tokens, as the
  paper computed it (tokenized_bleu.py), beside sacreBLEU's; no significance test.
* d-BLEU (Liu et al. 2020) joins each document's sentences with a space, then computes corpus
  BLEU over documents; reference k of a document is the join of the sentences' k-th references.
* Significance: sacreBLEU's paired bootstrap resampling (Koehn, 2004) of each model against the
  baseline (first model), ``bootstrap_samples`` resamples, seed from ``SACREBLEU_SEED`` (12345).
  The same resampling gives every system, the baseline and a lone model included, its own 95 %
  interval: ``<metric>_ci`` = ``[mean, half-width]``, sacreBLEU's ``μ ± ci`` (the 2.5th and
  97.5th percentiles of the resampled scores, half their distance either side of their mean).
  A system with no observed difference to the one it is tested against gets p = 1
  (:func:`no_difference`).
* METEOR (``meteor``, x 100, beside BLEU; :mod:`pipeline_lib.evaluate.meteor` says it all):
  NLTK's ``nltk.translate.meteor_score`` (the NLTK version is in ``meteor_signature``) with
  exact + stem matching only (no synonym: WordNet switched off, no download; no paraphrase),
  NLTK's parameters alpha 0.9, beta 3.0, gamma 0.5, on sacreBLEU 13a tokens, lowercased (always,
  whatever ``lowercase`` says). Stemmer by ``--tgt-lang``: Porter for English, NLTK's Snowball
  stemmer for the languages it has (German, French, Spanish, Russian, ...), none (exact only)
  for the others or without ``--tgt-lang``; no METEOR (``None``) for Chinese, Japanese, Korean
  and Thai targets, whose words are not space-separated. Several references: per sentence the
  best-scoring one. Corpus level: matches, lengths and chunks summed over the sentences and the
  score computed once from the sums (METEOR 1.5's aggregation); the mean of the sentence scores
  is kept as ``meteor_sentence_mean``. Not METEOR 1.5 (Denkowski & Lavie 2014): that adds
  synonym and paraphrase modules, language-tuned parameters with module weights and
  function-word weighting, and a minimum-chunk alignment search, so these numbers are lower and
  not comparable with a paper's METEOR 1.5. No significance test for METEOR: its Δ in the report
  carries no †.
* "All" is the concatenation of all test sets, in the order given.
* Context controls (``--against MODEL SYSTEM KIND``): the matched control's paired test of a
  context model against its random-context twin (``twin``) or its own decodings with random or
  empty context (``ctx_random``, ``ctx_empty``), under ``against.<KIND>`` of the model's row.
* Several seeds (``--replicate SYSTEM GROUP SEED``: SYSTEM is seed SEED's run of GROUP, e.g.
  ``doct_seed2`` of ``doct``; a system without one, such as a baseline every seed shares under
  ``seed_scope: fine_tune``, was trained once): each seed's systems are tested against that
  seed's baseline and their controls (the paired bootstrap above, per seed), and each GROUP
  gets its mean ± sample sd over seeds and a paired t-test across seeds (:func:`across_seeds`)
  of its per-seed BLEU difference to its control's group and to the baseline's. WHY that
  test: a model and its control of one seed share their initial checkpoint and data order, so
  the per-seed difference cancels what the seed does to both, and the t-test asks whether the
  mean of those differences is zero given how much they vary between seeds: the variation a
  single run's bootstrap over test sentences cannot see (Clark et al. 2011). With 3 seeds it
  has 2 degrees of freedom, so only a difference that is large against its spread is
  significant.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest, Result

from pipeline_lib import stage_options
from pipeline_lib.stage_options import json_value
from pipeline_lib.evaluate.cached_ter import CachedTER
from pipeline_lib.evaluate.meteor import Meteor
from pipeline_lib.evaluate.tokenized_bleu import TokenizedBleu
from pipeline_lib.evaluate.text_export import export
from pipeline_lib.manifest import Manifest

log = logging.getLogger("score")


ALL_TEST_SETS = "All"       # the concatenation of every test set in the results table
SIG_MARK = "†"              # significantly different from the baseline (paired bootstrap)


@dataclass(frozen=True)
class ScoreConfig:
    """The ``score`` section of config.yaml (see workflow/schemas/config.schema.yaml)."""

    lowercase: bool = False
    bootstrap_samples: int = 1000
    significance_level: float = 0.05
    #: BLEU as the paper computed it (``score.tokenized_bleu``: tokenized_bleu.py), or None
    tokenized_bleu: dict | None = None


@dataclass
class TestSet:
    """Hypotheses of every model on one test set, aligned with the references sentence by sentence."""

    name: str
    keys: list[tuple[str, int]] = field(default_factory=list)   # (doc_id, sent_idx) in doc order
    refs: list[list[str]] = field(default_factory=list)         # per sentence, its references
    hyps: dict[str, list[str]] = field(default_factory=dict)    # model -> hypothesis per sentence

    def concat(self, other: "TestSet") -> None:
        """Append ``other`` (keys are prefixed with the test set name so documents stay distinct)."""
        self.keys += [(f"{other.name}:{d}", i) for d, i in other.keys]
        self.refs += other.refs
        for model, hyps in other.hyps.items():
            self.hyps.setdefault(model, []).extend(hyps)


def read_references(docs: Path, split: str) -> tuple[list[tuple[str, int]], list[list[str]]]:
    """(doc_id, sent_idx) keys and reference lists of one split, in document order."""
    table = pq.read_table(docs, columns=["split", "doc_id", "sent_idx", "tgt"])
    keys, refs = [], []
    for row in table.to_pylist():
        if row["split"] != split:
            continue
        if not row["tgt"]:
            raise ValueError(f"{docs}: {split} document {row['doc_id']} sentence {row['sent_idx']} "
                             "has no reference")
        keys.append((row["doc_id"], int(row["sent_idx"])))
        refs.append(list(row["tgt"]))
    if not keys:
        raise ValueError(f"{docs}: no sentences in split {split!r}")
    return keys, refs


def read_hypotheses(path: Path, keys: list[tuple[str, int]], manifest: Manifest) -> list[str]:
    """Hypotheses in the order of ``keys``; a missing sentence scores as empty and is counted.

    A decoder that silently drops sentences would otherwise raise its BLEU (fewer, easier
    sentences); scoring the gap as an empty translation penalises it, and the manifest says so.
    """
    table = pq.read_table(path, columns=["doc_id", "sent_idx", "hyp"])
    by_key = {(r["doc_id"], int(r["sent_idx"])): r["hyp"] or "" for r in table.to_pylist()}
    missing = [k for k in keys if k not in by_key]
    if missing:
        log.warning("%s: %d of %d sentences have no hypothesis (scored as empty), first %s",
                    path, len(missing), len(keys), missing[0])
        manifest.reject(f"missing_hypothesis:{path}", len(missing))
    extra = len(set(by_key) - set(keys))
    if extra:
        manifest.reject(f"hypothesis_without_reference:{path}", extra)
    return [by_key.get(k, "") for k in keys]


def reference_streams(refs: list[list[str]]) -> list[list[str | None]]:
    """Per-sentence reference lists -> sacreBLEU's reference streams (one list per ref index)."""
    n = max(len(r) for r in refs)
    return [[r[k] if k < len(r) else None for r in refs] for k in range(n)]


def documents(keys: list[tuple[str, int]], lines: list[str]) -> list[str]:
    """Join the sentences of each document (keys are in document order) with a space."""
    out: list[str] = []
    current = None
    for (doc, _), line in zip(keys, lines):
        if doc != current:
            out.append(line)
            current = doc
        else:
            out[-1] = f"{out[-1]} {line}".strip()
    return out


def doc_references(keys: list[tuple[str, int]], refs: list[list[str]]) -> list[list[str | None]]:
    """Reference stream k of the documents: the join of their sentences' k-th references."""
    n = max(len(r) for r in refs)
    streams = []
    for k in range(n):
        # a document has reference k only where all of its sentences have one
        joined = documents(keys, [r[k] if k < len(r) else "\0" for r in refs])
        streams.append([None if "\0" in d else d for d in joined])
    return streams


def metrics(cfg: ScoreConfig) -> dict[str, object]:
    """The sentence-level metrics of one test set, shared by its scores and its paired bootstrap
    (TER keeps each segment's statistics: :mod:`pipeline_lib.evaluate.cached_ter`)."""
    return {"bleu": BLEU(lowercase=cfg.lowercase), "chrf": CHRF(lowercase=cfg.lowercase),
            "ter": CachedTER(case_sensitive=not cfg.lowercase)}


def score_test_set(ts: TestSet, models: list[str], cfg: ScoreConfig,
                   controls: dict[str, str] | None = None,
                   replicates: dict[str, tuple[str, int]] | None = None,
                   meteor: Meteor | None = None,
                   against: list[tuple[str, str, str]] | None = None,
                   tokenized: TokenizedBleu | None = None, workers: int = 1) -> dict:
    """Scores and significance of every model on one test set (first model = baseline), and of
    every model against its matched control (``controls``: model -> control system). With
    ``replicates`` (system -> (group, seed)) each seed's systems are tested against that seed's
    baseline, and ``seeds`` gives the statistics across seeds (:func:`across_seeds`).
    ``meteor``: corpus METEOR beside BLEU (default: no target language, exact matches only).
    ``against`` ((model, other, kind)): the same paired test of a model against its context
    controls (its random-context twin, its ablated decodings), under ``against.<kind>``.
    ``tokenized``: the paper's tokenized BLEU beside sacreBLEU's, as ``tokenized_bleu``.
    ``workers``: processes that compute TER's edit statistics first (the slowest part)."""
    meteor = meteor or Meteor()
    sent_refs = reference_streams(ts.refs)
    doc_keys_refs = doc_references(ts.keys, ts.refs)
    out: dict = {"sentences": len(ts.keys), "documents": len({d for d, _ in ts.keys}),
                 "references": len(sent_refs), "models": {}}
    scorers = metrics(cfg)
    scorers["ter"].fill([ts.hyps[m] for m in models], sent_refs, workers)
    for model in models:
        row: dict = {}
        for name, metric in scorers.items():
            score = metric.corpus_score(ts.hyps[model], sent_refs)
            row[name] = round(score.score, 2)
            row[f"{name}_signature"] = str(metric.get_signature())
        met = meteor.corpus(ts.hyps[model], ts.refs)
        row.update(met or {"meteor": None, "meteor_sentence_mean": None})
        row["meteor_signature"] = meteor.signature()
        dbleu = BLEU(lowercase=cfg.lowercase)
        score = dbleu.corpus_score(documents(ts.keys, ts.hyps[model]), doc_keys_refs)
        row["dbleu"] = round(score.score, 2)
        row["dbleu_signature"] = str(dbleu.get_signature())
        if tokenized is not None:
            row["tokenized_bleu"], row["tokenized_bleu_signature"] = tokenized.score(
                ts.hyps[model], sent_refs)
        out["models"][model] = row
    # also with the baseline alone: the resampling gives each system's own 95 % interval
    for group in seed_groups(models, replicates or {}):
        _significance(ts, group, cfg, scorers, sent_refs, doc_keys_refs, out)
    for model, control in (controls or {}).items():
        out["models"][model]["control"] = _against(ts, model, control, cfg, sent_refs,
                                                   doc_keys_refs)
    for model, other, kind in against or []:
        out["models"][model].setdefault("against", {})[kind] = _against(
            ts, model, other, cfg, sent_refs, doc_keys_refs)
    if replicates:
        out["seeds"] = across_seeds(out["models"], models[0], controls or {}, replicates,
                                    cfg.significance_level)
    return out


def seed_groups(models: list[str], replicates: dict[str, tuple[str, int]]) -> list[list[str]]:
    """The systems tested together against one baseline: all of them (one seed), or per seed
    that seed's systems behind that seed's baseline (``models[0]`` is seed 1's). A system
    trained once for every seed (not in ``replicates``: config ``seed_scope: fine_tune``) is
    every seed's baseline where it is the baseline, else a member of the first seed's group."""
    if not replicates:
        return [models]
    shared = [m for m in models[1:] if m not in replicates]
    seeds = list(dict.fromkeys(seed for _, seed in replicates.values()))
    groups = []
    for seed in seeds:
        members = [m for m in models if replicates.get(m, (None, None))[1] == seed]
        if models[0] in replicates:
            base_group = replicates[models[0]][0]
            base = [m for m in members if replicates[m][0] == base_group]
            if len(base) != 1:
                raise ValueError(f"seed {seed}: no run of the baseline {base_group} among "
                                 f"{members}")
        else:
            base = [models[0]]
        groups.append(base + [m for m in members if m != base[0]])
    groups[0][1:1] = shared
    return groups


def t_test_p(t: float, df: int) -> float:
    """Two-sided p-value of Student's t with ``df`` (integer) degrees of freedom, exactly.

    WHY no scipy: the closed form for integer df (Abramowitz & Stegun 26.7.3-4) is a short
    finite sum: with theta = atan(|t| / sqrt(df)), P(|T| <= |t|) is
    (2/pi) (theta + sin(theta) (cos(theta) + 2/3 cos^3(theta) + ... )) for odd df and
    sin(theta) (1 + 1/2 cos^2(theta) + 3/8 cos^4(theta) + ...) for even df."""
    if df < 1:
        raise ValueError(f"t test needs df >= 1, got {df}")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):   # cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ...
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + s * total) if df > 1 else 2 * theta / math.pi
    else:
        term, total = 1.0, 0.0
        for k in range(1, df // 2 + 1):         # 1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def paired_t(deltas: list[float], level: float) -> dict:
    """Mean, sample sd, t, df and two-sided p of per-seed differences (H0: mean 0); wins =
    seeds with a positive difference. One seed has no spread: no test."""
    n = len(deltas)
    out: dict = {"deltas": [round(d, 2) for d in deltas], "mean": round(statistics.fmean(deltas), 2),
                 "sd": None, "t": None, "df": n - 1, "p": None, "significant": False,
                 "wins": sum(d > 0 for d in deltas), "seeds": n}
    if n < 2:
        return out
    mean, sd = statistics.fmean(deltas), statistics.stdev(deltas)
    if sd == 0:
        t = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    else:
        t = mean / (sd / math.sqrt(n))
    p = 1.0 if mean == 0 else t_test_p(t, n - 1)
    out.update({"sd": round(sd, 2), "t": None if math.isinf(t) else round(t, 3),
                "p": round(p, 4), "significant": p < level})
    return out


def across_seeds(rows: dict[str, dict], baseline: str, controls: dict[str, str],
                 replicates: dict[str, tuple[str, int]], level: float) -> dict:
    """Per group (a system of the single-seed plan): its seeds, BLEU per seed, mean ± sd, and
    paired t-tests across seeds of its difference to its control's group and to the
    baseline's (each seed against the same seed's control and baseline), and, under
    ``against.<kind>``, to each of its context controls (each seed against its own twin or its
    own ablated decoding)."""
    by_group: dict[str, dict[int, str]] = {}
    for system, (group, seed) in replicates.items():
        if system in rows:
            by_group.setdefault(group, {})[seed] = system
    # the baseline of each seed: its run of the baseline, or the one baseline every seed shares
    base_group = replicates.get(baseline, (baseline,))[0]
    base = by_group.get(base_group) or {s: baseline for r in by_group.values() for s in r}
    out = {}
    for group, runs in by_group.items():
        seeds = sorted(runs)
        bleu = [rows[runs[s]]["bleu"] for s in seeds]
        entry: dict = {"seeds": seeds, "systems": [runs[s] for s in seeds], "bleu": bleu,
                       "mean": round(statistics.fmean(bleu), 2),
                       "sd": round(statistics.stdev(bleu), 2) if len(bleu) > 1 else None}
        if group != base_group:
            entry["baseline"] = {"group": base_group, **paired_t(
                [rows[runs[s]]["bleu"] - rows[base[s]]["bleu"] for s in seeds], level)}
        control = {s: controls[runs[s]] for s in seeds if runs[s] in controls}
        if control and len(control) == len(seeds):
            entry["control"] = {
                "group": replicates.get(control[seeds[0]], (control[seeds[0]],))[0],
                "per_seed_p": [rows[runs[s]]["control"]["bleu_p"] for s in seeds],
                **paired_t([rows[runs[s]]["control"]["bleu_delta"] for s in seeds], level)}
        # each context control (twin, ablated decodings) that every seed was tested against
        kinds = [k for k in rows[runs[seeds[0]]].get("against", {})
                 if all(k in rows[runs[s]].get("against", {}) for s in seeds)]
        if kinds:
            entry["against"] = {k: paired_t([rows[runs[s]]["against"][k]["bleu_delta"]
                                             for s in seeds], level) for k in kinds}
        out[group] = entry
    return out


def no_difference(base_hyps: list[str], hyps: list[str], base_res: Result,
                  res: Result) -> bool:
    """Whether a system cannot differ from its baseline: the same output, or the same score.

    sacreBLEU 2.x counts resampled differences (centred on their mean) strictly above the
    observed one and adds one, so a system identical to the baseline, or two systems that score
    alike in every resample (both BLEU 0 in a smoke run), get p = 1/(n+1), a dagger on a Δ of
    0.00. An observed difference of zero is no evidence of a difference: p = 1 there."""
    return hyps == base_hyps or float(res.score) == float(base_res.score)


def _against(ts: TestSet, model: str, control: str, cfg: ScoreConfig, sent_refs,
             doc_refs) -> dict:
    """BLEU and d-BLEU of ``model`` minus its matched control's, with the paired bootstrap
    p-value of ``model`` against the control (sacreBLEU's test, the control as its baseline)."""
    out: dict = {"system": control}
    runs = [("bleu", [(control, ts.hyps[control]), (model, ts.hyps[model])], sent_refs),
            ("dbleu", [(control, documents(ts.keys, ts.hyps[control])),
                       (model, documents(ts.keys, ts.hyps[model]))], doc_refs)]
    for key, systems, refs in runs:
        test = PairedTest(systems, {key: BLEU(lowercase=cfg.lowercase)}, refs, test_type="bs",
                          n_samples=cfg.bootstrap_samples)
        _, results = test()
        base_res, res = results["BLEU"]
        out[f"{key}_delta"] = round(float(res.score) - float(base_res.score), 2)
        out[f"{key}_p"] = 1.0 if no_difference(systems[0][1], systems[1][1], base_res, res) \
            else round(float(res.p_value), 4)
        out[f"{key}_significant"] = out[f"{key}_p"] < cfg.significance_level
    out.update(delta_intervals(ts, model, control, cfg, sent_refs))
    return out


def delta_intervals(ts: TestSet, model: str, control: str, cfg: ScoreConfig,
                    sent_refs) -> dict[str, list[float]]:
    """95 % percentile intervals of BLEU(model) − BLEU(control) under a paired bootstrap that
    resamples whole documents (``bleu_delta_ci_documents``) and single sentences
    (``bleu_delta_ci_sentences``): each draw takes the same units for both systems and
    recomputes both corpus BLEUs from sacreBLEU's own sentence statistics
    (:mod:`pipeline_lib.evaluate.resample` says why documents). Seed: ``SACREBLEU_SEED``, as
    sacreBLEU's own test."""
    import os

    import numpy as np

    from pipeline_lib.evaluate.resample import statistic_interval

    bleu = BLEU(lowercase=cfg.lowercase)
    mine, theirs = (np.asarray(bleu._extract_corpus_statistics(ts.hyps[s], sent_refs), float)
                    for s in (model, control))
    width = mine.shape[1]

    def delta(summed: np.ndarray) -> float:
        return (bleu._compute_score_from_stats(summed[:width]).score
                - bleu._compute_score_from_stats(summed[width:]).score)

    both = np.concatenate([mine, theirs], axis=1)
    seed = int(os.environ.get("SACREBLEU_SEED", "12345"))
    units = {"documents": [d for d, _ in ts.keys], "sentences": list(range(len(ts.keys)))}
    return {f"bleu_delta_ci_{name}": statistic_interval(both, groups, delta,
                                                        cfg.bootstrap_samples, seed, digits=2)
            for name, groups in units.items()}


def _significance(ts: TestSet, models: list[str], cfg: ScoreConfig, scorers: dict[str, object],
                  sent_refs, doc_refs, out: dict) -> None:
    """Paired bootstrap of every model against the baseline, sentence- and document-level:
    each system's 95 % interval (``_ci``) and, for every system but the baseline, its p-value.
    ``scorers``: the test set's sentence-level metrics (:func:`metrics`)."""
    runs = [
        (scorers, [(m, ts.hyps[m]) for m in models], sent_refs),
        ({"dbleu": BLEU(lowercase=cfg.lowercase)},
         [(m, documents(ts.keys, ts.hyps[m])) for m in models], doc_refs),
    ]
    for named_metrics, systems, refs in runs:
        test = PairedTest(systems, named_metrics, refs, test_type="bs",
                          n_samples=cfg.bootstrap_samples)
        signatures, results = test()
        # results is keyed by sacreBLEU's metric names (BLEU, chrF2, TER) in our metrics' order
        for ours, (theirs, sig) in zip(named_metrics, signatures.items()):
            base_res = results[theirs][0]
            for model, res in zip(results["System"], results[theirs]):
                row = out["models"][model]
                row[f"{ours}_bs_signature"] = str(sig)
                row[f"{ours}_ci"] = [round(float(res.mean), 2), round(float(res.ci), 2)]
                if res.p_value is not None:
                    same = no_difference(ts.hyps[models[0]], ts.hyps[model], base_res, res)
                    row[f"{ours}_p"] = 1.0 if same else round(float(res.p_value), 4)
                    row[f"{ours}_significant"] = row[f"{ours}_p"] < cfg.significance_level


def score_all(refs: dict[str, Path], hyps: list[tuple[str, str, str, Path]], baseline: str,
              cfg: ScoreConfig, manifest: Manifest,
              controls: dict[str, str] | None = None,
              replicates: dict[str, tuple[str, int]] | None = None,
              tgt_lang: str | None = None, text_dir: Path | None = None,
              against: list[tuple[str, str, str]] | None = None, workers: int = 1) -> dict:
    """Score all (model, corpus, split) hypotheses; returns the scores document. ``controls``
    (model -> its matched control) adds a test of each model against its control;
    ``replicates`` (system -> (group, seed), several seeds) the statistics across seeds;
    ``tgt_lang`` picks METEOR's stemmer (None: exact matches only); ``text_dir`` gets every test
    set's references and hypotheses as plain text (text_export.py); ``against`` (model, other
    system, kind): context controls each model is also tested against; ``workers``: processes
    for TER's edit statistics (:func:`score_test_set`)."""
    meteor = Meteor(tgt_lang)
    tokenized = _tokenized(cfg.tokenized_bleu, tgt_lang)
    controls = dict(controls or {})
    replicates = dict(replicates or {})
    # the baseline first, then the models in the order given (the config's order)
    models = list(dict.fromkeys([baseline] + [m for m, *_ in hyps]))
    if baseline not in {m for m, *_ in hyps}:
        raise ValueError(f"no hypotheses for the baseline model {baseline!r}")
    sets: dict[str, TestSet] = {}
    for model, corpus, split, path in hyps:
        name = f"{corpus}/{split}"
        if name not in sets:
            if corpus not in refs:
                raise ValueError(f"{path}: no references given for corpus {corpus!r}")
            keys, r = read_references(refs[corpus], split)
            sets[name] = TestSet(name, keys, r)
            manifest.add_input(refs[corpus])
        sets[name].hyps[model] = read_hypotheses(path, sets[name].keys, manifest)
        manifest.add_input(path)
    against = [tuple(a) for a in against or []]
    for flag, named in (("--control", [m for pair in controls.items() for m in pair]),
                        ("--against", [m for m, o, _ in against for m in (m, o)])):
        unknown = sorted(set(named) - set(models))
        if unknown:
            raise ValueError(f"{flag} names systems without hypotheses: {unknown}")
    if not set(replicates) <= set(models):
        raise ValueError(f"--replicate names unknown systems: "
                         f"{sorted(set(replicates) - set(models))}")
    for name, ts in sets.items():
        absent = [m for m in models if m not in ts.hyps]
        if absent:
            raise ValueError(f"test set {name}: no hypotheses for {absent}")
    names = sorted(sets)
    if text_dir is not None:
        manifest.extra["text_line_breaks_replaced"] = sum(
            export(name, sets[name].refs, sets[name].hyps, text_dir) for name in names)
    if len(names) > 1:
        everything = TestSet(ALL_TEST_SETS)
        for name in names:
            everything.concat(sets[name])
        sets[ALL_TEST_SETS] = everything
        names.append(ALL_TEST_SETS)
    results = {}
    for name in names:
        log.info("scoring %s (%d sentences)", name, len(sets[name].keys))
        results[name] = score_test_set(sets[name], models, cfg, controls, replicates, meteor,
                                       against, tokenized, workers)
    manifest.counts = {name: {"sentences": r["sentences"], "documents": r["documents"]}
                       for name, r in results.items()}
    return {"baseline": baseline, "models": models, "test_sets": names,
            "controls": controls, "against": [list(a) for a in against], "config": asdict(cfg), "meteor": meteor.describe(),
            "results": results,
            **({"replicates": {s: list(r) for s, r in replicates.items()}} if replicates else {})}


def _tokenized(spec: dict | None, tgt_lang: str | None) -> TokenizedBleu | None:
    """The configured tokenized BLEU, or None."""
    if spec is None:
        return None
    if not tgt_lang:
        raise ValueError("score.tokenized_bleu needs the target language (--tgt-lang): Moses "
                         "tokenizes by its rules")
    return TokenizedBleu(tgt_lang, spec["lowercase"], spec["as"], spec["tokenizer"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--refs", nargs=2, action="append", required=True, metavar=("CORPUS", "DOCS"),
                    help="a corpus and its docs.parquet (repeatable)")
    ap.add_argument("--hyp", nargs=4, action="append", required=True,
                    metavar=("MODEL", "CORPUS", "SPLIT", "PARQUET"),
                    help="hypotheses of MODEL on CORPUS/SPLIT (repeatable)")
    ap.add_argument("--baseline", required=True, help="model every other model is tested against")
    ap.add_argument("--control", nargs=2, action="append", default=[], metavar=("MODEL", "CONTROL"),
                    help="also test MODEL against its matched CONTROL (repeatable)")
    ap.add_argument("--against", nargs=3, action="append", default=[],
                    metavar=("MODEL", "SYSTEM", "KIND"),
                    help="also test MODEL against a context control SYSTEM, reported as KIND "
                         "(twin, ctx_random, ctx_empty; repeatable)")
    ap.add_argument("--replicate", nargs=3, action="append", default=[],
                    metavar=("SYSTEM", "GROUP", "SEED"),
                    help="SYSTEM is seed SEED's run of GROUP (several seeds; a system without "
                         "one was trained once for every seed)")
    ap.add_argument("--lowercase", action="store_true", help="case-insensitive scores")
    ap.add_argument("--tgt-lang", default=None,
                    help="target language (ISO 639-1): METEOR's stemmer (Porter for en, "
                         "Snowball where NLTK has one); without it, exact matches only")
    ap.add_argument("--tokenized-bleu", type=json_value, default=None, metavar="JSON",
                    help="also BLEU as the paper computed it: {\"tokenizer\": \"moses\", "
                         "\"lowercase\": bool, \"as\": what the paper ran} (config "
                         "score.tokenized_bleu)")
    ap.add_argument("--bootstrap-samples", type=int, default=ScoreConfig.bootstrap_samples)
    ap.add_argument("--significance-level", type=float, default=ScoreConfig.significance_level)
    ap.add_argument("--threads", type=int, default=1,
                    help="processes for TER's edit statistics (the rule's threads; the scores "
                         "do not depend on it)")
    ap.add_argument("--output", required=True, type=Path, help="scores JSON")
    ap.add_argument("--text-dir", type=Path, default=None,
                    help="write each test set's references and hypotheses as plain text here "
                         "(<corpus>/<split>/ref.txt, <system>.txt)")
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = ScoreConfig(args.lowercase, args.bootstrap_samples, args.significance_level,
                      args.tokenized_bleu)
    manifest = Manifest(stage="score_test", params={"baseline": args.baseline, **asdict(cfg),
                                                    "tgt_lang": args.tgt_lang})
    try:
        scores = score_all({c: Path(p) for c, p in args.refs},
                           [(m, c, s, Path(p)) for m, c, s, p in args.hyp], args.baseline, cfg,
                           manifest, dict(args.control),
                           {s: (g, int(seed)) for s, g, seed in args.replicate}, args.tgt_lang,
                           args.text_dir, args.against, args.threads)
    except (OSError, ValueError) as e:
        log.error("%s", e)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(scores, indent=2) + "\n")
    for name in scores["test_sets"]:
        for model, row in scores["results"][name]["models"].items():
            # the signature printed with every number (sacreBLEU's recommendation)
            print(f"{name}\t{model}\tBLEU {row['bleu']}\t{row['bleu_signature']}")
            if "tokenized_bleu" in row:
                print(f"{name}\t{model}\ttokenized BLEU {row['tokenized_bleu']}\t"
                      f"{row['tokenized_bleu_signature']}")
            print(f"{name}\t{model}\td-BLEU {row['dbleu']}\t{row['dbleu_signature']}")
            print(f"{name}\t{model}\tchrF {row['chrf']}\t{row['chrf_signature']}")
            print(f"{name}\t{model}\tTER {row['ter']}\t{row['ter_signature']}")
            print(f"{name}\t{model}\tMETEOR {row['meteor']}\t{row['meteor_signature']}")
    manifest.write(args.output.parent / "manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

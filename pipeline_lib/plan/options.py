"""The stage-to-rule contract: each rule's stage settings as one JSON object (the stage CLI's
``--options``, :mod:`pipeline_lib.stage_options`), built here from the validated config.

A rule passes ``--options {params.options:q}`` plus its input and output paths and wildcards,
and reads nothing from ``config``: what a stage is given is written once, in ``_BUILDERS``.
The JSON is also the rule's params rerun trigger, so each builder gives its stage only the
settings that stage reads: editing ``noise`` reruns noise_docs, not BPE. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Options = dict[str, Any]


class StageOptions:
    """Every rule's ``--options`` and the cluster shape (a part of :class:`pipeline_lib.plan.Plan`)."""

    def options(self, rule: str, **wildcards: str) -> str:
        """Rule ``rule``'s stage settings as one JSON (keys: its CLI's option names)."""
        return json.dumps(_BUILDERS[rule](self, **wildcards), sort_keys=True)

    # --- what rules need besides --options (threads, resources, inputs) ------------------
    @property
    def parse_threads(self) -> int:
        return self.config["parse"]["threads"]

    @property
    def train_threads(self) -> int:
        """Cores a training job asks for (config cluster.train_threads, lowered to --cores)."""
        return self.config["cluster"]["train_threads"]

    def train_resources(self) -> dict[str, Any]:
        """rule train_model's node count and ``gres`` (snakemake-executor-plugin-slurm's
        sbatch --nodes and --gres: GPUs per node, of ``cluster.gpu_model`` when set; "" = no
        GPU)."""
        c = self.config["cluster"]
        gpus = f"gpu:{c['gpu_model']}:{c['gpus_per_node']}" if c["gpu_model"] else \
            f"gpu:{c['gpus_per_node']}"
        return {"nodes": c["nodes"], "gres": gpus if c["gpus_per_node"] else ""}

    def gpu_resources(self) -> dict[str, Any]:
        """The GPU type of the rules whose GPU the profile asks for (decode_test,
        discourse_contrastive: the plugin's ``gpu_model``, sbatch --gpus=<model>:N), from
        ``cluster.gpu_model``; nothing when it is null (any GPU)."""
        model = self.config["cluster"]["gpu_model"]
        return {"gpu_model": model} if model else {}

    @property
    def max_requeues(self) -> int:
        """Time-limit requeues of a training job (config cluster.max_requeues): a resource of
        rule train_model, so changing it reruns nothing."""
        return self.config["cluster"]["max_requeues"]

    def corpus_spec(self, corpus: str) -> dict[str, Any]:
        """Corpus ``corpus``'s config entry (what its reader, inputs and code hash follow)."""
        return self.config["corpora"][corpus]

    @property
    def downloads(self) -> dict[str, Any]:
        return self.config["downloads"]

    @property
    def lang_pair(self) -> tuple[str, str]:
        return self.config["src_lang"], self.config["tgt_lang"]


def _ingest_corpus(plan: Any, corpus: str) -> Options:
    c, (src, tgt) = plan.config, plan.lang_pair
    return {"spec": plan.corpus_spec(corpus), "hygiene": c["hygiene"],
            "max_line_chars": c["ingest"]["max_line_chars"],
            "max_quarantined_share": c["ingest"]["max_quarantined_share"],
            "src_lang": src, "tgt_lang": tgt}


def _download_corpus(plan: Any) -> Options:
    d = plan.downloads
    return {"trust_first_download": d["trust_first_download"], "retries": d["retries"],
            "timeout_s": d["timeout_s"]}


def _check_ldc(plan: Any) -> Options:
    return {"dirs": plan.downloads["ldc"], "required": plan.downloads["ldc_required"]}


def _stanza_models(plan: Any) -> Options:
    # the configured folder ("" = env DOCMT_SHARED or the repository's third_party/, resolved
    # by the job), never a path of the checkout: a moved checkout does not retrain the parsers
    # (the rule's treebank digest follows the files' content)
    return {"spec": plan.config["stanza"], "shared_dir": plan.config["shared_dir"] or ""}


def _parse_shard(plan: Any) -> Options:
    p = plan.config["parse"]
    return {"splits": p["splits"], "max_sentences_per_split": p["max_sentences_per_split"] or 0,
            "num_shards": p["shards"], "max_words": p["max_words"],
            "batch_size": p["batch_size"]}


def _train_bpe(plan: Any) -> Options:
    b = plan.config["bpe"]
    return {"vocab_size": b["vocab_size"], "character_coverage": b["character_coverage"],
            "input_sentence_size": b["input_sentence_size"], "seed": b["seed"],
            "src_lang": plan.lang_pair[0], "tgt_lang": plan.lang_pair[1]}


def _shards(plan: Any) -> Options:
    s = plan.config["shards"]
    return {"rows_per_shard": s["rows_per_shard"], "row_group_rows": s["row_group_rows"],
            "max_len": s["max_len"]}


def _noise_docs(plan: Any) -> Options:
    n = plan.config["noise"]
    return {"gap_ratio": n["gap_ratio"], "mask_rate": n["mask_rate"],
            "mask_token_prob": n["mask_token_prob"], "random_token_prob": n["random_token_prob"],
            "max_sentences": n["max_sentences"], "seed": n["seed"],
            "gap_document_input": n["gap_document_input"]}


def _train_model(plan: Any) -> Options:
    """The launcher's (the trainer's own settings are the job's ``--config-json``)."""
    c = plan.config["cluster"]
    return {"nodes": c["nodes"], "gpus_per_node": c["gpus_per_node"]}


def _decode_test(plan: Any, model: str) -> Options:
    """The search settings (config ``decode``) and the system's unit. WHY one builder: rule
    decode_test and bench/gpu_prepare.py must decode alike."""
    d = plan.config["decode"]
    return {"beam": d["beam"], "lenpen": d["lenpen"], "max_len_a": d["max_len_a"],
            "max_len_b": d["max_len_b"], "batch_size": d["batch_size"], "nbest": d["nbest"],
            "greedy": d["greedy"], "static": {None: "auto", True: "on", False: "off"}[d["static"]],
            "mode": d["mode"], "unit": plan.systems[model][1],
            "context": plan.decode_context(model), "detokenize": plan.detokenize}


def _train_truecaser(plan: Any, lang: str) -> Options:
    """The language's side and segmenter (a truecaser learns from the run's segmented text)."""
    return {"side": "src" if lang == plan.lang_pair[0] else "tgt", "lang": lang,
            "steps": plan.tokenize[lang]}


def _tokenize_corpus(plan: Any) -> Options:
    return {"langs": list(plan.lang_pair), "tokenize": plan.tokenize}


def _score_test(plan: Any) -> Options:
    """Statistics settings, the baseline, each system's matched control and, with several seeds,
    which system is which seed's run (rule and bench/gpu_prepare.py alike)."""
    s = plan.config["score"]
    return {"lowercase": s["lowercase"], "tgt_lang": plan.lang_pair[1],
            "bootstrap_samples": s["bootstrap_samples"],
            "significance_level": s["significance_level"], "baseline": plan.baseline,
            "tokenized_bleu": s["tokenized_bleu"],
            "control": [[m, c] for m in plan.systems if (c := plan.control_of(m)) and c != m],
            "against": [list(a) for a in plan.against()],
            "replicate": [[m, r[0], str(r[1])] for m in plan.systems if (r := plan.replica(m))]}


def _discourse_consistency(plan: Any) -> Options:
    s = plan.config["score"]
    return {"stop_top_k": s["consistency_stop_top_k"], "min_chars": s["consistency_min_chars"]}


def _context_cxmi(plan: Any, model: str) -> Options:
    """Bootstrap resamples as the scores' (config score.bootstrap_samples)."""
    return {"draws": plan.config["score"]["bootstrap_samples"]}


def _discourse_contrastive(plan: Any, model: str) -> Options:
    return {"suites": plan.suites, "max_examples": plan.config["score"]["discourse_max_examples"],
            "lang_pair": "-".join(plan.lang_pair)}


def _report(plan: Any) -> Options:
    """The title, the suites and the validated config (preset and command line applied: its hash
    is the run's, written beside the report)."""
    return {"title": plan.config["report"]["title"], "suites": list(plan.suites),
            "config_json": json.dumps(plan.config, sort_keys=True),
            "paper_bleu": plan.paper_bleu}


#: rule -> its stage settings (rules absent here run with paths alone)
_BUILDERS: dict[str, Callable[..., Options]] = {
    "download_corpus": _download_corpus,
    "check_ldc": _check_ldc,
    "ingest_corpus": _ingest_corpus,
    "stanza_models": _stanza_models,
    "parse_shard": _parse_shard,
    "train_truecaser": _train_truecaser,
    "tokenize_corpus": _tokenize_corpus,
    "train_bpe": _train_bpe,
    "make_shards": _shards,
    "make_head_shards": _shards,
    "noise_docs": _noise_docs,
    "train_model": _train_model,
    "decode_test": _decode_test,
    "score_test": _score_test,
    "discourse_consistency": _discourse_consistency,
    "discourse_contrastive": _discourse_contrastive,
    "context_cxmi": _context_cxmi,
    "report": _report,
}

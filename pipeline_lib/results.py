"""Every path a run writes, declared once: each stage output, one method per stage.

Rule files, final targets, the report's inputs and the plan read paths from here and spell none
themselves: stage outputs, and each job's log and benchmark file (each method's :func:`stage`
registration). A method's arguments are the stage's wildcards: left at their defaults they give the
rule's own pattern (``{corpus}``), filled in they give one job's files. Each method returns its
files by role (``Files``): a mapping for a rule's ``output: **results.ingest_corpus()``, an
attribute for one file (``results.ingest_corpus(c).docs``).

WHY its own module: only the plan imports it, so no job's code hash covers it; a changed path
reruns jobs through their outputs, not through a hash of every stage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pipeline_lib.layout import (CHECKPOINT_DIR, CKPT_FINAL, DOCS_FILE, ENCODED_FILE,
                                 MANIFEST_FILE, METRICS_FILE, PARSE_FILE, QUARANTINE_FILE,
                                 RESTORE_FILE, SPM_PREFIX, STANZA_MODEL_FILE)

F = TypeVar("F", bound=Callable)

#: Each rule's jobs by name: the wildcards that name one job's log and benchmark files
#: (``<logs>/<rule>/<job>.log``, ``<benchmarks>/<rule>/<job>.tsv``); filled by :func:`stage`.
JOB_FILES: dict[str, str] = {}
#: Rules without a benchmark (the local rules download_corpus, check_ldc: their time is the
#: network's); filled by :func:`stage`.
UNTIMED: set[str] = set()


def stage(job: str, rule: str | None = None, timed: bool = True) -> Callable[[F], F]:
    """Register the :class:`Results` method of rule ``rule`` (default: the method's name): how
    one of its jobs is named in ``logs/`` and ``benchmarks/`` (``job``, a pattern of the rule's
    wildcards), and whether it has a benchmark. WHY beside the paths: a new stage declares its
    outputs, log and benchmark in one place."""
    def register(method: F) -> F:
        name = rule or method.__name__
        JOB_FILES[name] = job
        if not timed:
            UNTIMED.add(name)
        return method
    return register


#: the default ``results_dir``, whose logs and benchmarks sit directly in ``logs/``, ``benchmarks/``
DEFAULT_RESULTS = "results"


class Files(dict):
    """A stage's output files by role (role -> path)."""

    def __getattr__(self, role: str) -> str:
        try:
            return self[role]
        except KeyError:
            raise AttributeError(role) from None


class Results:
    """Paths under ``results_dir`` (stage outputs, ``<results>/<rule>/...``) and
    ``resources_dir`` (downloads and stanza models shared between runs)."""

    def __init__(self, results_dir: str, resources_dir: str) -> None:
        self.root = results_dir
        self.resources = resources_dir
        self.run = run_name(results_dir)

    def _job_file(self, kind: str, rule: str, suffix: str, wildcards: dict[str, str]) -> str:
        name = JOB_FILES[rule].format(**wildcards) if wildcards else JOB_FILES[rule]
        return "/".join([kind, *([self.run] if self.run else []), rule, name + suffix])

    def log(self, rule: str, **wildcards: str) -> str:
        """Rule ``rule``'s log file: its pattern, or one job's file given its wildcards."""
        return self._job_file("logs", rule, ".log", wildcards)

    def benchmark(self, rule: str, **wildcards: str) -> str:
        """Rule ``rule``'s benchmark file (Snakemake's ``benchmark:``): its pattern, or one job's
        file given its wildcards."""
        if rule in UNTIMED:
            raise ValueError(f"rule {rule} has no benchmark (a local rule: the network's time)")
        return self._job_file("benchmarks", rule, ".tsv", wildcards)

    def _at(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _stage(self, rule: str, *where: str, **names: str) -> Files:
        return Files({role: self._at(rule, *where, name) for role, name in names.items()})

    # --- downloads ---------------------------------------------------------------------
    @stage("{download}", rule="download_corpus", timed=False)
    def download(self, download: str = "{download}") -> Files:
        return Files(manifest="/".join([self.resources, "corpora", download, MANIFEST_FILE]))

    def stanza_store(self) -> str:
        """Stanza's model folder (``stanza.download``'s ``model_dir``), shared between runs."""
        return "/".join([self.resources, "stanza"])

    @stage("check_ldc", timed=False)
    def check_ldc(self) -> Files:
        return self._stage("check_ldc", manifest=MANIFEST_FILE)

    # --- ingestion and parsing ---------------------------------------------------------
    @stage("{corpus}")
    def ingest_corpus(self, corpus: str = "{corpus}") -> Files:
        return self._stage("ingest_corpus", corpus, docs=DOCS_FILE, quarantine=QUARANTINE_FILE,
                           manifest=MANIFEST_FILE)

    @stage("{lang}")
    def stanza_models(self, lang: str = "{lang}") -> Files:
        return self._stage("stanza_models", lang, model=STANZA_MODEL_FILE, manifest=MANIFEST_FILE)

    @stage("{corpus}/{side}.{shard}")
    def parse_shard(self, corpus: str = "{corpus}", side: str = "{side}",
                    shard: str = "{shard}") -> Files:
        return self._stage("parse_shard", corpus, side, shard, parse=PARSE_FILE,
                           quarantine=QUARANTINE_FILE, manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def parse_corpus(self, corpus: str = "{corpus}") -> Files:
        return self._stage("parse_corpus", corpus, src="src.parquet", tgt="tgt.parquet",
                           quarantine=QUARANTINE_FILE, manifest=MANIFEST_FILE)

    # --- preprocessing -----------------------------------------------------------------
    @stage("{lang}")
    def train_truecaser(self, lang: str = "{lang}") -> Files:
        return self._stage("train_truecaser", lang, model="truecase.model",
                           manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def tokenize_corpus(self, corpus: str = "{corpus}") -> Files:
        return self._stage("tokenize_corpus", corpus, docs=DOCS_FILE, manifest=MANIFEST_FILE)

    @stage("train_bpe")
    def train_bpe(self) -> Files:
        return self._stage("train_bpe", model=f"{SPM_PREFIX}.model", vocab=f"{SPM_PREFIX}.vocab",
                           manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def encode_bpe(self, corpus: str = "{corpus}") -> Files:
        return self._stage("encode_bpe", corpus, encoded=ENCODED_FILE,
                           quarantine=QUARANTINE_FILE, manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def encode_heads(self, corpus: str = "{corpus}") -> Files:
        return self._stage("encode_heads", corpus, encoded=ENCODED_FILE,
                           quarantine=QUARANTINE_FILE, manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def noise_docs(self, corpus: str = "{corpus}") -> Files:
        return self._stage("noise_docs", corpus, restore=RESTORE_FILE,
                           manifest=MANIFEST_FILE)

    @stage("{corpus}")
    def make_shards(self, corpus: str = "{corpus}") -> str:
        """The folder of a corpus's shards (``<split>/part-*.parquet``, ``manifest.json``)."""
        return self._at("make_shards", corpus)

    @stage("{corpus}")
    def make_head_shards(self, corpus: str = "{corpus}") -> str:
        """The folder of a corpus's shards with subword dependency heads."""
        return self._at("make_head_shards", corpus)

    @stage("{corpus}")
    def verify_shards(self, corpus: str = "{corpus}") -> Files:
        return self._stage("verify_shards", corpus, manifest=MANIFEST_FILE)

    # --- training, decoding, scoring, report -------------------------------------------
    @stage("{model}")
    def train_model(self, job: str = "{model}") -> Files:
        """A training job's manifest (its output) and metrics (written before the manifest,
        not an output: a resumed job appends to it)."""
        return self._stage("train_model", job, manifest=MANIFEST_FILE, metrics=METRICS_FILE)

    def train_dir(self, job: str = "{model}") -> str:
        return self._at("train_model", job)

    def checkpoint(self, job: str, which: str = CKPT_FINAL) -> str:
        return self._at("train_model", job, CHECKPOINT_DIR, which)

    @stage("{model}/{corpus}/{split}")
    def decode_test(self, model: str = "{model}", corpus: str = "{corpus}",
                    split: str = "{split}") -> Files:
        return self._stage("decode_test", model, corpus, hyps=f"{split}.parquet",
                           manifest=f"{split}.{MANIFEST_FILE}")

    @stage("score_test")
    def score_test(self) -> Files:
        # text/: every test set's references and hypotheses as plain text (text_export.py)
        return self._stage("score_test", scores="scores.json", manifest=MANIFEST_FILE,
                           text="text")

    @stage("discourse_consistency")
    def discourse_consistency(self) -> Files:
        return self._stage("discourse_consistency", consistency="consistency.json",
                           manifest=MANIFEST_FILE)

    @stage("{model}/{corpus}/{split}")
    def context_cxmi(self, model: str = "{model}", corpus: str = "{corpus}",
                     split: str = "{split}") -> Files:
        return self._stage("context_cxmi", model, corpus, cxmi=f"{split}.json")

    @stage("{model}")
    def discourse_contrastive(self, model: str = "{model}") -> Files:
        return self._stage("discourse_contrastive", model, contrastive="contrastive.json",
                           manifest=MANIFEST_FILE)

    @stage("report")
    def report(self) -> Files:
        return self._stage("report", html="index.html", md="report.md",
                           bleu="bleu_intervals.png", curves="training_curves.png",
                           config="config.json", manifest=MANIFEST_FILE)


def run_name(results_dir: str) -> str:
    """The folder of a run's logs and benchmarks under ``logs/`` and ``benchmarks/``: none for
    the default run (``results``), the results folder's path below ``results/`` for the others
    (``results/converged`` -> ``converged``, a preset's ``results/<preset>`` -> ``<preset>``), or
    the whole path for one elsewhere (``/scratch/run1`` -> ``scratch_run1``).

    WHY: a profile or preset run in the default run's checkout must not write its logs and wall
    times over the default run's (the report reads the wall times), and the default run's
    paths stay where they were (a benchmark file is a job output: moving it reruns the job)."""
    path = results_dir.strip("/")
    if path == DEFAULT_RESULTS:
        return ""
    if path.startswith(DEFAULT_RESULTS + "/"):
        path = path[len(DEFAULT_RESULTS) + 1:]
    return path.replace("/", "_")

"""The run plan: pure functions from the validated config to the jobs the rule files declare.

WHY here and not in ``workflow/rules/*.smk``: planning (which training jobs exist and in what
order, what each is given, which systems are decoded and scored, which corpora each stage reads)
is ordinary Python that deserves unit tests (tests/unit/test_plan.py runs it on the default
config and every preset), and rule files that share globals depend on their include order. The
Snakefile builds one :class:`Plan` after validation and every rule file reads only it.

Defaults live in one place, the config schema (``workflow/schemas/config.schema.yaml``): the
Snakefile validates with ``set_default``, and :func:`load_config` does the same for tests and
tools, so this module indexes the config without fallbacks.

This module imports nothing heavy (no torch, no readers' libraries): building the DAG must not
need every stage's dependencies.
"""

from __future__ import annotations

import copy
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline_lib.codehash import code_hash
from pipeline_lib.layout import CKPT_BEST, CKPT_FINAL, MANIFEST_FILE, SENT_SUFFIX
from pipeline_lib.layout import ROOT, shared_dir
from pipeline_lib.results import Files, Results

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
PRESET_DIR = ROOT / "config" / "presets"
PARSE_PRIORITY = 5  # between the baseline's chain and independent chains: Plan.train_priority
HEADS = "heads"   # model_settings.<job>.data: sentence pairs with subword dependency heads
SEED_SUFFIX = "_seed"   # <job>_seed<N>: job <job> trained with seed N (config `seeds`)
PLATEAU = "_plateau"    # a control's step label when its job stops on a plateau, not a budget


def replica_name(job: str, seed: int) -> str:
    return f"{job}{SEED_SUFFIX}{seed}"



def load_config(*files: str | Path, overrides: Mapping | None = None,
                config_args: Sequence[str] = ()) -> dict:
    """The config a ``snakemake --configfile files... --config config_args`` run sees: the
    files deep-merged in order, a ``preset`` applied, validated with the schema's defaults
    filled in (what the Snakefile does); a key given twice in one file is an error. The files
    after the first and ``overrides`` (merged like one more ``--configfile``) are what Snakemake
    calls command-line config; ``config_args`` are ``--config`` entries as typed on a command
    line (``'seeds=[1, 2]'``), read as the Snakefile reads them
    (:func:`pipeline_lib.config_files.retype_config_args`)."""
    from snakemake.utils import update_config

    from pipeline_lib.config_files import load_yaml, retype_config_args

    config: dict = {}
    later: dict = {}
    for i, f in enumerate(files or (DEFAULT_CONFIG,)):
        data = load_yaml(f) or {}
        update_config(config, copy.deepcopy(data))
        if i:
            update_config(later, data)
    cli = retype_config_args(config_args)
    for given in (dict(overrides or {}), cli):
        update_config(later, copy.deepcopy(given))
        update_config(config, copy.deepcopy(given))
    prepare_config(config, later, cli)
    return config


def prepare_config(config: dict, overrides: Mapping, cli: Mapping | None = None) -> None:
    """Apply ``config["preset"]`` (pipeline_lib.presets) and validate ``config`` in place with
    the schema's defaults; ``overrides`` are the command line's values (every ``--configfile``
    and ``--config``), which win over a preset; ``cli`` the ``--config`` values alone, whose
    ``train`` keys reach every job (:func:`_command_line_train`)."""
    from snakemake.utils import validate

    if config.get("preset"):
        from pipeline_lib.presets import apply_preset

        apply_preset(config, PRESET_DIR, overrides)
    _command_line_train(config, cli or {})
    _drop_other_readers_keys(config, overrides.get("corpora") or {})
    check_config(config)
    validate(config, str(SCHEMA))
    # Every job gets its model_settings entry, so the schema fills its defaults too (a job
    # without an entry is a one-step sentence-level run of the registry model of its name).
    settings = config["model_settings"]
    pending = list(config["models"])
    while pending:
        job = pending.pop()
        if job not in settings:
            settings[job] = {}
        pending.extend([settings[job]["init_from"]] if settings[job].get("init_from") else [])
    validate(config, str(SCHEMA))


def _command_line_train(config: dict, cli: Mapping) -> None:
    """A key that ``--config train=...`` gives is that value for every training job: it
    replaces the same key in ``fine_tune.train`` and in each ``model_settings.<job>.train`` (a
    preset's or a config file's) unless the same ``--config`` gives it there too.

    WHY: those sections override ``train`` per job, so ``--config preset=<name>
    train='{max_steps: 10}'`` changed no job of a preset that states each job's budget. A
    ``--configfile`` keeps the layering of config.yaml (its ``train`` is the base the per-job
    sections override): the profiles (config/converged.yaml) rely on it."""
    train = cli.get("train")
    if not isinstance(train, Mapping):
        return
    given_jobs = cli.get("model_settings") if isinstance(cli.get("model_settings"), Mapping) else {}
    given_ft = cli.get("fine_tune") if isinstance(cli.get("fine_tune"), Mapping) else {}
    sections = [(config.get("fine_tune"), given_ft)]
    if isinstance(config.get("model_settings"), Mapping):
        sections += [(s, given_jobs.get(job)) for job, s in config["model_settings"].items()]
    for section, given in sections:
        job_train = section.get("train") if isinstance(section, Mapping) else None
        if not isinstance(job_train, dict):
            continue
        named = given.get("train") if isinstance(given, Mapping) else None
        for key, value in train.items():
            if key in job_train and not (isinstance(named, Mapping) and key in named):
                job_train[key] = copy.deepcopy(value)


#: a YAML 1.1 boolean where a language code is expected: the words that read as it unquoted
_YAML11_BOOLS = {False: "no or off", True: "yes or on"}


def check_config(config: Mapping) -> None:
    """What the schema cannot say, refused before anything is planned
    (:class:`pipeline_lib.config_files.ConfigError`): a language code that YAML read as a
    boolean (``tgt_lang: no``, Norwegian, is ``false`` in YAML 1.1), the same language on both
    sides, and names that differ only in case (corpora; models and jobs), whose folders are one
    folder on a case-insensitive file system (macOS, Windows)."""
    from pipeline_lib.config_files import ConfigError

    stanza = config.get("stanza")
    treebanks = stanza.get("treebanks") if isinstance(stanza, Mapping) else None
    langs = [(key, config.get(key), f"{key}: 'no'") for key in ("src_lang", "tgt_lang")]
    langs += [("a key of stanza.treebanks", k, "'no': {name: ..., prefix: ...}")
              for k in (treebanks if isinstance(treebanks, Mapping) else {})]
    for where, value, quoted in langs:
        if isinstance(value, bool):
            raise ConfigError(
                f"{where} is {str(value).lower()}, a boolean, not a language code: YAML 1.1 "
                f"(config files) reads an unquoted {_YAML11_BOOLS[value]} as "
                f"{str(value).lower()}; quote the code, e.g. {quoted} for Norwegian")
    src, tgt = config.get("src_lang"), config.get("tgt_lang")
    if isinstance(src, str) and isinstance(tgt, str) and src.lower() == tgt.lower():
        raise ConfigError(
            f"src_lang and tgt_lang are both {src!r}: the pipeline translates between two "
            "languages (language identification would remove most pairs as "
            "wrong_language_tgt); set each side's code, e.g. --config src_lang=es tgt_lang=en")
    settings = config.get("model_settings")
    for what, names in [("corpora", config.get("corpora")),
                        ("models/model_settings",
                         [*(config.get("models") or []),
                          *(settings if isinstance(settings, Mapping) else [])])]:
        seen: dict[str, str] = {}
        for name in dict.fromkeys(names or []):
            if not isinstance(name, str):
                continue   # the schema refuses it
            other = seen.setdefault(name.casefold(), name)
            if other != name:
                raise ConfigError(
                    f"{what}: {other!r} and {name!r} differ only in case: their files "
                    "(results/<stage>/<name>/) would be one on a case-insensitive file system "
                    "(macOS, Windows); rename one")


def _drop_other_readers_keys(config: dict, given: Mapping) -> None:
    """A corpus entry that the command line (``--configfile``, ``--config``) gives with a
    reader keeps none of the keys an earlier file gave that this reader does not take.

    WHY: Snakemake deep-merges config files, so a user's ``bible: {reader: plaintext, splits:
    ...}`` would inherit the default's ``src_module``, ``dev_books``... and fail validation on
    keys the user never wrote; an entry with the same reader still merges (``bible: {max_chapters:
    20}`` keeps the default's modules)."""
    import yaml

    readers = yaml.safe_load(SCHEMA.read_text())["$defs"]
    for name, entry in given.items():
        merged = config.get("corpora", {}).get(name)
        reader = entry.get("reader") if isinstance(entry, Mapping) else None
        if not isinstance(merged, dict) or f"reader_{reader}" not in readers:
            continue
        takes = readers[f"reader_{reader}"]["properties"]
        for key in [k for k in merged if k not in entry and k not in takes]:
            del merged[key]


@dataclass(frozen=True)
class TrainJob:
    """One training job (``results/train_model/<name>``)."""

    name: str
    model: dict[str, Any]        # ModelConfig fields: size, registry name, extras
    train: dict[str, Any]        # TrainConfig fields: train section, job overrides, init, freeze
    data: str                    # shard task the job trains and validates on: sent | doc
    corpus: str                  # corpus whose train shards it reads
    dev_corpus: str              # corpus whose dev shards validate it
    init_from: str | None        # job whose checkpoint initialises it
    aux: str | None              # second shard task (restore | doc) on a share of the updates
    aux_corpus: str | None = None  # corpus of the aux shards (None = ``corpus``)

    def config_json(self) -> str:
        """The trainer's ``--config-json`` (also the rule's params rerun trigger)."""
        return json.dumps({"model": self.model, "train": self.train}, sort_keys=True)


class Plan:
    """Everything the rule files need to know about a validated config."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        #: every stage output's path (pipeline_lib.results): rules, targets and report read them
        self.results = Results(config["results_dir"], config["resources_dir"])
        self.jobs = self._train_jobs()
        self.controls = self._controls() if config["score"]["matched_controls"] else {}
        #: the evaluated model jobs, baseline first (``models``, or each of them per seed)
        self.models: list[str] = list(config["models"])
        self.seeds: list[int] = list(config["seeds"] or [config["train"]["seed"]])
        #: job -> (the job of the single-seed plan it repeats, its seed), with several seeds
        self.replicas: dict[str, tuple[str, int]] = {}
        if config["seeds"]:
            self._seed(self.seeds)

    # --- corpora -------------------------------------------------------------------------
    @property
    def corpora(self) -> list[str]:
        return list(self.config["corpora"])

    def splits(self, corpus: str) -> set[str]:
        """The splits a corpus's ingestion writes: its ``splits`` keys (a union's: those of its
        parts); the bible reader makes ``train`` from every book not in ``dev_books``/``test_books``."""
        spec = self.config["corpora"][corpus]
        if spec["reader"] == "bible":
            return {"train"} | {s for s in ("dev", "test") if spec[f"{s}_books"]}
        if spec["reader"] == "union":
            return {s for part in spec["parts"] for s in part["splits"]}
        return set(spec["splits"])

    @property
    def bpe_corpora(self) -> list[str]:
        """Corpora whose text trains the joint BPE model: ``bpe.corpora``, by default those with
        a ``train`` or ``mono`` split (pipeline_lib.preprocess.bpe reads no other). WHY not every
        corpus: a test-only corpus in train_bpe's input would retrain BPE, and so every model,
        when it changes."""
        named = self.config["bpe"]["corpora"]
        if named is None:
            return [c for c in self.corpora if self.splits(c) & {"train", "mono"}]
        for c in named:
            if c not in self.config["corpora"] or not self.splits(c) & {"train", "mono"}:
                raise ValueError(f"bpe.corpora: {c!r} is not a corpus with a train or mono "
                                 f"split (corpora: {', '.join(self.corpora)})")
        return list(named)

    @property
    def test_corpora(self) -> list[str]:
        """Corpora decoded and scored on ``score.test_splits`` (training-only corpora have none)."""
        return list(self.config["score"]["corpora"] or self.corpora)

    @property
    def test_splits(self) -> list[str]:
        return list(self.config["score"]["test_splits"])

    @property
    def head_corpora(self) -> list[str]:
        """Corpora whose parses some job trains on (``data: heads``: the DBSA supervision); only
        these are parsed, and a setup without such a job runs no stanza at all."""
        return list(dict.fromkeys(c for j in self.jobs.values() if j.data == HEADS
                                  for c in (j.corpus, j.dev_corpus)))

    @property
    def parses(self) -> bool:
        return bool(self.head_corpora)

    def shard_root(self, corpus: str, data: str) -> str:
        """The shard folder a job with ``data`` reads (a rule's output, hence its input)."""
        return (self.results.make_head_shards(corpus) if data == HEADS
                else self.results.make_shards(corpus))

    def shard_task(self, data: str) -> str:
        """The task folder inside :meth:`shard_root`: head shards hold sentence pairs."""
        return "sent" if data == HEADS else data

    # --- parsing -------------------------------------------------------------------------
    def treebank_digest(self, lang: str) -> str:
        """sha256 of the UD treebank files that would train language ``lang``'s stanza model,
        where the shared folder (:func:`pipeline_lib.layout.shared_dir`) holds them ("" where it
        does not: then the pinned commit in the config names them). Rule stanza_models passes
        the configured folder, not its resolved place, and reruns when this content changes:
        a moved checkout retrains nothing."""
        import hashlib

        tb = self.config["stanza"]["treebanks"].get(lang)
        h = hashlib.sha256()
        folder = shared_dir(self.config["shared_dir"]) / "ud"
        files = sorted((folder / tb["name"]).glob("*.conllu")) if tb else []
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:16] if files else ""

    def side_lang(self, side: str) -> str:
        return self.config["src_lang" if side == "src" else "tgt_lang"]

    def parse_shards(self, corpus: str, side: str) -> list[Files]:
        return [self.results.parse_shard(corpus, side, str(n))
                for n in range(self.config["parse"]["shards"])]

    def parse_shard_dirs(self, corpus: str, side: str) -> list[str]:
        """The folders of a corpus side's parse shards (what the merge step reads)."""
        return [str(Path(shard.manifest).parent) for shard in self.parse_shards(corpus, side)]

    def parse_shard_files(self, corpus: str, side: str) -> list[str]:
        return [f for shard in self.parse_shards(corpus, side) for f in shard.values()]

    # --- training ------------------------------------------------------------------------
    def _train_jobs(self) -> dict[str, TrainJob]:
        """Every evaluated model plus the jobs they start from (``init_from``), in order."""
        settings = self.config["model_settings"]
        order: list[str] = []
        pending = list(self.config["models"])
        while pending:
            job = pending.pop(0)
            if job not in order:
                order.append(job)
                if settings.get(job, {}).get("init_from"):
                    pending.append(settings[job]["init_from"])
        return {job: self._job(job) for job in order}

    def _job(self, job: str) -> TrainJob:
        cfg = self.config
        s = cfg["model_settings"][job]
        train = {k: v for k, v in cfg["train"].items() if k not in ("corpus", "dev_corpus")}
        corpus = s["corpus"] or cfg["train"]["corpus"]
        init, aux = s["init_from"], s["aux"]
        return TrainJob(
            name=job,
            model={**cfg["model_sizes"][s["size"] or cfg["model"]["size"]],
                   "name": s["name"] or job, "extras": dict(s["extras"])},
            train={**train, **(cfg["fine_tune"]["train"] if init else {}), **s["train"],
                   "init_from": self.checkpoint(init, CKPT_BEST) if init else None,
                   "freeze": list(s["freeze"]),
                   **({"aux_ratio": s["aux_ratio"]} if aux else {})},
            data=s["data"],
            corpus=corpus,
            dev_corpus=cfg["train"]["dev_corpus"] or corpus,
            init_from=init,
            aux=aux,
            aux_corpus=(s["aux_corpus"] or corpus) if aux else None,
        )

    # --- matched controls ----------------------------------------------------------------
    def _controls(self) -> dict[str, str]:
        """Evaluated model -> the job that had the same number of translation updates on the
        same sentence pairs without the model's method, added to ``self.jobs`` (Δ and † in the
        report are computed against it as well as against the baseline).

        The control mirrors the model's training chain link by link with Transformer jobs:
        a link that starts from a sentence-level Transformer job (two-step recipes, a DBSA or
        CAMN fine-tune) becomes that job continued for the same updates, on the same data, with
        the same schedule and every parameter trained; a link of a non-Transformer chain (cross-
        task pre-training, then fine-tuning) becomes a Transformer trained on that link's corpus
        for that link's translation updates (restoration updates do not translate), starting
        from the control of the previous link. A control identical to an existing job (e.g. the
        baseline) is that job.

        Under a plateau rule (``train.patience`` > 0, the converged regime) a job has no fixed
        number of updates to copy. The control then gets what stays fair when both stop on
        their own: the same initial checkpoint, data, schedule, stop rule (dev metric,
        patience, min_delta) and ``max_steps`` cap (scaled by the translation share like a
        budget), every parameter trained; each trains until its own dev metric stops
        improving. Neither is held to a budget the other exceeds, so the comparison asks what
        the papers ask (does the method beat the same baseline trained on until it no longer
        gains), and the report shows both jobs' updates and target tokens, and whether either
        hit the cap first. Its name says ``plateau`` where a budget
        control says its updates (``transformer_plus_plateau_doc``, ``transformer_plus150_doc``);
        a cross-task pre-training's control trains to its plateau from scratch, which is the
        baseline itself when their train settings agree."""
        controls: dict[str, str] = {}
        for model in self.config["models"]:
            control = self._control_job(model)
            if control != model:
                controls[model] = control
        return controls

    def _control_job(self, name: str) -> str:
        """The job mirroring job ``name`` (itself for a sentence-level Transformer)."""
        job = self.jobs[name]
        if job.model["name"] == "transformer" and not job.aux:
            return name
        parent = self._control_job(job.init_from) if job.init_from else None
        share = 1.0 - (job.train.get("aux_ratio") or 0.0) if job.aux == "restore" else 1.0
        steps = round(job.train["max_steps"] * share)
        # A job that stops on a plateau has no budget to copy: its control stops on its own
        # plateau under the same rule, and ``steps`` is only its cap (see _controls).
        label = PLATEAU if job.train.get("patience", 0) > 0 else str(steps)
        train = {k: v for k, v in job.train.items() if k != "aux_ratio"}
        if parent is None:
            suffix = "" if job.corpus == self.config["train"]["corpus"] else f"_{job.corpus}"
            spec = TrainJob(name=f"transformer_scratch{label}{suffix}",
                            model={**job.model, "name": "transformer", "extras": {}},
                            train={**train, "max_steps": steps, "init_from": None, "freeze": []},
                            data="sent" if job.data == "doc" and job.aux else job.data,
                            corpus=job.corpus, dev_corpus=job.dev_corpus, init_from=None, aux=None)
        else:
            spec = TrainJob(name=f"{parent}_plus{label}" + ("" if job.data == "sent"
                                                             else f"_{job.data}"),
                            model=dict(self.jobs[parent].model),
                            train={**train, "max_steps": steps,
                                   "init_from": self.checkpoint(parent, CKPT_BEST), "freeze": []},
                            data=job.data, corpus=job.corpus, dev_corpus=job.dev_corpus,
                            init_from=parent, aux=None)
        same = [j for j in self.jobs.values() if _same_training(j, spec)]
        if same:
            return same[0].name
        if spec.name in self.jobs:
            spec = TrainJob(**{**spec.__dict__, "name": f"{spec.name}_"
                               f"{zlib.crc32(spec.config_json().encode()) % 10_000:04d}"})
        self.jobs[spec.name] = spec
        return spec.name

    def _seed(self, seeds: list[int]) -> None:
        """Train every job with ``seeds``: one seed keeps the names (``train.seed`` = it); several
        repeat every job (chains and controls) as ``<job>_seed<N>``, each link starting from the
        same seed's parent, so a model and its control of seed N share their initial checkpoint
        and pair up in the test across seeds."""
        if len(seeds) == 1:
            self.jobs = {n: replace(j, train={**j.train, "seed": seeds[0]})
                         for n, j in self.jobs.items()}
            return
        single, self.jobs = self.jobs, {}
        for name, job in single.items():
            for seed in seeds:
                rep = replica_name(name, seed)
                init = replica_name(job.init_from, seed) if job.init_from else None
                self.jobs[rep] = replace(job, name=rep, init_from=init, train={
                    **job.train, "seed": seed,
                    "init_from": self.checkpoint(init, CKPT_BEST) if init else None})
                self.replicas[rep] = (name, seed)
        self.controls = {replica_name(m, s): replica_name(c, s)
                         for m, c in self.controls.items() for s in seeds}
        self.models = [replica_name(m, s) for m in self.config["models"] for s in seeds]

    def replica(self, system: str) -> tuple[str, int] | None:
        """(system of the single-seed plan, seed) of an evaluated system of a several-seed run
        (``crosstask_seed2_sent`` -> ``("crosstask_sent", 2)``), else None."""
        job = self.systems[system][0]
        if job not in self.replicas:
            return None
        base, seed = self.replicas[job]
        return (base + system[len(job):], seed)

    def replicate_args(self) -> str:
        """``--replicate SYSTEM GROUP SEED`` flags (score and report: statistics across seeds)."""
        return " ".join(f"--replicate {s} {r[0]} {r[1]}" for s in self.systems
                        if (r := self.replica(s)))

    def train_priority(self, job: str) -> int:
        """Snakemake priority of a training job when cores are scarce: the baseline and every
        job that starts from it form the longest chain (the baseline has the most updates and
        the most fine-tunes wait for it), so they go first (10); stanza models and parsing
        (``PARSE_PRIORITY``, DBSA's data) come next, so that the parse chain is not left for
        the end; independent chains (cross-task and its controls) fill what is left (1)."""
        baselines = {m for m in self.models  # the baseline of each seed
                     if self.replicas.get(m, (m,))[0] == self.config["models"][0]}
        while job not in baselines and self.jobs[job].init_from:
            job = self.jobs[job].init_from
        return 10 if job in baselines else 1

    def train_code(self, job: str) -> str:
        """Code hash of a training job: the trainer, the shared core and the module of the job's
        own model (``pipeline_lib/models/<name>.py``, which the registry imports by name), so
        editing one model retrains its jobs and what starts from them, not the others."""
        return code_hash("training.train", "training.launch",
                         f"models.{self.jobs[job].model['name']}")

    def model_code(self, system: str, *entry: str) -> str:
        """Code hash of a stage that runs an evaluated system's model (decoding, contrastive
        scoring): the stage's ``entry`` modules and the model's own module."""
        return code_hash(*entry, f"models.{self.jobs[self.systems[system][0]].model['name']}")

    def checkpoint(self, job: str, which: str = CKPT_FINAL) -> str:
        return self.results.checkpoint(job, which)

    def init_inputs(self, job: str) -> list[str]:
        init = self.jobs[job].init_from
        return [self.checkpoint(init, CKPT_BEST)] if init else []

    def aux_shards(self, job: str) -> str | None:
        """The folder of a job's second data stream (cross-task), else None."""
        j = self.jobs[job]
        if not j.aux:
            return None
        split = "mono" if j.aux == "restore" and "mono" in self.splits(j.aux_corpus) else "train"
        return f"{self.results.make_shards(j.aux_corpus)}/{j.aux}/{split}"

    def aux_flag(self, job: str) -> str:
        """``--aux-shards DIR`` of a job with a second data stream (cross-task), else ""."""
        aux = self.aux_shards(job)
        return f"--aux-shards {aux}" if aux else ""

    def train_shards(self, job: str, split: str = "train", dev: bool = False) -> str:
        """The shard folder of ``split`` that job ``job`` trains (or, ``dev``, validates) on."""
        j = self.jobs[job]
        return (f"{self.shard_root(j.dev_corpus if dev else j.corpus, j.data)}/"
                f"{self.shard_task(j.data)}/{split}")

    def aux_inputs(self, job: str) -> list[str]:
        """The shard folder of a job's aux corpus (declared: another corpus's shards rerun it)."""
        j = self.jobs[job]
        return [self.results.make_shards(j.aux_corpus)] if j.aux else []

    def job_regex(self) -> str:
        """Wildcard constraint matching exactly the training job names (longest first)."""
        return "|".join(sorted(self.jobs, key=len, reverse=True))

    # --- evaluation ----------------------------------------------------------------------
    @property
    def systems(self) -> dict[str, tuple[str, str]]:
        """Evaluated system -> (training job, decode unit). A model with
        ``model_settings.<m>.sentence_decode`` (cross-task: the paper's "translate sentences"
        mode) is decoded a second time, each sentence alone, as its own row ``<m>_sent``."""
        out = {m: (m, "document") for m in self.models}
        for m in self.models:
            if self.config["model_settings"][self.replicas.get(m, (m,))[0]]["sentence_decode"]:
                out[f"{m}{SENT_SUFFIX}"] = (m, "sentence")
        for c in dict.fromkeys(self.controls.values()):
            out.setdefault(c, (c, "document"))
        return out

    def control_of(self, system: str) -> str | None:
        """The matched control of an evaluated system (``<m>_sent`` shares ``m``'s)."""
        return self.controls.get(self.systems[system][0])

    def control_args(self) -> str:
        """``--control SYSTEM CONTROL`` flags for the significance tests against controls."""
        return " ".join(f"--control {s} {c}" for s in self.systems
                        if (c := self.control_of(s)) and c != s)

    @property
    def baseline(self) -> str:
        return self.models[0]

    def system_regex(self) -> str:
        return "|".join(sorted(self.systems, key=len, reverse=True))

    def hypotheses(self) -> list[tuple[str, str, str, str]]:
        """(system, corpus, split, hypothesis Parquet) of every decoded test set."""
        return [(m, c, s, self.results.decode_test(m, c, s).hyps)
                for m in self.systems for c in self.test_corpora for s in self.test_splits]

    def test_set_args(self) -> str:
        """``--refs CORPUS DOCS`` and ``--hyp SYSTEM CORPUS SPLIT PARQUET`` flags naming every
        test set, shell-quoted (score and discourse CLIs)."""
        import shlex

        args = [["--refs", c, self.results.ingest_corpus(c).docs]
                for c in self.test_corpora]
        args += [["--hyp", m, c, s, p] for m, c, s, p in self.hypotheses()]
        return " ".join(shlex.quote(a) for flag in args for a in flag)

    @property
    def suites(self) -> dict[str, dict]:
        return dict(self.config["score"]["discourse_suites"])

    def suite_files(self) -> list[str]:
        """Every file the contrastive suites read (rerun triggers)."""
        return [s[k] for s in self.suites.values()
                for k in ("path", "context_src", "context_tgt") if s.get(k)]

    # --- report --------------------------------------------------------------------------
    def rule_jobs(self) -> dict[str, list[dict[str, str]]]:
        """Every job of the run but the report's and the local rules' (``download_corpus``,
        ``check_ldc``), as rule -> the wildcards of each of its jobs.

        WHY: the report shows each stage's wall time from the jobs' benchmark files, so rule
        report declares all of them (each rule's own ``benchmark:`` pattern filled with these
        wildcards). The local rules have no benchmark: their time is the network's, and a
        benchmark file is an output, so a corpus placed by hand (what the download error tells
        a user on an offline machine to do) would be fetched again only to write one. This
        mirrors the DAG :meth:`final_targets` asks for; tests/integration/test_workflow.py
        checks it against ``snakemake -n``."""
        corpora = [{"corpus": c} for c in self.corpora]
        heads = [{"corpus": c} for c in self.head_corpora]
        langs = dict.fromkeys(self.side_lang(side) for side in ("src", "tgt"))
        jobs = {
            "ingest_corpus": corpora,
            "stanza_models": [{"lang": lang} for lang in langs] if self.parses else [],
            "parse_shard": [{"corpus": c, "side": side, "shard": str(n)}
                            for c in self.head_corpora for side in ("src", "tgt")
                            for n in range(self.config["parse"]["shards"])],
            "parse_corpus": heads,
            "train_bpe": [{}],
            "encode_bpe": corpora,
            "encode_heads": heads,
            "make_head_shards": heads,
            "noise_docs": corpora,
            "make_shards": corpora,
            "verify_shards": corpora,
            "train_model": [{"model": job} for job in self.jobs],
            "decode_test": [{"model": m, "corpus": c, "split": s}
                            for m, c, s, _ in self.hypotheses()],
            "score_test": [{}],
            "discourse_consistency": [{}],
            "discourse_contrastive": ([{"model": m} for m in self.models]
                                      if self.suites else []),
        }
        return {rule: wildcards for rule, wildcards in jobs.items() if wildcards}

    def benchmarks(self) -> list[tuple[str, str]]:
        """(rule, benchmark file) of every job of :meth:`rule_jobs`."""
        return [(rule, self.results.benchmark(rule, **wildcards))
                for rule, jobs in self.rule_jobs().items() for wildcards in jobs]

    def report_inputs(self) -> dict[str, list[str]]:
        """The files the report reads besides the scores (rule report's named inputs;
        :meth:`report_args` names the same files to the report)."""
        r = self.results
        return {
            "ingest": [r.ingest_corpus(c).manifest for c in self.corpora],
            # a shard folder: the manifest inside is not an output of its own
            "shards": [r.make_shards(c) for c in self.corpora],
            "train": [r.train_model(job).manifest for job in self.jobs],
            "decode": [r.decode_test(m, c, s).manifest for m, c, s, _ in self.hypotheses()],
            "benchmarks": [path for _, path in self.benchmarks()],
        }

    def report_args(self) -> str:
        """The report's flags naming every file it reads besides the scores, shell-quoted:
        which training job each evaluated system is (``--system``), the ingest, shard, training
        and decoding manifests, each training job's parent (the training chains as planned),
        and every job's benchmark file.

        A job's ``metrics.jsonl`` is named but not a declared input: the trainer writes it
        before the job's manifest, and declared as an output Snakemake would delete it before a
        resumed training job (which appends to it)."""
        import shlex

        r = self.results
        args = [["--system", system, job] for system, (job, _) in self.systems.items()]
        args += [["--ingest", c, r.ingest_corpus(c).manifest] for c in self.corpora]
        args += [["--shards", c, f"{r.make_shards(c)}/{MANIFEST_FILE}"] for c in self.corpora]
        args += [["--train", job, r.train_model(job).manifest, r.train_model(job).metrics,
                  self.jobs[job].init_from or ""] for job in self.jobs]
        args += [["--decode", m, r.decode_test(m, c, s).manifest]
                 for m, c, s, _ in self.hypotheses()]
        args += [["--benchmark", rule, path] for rule, path in self.benchmarks()]
        return " ".join(shlex.quote(a) for flag in args for a in flag)

    # --- targets -------------------------------------------------------------------------
    def final_targets(self) -> list[str]:
        """What ``rule all`` builds: every stage's manifest for every corpus and job, and the
        report."""
        r = self.results
        t = [r.ingest_corpus(c).manifest for c in self.corpora]
        t += [r.parse_corpus(c).manifest for c in self.head_corpora]
        t += [r.verify_shards(c).manifest for c in self.corpora]
        t += [r.train_model(m).manifest for m in [*self.models, *self.controls.values()]]
        t += [r.decode_test(m, c, s).manifest for m, c, s, _ in self.hypotheses()]
        t += [r.score_test().scores, r.discourse_consistency().consistency]
        if self.suites:
            t += [r.discourse_contrastive(m).contrastive for m in self.models]
        downloads = self.config["downloads"]
        t += [r.download(d).manifest for d in downloads["corpora"]]
        if downloads["ldc_required"]:
            t.append(r.check_ldc().manifest)
        t.append(r.report().html)
        return t


def _same_training(a: TrainJob, b: TrainJob) -> bool:
    """Whether two jobs train the same model the same way on the same data (names aside)."""
    return (a.model, a.train, a.data, a.corpus, a.dev_corpus, a.init_from, a.aux, a.aux_corpus) == \
        (b.model, b.train, b.data, b.corpus, b.dev_corpus, b.init_from, b.aux, b.aux_corpus)

"""The validated config a run sees: config files merged in order, a preset applied, the command
line's values typed and applied, checks the schema cannot express, then the schema with its
defaults (``workflow/schemas/config.schema.yaml``).

WHY its own module: the Snakefile calls :func:`prepare_config` before anything is planned, and
tests and tools call :func:`load_config` to see the config a ``snakemake`` command would;
neither needs the plan (pipeline_lib.plan), which reads the result. Defaults live in one place,
the schema: validation fills them in, so later code indexes the config without fallbacks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline_lib.layout import ROOT

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
PRESET_DIR = ROOT / "config" / "presets"


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
    from pipeline_lib.plan.training import chain_jobs

    for job in chain_jobs(config["models"], config["model_settings"]):
        config["model_settings"].setdefault(job, {})
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

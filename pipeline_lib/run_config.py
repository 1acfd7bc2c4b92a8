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
import math
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
    files = files or (DEFAULT_CONFIG,)
    for i, f in enumerate(files):
        data = load_yaml(f) or {}
        update_config(config, copy.deepcopy(data))
        if i:
            update_config(later, data)
    cli = retype_config_args(config_args)
    for given in (dict(overrides or {}), cli):
        update_config(later, copy.deepcopy(given))
        update_config(config, copy.deepcopy(given))
    if overrides and "corpora" in overrides:
        cli = {**cli, "corpora": {**dict(overrides["corpora"]), **dict(cli.get("corpora") or {})}}
    prepare_config(config, later, cli, files[1:])
    return config


def prepare_config(config: dict, overrides: Mapping, cli: Mapping | None = None,
                   files: Sequence[str | Path] = ()) -> None:
    """Apply ``config["preset"]`` (pipeline_lib.presets) and validate ``config`` in place with
    the schema's defaults; ``overrides`` are the command line's values (every ``--configfile``
    and ``--config``), which win over a preset; ``cli`` the ``--config`` values alone, whose
    ``train`` keys reach every job (:func:`_command_line_train`); ``files`` the command line's
    ``--configfile`` files (:func:`_own_corpora`, :func:`_own_results_dir`)."""
    from snakemake.utils import validate

    _no_preset_files(files)
    if config.get("preset"):
        from pipeline_lib.presets import apply_preset

        profiles = [Path(f) for f in files if _is_profile(f)]
        if profiles:
            overrides = _profile_under_preset(overrides, profiles, files, cli or {})
        apply_preset(config, PRESET_DIR, overrides)
        if profiles and "results_dir" not in overrides:
            config["results_dir"] = "_".join([config["results_dir"], *(p.stem for p in profiles)])
    else:
        _own_corpora(config, files, cli or {})
        _own_results_dir(config, files, overrides)
    _command_line_train(config, cli or {})
    _drop_other_readers_keys(config, overrides.get("corpora") or {})
    _normalise_languages(config)
    check_config(config)
    validate(config, str(SCHEMA))
    _train_corpus(config)
    _check_decode(config)
    # Every job gets its model_settings entry, so the schema fills its defaults too (a job
    # without an entry is a one-step sentence-level run of the registry model of its name).
    from pipeline_lib.plan.training import chain_jobs

    for job in chain_jobs(config["models"], config["model_settings"]):
        config["model_settings"].setdefault(job, {})
    validate(config, str(SCHEMA))
    _check_model_names(config)


def registered_models() -> set[str]:
    """The names of the model registry, read from its modules' ``@register("<name>")`` lines
    (pipeline_lib/models/registry.py: a model's module is named after it) without importing
    torch, which planning must not (tests/unit/test_config_checks.py holds this to ``MODELS``)."""
    import re

    return {m for f in (ROOT / "pipeline_lib" / "models").glob("*.py")
            for m in re.findall(r'^@register\("(\w+)"\)', f.read_text(), re.M)}


def _check_model_names(config: Mapping) -> None:
    """Every job's registry model exists, refused with the nearest names when planning instead
    of a traceback from the first job's code hash (issue 36)."""
    import difflib

    from pipeline_lib.config_files import ConfigError
    from pipeline_lib.plan.training import chain_jobs

    known = registered_models()
    for job in chain_jobs(config["models"], config["model_settings"]):
        name = config["model_settings"][job]["name"] or job
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
            where = (f"model_settings.{job}.name" if config["model_settings"][job]["name"]
                     else f"job {job!r} (a job without model_settings.{job}.name is the "
                          "registry model of its name)")
            raise ConfigError(f"{where}: no registered model {name!r}"
                              + (f"; did you mean {' or '.join(map(repr, near))}?" if near else "")
                              + f" Registered models: {', '.join(sorted(known))}")


#: what a profile (config/converged.yaml, config/gpu.yaml) may set under a preset: the machine's
#: device and resources, nothing of the paper's recipe (issue 35 item 2)
PROFILE_UNDER_PRESET = ("cluster", "resources_dir", "train.device", "train.num_workers",
                        "train.compile", "train.pad_multiple", "train.phase_times",
                        "decode.batch_size", "decode.static")


def _is_profile(f: str | Path) -> bool:
    """A profile of the checkout (config/<name>.yaml other than config.yaml)."""
    path = Path(f).resolve()
    return path.parent == DEFAULT_CONFIG.parent.resolve() and path.name != DEFAULT_CONFIG.name


def _leaves(d: Mapping, prefix: str = "") -> set[str]:
    """Dotted paths of the non-mapping values of ``d``."""
    out: set[str] = set()
    for k, v in d.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, Mapping) and v else {f"{prefix}{k}"}
    return out


def _profile_under_preset(overrides: Mapping, profiles: list[Path],
                          files: Sequence[str | Path], cli: Mapping) -> dict:
    """The command line's values without what only a profile set beyond its device and resource
    settings, listed on the console. WHY: a profile given with a preset
    (``make reproduce-converged SNAKEMAKE_ARGS="--config preset=<p>"``) is command-line config,
    which wins over the preset, so the converged profile's warm-up, learning rate, models and
    plateau rule replaced the paper's; a value the user's own file or ``--config`` repeats
    still wins."""
    import sys

    from pipeline_lib.config_files import load_yaml

    own: set[str] = _leaves(cli)
    for f in files:
        if not _is_profile(f):
            own |= _leaves(load_yaml(f) or {})
    dropped: list[str] = []
    out = copy.deepcopy(dict(overrides))
    for profile in profiles:
        for path in sorted(_leaves(load_yaml(profile) or {})):
            kept = any(path == a or path.startswith(a + ".") for a in PROFILE_UNDER_PRESET)
            if kept or path in own:
                continue
            node, *keys = [out], *path.split(".")
            for k in keys[:-1]:
                node.append(node[-1].get(k) if isinstance(node[-1], dict) else None)
            if isinstance(node[-1], dict) and node[-1].pop(keys[-1], None) is not None:
                dropped.append(path)
    _prune(out)
    if dropped:
        print(f"preset {overrides.get('preset') or cli.get('preset')}: "
              f"{', '.join(p.name for p in profiles)}: device and resource settings only; the "
              f"preset's values stay for {', '.join(dropped)}", file=sys.stderr)
    return out


def _prune(d: dict) -> None:
    """Remove the mappings left empty (in place)."""
    for k in list(d):
        if isinstance(d[k], dict):
            _prune(d[k])
            if not d[k]:
                del d[k]


def _no_preset_files(files: Sequence[str | Path]) -> None:
    """A preset file given with ``--configfile`` is refused with the command that applies it.
    WHY: Snakemake deep-merges it over config/config.yaml, so the Bible and the default models
    stayed beside the paper's setup and the results went to ``results/<preset>`` with no
    warning (issue 35); ``--config preset=<name>`` replaces the corpora, models and sizes."""
    from pipeline_lib.config_files import ConfigError

    for f in files:
        path = Path(f).resolve()
        if path.parent == PRESET_DIR.resolve() and path.suffix == ".yaml":
            raise ConfigError(
                f"{f}: a preset is not a config file to merge (its corpora and models would be "
                "added to config/config.yaml's Bible and default models); run it with "
                f"--config preset={path.stem}")


def _normalise_languages(config: dict) -> None:
    """``src_lang``/``tgt_lang`` in their two-letter form where one exists (``eng`` -> ``en``,
    pipeline_lib/language_codes.py), said on the console: before, ``tgt_lang: eng`` passed
    the schema, ``en`` and ``eng`` were two languages and ingest skipped language ID (issue 36)."""
    import sys

    from pipeline_lib.language_codes import normalised

    for key in ("src_lang", "tgt_lang"):
        code = config.get(key)
        if isinstance(code, str) and normalised(code.lower()) != code:
            config[key] = normalised(code.lower())
            print(f"{key}: {code!r} read as {config[key]!r} (its ISO 639-1 code, which the "
                  "language models and identifiers here use)", file=sys.stderr)


def _check_decode(config: Mapping) -> None:
    """``decode.nbest`` > ``decode.beam`` is refused when the run is planned, not when the
    first decoding starts after all training (issue 36)."""
    from pipeline_lib.config_files import ConfigError

    decode = config["decode"]
    if decode["nbest"] > decode["beam"]:
        raise ConfigError(f"decode.nbest={decode['nbest']} is more than decode.beam="
                          f"{decode['beam']}: a beam search keeps beam hypotheses; lower nbest "
                          "or raise beam")


def _not_finite(value: object, where: str = "") -> list[str]:
    """The key paths of every NaN or infinity in a config (YAML's .nan, .inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where or 'config'}={value}"]
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _not_finite(v, f"{where}.{k}" if where
                                                                 else str(k))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _not_finite(v, f"{where}[{i}]")]
    return []


def _own_corpora(config: dict, files: Sequence[str | Path], cli: Mapping) -> None:
    """A user's corpora replace the embedded default's: where a config file of the command
    line (other than the checkout's config/config.yaml) or ``--config`` names ``corpora``,
    those are the run's corpora; an entry of the default's that they do not name is dropped
    (one they name merges with it: ``bible: {max_chapters: 20}`` keeps the default's modules),
    and ``<name>: null`` drops an entry.

    WHY: Snakemake deep-merges config files, so README's "add a corpus" recipe trained every
    model on the Bible beside the user's corpus (issue 35). A config that sets up its own data
    means that data; the default run's corpus is a demo, not a base to add to."""
    from pipeline_lib.config_files import ConfigError, load_yaml

    named: dict = {}
    for f in files:
        if Path(f).resolve() == DEFAULT_CONFIG.resolve() or not Path(f).is_file():
            continue
        data = load_yaml(f) or {}
        if isinstance(data.get("corpora"), Mapping):
            named.update(data["corpora"])
    if isinstance(cli.get("corpora"), Mapping):
        named.update(cli["corpora"])
    corpora = config.get("corpora")
    if not named or not isinstance(corpora, dict):
        return
    for name in [n for n in corpora if n not in named or corpora[n] is None]:
        del corpora[name]
    if not corpora:
        raise ConfigError("corpora: every corpus was removed (each entry given is null): "
                          "name at least one corpus (README, 'Your own corpus')")


def _own_results_dir(config: dict, files: Sequence[str | Path], overrides: Mapping) -> None:
    """A run with a config file of the user's own (not one of the checkout's config/ folder)
    writes to ``results/<its name>`` unless a file or ``--config`` sets ``results_dir``, so
    it neither mixes with nor overwrites the default run's ``results/`` (issue 35). A file
    named ``config.yaml``, Snakemake's conventional name, names nothing: ``results/``."""
    if "results_dir" in overrides:
        return
    own = [Path(f) for f in files if Path(f).resolve().parent != DEFAULT_CONFIG.parent.resolve()
           and Path(f).name != DEFAULT_CONFIG.name]
    if own:
        config["results_dir"] = f"results/{own[-1].stem}"


def _train_corpus(config: dict) -> None:
    """``train.corpus`` null (the schema's default): the one corpus with a train split; with
    none or several, a clear request to name it (issue 35: the default was ``bible``, so a
    user's corpus was ingested and every model trained on the Bible)."""
    from pipeline_lib.config_files import ConfigError
    from pipeline_lib.plan.data import corpus_splits

    if config["train"]["corpus"] is not None:
        return
    able = [c for c, spec in config["corpora"].items() if "train" in corpus_splits(spec)]
    if len(able) == 1:
        config["train"]["corpus"] = able[0]
        return
    which = (f"{len(able)} corpora have one ({', '.join(able)})" if able
             else f"none of corpora ({', '.join(config['corpora'])}) has one")
    raise ConfigError(f"train.corpus: which corpus's train split trains the models? {which}; "
                      "set it, e.g. --config train='{corpus: " + (able or ["<name>"])[0] + "}'")


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

    # the schema's minimum/maximum let NaN through (every comparison with it is false): a
    # length-ratio filter at NaN keeps a 1:300 pair, an lr of NaN trains to a stack (issue 36)
    if bad := _not_finite(config):
        raise ConfigError(f"{', '.join(bad)}: not a finite number (YAML .nan/.inf); no run "
                          "can use it: give a number")
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

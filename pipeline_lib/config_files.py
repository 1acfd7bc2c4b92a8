"""Config files read strictly: a key given twice in one mapping is an error naming the file and
both lines.

WHY: YAML loaders (PyYAML, hence Snakemake's ``configfile``) keep the last of two equal keys
without a word, so a second ``bible:`` under ``corpora`` or a second ``src:`` in one split would
silently replace the first. The Snakefile reads every config file through ``check_files`` after
Snakemake has loaded them, and ``plan.load_config`` and the presets load through ``load_yaml``.

Command-line values (``--config KEY=VALUE``) are read again by :func:`command_line_config`: as
YAML 1.2 (core schema), refusing a key given twice. WHY: Snakemake parses a nested ``--config``
value with YAML's BaseLoader, so every number and boolean in ``seeds='[1, 2, 3]'`` or
``train='{max_steps: 10}'`` arrives as a string and fails the schema, and a key given twice in
one value keeps the last silently. YAML 1.2 and not PyYAML's 1.1: ``tgt_lang=no`` stays the
code ``'no'`` (1.1 reads it as false), ``010`` is ten. Values Snakemake typed itself (a whole
value that reads as an int, a float, ``True`` or ``False``) are kept as it typed them.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable

import yaml


class ConfigError(ValueError):
    """A config the pipeline refuses; the Snakefile reports it as Snakemake's ``WorkflowError``
    (its message, without a Python stack)."""


class DuplicateKeyError(ConfigError):
    """A mapping of a config file (or of a ``--config`` value) names one key twice."""


#: how a ``--config`` value is named in messages: ``--config <key>``
CLI_NAME = "--config "


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    first: dict[Any, tuple[int, int]] = {}
    for key_node, _ in node.value:   # the mapping's own keys: a merge (<<) may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        mark = key_node.start_mark
        try:
            hashable = key in first
        except TypeError:
            continue   # an unhashable key: construct_mapping reports it
        if hashable:
            line, column = first[key]
            if mark.name.startswith(CLI_NAME) and mark.line == line == 0:   # a one-line value
                where = f"{mark.name}: duplicate key {key!r} at character {mark.column + 1} " \
                        f"(first given at character {column + 1})"
            else:
                where = f"{mark.name}:{mark.line + 1}: duplicate key {key!r} (first given at " \
                        f"line {line + 1})"
            raise DuplicateKeyError(f"{where}; YAML would keep only the last value: remove one")
        first[key] = (mark.line, mark.column)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(path: str | Path) -> Any:
    """The YAML (or JSON) document in ``path``, refusing duplicate keys."""
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_StrictLoader)


def check_files(paths: Iterable[str | Path]) -> None:
    """Raise ``DuplicateKeyError`` for the first config file that repeats a key."""
    for path in dict.fromkeys(map(str, paths)):
        if Path(path).is_file():
            load_yaml(path)


# --- command-line values (--config KEY=VALUE) ------------------------------------------------

class _Yaml12Loader(_StrictLoader):
    """``_StrictLoader`` with the YAML 1.2 core schema's plain scalars: null (``~``, ``null``,
    empty), booleans (``true``/``false`` only), decimal, ``0o`` and ``0x`` integers, floats;
    everything else (``no``, ``on``, ``2024-01-01``, ``1:30``) is a string."""


_Yaml12Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in [
        ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
        ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
        ("float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                  r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", list("-+.0123456789"))]:
    _Yaml12Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), _first)


def _int12(loader: _Yaml12Loader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)   # 010 is ten in YAML 1.2 (PyYAML 1.1: eight)


def _float12(loader: _Yaml12Loader, node: yaml.ScalarNode) -> float:
    text = loader.construct_scalar(node).lower()
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _int12)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _float12)


def parse_yaml12(text: str, name: str = "<string>") -> Any:
    """``text`` read as YAML 1.2 (core schema), refusing a key given twice (``DuplicateKeyError``
    naming ``name``)."""
    loader = _Yaml12Loader(text)
    loader.name = name   # the marks (hence the duplicate-key message) name it
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _snakemake_typed(value: str) -> tuple[bool, Any]:
    """Whether Snakemake's own --config parsing types the whole ``value`` (int, float, True,
    False; ``snakemake.cli.parse_config``), and that value."""
    for parse in (int, float):
        try:
            return True, parse(value)
        except ValueError:
            pass
    if value in ("True", "False"):
        return True, value == "True"
    return False, None


def retype_config_args(entries: Iterable[str]) -> dict:
    """The ``--config KEY=VALUE`` entries as the config they give, each value read as YAML 1.2
    with duplicate keys refused; entries for one key are deep-merged in order, as Snakemake
    does. A value Snakemake types itself (see :func:`_snakemake_typed`) or an empty one (None)
    is kept as Snakemake reads it; a value that is not YAML stays the string it is."""
    from snakemake.common import parse_key_value_arg
    from snakemake.utils import update_config

    config: dict = {}
    for entry in entries:
        key, text = parse_key_value_arg(entry, errmsg="Invalid config definition")
        typed, value = _snakemake_typed(text)
        if text == "":
            value = None
        elif not typed:
            try:
                value = parse_yaml12(text, name=f"{CLI_NAME}{key}")
            except yaml.YAMLError:   # not YAML: Snakemake keeps the string (a duplicate raises)
                value = text
        update_config(config, {key: value})
    return config


def command_line_config(config: dict, settings: Any) -> tuple[dict, dict]:
    """Re-type what Snakemake's ``settings`` (``workflow.config_settings``) read from
    ``--config``, in ``config`` (in place) and in its command-line config; returns that
    command-line config (every ``--configfile``, then ``--config``) and the ``--config``
    values alone, typed.

    ``settings.config_args`` are the ``--config`` entries as given (Snakemake passes them on to
    every job it spawns, so each job's Snakefile types them alike). Where they are not what
    ``settings.config`` was parsed from (a caller of Snakemake's API that passed typed values),
    nothing is re-typed."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    overrides = copy.deepcopy(dict(settings.overwrite_config))
    entries = list(getattr(settings, "config_args", None) or [])
    try:
        from_cli = bool(entries) and repr(parse_config(entries)) == repr(dict(settings.config))
    except ValueError:   # not entries Snakemake's command line takes
        from_cli = False
    if not from_cli:
        return overrides, copy.deepcopy(dict(settings.config or {}))
    cli = retype_config_args(entries)
    update_config(overrides, copy.deepcopy(cli))
    update_config(config, copy.deepcopy(cli))
    return overrides, cli

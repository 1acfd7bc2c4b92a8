"""Config files read strictly: a key given twice in one mapping is an error naming the file and
both lines.

WHY: YAML loaders (PyYAML, hence Snakemake's ``configfile``) keep the last of two equal keys
without a word, so a second ``bible:`` under ``corpora`` or a second ``src:`` in one split would
silently replace the first. The Snakefile reads every config file through ``check_files`` after
Snakemake has loaded them, and ``plan.load_config`` and the presets load through ``load_yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import yaml


class DuplicateKeyError(ValueError):
    """A mapping of a config file names one key twice."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    first: dict[Any, int] = {}
    for key_node, _ in node.value:   # the mapping's own keys: a merge (<<) may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hashable = key in first
        except TypeError:
            continue   # an unhashable key: construct_mapping reports it
        if hashable:
            raise DuplicateKeyError(f"{key_node.start_mark.name}:{line}: duplicate key {key!r} "
                                    f"(first given at line {first[key]}); YAML would keep only "
                                    "the last value: remove one")
        first[key] = line
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

"""Paper presets (``config/presets/<name>.yaml``), selected with ``--config preset=<name>``.

Why sections are replaced, not merged: Snakemake deep-merges every ``--configfile`` into the
default config, so a paper's ``corpora`` would be added to the embedded Bible corpus and its
``model_settings`` would inherit the smoke run's step counts. A preset therefore replaces each
top-level section it names as a whole, keeps the default's other sections, and the command line
(``--config``/``--configfile``) still has the last word.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from pipeline_lib.config_files import load_yaml


def available(preset_dir: Path) -> list[str]:
    return sorted(p.stem for p in preset_dir.glob("*.yaml"))


def apply_preset(config: dict, preset_dir: Path, overrides: Mapping) -> None:
    """Replace ``config``'s sections with those of preset ``config["preset"]``, then re-apply
    the command-line ``overrides`` (deep-merged, as Snakemake does)."""
    from snakemake.utils import update_config

    name = config["preset"]
    path = preset_dir / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"preset {name!r}: no file {path} (available: "
                         f"{', '.join(available(preset_dir))})")
    preset = load_yaml(path) or {}
    if "preset" in preset:
        raise ValueError(f"{path}: a preset cannot name another preset")
    for section, value in preset.items():
        config[section] = copy.deepcopy(value)
    update_config(config, copy.deepcopy(dict(overrides)))

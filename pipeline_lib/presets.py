"""Paper presets (``config/presets/<name>.yaml``), selected with ``--config preset=<name>``.

A preset is the paper's whole setup: ``apply_preset`` rebuilds the config from the preset alone,
drops everything the default config (``config/config.yaml``, the 60-minute smoke run) gave, and
then deep-merges the command line (``--config``/``--configfile``), which still has the last word;
the schema fills in every key neither names. WHY not keep the default's sections the preset does
not name: those are the smoke run's (its ``fine_tune`` block of 150 updates at lr 1e-3 reached
every preset job with ``init_from``; its stanza and parse sizes, its Bible corpus), and a value a
paper's run trains with must be one its preset states (tests/unit/test_presets.py resolves every
preset over config/config.yaml and over an empty default and requires the same jobs). WHY
replace and not merge at all: Snakemake deep-merges every ``--configfile`` into the default, so a
paper's ``corpora`` would be added to the Bible and its ``model_settings`` would inherit the
smoke run's step counts.

A preset may start from a shared base with ``extends: <base>`` (``config/presets/base/<base>.yaml``,
deep-merged under the preset): the four Chen et al. (2021) presets differ only in their data,
so their models, recipes and training values are written once (``base/chen2021.yaml``).

``config/presets/paper/<name>.yaml`` holds, per preset, the paper's training values (learning
rate, warm-up, updates, stop rule, checkpoint selection), each with its section, table or
equation; :func:`paper_values` reads it and tests/unit/test_presets_paper.py checks the planned
jobs against it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from pipeline_lib.config_files import ConfigError, load_yaml


#: folder (under the preset folder) of the papers' value tables, one ``<preset>.yaml`` each
PAPER_DIR = "paper"
#: folder (under the preset folder) of the bases presets extend (``extends: <base>``)
BASE_DIR = "base"
#: a preset's ``results_dir`` unless it or the command line names one: ``results/<preset>``
#: (WHY: a preset run in the default run's checkout must not write into its ``results/``)
RESULTS_ROOT = "results"


def available(preset_dir: Path) -> list[str]:
    return sorted(p.stem for p in preset_dir.glob("*.yaml"))


def paper_values(preset_dir: Path, name: str) -> dict:
    """The paper's values of preset ``name`` (``<preset_dir>/paper/<name>.yaml``)."""
    return load_yaml(preset_dir / PAPER_DIR / f"{name}.yaml") or {}


def load_preset(preset_dir: Path, name: str) -> dict:
    """Preset ``name`` as a whole config: its ``extends`` base deep-merged under it."""
    from snakemake.utils import update_config

    path = preset_dir / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"preset {name!r}: no file {path} (available: "
                          f"{', '.join(available(preset_dir))})")
    preset = load_yaml(path) or {}
    if "preset" in preset:
        raise ConfigError(f"{path}: a preset cannot name another preset")
    base_name = preset.pop("extends", None)
    if base_name is None:
        return preset
    base_path = preset_dir / BASE_DIR / f"{base_name}.yaml"
    if not base_path.exists():
        raise ConfigError(f"{path}: extends {base_name!r}, but there is no {base_path}")
    config = load_yaml(base_path) or {}
    if {"extends", "preset"} & set(config):
        raise ConfigError(f"{base_path}: a base cannot extend or name a preset")
    update_config(config, preset)
    return config


def apply_preset(config: dict, preset_dir: Path, overrides: Mapping) -> None:
    """Make ``config`` (in place) preset ``config["preset"]`` alone, then re-apply the
    command-line ``overrides`` (deep-merged, as Snakemake does): nothing of the default config
    that the command line does not repeat is kept. Its outputs go to ``results/<preset>``
    unless the preset or the command line sets ``results_dir``."""
    from snakemake.utils import update_config

    name = config["preset"]
    preset = load_preset(preset_dir, name)
    config.clear()
    config.update(copy.deepcopy(preset))
    config["preset"] = name
    config.setdefault("results_dir", f"{RESULTS_ROOT}/{name}")
    update_config(config, copy.deepcopy(dict(overrides)))

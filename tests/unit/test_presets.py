"""Presets reproduce the seed papers' setups and stay valid against the config schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline_lib.ingest.download import CATALOGUE, LDC_TRAIN, NIST_SETS
from pipeline_lib.plan import Plan, load_config
from pipeline_lib.presets import apply_preset

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
PRESETS = sorted((ROOT / "config/presets").glob("*.yaml"))
EXPECTED = {"zhang2018_zh-en", "chen2021_en-de_ted", "chen2021_en-de_news",
            "chen2021_en-de_europarl", "jiang2019_es-en_ted"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_every_seed_setup_has_a_preset():
    assert {p.stem for p in PRESETS} >= EXPECTED


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_names_only_schema_keys_and_validates_merged(preset):
    schema = _load(SCHEMA)
    data = _load(preset)
    unknown = set(data) - set(schema["properties"])
    assert not unknown, f"{preset.name}: keys unknown to the schema: {sorted(unknown)}"
    # `--config preset=<name>`: the preset's sections replace the default's, then validated.
    config = load_config(overrides={"preset": preset.stem})
    assert "bible" not in config["corpora"]
    # every job trains and validates on corpora of the preset, every scored corpus has a test set
    plan = Plan(config)
    assert set(config["models"]) <= set(plan.jobs)
    for job in plan.jobs.values():
        assert job.corpus in config["corpora"] and job.dev_corpus in config["corpora"], job.name
    for corpus in plan.test_corpora:
        assert "test" in config["corpora"][corpus]["splits"], corpus
    assert config["model"]["preset"] == "base"


def test_command_line_values_win_over_a_preset(tmp_path):
    config = {**_load(ROOT / "config/config.yaml"), "preset": "jiang2019_es-en_ted"}
    overrides = {"preset": "jiang2019_es-en_ted", "train": {"max_steps": 7}}
    apply_preset(config, ROOT / "config/presets", overrides)
    assert config["train"]["max_steps"] == 7 and config["train"]["warmup"] == 4000
    assert config["stanza"] == _load(ROOT / "config/config.yaml")["stanza"]  # not in the preset
    with pytest.raises(ValueError, match="available: chen2021_en-de_europarl"):
        apply_preset({"preset": "nope"}, ROOT / "config/presets", {})


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_downloaded_corpora_come_from_the_catalogue(preset):
    data = _load(preset)
    downloads = data.get("downloads", {}).get("corpora", [])
    assert set(downloads) <= set(CATALOGUE)
    for name, spec in data["corpora"].items():
        if "download" in spec:
            assert spec["download"] in downloads, f"{name}: download {spec['download']} not fetched"
            for split in spec["splits"].values():
                for key in ("src", "tgt"):
                    paths = split[key] if isinstance(split[key], list) else [split[key]]
                    for p in paths:
                        assert p.startswith(f"resources/corpora/{spec['download']}/"), p


def test_zhang2018_requires_every_ldc_release_and_nist_set():
    data = _load(ROOT / "config/presets/zhang2018_zh-en.yaml")
    required = set(data["downloads"]["ldc_required"])
    assert required == set(LDC_TRAIN) | set(NIST_SETS)
    assert set(data["downloads"]["ldc"]) == required

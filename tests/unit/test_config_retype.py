"""Command-line config (``--config KEY=VALUE``) typed as YAML 1.2 with duplicate keys refused
(pipeline_lib/config_files.py ``retype_config_args``, ``command_line_config``), and its ``train``
reaching every job (pipeline_lib/run_config.py ``_command_line_train``).

WHY: Snakemake reads a nested ``--config`` value with YAML's BaseLoader, so README's own
``seeds='[1, 2, 3]'`` and ``train='{max_steps: 10}'`` arrived as strings and failed the schema,
and a key given twice in one value kept the last silently."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from snakemake.cli import parse_config
from snakemake.settings.types import ConfigSettings

from pipeline_lib.config_files import (DuplicateKeyError, command_line_config,
                                       retype_config_args)
from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_numbers_lists_and_nested_mappings_are_typed():
    got = retype_config_args([
        "seeds=[1, 2, 3]",
        "train={max_steps: 10, lr: 5.0e-4, dev_bleu: false, max_context_tokens: null}",
        "model_settings={doct: {train: {max_steps: 7}, freeze: [a, b]}, camn: {extras: {k: 1}}}",
    ])
    assert got == {
        "seeds": [1, 2, 3],
        "train": {"max_steps": 10, "lr": 5.0e-4, "dev_bleu": False, "max_context_tokens": None},
        "model_settings": {"doct": {"train": {"max_steps": 7}, "freeze": ["a", "b"]},
                           "camn": {"extras": {"k": 1}}},
    }
    assert type(got["seeds"][0]) is int and type(got["train"]["lr"]) is float


def test_scalars_follow_yaml_1_2_not_1_1():
    [(_, v)] = retype_config_args(
        ['xs=[no, on, yes, off, 010, 0x1F, 0o17, 1e3, .inf, ~, null, True, "10", 2024-01-01, 1:30]']
    ).items()
    assert v[:8] == ["no", "on", "yes", "off", 10, 31, 15, 1000.0]
    assert math.isinf(v[8]) and v[9] is None and v[10] is None and v[11] is True
    assert v[12:] == ["10", "2024-01-01", "1:30"]


def test_values_snakemake_typed_are_kept_as_given():
    got = retype_config_args(["aa=10", "bb=1.5", "cc=True", "dd=", "preset=jiang2019_es-en_ted",
                              "tgt_lang=no", "results_dir=results/x y", "bad=[1, 2",
                              "quoted='[1, 2]'"])
    assert got == {"aa": 10, "bb": 1.5, "cc": True, "dd": None, "preset": "jiang2019_es-en_ted",
                   "tgt_lang": "no", "results_dir": "results/x y", "bad": "[1, 2",
                   "quoted": [1, 2]}   # Snakemake strips the quotes around a whole value


def test_entries_for_one_key_are_deep_merged_in_order():
    assert retype_config_args(["train={lr: 1, max_steps: 5}", "train={max_steps: 2}"]) == \
        {"train": {"lr": 1, "max_steps": 2}}


def test_a_key_given_twice_in_one_value_is_refused():
    with pytest.raises(DuplicateKeyError, match=r"^--config train: duplicate key 'max_steps' at "
                                                r"character 17 \(first given at character 2\)"):
        retype_config_args(["train={max_steps: 10, max_steps: 3}"])
    with pytest.raises(DuplicateKeyError, match=r"--config model_settings: duplicate key 'lr'"):
        retype_config_args(["model_settings={doct: {train: {lr: 1, lr: 2}}}"])
    with pytest.raises(DuplicateKeyError, match=r"^--config train:2: duplicate key 'lr' \(first "
                                                r"given at line 1\)"):
        retype_config_args(["train={lr: 1,\n lr: 2}"])


def test_command_line_config_retypes_what_snakemake_parsed(tmp_path):
    """What the Snakefile does with Snakemake's own ConfigSettings: the --config values are
    typed in the config and in the command-line config; a --configfile's values are kept."""
    extra = tmp_path / "extra.yaml"
    extra.write_text("train: {warmup: 7}\nresults_dir: out\n")
    entries = ["seeds=[1, 2]", "train={max_steps: 10}"]
    settings = ConfigSettings(config=parse_config(entries), configfiles=[extra],
                              config_args=entries)
    assert settings.overwrite_config["seeds"] == ["1", "2"]   # Snakemake's own reading
    config = {"src_lang": "es", **{k: v for k, v in settings.overwrite_config.items()}}
    overrides, cli = command_line_config(config, settings)
    assert cli == {"seeds": [1, 2], "train": {"max_steps": 10}}
    assert overrides == {"seeds": [1, 2], "train": {"warmup": 7, "max_steps": 10},
                         "results_dir": "out"}
    assert config["seeds"] == [1, 2] and config["train"] == {"warmup": 7, "max_steps": 10}
    # a caller of Snakemake's API passes typed values: nothing is read again
    typed = ConfigSettings(config={"seeds": [1, 2], "x": None})
    assert command_line_config({}, typed)[1] == {"seeds": [1, 2], "x": None}
    dup = ["train={lr: 1, lr: 2}"]
    with pytest.raises(DuplicateKeyError):
        command_line_config({}, ConfigSettings(config=parse_config(dup), config_args=dup))


def test_load_config_reads_config_args_as_the_snakefile_does():
    plan = Plan(load_config(config_args=["seeds=[1, 2, 3]", "train={max_steps: 10}"]))
    assert plan.seeds == [1, 2, 3]
    # 5: the control of cross-task's pre-training, half of whose updates restore documents
    assert {j.train["max_steps"] for j in plan.jobs.values()} == {10, 5}
    assert plan.jobs["doct_seed1"].train["max_steps"] == 10


def test_command_line_train_reaches_every_job_of_a_preset():
    """``--config preset=jiang2019_es-en_ted train='{max_steps: 10}'`` (README): the preset's
    per-job budgets give way to the --config value, unless --config names the job's own."""
    preset = {"preset": "jiang2019_es-en_ted"}
    base = Plan(load_config(overrides=preset))
    assert {j.train["max_steps"] for j in base.jobs.values()} == {50000}
    plan = Plan(load_config(overrides=preset, config_args=["train={max_steps: 10}"]))
    assert {j.name: j.train["max_steps"] for j in plan.jobs.values()} == \
        {name: 10 for name in base.jobs}
    own = Plan(load_config(overrides=preset, config_args=[
        "train={max_steps: 10}", "model_settings={camn: {train: {max_steps: 20}}}"]))
    assert own.jobs["camn"].train["max_steps"] == 20
    assert own.jobs["transformer"].train["max_steps"] == 10
    # a --configfile's train stays the base that the per-job sections override
    layered = Plan(load_config(overrides={**preset, "train": {"max_steps": 10}}))
    assert {j.train["max_steps"] for j in layered.jobs.values()} == {50000}
    # and the default run's fine-tunes (fine_tune.train) follow --config train as well
    default = Plan(load_config(config_args=["train={max_steps: 10, warmup: 3}"]))
    assert default.jobs["doct"].train["max_steps"] == 10
    assert {j.train["warmup"] for j in default.jobs.values()} == {3}

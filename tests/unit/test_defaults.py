"""The config schema is the one place a default lives: the stage dataclasses and the stage CLIs
that also run outside Snakemake must agree with it (Snakemake passes every value explicitly, so a
drifted default would only show when a stage is run by hand)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from pathlib import Path

import pytest
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture(scope="module")
def defaults() -> dict:
    config = {"src_lang": "es", "tgt_lang": "en", "corpora": {"c": {
        "reader": "bible", "src_module": "spaRV1909eb", "tgt_module": "engWEB2015eb"}}}
    validate(config, str(SCHEMA))
    return config


# dataclass -> (schema section, {field: schema key}) for every field the schema knows
DATACLASSES = {
    "pipeline_lib.training.train_config:TrainConfig": ("train", {}),
    "pipeline_lib.models.search:BeamConfig": ("decode", {}),
    "pipeline_lib.evaluate.score:ScoreConfig": ("score", {}),
    "pipeline_lib.evaluate.discourse:ConsistencyConfig": (
        "score", {"stop_top_k": "consistency_stop_top_k", "min_chars": "consistency_min_chars"}),
    "pipeline_lib.preprocess.noise:NoiseConfig": ("noise", {}),
    "pipeline_lib.preprocess.shards:ShardConfig": ("shards", {}),
    "pipeline_lib.preprocess.bpe:BpeConfig": ("bpe", {}),
    "pipeline_lib.parse.dependencies:ParseSettings": ("parse", {}),
    "pipeline_lib.ingest:Limits": ("ingest", {}),
    "pipeline_lib.ingest.hygiene:HygieneConfig": ("hygiene", {}),
}
#: TrainConfig keys set per job by the plan, not by the train section
JOB_LEVEL = {"init_from", "freeze", "aux_ratio", "matched_to"}


def _load(ref: str):
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("ref", sorted(DATACLASSES))
def test_dataclass_defaults_equal_the_schema(ref, defaults):
    cls = _load(ref)
    section, renamed = DATACLASSES[ref]
    checked = 0
    for f in dataclasses.fields(cls):
        key = renamed.get(f.name, f.name)
        if f.name in JOB_LEVEL or key not in defaults[section]:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        want = defaults[section][key]
        assert (list(default) if isinstance(default, tuple) else default) == want, \
            f"{cls.__name__}.{f.name} = {default!r}, schema {section}.{key} = {want!r}"
        checked += 1
    assert checked, f"{cls.__name__} shares no key with schema section {section}"


# CLI (module, subcommand) -> {argparse dest: "section.key"}
CLIS = {
    ("pipeline_lib.evaluate.decode", None): {
        "beam": "decode.beam", "lenpen": "decode.lenpen", "max_len_a": "decode.max_len_a",
        "max_len_b": "decode.max_len_b", "batch_size": "decode.batch_size",
        "nbest": "decode.nbest", "mode": "decode.mode"},
    ("pipeline_lib.evaluate.score", None): {
        "bootstrap_samples": "score.bootstrap_samples",
        "significance_level": "score.significance_level"},
    ("pipeline_lib.evaluate.discourse", "consistency"): {
        "stop_top_k": "score.consistency_stop_top_k", "min_chars": "score.consistency_min_chars"},
    ("pipeline_lib.evaluate.discourse", "contrastive"): {
        "max_examples": "score.discourse_max_examples"},
    ("pipeline_lib.ingest.__main__", None): {"max_line_chars": "ingest.max_line_chars",
                                             "max_quarantined_share":
                                                 "ingest.max_quarantined_share"},
    ("pipeline_lib.ingest.download", "get"): {
        "retries": "downloads.retries", "timeout_s": "downloads.timeout_s"},
    ("pipeline_lib.parse.dependencies", "shard"): {
        "splits": "parse.splits", "max_words": "parse.max_words",
        "batch_size": "parse.batch_size", "threads": "parse.threads"},
    ("pipeline_lib.preprocess.bpe", "train"): {
        "vocab_size": "bpe.vocab_size", "character_coverage": "bpe.character_coverage",
        "input_sentence_size": "bpe.input_sentence_size", "seed": "bpe.seed"},
    ("pipeline_lib.preprocess.noise", None): {
        "gap_ratio": "noise.gap_ratio", "mask_rate": "noise.mask_rate",
        "mask_token_prob": "noise.mask_token_prob", "random_token_prob": "noise.random_token_prob",
        "max_sentences": "noise.max_sentences", "seed": "noise.seed",
        "gap_document_input": "noise.gap_document_input"},
    ("pipeline_lib.preprocess.shards", "make"): {
        "rows_per_shard": "shards.rows_per_shard", "row_group_rows": "shards.row_group_rows",
        "max_len": "shards.max_len"},
    ("pipeline_lib.training.launch", None): {
        "nodes": "cluster.nodes", "gpus_per_node": "cluster.gpus_per_node"},
}


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def _parser(module: str, monkeypatch) -> argparse.ArgumentParser:
    """The ArgumentParser a CLI's main() builds, caught before it parses anything."""
    def capture(self, *args, **kwargs):
        raise _Captured(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", capture)
    try:
        importlib.import_module(module).main([])
    except _Captured as c:
        return c.parser
    raise AssertionError(f"{module}.main() did not build an argument parser")


@pytest.mark.parametrize("cli", sorted(CLIS, key=str), ids=lambda c: f"{c[0]}:{c[1]}")
def test_cli_defaults_equal_the_schema(cli, defaults, monkeypatch):
    module, sub = cli
    parser = _parser(module, monkeypatch)
    if sub is not None:
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[sub]
    dests = {a.dest: a.default for a in parser._actions}
    for dest, path in CLIS[cli].items():
        section, key = path.split(".")
        assert dest in dests, f"{module} {sub or ''}: no option {dest}"
        assert dests[dest] == defaults[section][key], \
            f"{module} {sub or ''} --{dest} defaults to {dests[dest]!r}, schema {path} = " \
            f"{defaults[section][key]!r}"


def _reader_defaults() -> dict[str, dict]:
    """$defs.reader_<name> -> {key: default} for every key the schema gives a default."""
    import yaml

    defs = yaml.safe_load(SCHEMA.read_text())["$defs"]
    return {name: {k: p["default"] for k, p in d.get("properties", {}).items() if "default" in p}
            for name, d in defs.items() if name.startswith("reader_")}


def test_reader_defaults_equal_the_schema():
    """A reader fills a key the config left out with the schema's default: readers run on specs
    the schema validated but did not fill (corpus entries pick their reader's $defs by if/then,
    which Snakemake's default filling does not enter)."""
    from pipeline_lib.ingest.aspec import _source
    from pipeline_lib.ingest.bible import BibleSpec

    schema = _reader_defaults()
    bible = BibleSpec.from_dict({"src_module": "a", "tgt_module": "b"})
    seen = {"reader_bible": {k: (list(v) if isinstance(v, tuple) else v)
                             for k, v in dataclasses.asdict(bible).items()},
            "reader_aspec": {"source": _source({})}}
    assert {r for r, d in schema.items() if d} == set(seen), \
        "a reader gained a schema default: check it here"
    for reader, defaults in schema.items():
        for key, want in defaults.items():
            assert seen[reader][key] == want, f"{reader}.{key}: code {seen[reader][key]!r}, schema {want!r}"

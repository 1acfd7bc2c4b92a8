"""The stage-to-rule contract (pipeline_lib.stage_options, pipeline_lib.plan.options): every rule
hands its stage one ``--options`` JSON built by the plan, which the stage's own parser checks,
and no rule file reads ``config``."""

from __future__ import annotations

import argparse
import importlib
import json
import re
from pathlib import Path

import pytest

from pipeline_lib import stage_options
from pipeline_lib.plan import Plan
from pipeline_lib.plan.options import _BUILDERS
from pipeline_lib.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "config" / "presets").glob("*.yaml"))

#: rule -> (the module its shell runs with ``python -m``, sub-command or None)
STAGE_CLIS = {
    "download_corpus": ("pipeline_lib.ingest.download", "get"),
    "check_ldc": ("pipeline_lib.ingest.download", "check-ldc"),
    "ingest_corpus": ("pipeline_lib.ingest.__main__", None),
    "stanza_models": ("pipeline_lib.parse.stanza_models", None),
    "parse_shard": ("pipeline_lib.parse.dependencies", "shard"),
    "train_truecaser": ("pipeline_lib.preprocess.pretokenize", "train"),
    "tokenize_corpus": ("pipeline_lib.preprocess.pretokenize", "apply"),
    "train_bpe": ("pipeline_lib.preprocess.bpe", "train"),
    "make_shards": ("pipeline_lib.preprocess.shards", "make"),
    "make_head_shards": ("pipeline_lib.preprocess.shards", "make"),
    "noise_docs": ("pipeline_lib.preprocess.noise", None),
    "train_model": ("pipeline_lib.training.launch", None),
    "decode_test": ("pipeline_lib.evaluate.decode", None),
    "score_test": ("pipeline_lib.evaluate.score", None),
    "discourse_consistency": ("pipeline_lib.evaluate.discourse", "consistency"),
    "discourse_contrastive": ("pipeline_lib.evaluate.discourse", "contrastive"),
    "context_cxmi": ("pipeline_lib.evaluate.cxmi", None),
    "report": ("pipeline_lib.evaluate.report.build", None),
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="stage")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--mode", choices=["a", "b"], default="a")
    ap.add_argument("--splits", nargs="+", default=["train"])
    ap.add_argument("--docs", nargs="+", type=Path)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--control", nargs=2, action="append", default=[])
    ap.add_argument("--spec", type=stage_options.json_value, default="{}")
    return ap


def test_options_become_typed_defaults_and_flags_win():
    args = stage_options.parse_args(_parser(), [
        "--options", json.dumps({"out_dir": "o", "max_len": "7", "splits": ["dev", "test"],
                                 "docs": ["a.parquet"], "greedy": True,
                                 "control": [["m", "c"]], "spec": {"reader": "bible"}}),
        "--mode", "b"])
    assert args.out_dir == Path("o") and args.max_len == 7 and args.splits == ["dev", "test"]
    assert args.docs == [Path("a.parquet")] and args.greedy and args.control == [["m", "c"]]
    assert args.spec == {"reader": "bible"} and args.mode == "b"
    flag = stage_options.parse_args(_parser(), ["--options", '{"max_len": 7}',
                                                "--max-len", "9", "--out-dir", "o"])
    assert flag.max_len == 9
    # without --options the flags behave as before (a JSON flag still parses)
    plain = stage_options.parse_args(_parser(), ["--out-dir", "o", "--spec", '{"a": 1}'])
    assert plain.spec == {"a": 1} and plain.max_len == 5


@pytest.mark.parametrize("options, message", [
    ({"out_dir": "o", "max_lenn": 3}, "'max_lenn' is not an option of stage"),
    ({"out_dir": "o", "mode": "c"}, "mode: 'c' is not one of ['a', 'b']"),
    ({"out_dir": "o", "max_len": "x"}, "max_len"),
    ([1, 2], "must be a JSON object"),
])
def test_a_wrong_option_is_refused_naming_it(options, message, capsys):
    with pytest.raises(SystemExit) as e:
        stage_options.parse_args(_parser(), ["--options", json.dumps(options)])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_options_reach_the_sub_command_the_arguments_name():
    ap = argparse.ArgumentParser(prog="tool")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("train").add_argument("--seed", type=int, default=0)
    sub.add_parser("encode").add_argument("--threads", type=int, default=1)
    assert stage_options.parse_args(ap, ["train", "--options", '{"seed": 3}']).seed == 3
    with pytest.raises(SystemExit):
        stage_options.parse_args(ap, ["encode", "--options", '{"seed": 3}'])


def test_options_after_a_double_dash_belong_to_the_command_behind_it():
    ap = argparse.ArgumentParser(prog="launch")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("rest", nargs="*")
    args = stage_options.parse_args(ap, ["--options", '{"nodes": 2}', "--", "--options", "x"])
    assert args.nodes == 2 and args.rest == ["--options", "x"]


def _wildcards(plan: Plan, rule: str) -> dict[str, str] | None:
    """One job's wildcards of ``rule`` (the builders read ``model`` only); None for a rule with
    no job in this plan (a truecaser where no language is truecased)."""
    if rule == "train_truecaser":
        return {"lang": plan.truecased[0]} if plan.truecased else None
    return {"model": next(iter(plan.systems))} if rule in ("decode_test", "context_cxmi",
                                                            "discourse_contrastive") else \
        {"corpus": plan.corpora[0]} if rule == "ingest_corpus" else {}


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_every_rule_options_are_accepted_by_its_stage(preset, capsys):
    """What the plan sends each stage parses with that stage's own parser (names, types and
    choices), for the default config and every preset: ``--help`` exits 0 only after the
    options were applied."""
    plan = Plan(load_config(overrides={"preset": preset} if preset else None))
    assert set(STAGE_CLIS) == set(_BUILDERS)
    for rule, (module, command) in STAGE_CLIS.items():
        if (wildcards := _wildcards(plan, rule)) is None:
            continue
        options = plan.options(rule, **wildcards)
        with pytest.raises(SystemExit) as e:
            importlib.import_module(module).main(
                [*([command] if command else []), "--options", options, "--help"])
        assert e.value.code == 0, (rule, capsys.readouterr().err)


def test_rule_files_read_only_the_plan():
    """The contract holds in the rule files: settings reach a stage through the plan's
    ``--options``, never a ``config`` lookup of a rule's own (pipeline_lib/plan/options.py)."""
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    lookups = [f"{f.name}:{n}" for f in files
               for n, line in enumerate(f.read_text().splitlines(), 1)
               if re.search(r"\bconfig\s*(\[|\.get\()", line)]
    assert lookups == []


def test_a_setting_reruns_only_the_stages_that_read_it():
    """The options are each rule's params rerun trigger: a noise setting changes noise_docs's,
    not BPE's or the shards'."""
    base = Plan(load_config())
    noisy = Plan(load_config(overrides={"noise": {"mask_rate": 0.3}}))
    changed = {r for r in _BUILDERS if r not in ("decode_test", "discourse_contrastive",
                                                 "context_cxmi", "train_truecaser",
                                                 "ingest_corpus")
               and base.options(r) != noisy.options(r)}
    assert changed == {"noise_docs", "report"}

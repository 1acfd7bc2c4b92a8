"""What the schema cannot say, refused when the config is loaded (pipeline_lib/run_config.py
``check_config``), and each preset's own results folder (pipeline_lib/presets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "config" / "presets").glob("*.yaml"))


def test_the_same_language_on_both_sides_is_refused():
    with pytest.raises(ValueError, match=r"src_lang and tgt_lang are both 'es': .*wrong_language"):
        load_config(overrides={"tgt_lang": "es"})
    with pytest.raises(ValueError, match="src_lang and tgt_lang are both 'en'"):
        load_config(config_args=["src_lang=en"])


def test_a_language_code_read_as_a_boolean_gets_a_hint_to_quote_it(tmp_path):
    norway = tmp_path / "no.yaml"
    norway.write_text("tgt_lang: no\n")   # YAML 1.1 (config files): false
    with pytest.raises(ValueError, match=r"tgt_lang is false, a boolean, not a language code: "
                                         r".*quote the code, e.g. tgt_lang: 'no'"):
        load_config(ROOT / "config" / "config.yaml", norway)
    treebank = tmp_path / "tb.yaml"
    treebank.write_text("stanza: {treebanks: {no: {name: UD_Norwegian-Bokmaal, prefix: no}}}\n")
    with pytest.raises(ValueError, match="a key of stanza.treebanks is false, a boolean"):
        load_config(ROOT / "config" / "config.yaml", treebank)
    # quoted, or on the command line (YAML 1.2), it is the code
    norway.write_text("tgt_lang: 'no'\n")
    assert load_config(ROOT / "config" / "config.yaml", norway)["tgt_lang"] == "no"
    assert load_config(config_args=["tgt_lang=no"])["tgt_lang"] == "no"


def test_names_that_differ_only_in_case_are_refused():
    news = {"reader": "plaintext", "splits": {"train": {"src": "n.es", "tgt": "n.en"}}}
    with pytest.raises(ValueError, match=r"corpora: 'News' and 'news' differ only in case"):
        load_config(overrides={"corpora": {"News": news, "news": news}})
    with pytest.raises(ValueError, match=r"corpora: 'bible' and 'Bible' differ only in case"):
        load_config(config_args=["corpora={Bible: {reader: bible}, bible: {}}"])
    with pytest.raises(ValueError, match=r"models/model_settings: 'doct' and 'DocT' differ"):
        load_config(overrides={"model_settings": {"DocT": {"init_from": "transformer"}}})
    # names that differ otherwise are fine
    config = load_config(overrides={"corpora": {"news": news, "news2": news},
                                    "train": {"corpus": "news"}})
    assert set(config["corpora"]) == {"news", "news2"}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_writes_under_its_own_results_dir(preset):
    plan = Plan(load_config(overrides={"preset": preset}))
    assert plan.config["results_dir"] == f"results/{preset}"
    # every target but the downloads (resources/, shared by every run) is under it
    assert all(p.startswith((f"results/{preset}/", "resources/")) for p in plan.final_targets())
    assert any(p.startswith(f"results/{preset}/") for p in plan.final_targets())
    # over config/config.yaml (a preset run in the default checkout) the same
    over_default = load_config(ROOT / "config" / "config.yaml", overrides={"preset": preset})
    assert over_default["results_dir"] == f"results/{preset}"
    # the command line still has the last word
    assert load_config(overrides={"preset": preset, "results_dir": "mine"})["results_dir"] == \
        "mine"
    assert load_config(overrides={"preset": preset},
                       config_args=["results_dir=elsewhere"])["results_dir"] == "elsewhere"


def test_the_default_run_keeps_results():
    assert load_config()["results_dir"] == "results"


def test_an_unknown_model_name_is_refused_with_the_nearest_registered_ones():
    """Issue 36: a typo in a job or registry name stops the run when it is planned, with the
    names it may have meant, not with a traceback from the first job's code hash."""
    from pipeline_lib.models.registry import MODELS
    from pipeline_lib.run_config import registered_models

    assert registered_models() == set(MODELS)      # the torch-free reading of the registry
    with pytest.raises(ValueError, match=r"job 'doctt' .*no registered model 'doctt'; did you "
                                         r"mean 'doct'\? Registered models: cache, camn"):
        load_config(config_args=["models=[transformer,doctt]"])
    with pytest.raises(ValueError, match=r"model_settings.doct.name: no registered model 'camm'; "
                                         r"did you mean 'camn'\?"):
        load_config(overrides={"model_settings": {"doct": {"name": "camm"}}})


def test_three_letter_codes_are_read_as_their_two_letter_form(capsys):
    """Issue 36: ISO 639-2/3 codes of languages with an ISO 639-1 code are normalised, said on
    the console, so that `en` and `eng` are one language and language ID knows the code."""
    from pipeline_lib.language_codes import THREE_TO_TWO, normalised

    config = load_config(overrides={"tgt_lang": "eng", "src_lang": "spa"})
    assert (config["src_lang"], config["tgt_lang"]) == ("es", "en")
    assert "tgt_lang: 'eng' read as 'en'" in capsys.readouterr().err
    assert normalised("ger") == normalised("deu") == "de" and normalised("yue") == "yue"
    assert len(set(THREE_TO_TWO.values())) == 184          # every ISO 639-1 language
    with pytest.raises(ValueError, match="src_lang and tgt_lang are both 'en'"):
        load_config(overrides={"src_lang": "en", "tgt_lang": "eng"})


def test_a_preset_file_given_as_a_configfile_is_refused_with_the_command_that_applies_it():
    """Issue 35 item 2: `--configfile config/presets/<p>.yaml` merged the paper's setup over the
    Bible and the default models, silently; it is refused, naming `--config preset=<p>`."""
    with pytest.raises(ValueError, match=r"tu2018_zh-en_ted.yaml: a preset is not a config file "
                                         r"to merge .*--config preset=tu2018_zh-en_ted"):
        load_config(ROOT / "config" / "config.yaml",
                    ROOT / "config" / "presets" / "tu2018_zh-en_ted.yaml")
    assert load_config(overrides={"preset": "tu2018_zh-en_ted"})["preset"] == "tu2018_zh-en_ted"


DEVICE_KEYS = ("device", "num_workers", "compile", "pad_multiple", "phase_times")


@pytest.mark.parametrize("profiles", [("converged",), ("converged", "gpu")])
@pytest.mark.parametrize("preset", PRESETS)
def test_a_profile_under_a_preset_sets_only_the_device_and_resources(preset, profiles, capsys):
    """Issue 35 item 2: `make reproduce-converged SNAKEMAKE_ARGS="--config preset=<p>"` let the
    profile's values win over the paper's (the cache got warm-up 50 and lr 1e-3, the Bible and
    the default models came back, the output went to results/converged). Every job now trains
    what the preset alone trains, but for the device and resource keys; the rest is listed."""
    files = [ROOT / "config" / f"{p}.yaml" for p in profiles]
    alone = Plan(load_config(overrides={"preset": preset}))
    both = Plan(load_config(ROOT / "config" / "config.yaml", *files, overrides={"preset": preset}))
    assert list(both.jobs) == list(alone.jobs) and both.corpora == alone.corpora

    def recipe(plan, job):     # the results folder differs by name (initial checkpoints' paths)
        train = {k: v for k, v in job.train.items() if k not in DEVICE_KEYS}
        if train["init_from"]:
            train["init_from"] = train["init_from"].replace(plan.config["results_dir"], "<run>")
        return {**job.__dict__, "train": train}

    assert [recipe(both, j) for j in both.jobs.values()] == \
        [recipe(alone, j) for j in alone.jobs.values()]
    assert both.config["results_dir"] == "_".join([alone.config["results_dir"], *profiles])
    assert "device and resource settings only; the preset's values stay for" in \
        capsys.readouterr().err
    if "gpu" in profiles:
        assert both.config["train"]["device"] == "cuda"
        assert both.config["cluster"]["gpus_per_node"] == 1

"""Issue 35 item 1: a user's corpora replace the embedded Bible, train on their own corpus, and
write to a results folder of the config's name; the ways a user names them (a --configfile from
the checkout, --config) plan no Bible job."""

from __future__ import annotations

import pytest
import yaml

from pipeline_lib.config_files import ConfigError
from pipeline_lib.plan import Plan
from pipeline_lib.run_config import DEFAULT_CONFIG, load_config

NEWS = {"reader": "plaintext", "splits": {
    "train": {"src": "d/train.de", "tgt": "d/train.en", "docids": "d/train.docids"},
    "test": {"src": "d/test.de", "tgt": "d/test.en", "docids": "d/test.docids"}}}


def own(tmp_path, name: str = "my", **config) -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"src_lang": "de", "tgt_lang": "en",
                                    "corpora": {"news": NEWS}, **config}))
    return load_config(DEFAULT_CONFIG, path)


def test_a_users_corpus_replaces_the_bible_and_trains_every_model(tmp_path):
    config = own(tmp_path)
    assert list(config["corpora"]) == ["news"] and config["train"]["corpus"] == "news"
    assert config["results_dir"] == "results/my"
    plan = Plan(config)
    assert {job.corpus for job in plan.jobs.values()} == {"news"}
    assert not [t for t in plan.final_targets() if "bible" in t]
    assert all(t.startswith(("results/my/", "resources/")) for t in plan.final_targets())


def test_the_bible_stays_where_named_and_goes_where_null(tmp_path):
    kept = own(tmp_path, corpora={"news": NEWS, "bible": {}}, train={"corpus": "news"})
    assert set(kept["corpora"]) == {"news", "bible"}
    assert kept["corpora"]["bible"]["src_module"] == "spaRV1909eb"    # merged with the default's
    dropped = own(tmp_path, corpora={"news": NEWS, "bible": None})
    assert list(dropped["corpora"]) == ["news"]
    # --config names corpora too; results_dir given stays
    cli = load_config(config_args=["src_lang=de", "tgt_lang=en", "results_dir=out",
                                   "corpora={news: {reader: plaintext, splits: {train: "
                                   "{src: a.de, tgt: a.en}}}}"])
    assert list(cli["corpora"]) == ["news"] and cli["results_dir"] == "out"


def test_several_training_corpora_ask_which_one_trains(tmp_path):
    with pytest.raises(ConfigError, match=r"train.corpus: which corpus's train split trains "
                                          r"the models\? 2 corpora have one \(news, talks\)"):
        own(tmp_path, corpora={"news": NEWS, "talks": NEWS})
    picked = own(tmp_path, corpora={"news": NEWS, "talks": NEWS}, train={"corpus": "talks"})
    assert picked["train"]["corpus"] == "talks"


def test_the_default_run_and_the_checkouts_profiles_are_unchanged():
    config = load_config()
    assert list(config["corpora"]) == ["bible"] and config["train"]["corpus"] == "bible"
    assert config["results_dir"] == "results"
    root = DEFAULT_CONFIG.parent
    converged = load_config(DEFAULT_CONFIG, root / "converged.yaml")
    assert converged["results_dir"] == "results/converged"
    assert list(converged["corpora"]) == ["bible"]


def test_a_file_named_config_yaml_keeps_results(tmp_path):
    assert own(tmp_path, name="config")["results_dir"] == "results"

"""The config schema refuses what a reader cannot use, and names that cannot be wildcards, at
validation time with the offending key's path (issue 11, items 7 and 8). Validation goes through
snakemake.utils.validate, the call the Snakefile makes before any rule is read."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from pipeline_lib.layout import NAME_PATTERN
from pipeline_lib.run_config import load_config
from pipeline_lib.ingest import aspec, iwslt, ldc, mono, plaintext, sgml, tdf, wmt_xml
from pipeline_lib.ingest.lines import ALLOW_EMPTY

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
#: the default run's config with the schema's defaults filled in (config.yaml holds differences)
DEFAULT = load_config(ROOT / "config/config.yaml")


def with_corpus(spec: dict, name: str = "news", **sections) -> dict:
    config = copy.deepcopy(DEFAULT)
    config["corpora"][name] = spec
    config.update(sections)
    return config


def refused(config: dict) -> str:
    with pytest.raises(WorkflowError) as e:
        validate(config, str(SCHEMA))
    return str(e.value)


def on(*path: str) -> str:
    """How jsonschema names an instance path in its message."""
    return "On instance" + "".join(f"[{p!r}]" for p in path) + ":"


PLAIN = {"reader": "plaintext", "splits": {"train": {"src": "a.es", "tgt": "a.en"}}}


# --- 7. each reader's keys and types -------------------------------------------------------

@pytest.mark.parametrize("spec, path, says", [
    ({**PLAIN, "doc_separator": "<d>"},  # beside `splits` instead of inside a split
     ("corpora", "news"), "'doc_separator' was unexpected"),
    ({"reader": "mono_sgml", "splits": {"mono": {"src": "g/*.gz", "doc_types": "story"}}},
     ("corpora", "news", "splits", "mono", "doc_types"), "'story' is not of type 'array'"),
    ({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "doc_separator": 0}}},
     ("corpora", "news", "splits", "train", "doc_separator"), "0 is not of type 'string'"),
    ({"reader": "plaintext", "splits": {"train": {"src": ["a.es"], "tgt": "a.en"}}},
     ("corpora", "news", "splits", "train", "src"), "['a.es'] is not of type 'string'"),
], ids=["key_at_wrong_level", "doc_types_string", "doc_separator_int", "plaintext_src_list"])
def test_7_reported_cases_are_refused_with_the_key_path(spec, path, says):
    message = refused(with_corpus(spec))
    assert says in message and on(*path) in message


@pytest.mark.parametrize("spec, path", [
    ({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "docids": "c",
                                                  "doc_separator": "<d>"}}},
     ("corpora", "news", "splits", "train")),
    ({"reader": "plaintext", "splits": {"training": {"src": "a", "tgt": "b"}}},
     ("corpora", "news", "splits")),
    ({"reader": "mono_text", "splits": {"train": {"src": "a"}}}, ("corpora", "news", "splits")),
    ({"reader": "sgml", "splits": {"test": {"src": "a.sgm"}}}, ("corpora", "news", "splits", "test")),
    ({"reader": "sgml", "splits": {"test": {"src": "a.sgm", "tgt": "", }}},
     ("corpora", "news", "splits", "test", "tgt")),
    ({"reader": "wmt_xml", "splits": {"test": {"src": "x.xml", "translators": "A"}}},
     ("corpora", "news", "splits", "test", "translators")),
    ({"reader": "ldc_sent", "splits": {"train": {"src": "a", "tgt": "b", "allow_empty": "yes"}}},
     ("corpora", "news", "splits", "train", "allow_empty")),
    ({"reader": "bible", "tgt_module": "engWEB2015eb"}, ("corpora", "news")),
    ({"reader": "bible", "src_module": "a", "tgt_module": "b", "splits": {}}, ("corpora", "news")),
    ({"reader": "aspec", "splits": {"train": {"file": "t.txt", "max_pairs": 0}}},
     ("corpora", "news", "splits", "train", "max_pairs")),
    ({"reader": "aspec", "source": "zh", "splits": {"test": {"file": "t.txt"}}},
     ("corpora", "news", "source")),
    ({"reader": "aspec", "splits": {"mono": {"file": "t.txt"}}}, ("corpora", "news", "splits")),
    ({"reader": "union", "parts": [{"reader": "gale_tdf", "splits": {"train": {"src": "a"}}}]},
     ("corpora", "news", "parts", 0, "splits", "train")),
    ({"reader": "union", "parts": [{"reader": "union", "parts": [PLAIN]}]},
     ("corpora", "news", "parts", 0, "reader")),
], ids=["docids_and_separator", "unknown_split", "mono_reader_train_split", "sgml_without_tgt",
        "empty_path", "translators_string", "allow_empty_string", "bible_without_src_module",
        "bible_with_splits", "aspec_max_pairs_zero", "aspec_source", "aspec_mono_split",
        "union_part_without_tgt", "union_of_unions"])
def test_7_other_unusable_entries_are_refused_with_the_key_path(spec, path):
    assert on(*path) in refused(with_corpus(spec))


def test_7_valid_variations_of_every_reader_validate():
    splits = {
        "sgml": {"test": {"src": "s.sgm", "tgt": ["r0.sgm", "r1.sgm"], ALLOW_EMPTY: False}},
        "wmt_xml": {"test": {"src": "w.xml", "translators": ["A", "B"]}},
        "iwslt": {"train": {"src": "t.en", "tgt": "t.de"},
                  "test": {"src": ["a.en.xml", "b.en.xml"], "tgt": ["a.de.xml", "b.de.xml"]}},
        "plaintext": {"train": {"src": "a", "tgt": "b", "docids": "c"},
                      "dev": {"src": "a", "tgt": "b", "doc_separator": "<d>", ALLOW_EMPTY: True}},
        "ldc_doc": {"train": {"src": ["s/*.sgm"], "tgt": [["E01/*.sgm", "x/E01/*.sgm"], "E02/*.sgm"],
                              "src_encoding": "gb18030"}},
        "gale_tdf": {"train": {"src": "source/*.tdf", "tgt": ["translation/*.eng.tdf"]}},
        "ldc_sent": {"train": {"src": "a", "tgt": "b"}, "dev": {"src": ["a", "c"], "tgt": ["b", "d"]}},
        "mono_sgml": {"mono": {"src": ["g/*.gz"], "doc_types": ["story", "multi"]}},
        "mono_text": {"mono": {"src": "m.txt", "doc_separator": ""}},
        "aspec": {"train": {"file": ["train-1.txt", "train-2.txt"], "max_pairs": 1500000},
                  "test": {"file": "test.txt"}},
    }
    config = copy.deepcopy(DEFAULT)
    for reader, sub in splits.items():
        config["corpora"][f"c_{reader}"] = {"reader": reader, "splits": sub}
    config["corpora"]["c_iwslt"]["download"] = "iwslt17_en_de"
    config["corpora"]["c_union"] = {"reader": "union", "parts": [
        {"reader": "ldc_doc", "splits": splits["ldc_doc"]},
        {"reader": "gale_tdf", "splits": splits["gale_tdf"]}]}
    validate(config, str(SCHEMA))
    # defaults of bible keys are set on bible entries only, so other entries reach the reader as written
    assert config["corpora"]["bible"]["max_length_ratio"] == 2.5
    assert config["corpora"]["c_plaintext"] == {"reader": "plaintext", "splits": splits["plaintext"]}


def test_7_schema_and_readers_agree_on_split_keys():
    schema = yaml.safe_load(SCHEMA.read_text())
    readers = {"sgml": sgml.KEYS, "wmt_xml": wmt_xml.KEYS, "iwslt": iwslt.KEYS,
               "plaintext": plaintext.KEYS, **ldc.KEYS, **mono.KEYS, "aspec": aspec.KEYS,
               "gale_tdf": tdf.KEYS}
    for reader, keys in readers.items():
        split = schema["$defs"][f"reader_{reader}"]["properties"]["splits"]["additionalProperties"]
        assert set(split["properties"]) == set(keys) | {ALLOW_EMPTY}, reader


def test_7_bad_entry_fails_before_the_dag_is_built(tmp_path):
    """The real Snakefile: a dry run with a bad entry stops at validation, naming the key."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"src_lang": "es", "tgt_lang": "en", "corpora": {"news": {
        "reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b", "doc_separator": 0}}}}}))
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(bad),
                           "--directory", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert on("corpora", "news", "splits", "train", "doc_separator") in out
    assert "Building DAG" not in out


# --- 8. names that become wildcards --------------------------------------------------------

@pytest.mark.parametrize("make, path", [
    (lambda c: c["corpora"].update({"my corpus": c["corpora"].pop("bible")}), ("corpora",)),
    (lambda c: c.update(models=["transformer", "doc t"]), ("models", 1)),
    (lambda c: c.update(model_settings={"x;rm -rf": {"name": "doct"}}), ("model_settings",)),
    (lambda c: c.update(model_settings={"doct": {"corpus": "../bible"}}),
     ("model_settings", "doct", "corpus")),
    (lambda c: c.update(model_settings={"doct": {"init_from": "a b"}}),
     ("model_settings", "doct", "init_from")),
    (lambda c: c["score"].update(discourse_suites={"deixis/x": {"format": "voita", "path": "d.json"}}),
     ("score", "discourse_suites")),
    (lambda c: c["score"].update(corpora=["bible", "$(touch x)"]), ("score", "corpora", 1)),
    (lambda c: c["train"].update(corpus="-bible"), ("train", "corpus")),
    (lambda c: c["corpora"].update(news={**PLAIN, "download": "../../etc"}), ("corpora", "news", "download")),
], ids=["corpus", "models", "model_settings_key", "job_corpus", "init_from", "discourse_suite",
        "score_corpora", "train_corpus", "download"])
def test_8_names_that_form_wildcards_are_restricted(make, path):
    config = copy.deepcopy(DEFAULT)
    make(config)
    assert on(*path) in refused(config)


def test_8_name_pattern_is_the_one_the_code_uses():
    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["$defs"]["name"]["pattern"] == NAME_PATTERN
    for ok in ("bible", "mt06", "iwslt17.en-de", "crosstask_pretrain", "A1"):
        assert re.match(NAME_PATTERN, ok)
    for bad in ("my corpus", "a/b", "-x", ".hidden", "", "a;b", "é"):
        assert not re.match(NAME_PATTERN, bad)

"""Presets reproduce the seed papers' setups and stay valid against the config schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline_lib.ingest.download import CATALOGUE, NIST_SETS, ZHANG2018_DOC, ZHANG2018_SENT
from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config
from pipeline_lib.config_files import ConfigError
from pipeline_lib.presets import BASE_DIR, apply_preset, load_preset

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
PRESETS = sorted((ROOT / "config/presets").glob("*.yaml"))
EXPECTED = {"zhang2018_zh-en", "chen2021_en-de_ted", "chen2021_en-de_news",
            "chen2021_en-de_europarl", "jiang2019_es-en_ted", "deguchi2019_ja-en_aspec",
            "tu2018_zh-en_ted", "chen2021_zh-en"}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _preset(path: Path) -> dict:
    """A preset file as a whole config (its ``extends`` base merged in)."""
    return load_preset(path.parent, path.stem)


def test_every_seed_setup_has_a_preset():
    assert {p.stem for p in PRESETS} >= EXPECTED


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_names_only_schema_keys_and_validates_merged(preset):
    schema = _load(SCHEMA)
    data = _preset(preset)
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
    assert config["model"]["size"] == "base"


def test_command_line_values_win_over_a_preset(tmp_path):
    config = {**_load(ROOT / "config/config.yaml"), "preset": "jiang2019_es-en_ted",
              "seeds": [1, 2]}
    overrides = {"preset": "jiang2019_es-en_ted", "train": {"max_steps": 7}, "seeds": [1, 2]}
    apply_preset(config, ROOT / "config/presets", overrides)
    assert config["train"]["max_steps"] == 7 and config["train"]["warmup"] == 4000
    assert config["seeds"] == [1, 2]                 # the command line's, not in the preset
    # the default run's sections the preset does not name are gone (the schema fills them)
    assert "stanza" not in config and "fine_tune" not in config and "parse" not in config
    with pytest.raises(ValueError, match="available: chen2021_en-de_europarl"):
        apply_preset({"preset": "nope"}, ROOT / "config/presets", {})


def test_a_preset_extends_its_base_and_states_only_its_data():
    """The four Chen et al. presets share base/chen2021.yaml: the preset's keys win (its
    training corpus), the base's arrive (models, recipes, training values); a base that does not
    exist, or that extends again, is refused with the file named."""
    bases = sorted((ROOT / "config/presets" / BASE_DIR).glob("*.yaml"))
    assert [b.stem for b in bases] == ["chen2021"]
    for b in bases:     # a base names only schema keys, and nothing that makes it a preset
        assert set(_load(b)) <= set(_load(SCHEMA)["properties"]) - {"preset"}, b
    chen = [p for p in PRESETS if p.stem.startswith("chen2021_")]
    assert len(chen) == 4 and all(_load(p)["extends"] == "chen2021" for p in chen)
    base = _load(bases[0])
    for p in chen:
        merged, own = _preset(p), _load(p)
        assert merged["models"] == base["models"] and merged["decode"] == base["decode"]
        assert merged["train"]["corpus"] == own["train"]["corpus"]
        assert merged["train"]["lr"] == base["train"]["lr"]
        assert merged["model_settings"]["crosstask_pretrain"]["corpus"] == \
            own["model_settings"]["crosstask_pretrain"]["corpus"]
        assert merged["model_settings"]["crosstask_pretrain"]["aux"] == "restore"
        assert "extends" not in merged


def test_a_missing_or_chained_base_is_refused(tmp_path):
    (tmp_path / BASE_DIR).mkdir()
    (tmp_path / "a.yaml").write_text("extends: nowhere\n")
    with pytest.raises(ConfigError, match=r"a.yaml: extends 'nowhere', but there is no"):
        load_preset(tmp_path, "a")
    (tmp_path / BASE_DIR / "b.yaml").write_text("extends: c\n")
    (tmp_path / "a.yaml").write_text("extends: b\n")
    with pytest.raises(ConfigError, match="b.yaml: a base cannot extend"):
        load_preset(tmp_path, "a")


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_downloaded_corpora_come_from_the_catalogue(preset):
    data = _preset(preset)
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


def test_zhang2018_names_every_release_of_footnote_3_and_requires_those_it_reads():
    """Footnote 3 lists the sentence- and document-level releases; the preset says of each
    what it does with it, and requires (before the DAG) exactly the directories it reads."""
    path = ROOT / "config/presets/zhang2018_zh-en.yaml"
    data, text = _load(path), path.read_text()
    assert all(release in text for release in ZHANG2018_SENT + ZHANG2018_DOC)
    read = {p.split("/")[3] for part in data["corpora"]["ldc_doc"]["parts"]
            for sub in part["splits"].values() for key in ("src", "tgt")
            for p in (sub[key] if isinstance(sub[key], list) else [sub[key]])
            for p in (p if isinstance(p, list) else [p])}
    assert read == {"LDC2002T01", "LDC2009T15", "LDC2010T03"} <= set(ZHANG2018_DOC)
    required = set(data["downloads"]["ldc_required"])
    assert required == read | set(NIST_SETS) == set(data["downloads"]["ldc"])


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_job_reads_splits_its_corpora_have(preset):
    """A job trains on `train`, validates on `dev`, and reads restoration instances from `mono`
    or `train` and parallel documents from `train` (a missing split only shows at training)."""
    config = load_config(overrides={"preset": preset.stem})
    plan = Plan(config)
    splits = {name: plan.splits(name) for name in config["corpora"]}
    for job in plan.jobs.values():
        assert "train" in splits[job.corpus], job.name
        assert "dev" in splits[job.dev_corpus], (job.name, job.dev_corpus)
        if job.aux:
            assert splits[job.aux_corpus] & ({"mono", "train"} if job.aux == "restore"
                                             else {"train"}), job.name


def _has_documents(spec: dict, split: str) -> bool:
    """Whether a corpus split is read as multi-sentence documents (ldc_sent and aspec never are;
    plaintext only with document ids or separators; a union when every part with that split is)."""
    if spec["reader"] == "union":
        return all(_has_documents(p, split) for p in spec["parts"] if split in p["splits"])
    if spec["reader"] in ("ldc_sent", "aspec"):
        return False
    sub = spec["splits"][split]
    return spec["reader"] != "plaintext" or "docids" in sub or "doc_separator" in sub


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_document_level_steps_read_documents(preset):
    """Context models, restoration and document fine-tuning read corpora with documents; only
    sentence-level steps (a baseline, translation pre-training) may read sentence pairs."""
    config = load_config(overrides={"preset": preset.stem})
    corpora = config["corpora"]
    for job in Plan(config).jobs.values():
        if job.data == "doc" or job.aux == "doc":
            assert _has_documents(corpora[job.corpus], "train"), job.name
        if job.aux == "restore":
            split = "mono" if "mono" in corpora[job.aux_corpus]["splits"] else "train"
            assert _has_documents(corpora[job.aux_corpus], split), job.name
    for name, spec in corpora.items():   # Maruf et al. (2019) files are read as documents
        for split, sub in spec.get("splits", {}).items():  # (no union holds them)
            if "concatenated_en2de_" in str(sub.get("src")):
                assert sub.get("doc_separator") == "<d>", (name, split)


CHEN = [p for p in PRESETS if p.stem.startswith("chen2021_")]


@pytest.mark.parametrize("preset", CHEN, ids=lambda p: p.stem)
def test_chen2021_trains_with_and_without_resources(preset):
    """Sec. 4.2: "with resources" pre-trains on sentence pairs + monolingual documents, then
    fine-tunes; "without" trains from scratch on the two fine-tuning tasks (no pre-training)."""
    config = load_config(overrides={"preset": preset.stem})
    plan, corpora = Plan(config), config["corpora"]
    finetune = config["train"]["corpus"]
    # "with resources": WMT14 sentence pairs translated, Gigaword documents restored
    pre = plan.jobs["crosstask_pretrain"]
    pairs, gigaword, vocab = CHEN_PAIR[config["src_lang"], config["tgt_lang"]]
    assert corpora[pre.corpus]["reader"] == "ldc_sent"
    assert corpora[pre.corpus].get("download") == pairs
    assert pre.aux == "restore" and corpora[pre.aux_corpus]["reader"] == "mono_sgml"
    assert set(corpora[pre.aux_corpus]["splits"]) == {"mono"}
    assert gigaword in config["downloads"]["ldc_required"]
    assert f"/{gigaword}/" in str(corpora[pre.aux_corpus]["splits"]["mono"]["src"])
    job = plan.jobs["crosstask"]
    assert job.init_from == pre.name and job.corpus == finetune and job.aux == "doc"
    # "without resources": from scratch, the fine-tuning tasks and settings; its matched
    # control is the baseline itself (Table 1 #1)
    scratch = plan.jobs["crosstask_scratch"]
    assert scratch.init_from is None and scratch.corpus == finetune and scratch.aux == "doc"
    assert scratch.train["max_steps"] == job.train["max_steps"] == 200000
    assert plan.controls["crosstask_scratch"] == plan.baseline == "transformer"
    for model in ("crosstask", "crosstask_scratch"):
        assert f"{model}_sent" in plan.systems and model in plan.controls
    # Sec. 4.1: 500K pre-training updates, BPE 25K (En-De) / 30K (Zh-En), beam 5; En-De
    # fine-tuning documents from the Maruf et al. (2019) release, Zh-En's from the LDC releases
    assert pre.train["max_steps"] == 500000
    assert config["bpe"]["vocab_size"] == vocab and config["decode"]["beam"] == 5
    assert _has_documents(corpora[finetune], "train")
    if config["src_lang"] == "en":
        assert "concatenated_en2de_train_en.txt" in corpora[finetune]["splits"]["train"]["src"]


#: Sec. 4.1 per language pair: the pre-training pairs' download (None: licensed LDC releases,
#: fn. 4), the monolingual Gigaword release, the BPE size
CHEN_PAIR = {("en", "de"): ("wmt14_en_de_train", "LDC2011T07", 25000),
             ("zh", "en"): (None, "LDC2009T27", 30000)}


def test_chen2021_zh_en_is_the_nist_task_of_sec_4_1():
    """Sec. 4.1 Zh-En: fine-tuning on the LDC document releases of fn. 8 (those with a reader),
    MT06 validates, MT02-05 and MT08 are tested (their "All" the paper's combined test set), the
    pre-training pairs are fn. 4's prepared concatenation; English lowercased for BLEU (fn. 7)."""
    config = load_config(overrides={"preset": "chen2021_zh-en"})
    plan = Plan(config)
    assert config["train"]["corpus"] == "ldc_doc" and config["train"]["dev_corpus"] == "mt06"
    assert sorted(plan.test_corpora) == ["mt02", "mt03", "mt04", "mt05", "mt08"]
    assert config["score"]["lowercase"] is True
    assert plan.jobs["crosstask_pretrain"].corpus == "ldc_sent"
    text = (ROOT / "config/presets/chen2021_zh-en.yaml").read_text()
    for release in ("LDC2002T01", "LDC2004T07", "LDC2005T06", "LDC2005T10", "LDC2009T02",
                    "LDC2009T15", "LDC2010T03", "LDC2002E18", "LDC2003E07", "LDC2003E14",
                    "LDC2004T08", "LDC2009T27"):
        assert release in text, release


#: what a value's comment may cite: the paper's sections, equations, tables, footnotes, appendix
CITES = ("Sec.", "Eq.", "Tab", "fn.", "footnote", "App.")
TRAINING_KEYS = ("max_steps", "lr:", "warmup:", "aux_ratio:", "vocab_size:", "max_tokens:",
                 "beam:", "lenpen:", "cache_size", "lambda_", "parse_layer", "memory_mode",
                 "context_sentences", "freeze:", "init_from:")


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_recipe_value_cites_the_paper_or_says_it_is_silent(preset):
    """Each training value says where it comes from, on its line or in the comment right above:
    a section, equation, table or footnote of the paper, or that the paper is silent. No value
    passes for the paper's without a citation, and none is left "not verified"."""
    text = preset.read_text()
    for banned in ("not verified", "NOT verified", "not reachable", "could not be read"):
        assert banned not in text, f"{preset.name}: {banned!r}"
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#") or not any(k in line for k in TRAINING_KEYS):
            continue
        above = []
        for prev in reversed(lines[:i]):
            if not prev.lstrip().startswith("#"):
                break
            above.append(prev)
        said = " ".join([line, *above])
        assert any(c in said for c in CITES) or "paper silent" in said, \
            f"{preset.name}:{i + 1}: {line.strip()}"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_header_puts_the_papers_values_beside_its_own(preset):
    """The header holds a table `value | paper | here` with a row per recipe step."""
    header = []
    for line in preset.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    table = [line for line in header if line.count("|") == 2]
    assert any("paper" in row and "here" in row for row in table), preset.name
    rows = {row.split("|")[0].lstrip("# ").strip() for row in table} - {""}
    assert len(rows) >= 6, (preset.name, sorted(rows))


def test_schema_lists_every_catalogue_entry():
    schema = _load(SCHEMA)
    assert set(schema["$defs"]["catalogue_entry"]["enum"]) == set(CATALOGUE)


def _differences(a, b, path: str = "") -> list[str]:
    """Every key path at which ``a`` and ``b`` differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (_differences(a.get(k, "<absent>"), b.get(k, "<absent>"),
                                       f"{path}.{k}" if path else str(k)))]
    return [] if a == b else [f"{path}: {a!r} (with config/config.yaml) vs {b!r} (empty default)"]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_no_default_run_value_reaches_a_preset(preset, tmp_path):
    """A preset is the paper's whole setup: resolved over config/config.yaml (the 60-minute smoke
    run: its fine_tune block, train values, stanza/parse sizes, the Bible corpus) and over an empty
    default, every planned job (model, train, data, corpora, chain, matched controls) and every
    config section are the same. The message names each key that differs."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("{}\n")
    over_default = load_config(ROOT / "config/config.yaml", overrides={"preset": preset.stem})
    over_empty = load_config(empty, overrides={"preset": preset.stem})
    jobs = [{name: job.__dict__ for name, job in Plan(c).jobs.items()}
            for c in (over_default, over_empty)]
    diff = _differences(jobs[0], jobs[1], "jobs") + _differences(over_default, over_empty)
    assert not diff, f"{preset.stem}: the default run reaches the preset:\n  " + "\n  ".join(diff)


#: the model size keys a paper states (or a preset chooses where it is silent)
SIZE_KEYS = {"d_model", "n_heads", "d_ff", "enc_layers", "dec_layers", "dropout"}
#: train keys that change what is trained or which checkpoint is decoded (not instrumentation
#: such as log_every, compile, phase_times, num_workers or device)
RECIPE_TRAIN_KEYS = {"max_tokens", "max_context_tokens", "update_freq", "max_steps", "warmup",
                     "lr", "clip_norm", "label_smoothing", "seed", "validate_every", "save_every",
                     "keep_last", "average_last_k", "patience", "min_delta", "stop_metric",
                     "buffer_sents", "dev_bleu"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_states_every_training_value_and_its_model_size(preset):
    """The schema's train defaults are sized for the CPU smoke run (500 updates, lr 1e-3...):
    a preset states every recipe key of the train section itself, and the sizes of its model."""
    schema, data = _load(SCHEMA), _preset(preset)
    assert RECIPE_TRAIN_KEYS <= set(schema["properties"]["train"]["properties"])
    missing = RECIPE_TRAIN_KEYS - set(data["train"])
    assert not missing, f"{preset.stem}: train keys left to the schema: {sorted(missing)}"
    size = data["model"]["size"]
    stated = set(data.get("model_sizes", {}).get(size, {}))
    assert stated >= SIZE_KEYS, f"{preset.stem}: model_sizes.{size} lacks {SIZE_KEYS - stated}"


@pytest.mark.parametrize("preset", CHEN, ids=lambda p: p.stem)
def test_chen2021_learns_bpe_on_the_pretraining_data_only(preset):
    """Sec. 4.1: BPE is learned on the merged pre-training data (the WMT14 pairs and the
    Gigaword documents), the fine-tuning data only segmented with it."""
    config = load_config(overrides={"preset": preset.stem})
    plan = Plan(config)
    pre = plan.jobs["crosstask_pretrain"]
    assert plan.bpe_corpora == [pre.corpus, pre.aux_corpus]
    assert pre.aux_corpus == "gigaword" and pre.corpus in ("wmt14", "ldc_sent")
    assert config["train"]["corpus"] not in plan.bpe_corpora


def test_bpe_corpora_default_is_every_corpus_with_train_or_mono_text():
    """bpe.corpora null (the default, and every preset but Chen et al.'s) keeps the rule of
    Plan.bpe_corpora; a named corpus without train or mono text is refused."""
    default = Plan(load_config())
    assert default.config["bpe"]["corpora"] is None and default.bpe_corpora == ["bible"]
    plan = Plan(load_config(overrides={"preset": "jiang2019_es-en_ted"}))
    assert plan.bpe_corpora == ["ted"]
    bad = Plan(load_config(overrides={"preset": "chen2021_en-de_europarl",
                                      "bpe": {"corpora": ["europarl_maruf"]}}))
    with pytest.raises(ValueError, match="bpe.corpora: 'europarl_maruf'"):
        bad.bpe_corpora

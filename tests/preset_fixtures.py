"""Every paper preset on small files in its corpora's real release formats (tests/data/presets/).

``tests/data/presets/corpora/<entry>/`` holds, for each download catalogue entry a preset names,
a few documents at the very paths the extracted archive has them (IWSLT ``train.tags`` and dev/test
XML, the Maruf et al. 2019 ``<d>`` files, the WMT14 training text). ``tests/data/presets/data/``
mirrors the presets' placeholders for licensed or on-request material under ``/data/`` (LDC and
NIST SGML, gzipped English Gigaword, the Maruf Europarl training files).

A run stages them in its working directory: catalogue entries as finished downloads
(``resources/corpora/<entry>/`` plus its manifest, so rule download_corpus has nothing to do and
nothing is fetched) and ``data/`` beside them, with the preset's ``/data/...`` paths and
``downloads.ldc`` directories pointed there. A preset that parses (DBSA's) gets ``shared/ud/``:
the UD treebanks the repository ships (English EWT) and ``tests/data/presets/ud/``'s
UD_Japanese-smoke, a 75-sentence fixture in UD's scheme (UD_Japanese-GSD, the preset's own
treebank, cannot be downloaded here), so that stanza trains tiny models offline. WHY not drop the ``download:`` keys instead: Snakemake
deep-merges command-line config over the preset, which can replace values but not delete keys;
staging the downloads also reads every catalogue path of the preset exactly as written.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import yaml

from pipeline_lib.presets import load_preset

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "presets"
SHARED = "shared"            # staged treebanks (<work>/shared/ud/<name>/), the run's shared_dir
#: The Japanese treebank a smoke run trains its stanza models on (see the module docstring).
JA_SMOKE = {"name": "UD_Japanese-smoke", "prefix": "ja_smoke", "commit": "fixture"}
PRESETS = sorted(p.stem for p in (ROOT / "config" / "presets").glob("*.yaml"))
PLACEHOLDER = "/data/"       # the presets' prefix for material that cannot be downloaded
STAGED = "data/"             # where it is staged, relative to the run's working directory

SMOKE_STEPS = {"max_steps": 6, "warmup": 3, "validate_every": 6, "save_every": 6, "log_every": 2}


def preset(name: str) -> dict:
    """The preset as a whole config (its ``extends`` base merged in)."""
    return load_preset(ROOT / "config" / "presets", name)


def _local(value):
    """A preset value with its ``/data/...`` paths moved under the staged ``data/``."""
    if isinstance(value, str):
        return STAGED + value[len(PLACEHOLDER):] if value.startswith(PLACEHOLDER) else value
    if isinstance(value, list):
        return [_local(v) for v in value]
    if isinstance(value, dict):
        return {k: _local(v) for k, v in value.items()}
    return value


def fixture_overrides(name: str) -> dict:
    """Config (deep-merged over the preset) that reads the staged fixtures."""
    p = preset(name)
    return {"corpora": _local(copy.deepcopy(p["corpora"])),
            "downloads": {"ldc": _local(p.get("downloads", {}).get("ldc", {}))}}


def smoke_overrides(name: str) -> dict:
    """Every stage at smoke size: 1+1-layer d_model 32 models, 6 updates per job, beam 2, stanza
    models of 8 tagger and parser steps (Japanese on the UD_Japanese-smoke fixture)."""
    p = preset(name)
    jobs = p["model_settings"]
    langs = {p["src_lang"], p["tgt_lang"]}
    return {
        "shared_dir": SHARED,
        "stanza": {"download": False,
                   "treebanks": {"ja": dict(JA_SMOKE)} if "ja" in langs else {},
                   "training": {"tagger_steps": 8, "parser_steps": 8, "hidden_dim": 32,
                                "deep_biaff_hidden_dim": 32, "word_emb_dim": 16, "tag_emb_dim": 8,
                                "transformed_dim": 16, "parser_layers": 1}},
        "model": {"size": "tiny"},
        "model_sizes": {"tiny": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                                   "dec_layers": 1}},
        "bpe": {"vocab_size": 400},   # Chinese fixtures hold ~200 distinct characters
        "parse": {"max_sentences_per_split": 40, "shards": 1},
        "cluster": {"gpus_per_node": 0},
        "train": {**SMOKE_STEPS, "max_tokens": 1024, "update_freq": 1, "compile": False,
                  "num_workers": 0, "buffer_sents": 1000, "average_last_k": 0, "keep_last": 2,
                  "patience": 0},
        "model_settings": {job: {"train": dict(SMOKE_STEPS)} for job in jobs},
        "decode": {"beam": 2, "max_len_b": 5},
        # the context ablation's decodes and forced decodings run end to end in the tiny run
        # (conftest.py); of the presets only Zhang et al.'s (DocT, five test sets) repeats them.
        # With it on in every preset, Chen Zh-En decoded 55 system x test-set pairs, not 35
        # (346 s, not 227 s)
        "score": {"bootstrap_samples": 50, "context_ablation": name == "zhang2018_zh-en"},
        # the fixtures' test talks repeat training talks: counted, not removed (nor an error)
        "hygiene": {"overlap": "keep"},
    }


def stage(name: str, work: Path, downloads: bool) -> None:
    """Put the preset's fixtures into ``work``: ``data/`` always (paths the DAG must see, LDC
    directories that must exist), the catalogue entries as finished downloads if ``downloads``."""
    shutil.copytree(FIXTURES / "data", work / "data", dirs_exist_ok=True)
    shared = work / SHARED / "ud"
    shutil.copytree(FIXTURES / "ud", shared, dirs_exist_ok=True)
    for treebank in (ROOT / "third_party" / "ud").iterdir():
        if treebank.is_dir() and not (shared / treebank.name).exists():
            (shared / treebank.name).symlink_to(treebank)
    p = preset(name)
    for directory in _local(p.get("downloads", {}).get("ldc", {})).values():
        (work / directory).mkdir(parents=True, exist_ok=True)   # releases the preset never reads
    if not downloads:
        return
    for entry in p.get("downloads", {}).get("corpora", []):
        target = work / "resources" / "corpora" / entry
        shutil.copytree(FIXTURES / "corpora" / entry, target, dirs_exist_ok=True)
        (target / "manifest.json").write_text(json.dumps(
            {"stage": "download_corpus", "params": {"entry": entry},
             "note": f"test fixture copied from {FIXTURES.relative_to(ROOT)}/corpora/{entry}"}))


def merged(*sections: dict) -> dict:
    """Override sections deep-merged in order (as Snakemake merges config files)."""
    from snakemake.utils import update_config

    out: dict = {}
    for s in sections:
        update_config(out, copy.deepcopy(s))
    return out


def write_config(work: Path, config: dict) -> Path:
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path

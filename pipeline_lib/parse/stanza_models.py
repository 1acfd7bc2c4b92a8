"""Provide one stanza POS tagger + dependency parser per language for the parse stage.

``python -m pipeline_lib.parse.stanza_models --lang es --spec '<stanza config JSON>' --shared-dir third_party
--resources-dir resources/stanza --out-dir results/stanza_models/es --threads 2``

writes ``model.json`` (a *model descriptor*: the keyword arguments of ``stanza.Pipeline`` that load
the chosen models, plus where they came from) and ``manifest.json``. The parse stage only ever
reads the descriptor (``load_pipeline``), so it does not care which way a model was obtained.

Where a model comes from, first match wins (the manifest's ``source`` and the log say which):

1. ``configured``: ``stanza.model_dir`` from config, a directory in stanza's own layout
   (``resources.json`` + ``<lang>/pos/<package>.pt`` ...), e.g. what ``stanza.download`` wrote on
   another machine.
2. ``stanza_resources``: stanza's resources directory ($STANZA_RESOURCES_DIR or
   ~/stanza_resources) when it already holds the language.
3. ``trained`` / ``downloaded`` models kept under ``resources/stanza/`` by an earlier run (reused,
   so a second run costs nothing).
4. ``downloaded``: ``stanza.download`` of the configured package (``stanza.download: true``); the
   resources/model URLs are configurable so that a mirror can be used.
5. ``trained``: stanza's own trainers (``stanza.models.tagger`` / ``stanza.models.parser``, run as
   subprocesses) on a UD treebank named in config (``stanza.train: true``). This is the path our
   offline machines take. The treebank is read from ``<shared_dir>/ud/<name>/`` or, when absent,
   downloaded from the UD GitHub repository at the configured commit into ``resources/ud/``.
   Only the dev and test files are used: the dev file is split into a training part and a small
   model-selection part, and the **test file is held out** for the LAS/UAS written to the manifest.
   Models are small (no pretrained embeddings, no character model) so that both languages train in
   a few minutes on 2 CPU cores; they are far below stanza's released models, which the
   configured/downloaded paths give.

Trained models predict UPOS only (XPOS and features are blanked in the training copy): the tagger
then trains about twice as fast and the parser uses UPOS alone as tag input, so that it never sees
tags at training time that the tagger cannot predict. Lemmas are not needed for heads: the
pipeline runs stanza's identity lemmatizer only because depparse requires a lemma processor.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from pipeline_lib import stage_options
from pipeline_lib.stage_options import json_value
from pipeline_lib.atomic import write_text
from pipeline_lib.progress import LOG_EVERY_S
from pipeline_lib.layout import MANIFEST_FILE, STANZA_MODEL_FILE
from pipeline_lib.fetch import DownloadError, fetch
from pipeline_lib.layout import shared_dir
from pipeline_lib.manifest import Manifest

log = logging.getLogger("stanza_models")

# depparse requires a lemma processor; the identity lemmatizer satisfies it without a model
# (lemmas are not needed for heads). tokenize runs pretokenized (see pipeline_lib.parse.dependencies).
PROCESSORS = "tokenize,pos,lemma,depparse"
UD_DEFAULT_URL = "https://raw.githubusercontent.com/UniversalDependencies"


class MissingModelError(RuntimeError):
    """No stanza model is available for a language and none can be obtained."""


@dataclass(frozen=True)
class Treebank:
    """A UD treebank at a fixed commit: ``<name>/<prefix>-ud-{dev,test}.conllu``."""

    name: str
    prefix: str
    commit: str = "master"

    def file(self, part: str) -> str:
        return f"{self.prefix}-ud-{part}.conllu"


@dataclass(frozen=True)
class TrainSettings:
    """Dimensions and steps of the offline tagger/parser (see the module docstring)."""

    tagger_steps: int = 150
    parser_steps: int = 300
    hidden_dim: int = 128
    deep_biaff_hidden_dim: int = 128
    word_emb_dim: int = 64
    tag_emb_dim: int = 32
    transformed_dim: int = 64
    parser_layers: int = 2
    parser_batch_size: int = 2500     # tokens per parser update (stanza's default: 5000)
    select_fraction: float = 0.1      # share of the dev file kept for stanza's model selection
    seed: int = 1234


@dataclass(frozen=True)
class StanzaConfig:
    """The ``stanza`` config section (workflow/schemas/config.schema.yaml)."""

    model_dir: str | None = None
    package: str = "default"
    download: bool = True
    resources_url: str | None = None
    model_url: str | None = None
    train: bool = True
    ud_url: str = UD_DEFAULT_URL
    treebanks: dict[str, Treebank] = field(default_factory=dict)
    training: TrainSettings = TrainSettings()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StanzaConfig":
        d = dict(d)
        tbs = {lang: Treebank(**tb) for lang, tb in d.pop("treebanks", {}).items()}
        training = TrainSettings(**d.pop("training", {}))
        return cls(treebanks=tbs, training=training, **d)


# --------------------------------------------------------------------------- descriptors

def _descriptor(lang: str, source: str, **pipeline: Any) -> dict[str, Any]:
    """Keyword arguments for ``stanza.Pipeline`` that load these models without the network."""
    kwargs = {"lang": lang, "processors": PROCESSORS, "tokenize_pretokenized": True,
              "lemma_use_identity": True, "download_method": None, **pipeline}
    return {"lang": lang, "source": source, "pipeline": kwargs}


def load_pipeline(descriptor: dict[str, Any] | str | Path, threads: int = 1,
                  batch_size: int = 256, use_gpu: bool | None = None):
    """A stanza Pipeline from a model descriptor (``model.json`` or its dict).

    ``threads`` sets torch's intra-op threads (the rule's ``threads:``); ``use_gpu`` defaults to
    whether CUDA is available.
    """
    import stanza
    import torch

    if not isinstance(descriptor, dict):
        descriptor = json.loads(Path(descriptor).read_text())
    torch.set_num_threads(max(1, threads))
    if use_gpu is None:
        use_gpu = torch.cuda.is_available()
    return stanza.Pipeline(**descriptor["pipeline"], use_gpu=use_gpu, pos_batch_size=batch_size,
                           depparse_batch_size=batch_size, logging_level="WARN")


# --------------------------------------------------------------------------- installed models

def _has_language(model_dir: Path, lang: str) -> bool:
    return ((model_dir / "resources.json").is_file() and any((model_dir / lang / "pos").glob("*.pt"))
            and any((model_dir / lang / "depparse").glob("*.pt")))


def _installed(model_dir: Path, lang: str, package: str, source: str) -> dict[str, Any]:
    return _descriptor(lang, source, dir=str(model_dir), package=package)


def stanza_resources_dir() -> Path:
    from stanza.resources.common import DEFAULT_MODEL_DIR

    return Path(DEFAULT_MODEL_DIR)


def download(lang: str, package: str, dest: Path, resources_url: str | None,
             model_url: str | None) -> dict[str, Any]:
    """``stanza.download`` of the POS and depparse models (and their dependencies) into ``dest``."""
    import stanza

    kw: dict[str, Any] = {}
    if resources_url:
        kw["resources_url"] = resources_url
    if model_url:
        kw["model_url"] = model_url
    processors = {"pos": package, "depparse": package} if package != "default" else "pos,depparse"
    dest.mkdir(parents=True, exist_ok=True)
    stanza.download(lang, model_dir=str(dest), package=None if package != "default" else package,
                    processors=processors, logging_level="INFO", **kw)
    return _installed(dest, lang, package, "downloaded")


# --------------------------------------------------------------------------- treebanks

def fetch_treebank(tb: Treebank, shared_dir: Path, cache_dir: Path, ud_url: str) -> Path:
    """Directory with the treebank's dev and test files: shared_dir/ud/<name>, else downloaded."""
    files = [tb.file("dev"), tb.file("test")]
    shared = shared_dir / "ud" / tb.name
    if all((shared / f).is_file() for f in files):
        return shared
    local = cache_dir / tb.name / tb.commit
    for f in files:
        target = local / f
        if target.is_file():
            continue
        url = f"{ud_url.rstrip('/')}/{tb.name}/{tb.commit}/{f}"
        log.info("%s not in %s: downloading %s", f, shared, url)
        fetch(url, target)   # retried, resumed, renamed into place only when complete
    return local


def conllu_sentences(path: Path) -> Iterator[list[str]]:
    """Blocks of CoNLL-U lines (comments included), one per sentence."""
    block: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                block.append(line)
            elif block:
                yield block
                block = []
    if block:
        yield block


def _upos_only(block: list[str]) -> list[str]:
    """Blank XPOS and FEATS (see the module docstring) in one CoNLL-U sentence."""
    out = []
    for line in block:
        cols = line.split("\t")
        if len(cols) == 10 and not line.startswith("#"):
            cols[4] = cols[5] = "_"
            line = "\t".join(cols)
        out.append(line)
    return out


def prepare_training_files(dev: Path, out_dir: Path, select_fraction: float) -> tuple[Path, Path]:
    """Split the UD dev file into a training part and a model-selection part (UPOS only)."""
    blocks = [_upos_only(b) for b in conllu_sentences(dev)]
    n_select = max(1, int(len(blocks) * select_fraction))
    out_dir.mkdir(parents=True, exist_ok=True)
    train, select = out_dir / "train.conllu", out_dir / "select.conllu"
    for path, part in ((train, blocks[:-n_select]), (select, blocks[-n_select:])):
        path.write_text("".join("\n".join(b) + "\n\n" for b in part), encoding="utf-8")
    return train, select


def read_gold(path: Path) -> list[dict[str, list]]:
    """Syntactic words of each sentence (multi-word token ranges and empty nodes skipped)."""
    sents = []
    for block in conllu_sentences(path):
        s: dict[str, list] = {"words": [], "upos": [], "heads": [], "deprels": []}
        for line in block:
            cols = line.split("\t")
            if line.startswith("#") or len(cols) != 10 or not cols[0].isdigit():
                continue
            s["words"].append(cols[1])
            s["upos"].append(cols[3])
            s["heads"].append(int(cols[6]))
            s["deprels"].append(cols[7].split(":")[0])
        if s["words"]:
            sents.append(s)
    return sents


# --------------------------------------------------------------------------- training

#: stanza's trainers log ``Finished STEP 40/500, loss = ... (0.213 sec/batch), lr: ...``
STANZA_STEP = re.compile(r"Finished STEP (\d+)/(\d+), .*\(([\d.]+) sec/batch\)")


def time_left(line: str) -> str | None:
    """``step 40/500, about 98 s left`` from a stanza trainer's step line (its own sec/batch
    times the steps to go; evaluation passes come on top), else None."""
    m = STANZA_STEP.search(line)
    if not m:
        return None
    step, total, per_batch = int(m.group(1)), int(m.group(2)), float(m.group(3))
    return f"step {step}/{total}, about {max(0, total - step) * per_batch:.0f} s left"


def _run_trainer(module: str, args: list[str], threads: int) -> None:
    """Run one of stanza's trainers, its output passed through to this job's log with a line
    of the time left every ``LOG_EVERY_S`` (stanza logs steps, not an ETA)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", module, *args]
    log.info("running %s", " ".join(cmd))
    name, last = module.rsplit(".", 1)[-1], time.monotonic()
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as proc:
        for line in proc.stdout:
            sys.stderr.write(line)
            left = time_left(line)
            if left and time.monotonic() - last >= LOG_EVERY_S:
                log.info("stanza %s: %s", name, left)
                last = time.monotonic()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def train_models(lang: str, treebank_dir: Path, tb: Treebank, out_dir: Path, settings: TrainSettings,
                 threads: int = 1) -> dict[str, Any]:
    """Train a UPOS tagger and a parser with stanza's trainers; returns the model descriptor."""
    train, select = prepare_training_files(treebank_dir / tb.file("dev"), out_dir / "data",
                                           settings.select_fraction)
    s = settings
    common = ["--train_file", str(train), "--eval_file", str(select), "--lang", lang,
              "--shorthand", tb.prefix, "--no_pretrain", "--no_char", "--save_dir", str(out_dir),
              "--hidden_dim", str(s.hidden_dim), "--deep_biaff_hidden_dim", str(s.deep_biaff_hidden_dim),
              "--word_emb_dim", str(s.word_emb_dim), "--tag_emb_dim", str(s.tag_emb_dim),
              "--transformed_dim", str(s.transformed_dim), "--seed", str(s.seed)]
    t0 = time.time()
    _run_trainer("stanza.models.tagger", common + [
        "--save_name", "tagger.pt", "--max_steps", str(s.tagger_steps),
        "--eval_interval", str(max(1, s.tagger_steps // 2)), "--fix_eval_interval"], threads)
    t1 = time.time()
    _run_trainer("stanza.models.parser", common + [
        "--save_name", "parser.pt", "--max_steps", str(s.parser_steps), "--no_xpos", "--no_ufeats",
        "--num_layers", str(s.parser_layers), "--batch_size", str(s.parser_batch_size),
        "--eval_interval", str(max(1, s.parser_steps // 2)),
        "--no_checkpoint"], threads)
    t2 = time.time()
    # An empty resources.json lets stanza.Pipeline load explicit model paths offline.
    (out_dir / "resources.json").write_text("{}\n")
    desc = _descriptor(lang, "trained", dir=str(out_dir), allow_unknown_language=True,
                       pos_model_path=str(out_dir / "tagger.pt"),
                       depparse_model_path=str(out_dir / "parser.pt"))
    desc["training"] = {"treebank": asdict(tb), "treebank_dir": str(treebank_dir),
                        "settings": asdict(settings), "tagger_seconds": round(t1 - t0, 1),
                        "parser_seconds": round(t2 - t1, 1)}
    return desc


def evaluate(descriptor: dict[str, Any], gold_path: Path, threads: int = 1) -> dict[str, Any]:
    """UPOS accuracy, UAS and LAS (universal relation, CoNLL 2018 style) on gold words."""
    gold = read_gold(gold_path)
    nlp = load_pipeline(descriptor, threads=threads)
    t0 = time.time()
    doc = nlp([g["words"] for g in gold])
    seconds = time.time() - t0
    n = upos = uas = las = 0
    for g, sent in zip(gold, doc.sentences):
        for i, w in enumerate(sent.words):
            n += 1
            upos += w.upos == g["upos"][i]
            if w.head == g["heads"][i]:
                uas += 1
                las += w.deprel.split(":")[0] == g["deprels"][i]
    return {"file": str(gold_path), "sentences": len(gold), "words": n,
            "upos": round(100 * upos / n, 2), "uas": round(100 * uas / n, 2),
            "las": round(100 * las / n, 2), "sentences_per_s": round(len(gold) / seconds, 1)}


# --------------------------------------------------------------------------- resolution

def missing_model_message(lang: str, cfg: StanzaConfig, shared_dir: Path, tried: list[str]) -> str:
    tb = cfg.treebanks.get(lang)
    where = (f"{shared_dir / 'ud' / tb.name}/{tb.file('dev')} (+ {tb.file('test')})" if tb
             else f"a treebank entry stanza.treebanks.{lang}")
    return (
        f"No stanza model for language '{lang}' and no way to get one (tried: {'; '.join(tried)}).\n"
        "Provide one of:\n"
        f"  1. stanza.model_dir: a directory with stanza models for '{lang}' (the layout "
        "stanza.download writes: resources.json, <lang>/pos, <lang>/depparse), or put them in "
        "stanza's resources directory ($STANZA_RESOURCES_DIR, default ~/stanza_resources);\n"
        "  2. network access to stanza's model server (stanza.download: true, or a mirror via "
        "stanza.resources_url / stanza.model_url);\n"
        f"  3. a UD treebank to train on (stanza.train: true): {where}, via shared_dir or env "
        f"DOCMT_SHARED, or network access to {cfg.ud_url}."
    )


def provide(lang: str, cfg: StanzaConfig, shared_dir: Path, resources_dir: Path,
            threads: int = 1) -> dict[str, Any]:
    """The model descriptor for ``lang`` (see the module docstring for the order)."""
    tried: list[str] = []
    if cfg.model_dir:
        d = Path(cfg.model_dir)
        if _has_language(d, lang):
            return _installed(d, lang, cfg.package, "configured")
        tried.append(f"stanza.model_dir {d}: no {lang} pos+depparse models")
    home = stanza_resources_dir()
    if _has_language(home, lang):
        return _installed(home, lang, cfg.package, "stanza_resources")
    tried.append(f"stanza resources {home}: no {lang} pos+depparse models")
    trained_dir = resources_dir / "trained" / lang
    kept = trained_dir / STANZA_MODEL_FILE
    tb = cfg.treebanks.get(lang)
    if kept.is_file():
        desc = json.loads(kept.read_text())
        same = (tb is not None and desc["training"]["treebank"] == asdict(tb)
                and desc["training"]["settings"] == asdict(cfg.training))
        files = all(Path(desc["pipeline"][k]).is_file() for k in ("pos_model_path", "depparse_model_path"))
        if same and files:
            desc["reused"] = True
            return desc
        log.info("kept models in %s were trained with other settings or are incomplete: retraining",
                 trained_dir)
    downloaded = resources_dir / "downloaded"
    if _has_language(downloaded, lang):
        return {**_installed(downloaded, lang, cfg.package, "downloaded"), "reused": True}
    if cfg.download:
        try:
            return download(lang, cfg.package, downloaded, cfg.resources_url, cfg.model_url)
        except Exception as e:  # stanza raises requests/OSError/ValueError subclasses alike
            log.warning("stanza.download(%s) failed: %s", lang, e)
            tried.append(f"stanza.download: {type(e).__name__}: {e}")
    else:
        tried.append("stanza.download disabled")
    if cfg.train and tb is not None:
        try:
            tb_dir = fetch_treebank(tb, shared_dir, resources_dir.parent / "ud", cfg.ud_url)
        except (OSError, DownloadError) as e:
            tried.append(f"UD treebank {tb.name}: {e}")
        else:
            desc = train_models(lang, tb_dir, tb, trained_dir, cfg.training, threads)
            desc["evaluation"] = evaluate(desc, tb_dir / tb.file("test"), threads)
            write_text(kept, json.dumps(desc, indent=2) + "\n")
            return desc
    else:
        tried.append("training disabled" if not cfg.train else f"no stanza.treebanks.{lang}")
    raise MissingModelError(missing_model_message(lang, cfg, shared_dir, tried))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lang", required=True)
    ap.add_argument("--spec", default="{}", type=json_value, help="the `stanza` config section as JSON")
    ap.add_argument("--shared-dir", default="", help="folder with ud/<treebank>/ ('' = env "
                    "DOCMT_SHARED, else the repository's third_party/)")
    ap.add_argument("--resources-dir", type=Path, required=True, help="e.g. resources/stanza")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg = StanzaConfig.from_dict(args.spec)
    manifest = Manifest(stage="stanza_models", params={"lang": args.lang, **args.spec})
    try:
        desc = provide(args.lang, cfg, shared_dir(args.shared_dir), args.resources_dir,
                       args.threads)
    except MissingModelError as e:
        log.error("%s", e)
        return 2
    for key in ("pos_model_path", "depparse_model_path"):
        if key in desc["pipeline"]:
            manifest.add_input(desc["pipeline"][key])
    if "training" in desc:
        manifest.add_input(desc["training"]["treebank_dir"])
    manifest.extra = {"source": desc["source"], "reused": desc.get("reused", False),
                      "evaluation": desc.get("evaluation"), "training": desc.get("training")}
    write_text(args.out_dir / STANZA_MODEL_FILE, json.dumps(desc, indent=2) + "\n")
    manifest.write(args.out_dir / MANIFEST_FILE)
    log.info("%s: stanza models from %s%s %s", args.lang, desc["source"],
             " (reused)" if desc.get("reused") else "", desc.get("evaluation") or "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What bench/gpu_check.sh needs on a bare GPU machine, built where snakemake and jsonschema are
installed: the shards, the BPE model and the test references of a finished run copied into the
GPU profile's results folder, and one JSON of resolved job configs and command lines.

    .venv/bin/python bench/gpu_prepare.py [--from results/converged] [--smoke]

WHY a separate step: a GPU machine lent for minutes has torch, sentencepiece, pyarrow, pandas,
sacrebleu, tqdm and tensorboard but not snakemake, jsonschema or stanza, so nothing there may
call ``load_config`` or ``Plan``. Everything they decide (each job's model and train config,
its shard folders, the decode and score flags) is resolved here from the same config files
``make reproduce-gpu`` reads (config/config.yaml, converged.yaml, gpu.yaml) and written to
``<results>/gpu_check.json``; the paths in it are the plan's own, relative to the checkout, so
the copy of the checkout on the GPU machine (with ``--carry`` of the results folder) runs them
as they are.

The JSON has:
- ``modes``: one training job per data mode for bench/trainer_efficiency.py (sentence:
  transformer, heads: dbsa, context: doct, stream: cache, document: crosstask's parallel
  documents, restore: crosstask_pretrain's restoration; the last two with aux_ratio 1, so every
  update reads that stream), each from scratch (no init_from) with the GPU profile's sizes;
- ``slice``: the converged slice as stages of commands (the commands of a stage run side by
  side): the baseline to its plateau, DocT to its own, its matched control and its
  random-context twin to DocT's updates (DocT, control and twin once per seed of the profile,
  from the one baseline), decoding the test set (DocT also with random and empty
  context), scoring with the paired bootstrap. The caps (``SLICE``) fit the slice into bench/
  gpu_check.sh's 9 minutes on one H100 only if the trainer runs near its update's speed; a job
  that hits its cap is named in the verdict.

``--smoke`` (CI, on CPU): the same file for tiny models and a few updates on CPU, so that the
commands are run for real by tests/integration/test_bench_smoke.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_lib.plan import Plan  # noqa: E402
from pipeline_lib.run_config import load_config  # noqa: E402

PROFILE = ["config/config.yaml", "config/converged.yaml", "config/gpu.yaml"]
#: data mode -> the job of the GPU profile that trains in it, and its aux_ratio in the bench
MODE_JOBS = {"sentence": ("transformer", None), "heads": ("dbsa", None),
             "context": ("doct", None), "stream": ("cache", None),
             "document": ("crosstask", 1.0), "restore": ("crosstask_pretrain", 1.0)}
#: the converged slice: the baseline and DocT (its control comes with it), capped for 9 minutes
SLICE = {"models": ["transformer", "doct"],
         "model_settings": {"transformer": {"train": {"max_steps": 2500}}},
         "fine_tune": {"train": {"max_steps": 1000}}}
SMOKE = {"model_sizes": {"base": {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1,
                                  "dec_layers": 1}},
         "train": {"device": "cpu", "max_tokens": 512, "num_workers": 0, "validate_every": 2,
                   "save_every": 2, "log_every": 1, "warmup": 2, "patience": 1,
                   "dev_bleu": False},
         "model_settings": {"transformer": {"train": {"max_steps": 4}}},
         "fine_tune": {"train": {"max_steps": 2, "validate_every": 1, "save_every": 1}},
         "decode": {"beam": 2, "batch_size": 8, "max_len_b": 3},
         # the twin and the ablated decodes run on the GPU (tests/integration/test_pipeline_e2e.py
         # runs them on CPU); on 2 shared CPU cores six decodes side by side outran the budget
         "score": {"bootstrap_samples": 10, "context_ablation": False, "context_twins": False},
         # one seed: the profile's three would triple the smoke's fine-tunes; the verdict over
         # seeds is tested on its scores (tests/unit/test_gpu_check_verdict.py)
         "seeds": None}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def mode_jobs(plan: Plan) -> dict[str, dict]:
    """Data mode -> the job's model and train config (from scratch) and its shard folders."""
    out = {}
    for mode, (job, aux_ratio) in MODE_JOBS.items():
        j = plan.jobs[job]
        train = {**j.train, "init_from": None}
        if aux_ratio is not None:
            train["aux_ratio"] = aux_ratio
        out[mode] = {"job": job, "model": j.model, "train": train,
                     "shards": plan.train_shards(job),
                     "dev_shards": plan.train_shards(job, "dev", dev=True),
                     "aux_shards": plan.aux_shards(job)}
    return out


def slice_stages(plan: Plan, python: str = "python") -> list[list[list[str]]]:
    """The converged slice as stages of argv lists, each mirroring its rule's shell command
    (workflow/rules/train.smk, decode.smk, score.smk; the decode and score flags from the
    plan, as the rules take them): train the baseline; then DocT; then its matched control and
    its random-context twin, which train DocT's updates (the rule's ``--budget-of``); decode
    every system's test sets side by side (DocT also with random and empty context); score."""
    spm = plan.results.train_bpe().model

    def train(job: str) -> list[str]:
        aux = plan.aux_shards(job)
        return [python, "-m", "pipeline_lib.training.train",
                "--config-json", plan.jobs[job].config_json(),
                "--shards", plan.train_shards(job),
                "--dev-shards", plan.train_shards(job, "dev", dev=True),
                "--spm", spm, "--out-dir", plan.results.train_dir(job),
                *(["--aux-shards", aux] if aux else []), *plan.budget_flag(job).split()]

    decode = [[python, "-m", "pipeline_lib.evaluate.decode",
               "--checkpoint", plan.checkpoint(plan.systems[m][0]),
               "--shards", plan.decode_shards(m, c, s), "--spm", spm,
               "--output", hyps, "--manifest", plan.results.decode_test(m, c, s).manifest,
               "--options", plan.options("decode_test", model=m)]
              for m, c, s, hyps in plan.hypotheses()]
    score = [python, "-m", "pipeline_lib.evaluate.score",
             *[a for c in plan.test_corpora for a in ("--refs", c, plan.results.ingest_corpus(c).docs)],
             *[a for m, c, s, p in plan.hypotheses() for a in ("--hyp", m, c, s, p)],
             "--options", plan.options("score_test"), "--output", plan.results.score_test().scores]
    baseline = plan.models[0]
    rest = [j for j in plan.jobs if j != baseline]
    # a matched control reads its model's manifest (its updates): a stage after the models
    models = [train(j) for j in rest if not plan.jobs[j].budget_of]
    controls = [train(j) for j in rest if plan.jobs[j].budget_of]
    return [[train(baseline)], models, controls, decode, [score]]


def copy_inputs(plan: Plan, source: Path) -> list[str]:
    """The shard folders, BPE model and test references of a finished run under ``source``
    (its results folder), copied to the same places under the plan's results folder."""
    here = Path(plan.results.root)
    wanted = [Path(plan.results.make_shards(c)) for c in plan.config["corpora"]]
    wanted += [Path(plan.results.make_head_shards(c)) for c in plan.config["corpora"]]
    wanted += [Path(plan.results.train_bpe().model)]
    wanted += [Path(plan.results.ingest_corpus(c).docs) for c in plan.test_corpora]
    copied = []
    for dest in wanted:
        src = source / dest.relative_to(here)
        if not src.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)
        copied.append(str(dest))
    return copied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="source", type=Path, default=Path("results/converged"),
                    help="results folder of a run that has made its shards (and head shards)")
    ap.add_argument("--results", help="results folder to prepare (default: the GPU profile's, "
                    "results/gpu; with --smoke results/gpu-smoke)")
    ap.add_argument("--smoke", action="store_true", help="tiny models on CPU, a few updates")
    a = ap.parse_args()
    # a smoke run writes beside the real one, never into the folder its verdict is read from
    over = {"results_dir": a.results or ("results/gpu-smoke" if a.smoke else None)}
    over = {k: v for k, v in over.items() if v}
    extra = SMOKE if a.smoke else {}
    # the modes' jobs and the inputs by their single-seed names (seeds do not change them)
    full = Plan(load_config(*(ROOT / f for f in PROFILE),
                            overrides=_merge(_merge(extra, over), {"seeds": None})))
    part = Plan(load_config(*(ROOT / f for f in PROFILE),
                            overrides=_merge(_merge(SLICE, extra), over)))
    copied = copy_inputs(full, a.source)
    out = Path(full.results.root) / "gpu_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    missing = [m for m, spec in mode_jobs(full).items() if not Path(spec["shards"]).is_dir()]
    out.write_text(json.dumps({"spm": full.results.train_bpe().model, "modes": mode_jobs(full),
                               "slice": slice_stages(part), "missing_modes": missing,
                               "smoke": a.smoke}, indent=1))
    print(f"copied {len(copied)} inputs from {a.source}; modes without shards: {missing or 'none'}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# One command for a GPU at hand (issue 29): trainer / update per data mode, the converged slice
# (baseline, DocT and its matched control to their plateaus, test BLEU, verdict) and decoding
# speed, within 9 minutes on one H100, written to $OUT/gpu_check.md with the logs in
# $OUT/gpu_check_logs.tgz. Record the result in bench/RESULTS.md with the card and the commit.
#
# Before, on a machine with the project's venv (snakemake, jsonschema), from a run that has
# made its shards (e.g. `make reproduce-converged` or the default run, with make_head_shards):
#   .venv/bin/python bench/gpu_prepare.py --from results/converged
# which fills results/gpu/ (shards, BPE model, test references, gpu_check.json, ~25 MB). Then,
# on the GPU machine, in the checkout with results/gpu carried over:
#   bash bench/gpu_check.sh [OUT] [--smoke]
# It needs only torch (CUDA), sentencepiece, pyarrow, pandas, sacrebleu, tqdm, tensorboard.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-gpu_check_out}}
shift || true
PY=${PYTHON:-python3}
"$PY" bench/gpu_check.py --jobs results/gpu/gpu_check.json --out "$OUT" --budget "${BUDGET:-540}" "$@"
tar czf "$OUT/gpu_check_logs.tgz" -C "$OUT" logs

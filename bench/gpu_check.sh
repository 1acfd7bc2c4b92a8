#!/usr/bin/env bash
# One command for a GPU at hand (issue 29): trainer / update per data mode, the converged slice
# (baseline, DocT, then its matched control on DocT's updates, test BLEU, verdict) and decoding
# speed, within 9 minutes on one H100, written to $OUT/gpu_check.md with the logs in
# $OUT/gpu_check_logs.tgz (always, whatever failed). Record the result in bench/RESULTS.md with
# the card and the commit.
#
# Before, on a machine with the project's venv (snakemake, jsonschema), from a run that has
# made its shards (e.g. `make reproduce-converged` or the default run, with make_head_shards):
#   .venv/bin/python bench/gpu_prepare.py --from results/converged
# which fills results/gpu/ (shards, BPE model, test references, gpu_check.json, ~25 MB). Then,
# on the GPU machine, in the checkout with results/gpu carried over:
#   bash bench/gpu_check.sh [OUT] [--smoke]
# (--smoke: tiny and on CPU, from `bench/gpu_prepare.py --smoke`'s results/gpu-smoke/).
# It needs only torch (CUDA), sentencepiece, pyarrow, pandas, sacrebleu, tqdm, tensorboard:
# no snakemake, jsonschema, stanza, nltk, defusedxml, sacremoses, jieba or fugashi, and no git
# (tests/integration/test_gpu_check_bare.py runs it so).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
if [[ $# -gt 0 && $1 != -* ]]; then
    OUT=$1
    shift
fi
PY=${PYTHON:-python3}
mkdir -p "$OUT/logs"
# the logs' names hold spaces and commas: they come back in one archive, whatever failed
trap 'tar czf "$OUT/gpu_check_logs.tgz" -C "$OUT" logs' EXIT
"$PY" bench/gpu_check.py --out "$OUT" --budget "${BUDGET:-540}" "$@"

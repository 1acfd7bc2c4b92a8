"""Every bench script still runs (issue 29): ``python bench/<script> --smoke`` on CPU, the
smallest real run of the code path it measures (one or two updates, batches or iterations), on
the tiny run's outputs (tests/conftest.py: tiny_pipeline) where it reads the default run's.

A signature change in pipeline_lib then fails here, not in the next measurement. Each case checks
the exit status and the script's figure line (the one its docstring names as the comparable
figure). A new bench script without a case in SMOKE fails test_every_bench_file_has_a_smoke_case.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_lib.layout import CKPT_BEST
from pipeline_lib.models.registry import MODELS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
FILES = sorted(p.name for p in BENCH.glob("*.py"))
TIMEOUT = 900   # seconds per script: a few seconds each on an idle core; gpu_check.py up to its 540 s budget

# bench files with no command line of their own -> (the script whose smoke case runs them, the
# flag of that case that does)
LIBRARIES = {"torch_reference.py": ("train_throughput.py", "--reference")}

NUM = r"\d[\d,]*(?:\.\d+)?"
# the tiny config's model sizes and settings (1+1 layers, d_model 32)
TINY_CONFIG = ["--config", "{root}/config/config.yaml", "{run}/config.yaml"]
# script -> (arguments after --smoke, the figure line). In arguments, {run} is the tiny run's
# folder, {results} its results folder, {tmp} a fresh folder of the case, {root} the checkout,
# the other names the tiny run's files (the places fixture) and {gpu_check} the gpu_check
# fixture's job file.
SMOKE: dict[str, tuple[list[str], str]] = {
    "batch_shapes.py": (
        ["--shards", "{shards}/sent/train"],
        rf"^batch_shapes: \d+ shapes in epoch 1 with rows cut to 8 \(\d+ with rows by budget\) "
        r"at 512 tokens$"),
    "dag_build.py": (
        # the finished tiny run (test_reruns.py may have left a job to redo: any count)
        ["--directory", "{run}", "--configfile", "{root}/config/config.yaml", "{run}/config.yaml"],
        rf"^dag_build: {NUM} s to plan \d+ jobs \(median of 1\)$"),
    "decode_throughput.py": (
        ["--checkpoint", "{checkpoint}", "--shards", "{shards}/sent/dev"],
        rf"^beam4_bs64_sentences_per_s={NUM}$"),
    "gpu_check.py": (
        # every part at tiny size on CPU: trainer / update per mode, the converged slice to its
        # verdict, decoding speed; exit 1 when a command failed
        ["--jobs", "{gpu_check}", "--out", "{tmp}"],
        r"^Verdict: doct against its matched control \S+: not decided: one seed .*\n(?:.*\n)*"
        rf"Total: {NUM} s of a {NUM} s budget\.$"),
    "gpu_prepare.py": (
        ["--from", "{results}", "--results", "{tmp}/results"],
        r"^wrote \S+/gpu_check\.json$"),
    "hygiene_throughput.py": (
        ["--docs", "{docs}", "--work", "{tmp}"],
        rf"^hygiene_throughput: {NUM} pairs/s per core at {NUM} pairs \(langid on\); peak RSS "
        rf"{NUM} MiB \({NUM}x the {NUM}-pair run\)$"),
    "ingest_bible.py": (
        ["--sword-dir", "{run}/resources/sword"],
        rf"^read_module\(spaRV1909eb\): {NUM} verses cleaned in {NUM} s$"),
    "langid_bible.py": (
        ["--docs", "{docs}"],
        rf"^langid_bible: {NUM} of 200 pairs \({NUM}%\) wrongly removed"),
    "loader_memory.py": (
        ["--work", "{tmp}"],
        rf"^peak RSS ratio {NUM} vs {NUM} pairs: {NUM}$"),
    "loader_throughput.py": (
        ["--work", "{tmp}"],
        rf"^sentence loader: {NUM} target tokens/s with \d+ workers$"),
    "model_overhead.py": (
        [*TINY_CONFIG, "--work", "{tmp}"],
        # the table of ratios, a row for every registered model but the baseline
        r"^ratios model / transformer \(tiny, cpu\): train frozen \| train all \| decode\n"
        rf"(?:\S+ +(?:{NUM}|-)(?: \| (?:{NUM}|-)){{2}}(?:\n|$)){{{len(MODELS) - 1}}}"),
    "parse_throughput.py": (
        ["--model", "{stanza_es}", "--docs", "{docs}"],
        rf"^{NUM}\Z"),   # the last line: sentences/s alone
    "pretokenize_throughput.py": (
        ["--docs", "{docs}"],
        rf"^pretokenize_throughput: {NUM} sentences/s per core \(moses es\), {NUM} \(moses \+ "
        r"truecase en\) at 200 sentences$"),
    "preprocess_throughput.py": (
        ["--docs", "{docs}", "--work", "{tmp}"],
        rf"^preprocess_throughput: {NUM} sentences/s per core at 400 sentences; peak RSS "
        rf"{NUM} MiB \({NUM}x the 200-sentence run\)$"),
    "train_throughput.py": (
        [*TINY_CONFIG, "--reference"],
        rf"^ours/reference: {NUM}$"),
    "score_throughput.py": (
        # the finished tiny run's hypotheses, scored with 1 and 2 processes (identical scores)
        ["--directory", "{run}", "--configfile", "{root}/config/config.yaml", "{run}/config.yaml"],
        rf"^score_throughput: \d+ hypothesis files scored in {NUM} s with 1 process, {NUM} s "
        r"with 2$"),
    "trainer_efficiency.py": (
        # every data mode's job, on the tiny run's shards as bench/gpu_prepare.py --smoke lays
        # them out
        # two epochs of each, in the jobs' own batches (cache: 4 x 4,096 tokens an update)
        ["--jobs", "{gpu_check}", "--modes", "all", "--threads", "1", "--epochs", "2"],
        rf"^mode=stream: median target tokens/s trainer {NUM}  update {NUM}  trainer/update "
        rf"{NUM}  epoch 1 (?:{NUM}|-)  later {NUM}\n(?:.*\n)*"
        rf"trainer/update: {NUM} \(lowest, mode \w+; .+\)$"),
}


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(BENCH / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def gpu_check(places, tmp_path_factory) -> str:
    """bench/gpu_prepare.py --smoke's job file, on a copy of the tiny run's shards."""
    out = tmp_path_factory.mktemp("gpu_prepare") / "results"
    proc = run_bench("gpu_prepare.py", "--smoke", "--from", places["results"],
                     "--results", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return str(out / "gpu_check.json")


@pytest.fixture(scope="module")
def places(tiny_pipeline) -> dict[str, str]:
    """The tiny run's files the cases read, named by pipeline_lib.results as the rules do."""
    from pipeline_lib.plan import Plan
    from pipeline_lib.run_config import load_config

    results = Plan(load_config(ROOT / "config" / "config.yaml",
                               tiny_pipeline / "config.yaml")).results
    run = lambda p: str(tiny_pipeline / p)   # noqa: E731
    return {"root": str(ROOT), "run": str(tiny_pipeline), "results": run(results.root),
            "docs": run(results.ingest_corpus("bible").docs),
            "stanza_es": run(results.stanza_models("es").model),
            "shards": run(results.make_shards("bible")),
            "checkpoint": run(results.checkpoint("transformer", CKPT_BEST))}


def test_every_bench_file_has_a_smoke_case():
    missing = set(FILES) - set(SMOKE) - set(LIBRARIES)
    assert not missing, f"bench files without a smoke case (add them to SMOKE): {sorted(missing)}"
    assert set(SMOKE) | set(LIBRARIES) <= set(FILES), "cases for bench files that are gone"
    assert not set(SMOKE) & set(LIBRARIES)
    for name in SMOKE:
        assert 'if __name__ == "__main__":' in (BENCH / name).read_text(), name
    for name, (script, flag) in LIBRARIES.items():
        # a bench file with a command line is a script and needs its own case
        assert '__name__ == "__main__"' not in (BENCH / name).read_text(), name
        assert f"from {Path(name).stem} import" in (BENCH / script).read_text(), name
        assert flag in SMOKE[script][0], name


@pytest.mark.parametrize("script", [f for f in FILES if f not in LIBRARIES])
def test_bench_script_smoke(script, places, tmp_path, request):
    assert script in SMOKE, f"bench/{script} has no smoke case: add it to SMOKE"
    extra, figure = SMOKE[script]
    more = {"gpu_check": request.getfixturevalue("gpu_check")} if "{gpu_check}" in extra else {}
    proc = run_bench(script, "--smoke", *(a.format(**places, **more, tmp=tmp_path) for a in extra))
    out = proc.stdout.rstrip()
    assert proc.returncode == 0, f"{out[-3000:]}\n{proc.stderr[-5000:]}"
    assert re.search(figure, out, re.M), f"no figure line {figure!r} in:\n{out[-3000:]}"

"""README's `--config` commands run as written (`snakemake -n`): nested values are typed by
YAML 1.2 (Snakemake alone passes `seeds='[1, 2, 3]'` on as strings, which the schema refuses),
`--config train=...` reaches a preset's jobs, a preset writes under results/<preset>, and a
refused config ends with its message, not a Python stack."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_snakemake
from preset_fixtures import fixture_overrides, stage, write_config

ROOT = Path(__file__).resolve().parents[2]
PRESET = "jiang2019_es-en_ted"


def _train_configs(out: str) -> dict[str, dict]:
    """Each planned training job's ``--config-json`` (``snakemake -n -p``), by job."""
    found = re.findall(r"ln -sfn (\S+)\.attempts\.log .*?--config-json '([^']*)'", out)
    assert found and len(found) == out.count("rule train_model:"), out[-3000:]
    return {job: json.loads(config) for job, config in found}


def _dry_run(work: Path, *config: str) -> str:
    (work / "config.yaml").write_text("{}\n")
    proc = run_snakemake(work, "-n", "-p", "--config", *config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_nested_seeds_are_integers(tmp_path):
    configs = _dry_run(tmp_path, "seeds=[1, 2, 3]")
    jobs = _train_configs(configs)
    assert {c["train"]["seed"] for c in jobs.values()} == {1, 2, 3}
    assert {"transformer", "doct_seed1", "doct_seed2", "doct_seed3"} <= set(jobs)
    assert jobs["transformer"]["train"]["seed"] == 1     # one baseline for every seed


def test_nested_train_values_are_integers_and_reach_every_job(tmp_path):
    jobs = _train_configs(_dry_run(tmp_path, "train={max_steps: 10, lr: 5.0e-4}"))
    # every job 10 updates, but the control of cross-task's pre-training: half its updates
    assert {name: c["train"]["max_steps"] for name, c in jobs.items()} == \
        {name: 5 if name == "transformer_scratch5" else 10 for name in jobs}
    assert {c["train"]["lr"] for c in jobs.values()} == {5.0e-4}


def test_a_preset_takes_command_line_train_and_writes_under_its_own_folder(tmp_path):
    stage(PRESET, tmp_path, downloads=False)
    write_config(tmp_path, fixture_overrides(PRESET))
    # these entries continue run_snakemake's `--config preset=<name>` (a second --config
    # would replace it)
    proc = run_snakemake(tmp_path, "train={max_steps: 10}", "-n", "-p", preset=PRESET)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    jobs = _train_configs(out)
    assert set(jobs) == {"transformer", "camn", "transformer_scratch_matched_camn"}
    assert {c["train"]["max_steps"] for c in jobs.values()} == {10}
    outputs = [path for line in re.findall(r"^\s+output: (.+)$", out, re.M)
               for path in line.split(", ")]
    assert len(outputs) > 20 and f"results/{PRESET}/train_model/camn/manifest.json" in outputs
    # every output but the downloads (resources/, shared by every run)
    assert all(o.startswith((f"results/{PRESET}/", "resources/")) for o in outputs), outputs


@pytest.mark.parametrize("given, message", [
    (["train={max_steps: 10, max_steps: 3}"],
     "--config train: duplicate key 'max_steps' at character 17 (first given at character 2); "
     "YAML would keep only the last value: remove one"),
    ("file", "config.yaml:2: duplicate key 'src_lang' (first given at line 1)"),
    (["src_lang=en"], "src_lang and tgt_lang are both 'en'"),
], ids=["config", "configfile", "same_language"])
def test_a_refused_config_is_one_line_without_a_python_stack(tmp_path, given, message):
    (tmp_path / "config.yaml").write_text("{}\n")
    if given == "file":
        (tmp_path / "config.yaml").write_text("src_lang: es\nsrc_lang: en\n")
        args = ["-n"]
    else:
        args = ["-n", "--config", *given]
    proc = run_snakemake(tmp_path, *args)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    lines = [line for line in err.splitlines() if line.strip()]
    [at] = [i for i, line in enumerate(lines) if message in line]
    assert lines[at - 1].startswith("WorkflowError in file ") and "Snakefile" in lines[at - 1]
    assert "Traceback" not in err
    # Snakemake names the Snakefile's line; no frame of pipeline_lib or yaml follows
    frames = [line for line in lines if line.lstrip().startswith('File "')]
    assert all(f'"{ROOT / "Snakefile"}"' in f for f in frames), frames
    assert len(frames) <= 1 and lines[at + 1:] == frames, lines[at:]

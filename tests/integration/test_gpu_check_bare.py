"""bench/gpu_check.sh as a lent GPU machine runs it (issue 33 item 5): only torch, pyarrow,
pandas, sentencepiece, sacrebleu, tqdm and tensorboard importable (snakemake, jsonschema,
stanza, nltk, defusedxml and the tokenizers sacremoses, jieba and fugashi blocked by an import
hook in every process it starts), no git on
PATH, and a training job stopped by the time budget. Every file must come back: the report and
the archive of the logs, with the budget stop recorded as a finished run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = ("snakemake", "jsonschema", "stanza", "nltk", "defusedxml", "sacremoses", "jieba",
           "fugashi")
HOOK = f'''
import sys

class _Missing:
    """The lent machine's Python: these packages are not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: a bare GPU machine)")
        return None

sys.meta_path.insert(0, _Missing())
'''


def _bare_path(folder: Path) -> str:
    """A PATH with every program of /usr/bin and /bin but git."""
    folder.mkdir()
    for d in ("/usr/bin", "/bin"):
        for prog in Path(d).iterdir():
            if prog.name != "git" and not (folder / prog.name).exists():
                (folder / prog.name).symlink_to(prog)
    return str(folder)


@pytest.mark.slow
def test_gpu_check_runs_on_a_bare_machine_and_brings_every_file_back(tiny_pipeline, tmp_path):
    jobs = tmp_path / "results" / "gpu_check.json"
    prepared = subprocess.run([sys.executable, "bench/gpu_prepare.py", "--smoke", "--from",
                               str(tiny_pipeline / "results"), "--results", str(jobs.parent)],
                              cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    spec = json.loads(jobs.read_text())
    # the baseline could train far longer than the budget allows: its time rule stops it
    baseline = spec["slice"][0][0]
    i = baseline.index("--config-json") + 1
    cfg = json.loads(baseline[i])
    cfg["train"].update(max_steps=1_000_000, patience=0)
    baseline[i] = json.dumps(cfg)
    jobs.write_text(json.dumps(spec))
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    env = {**os.environ, "PYTHONPATH": str(hook), "PYTHON": sys.executable,
           "PATH": _bare_path(tmp_path / "bin"), "BUDGET": "110"}
    probe = subprocess.run([sys.executable, "-c", "import nltk"], env=env, capture_output=True,
                           text=True)
    assert probe.returncode != 0 and "blocked" in probe.stderr      # the hook holds
    assert subprocess.run(["bash", "-c", "command -v git"], env=env).returncode != 0
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), str(out), "--smoke",
                           "--jobs", str(jobs)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    report = (out / "gpu_check.md").read_text()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + report
    assert "commit: unknown (no git here" in report
    stops = {r.split("|")[1].strip(): r.split("|")[2].strip()
             for r in report.splitlines() if r.startswith("| transformer")}
    assert stops["transformer"] == "max_seconds", report
    assert "Verdict: doct against its matched control" in report
    with tarfile.open(out / "gpu_check_logs.tgz") as tar:
        names = tar.getnames()
    assert any(n.endswith("train baseline 0.log") for n in names), names
    assert any(n.endswith("score 0.log") for n in names), names
    scores = json.loads(Path(spec["slice"][-1][0][spec["slice"][-1][0].index("--output") + 1])
                        .read_text())
    assert scores["meteor"]["note"].startswith("not computed: nltk is not installed")

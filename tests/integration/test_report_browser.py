"""The report in a real headless browser: it renders, its tables and image are there, every link
resolves; and the Snakemake rules build it (and ``snakemake --report``) from stage outputs.

Chromium comes from Debian (`apt-get install -y --no-install-recommends chromium`); the test installs it when it is
missing and it runs as root, and skips (saying why) only where that is impossible.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

# shared stage outputs, written by the stages' own writers
from test_report import build_results, run_report, write_benchmark

from pipeline_lib.plan import Plan  # noqa: E402
from pipeline_lib.run_config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


def chromium() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed and cannot be installed here "
                    "(needs root and apt-get: apt-get install -y --no-install-recommends chromium)")
    proc = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium"], capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0 or not Path(CHROMIUM).exists():
        pytest.skip(f"apt-get install -y --no-install-recommends chromium failed: {proc.stderr[-500:]}")
    return CHROMIUM


def headless(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp / 'chromium-profile'}", *extra,
         page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.links += [v for k, v in attrs if k in ("href", "src") and v]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path):
    out = run_report(build_results(tmp_path, ["transformer", "han"], parents={"han": "transformer"},
                                   controls={"han": "transformer_plus100"}))
    page = out / "index.html"
    shot = tmp_path / "screenshot.png"
    proc = headless(page, tmp_path, "--window-size=1400,1800", f"--screenshot={shot}")
    assert shot.exists(), proc.stderr[-2000:]
    assert png_size(shot) == (1400, 1800) and shot.stat().st_size > 20_000   # not a blank page
    dom = headless(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    parser = Links()
    parser.feed(dom.stdout)
    # verdict, budgets, run, BLEU, all metrics, discourse, training jobs, models, data funnel,
    # wall times (no seeds table: one seed)
    assert parser.tags.get("table") == 10 and parser.tags.get("img") == 2
    assert "transformer (baseline)" in dom.stdout and "Training jobs" in dom.stdout
    assert parser.links, "the report links nothing (its images at least)"
    for link in parser.links:
        url = urlparse(link)
        if url.scheme in ("http", "https"):
            pytest.fail(f"report links outside itself: {link}")
        if url.fragment and not url.path:   # the contents: a section of the page itself
            assert f'id="{url.fragment}"' in dom.stdout, f"broken link {link}"
            continue
        target = Path(unquote(url.path)) if url.scheme == "file" else out / unquote(url.path)
        assert target.is_file(), f"broken link {link}"
    for image in ("bleu_intervals.png", "training_curves.png"):
        assert png_size(out / image)[0] > 0


@pytest.mark.slow
def test_snakemake_rules_build_the_report_and_the_report_zip(tmp_path):
    """The real rules from the outputs of earlier stages: every file the report rule declares
    is there (benchmarks of the earlier stages' jobs included), score_test, discourse_consistency
    and report run."""
    build_results(tmp_path, ["transformer"])
    for stale in ("score_test", "discourse_consistency"):
        shutil.rmtree(tmp_path / "results" / stale)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # only the baseline was "trained" by build_results: the report's rows follow `models`; it
    # wrote no checkpoint, so no forced decoding for CXMI (which would train the baseline first)
    (tmp_path / "models.yaml").write_text(f"results_dir: {tmp_path / 'results'}\n"
                                          "models: [transformer]\n"
                                          "score: {context_ablation: false}\n")
    allowed = ("score_test", "discourse_consistency", "report")
    plan = Plan(load_config(ROOT / "config" / "config.yaml", tmp_path / "models.yaml"))
    for rule, jobs in plan.rule_jobs().items():   # the earlier jobs' benchmark files
        for wildcards in jobs:
            bench = tmp_path / plan.results.benchmark(rule, **wildcards)
            if rule not in allowed and not bench.exists():
                write_benchmark(bench, 1.0)
    base = [sys.executable, "-m", "snakemake", "--directory", str(tmp_path), "--snakefile",
            str(ROOT / "Snakefile"), "--configfile", str(ROOT / "config" / "config.yaml"),
            str(tmp_path / "models.yaml"), "--allowed-rules", *allowed]
    target = str(tmp_path / "results" / "report" / "index.html")
    proc = subprocess.run([*base, "--cores", "1", "--", target], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = Path(target).read_text()
    assert "bible/test BLEU" in page and "score_test" in page   # its own benchmark was read
    proc = subprocess.run([*base, "--cores", "1", "--report", str(tmp_path / "report.zip"), "--",
                           target],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    for f in ("index.html", "report.md", "bleu_intervals.png", "training_curves.png"):
        assert any(n.endswith(f) for n in names), names

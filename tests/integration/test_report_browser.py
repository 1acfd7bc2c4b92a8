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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_report import build_results, run_report  # noqa: E402  (shared synthetic stage outputs)

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
    models = ["transformer", "han"]
    out = run_report(build_results(tmp_path, models), models)
    page = out / "index.html"
    shot = tmp_path / "screenshot.png"
    proc = headless(page, tmp_path, "--window-size=1400,1800", f"--screenshot={shot}")
    assert shot.exists(), proc.stderr[-2000:]
    assert png_size(shot) == (1400, 1800) and shot.stat().st_size > 20_000   # not a blank page
    dom = headless(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    parser = Links()
    parser.feed(dom.stdout)
    assert parser.tags.get("table") == 4 and parser.tags.get("img") == 1
    assert "transformer (baseline)" in dom.stdout and "Training curves" in dom.stdout
    assert parser.links, "the report links nothing (the curves image at least)"
    for link in parser.links:
        url = urlparse(link)
        if url.scheme in ("http", "https"):
            pytest.fail(f"report links outside itself: {link}")
        target = Path(unquote(url.path)) if url.scheme == "file" else out / unquote(url.path)
        assert target.is_file(), f"broken link {link}"
    assert png_size(out / "training_curves.png")[0] > 0


@pytest.mark.slow
def test_snakemake_rules_build_the_report_and_the_report_zip(tmp_path):
    build_results(tmp_path, ["transformer"])
    for stale in ("score_test", "discourse_consistency"):
        shutil.rmtree(tmp_path / "results" / stale)
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # only the baseline was "trained" by build_results: the report's rows follow `models`
    (tmp_path / "models.yaml").write_text(f"results_dir: {tmp_path / 'results'}\n"
                                          "models: [transformer]\n")
    base = [sys.executable, "-m", "snakemake", "--directory", str(tmp_path), "--snakefile",
            str(ROOT / "Snakefile"), "--configfile", str(ROOT / "config" / "config.yaml"),
            str(tmp_path / "models.yaml"),
            "--allowed-rules", "score_test", "discourse_consistency", "report"]
    target = str(tmp_path / "results" / "report" / "index.html")
    proc = subprocess.run([*base, "--cores", "1", "--", target], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "bible/test BLEU" in Path(target).read_text()
    proc = subprocess.run([*base, "--cores", "1", "--report", str(tmp_path / "report.zip"), "--",
                           target],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = zipfile.ZipFile(tmp_path / "report.zip").namelist()
    for f in ("index.html", "report.md", "training_curves.png"):
        assert any(n.endswith(f) for n in names), names

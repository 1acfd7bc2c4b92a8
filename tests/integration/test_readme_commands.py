"""Every command README and the docs pages show runs as written (issue 27 item 5): a documented
example that fails is a CI failure, not a user's first surprise.

The commands are read from README and the pages it maps (``DOCS``): every line of a ```bash block (``\\`` continuations
joined, comments dropped) and every inline code span that starts like a command
(``snakemake``, ``make``, ``python``, ``.venv/bin/python``, ``bash``, ``pip``, SLURM's
clients) and has an argument. They run in README order in a copy of the finished tiny run
(tests/conftest.py: tiny_pipeline) laid out as a checkout: its ``config/config.yaml`` is the
default config with the tiny run's values merged in, so ``snakemake`` there sees the finished
run it describes; ``Snakefile``, ``workflow/`` and ``profiles/`` link to this checkout and
``bench/`` is a copy (its scripts find ``results/`` beside themselves).

How each kind runs, and why:

* ``make <target>``: ``make -n`` in this checkout (the target exists and expands; running it
  would install and run the whole pipeline, which CI does with ``make test`` already);
* ``snakemake ...``: as written, except that ``-n`` is added where the run would do work here
  (``--forcerun``, a preset's new results folder, the SLURM profile, which would submit); a
  preset command gets its corpora from the release-format fixtures (tests/preset_fixtures.py)
  through one more ``--configfile``, the licensed paths being placeholders;
* ``python -m pipeline_lib...``, ``python -c``, ``printf``: as written (the translation examples
  read the tiny run's models);
* ``.venv/bin/python bench/...``: as written plus ``--smoke`` (each script's smallest real run),
  every optional ``[--flag value]`` included with its first alternative;
* NOT_RUN: commands that cannot run on a CI machine, each with the test that covers it.

Placeholders (``<name>``, ``my.yaml``) take the values in SUBSTITUTE.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from preset_fixtures import fixture_overrides, stage

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
#: README and the pages it maps, in the order the text had them before the pages were split out
#: (commands run in this order: a later one may read what an earlier one wrote)
DOCS = [README, *(ROOT / "docs" / f"{page}.md" for page in (
    "profiles", "pipeline", "inputs", "preprocessing", "models", "training", "evaluation",
    "cluster", "development", "limitations")), ROOT / "config" / "README.md"]


def documented_commands() -> list[tuple[str, str]]:
    """(file:line, command) of every command README and the docs pages show, in DOCS order."""
    return [(f"{path.relative_to(ROOT)}:{line}", cmd) for path in DOCS
            for line, cmd in readme_commands(path.read_text())]
#: how a command starts (a code span starting otherwise is a name, a path or a value)
COMMAND = re.compile(r"^(snakemake|make|python3?|\.venv/bin/python|bash|printf|pip|sbatch|squeue|"
                     r"scontrol)\s+\S")
#: command (regex, searched) -> why it is not run here and what covers it
NOT_RUN = {
    r"^pip install|^python3 -m venv": "installs packages: `make install` runs the supported one",
    r"^(sbatch|squeue|scontrol)\b": "a SLURM client on a cluster: tests/integration/"
                                    "test_slurm_profile.py and test_slurm_training.py drive the "
                                    "SLURM stand-in (tests/shims/fake_slurm.py)",
    r"^python -m pipeline_lib\.ingest\.download get": "fetches from the internet: tests/unit/"
                                                      "ingest/test_download.py runs it against "
                                                      "a server on 127.0.0.1",
    r"^bash bench/gpu_check\.sh": "needs a CUDA device: its Python part runs in "
                                  "test_bench_smoke.py (gpu_check.py --smoke)",
}
#: placeholders in README commands -> what stands for them here
SUBSTITUTE = {"<name>": "jiang2019_es-en_ted", "my.yaml": "my.yaml",
              "--from results/converged": "--from results"}
TIMEOUT = 600


def _strip_comment(line: str) -> str:
    """``line`` without a shell comment (a ``#`` at a word start, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str) -> list[tuple[int, str]]:
    """(line number, command) of every command README shows, in order."""
    out: list[tuple[int, str]] = []
    lines = text.splitlines()
    i, fence = 0, None
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = None if fence else line[3:].strip() or "text"
            i += 1
            continue
        if fence == "bash":
            start, cmd = i + 1, _strip_comment(line)
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1].rstrip() + " " + _strip_comment(lines[i]).strip()
            if cmd.strip():
                out.append((start, cmd.strip()))
        elif fence is None:
            for span in re.findall(r"`([^`\n]+)`", line):
                # `python -m pipeline_lib.translate` alone names a program, it is no command
                if COMMAND.match(span) and not re.fullmatch(r"python3? -m [\w.<>]+", span):
                    out.append((i + 1, span.strip()))
        i += 1
    return out


def _optional(cmd: str) -> str:
    """Every optional ``[--flag a|b]`` of a bench command included, with its first choice."""
    return re.sub(r"\[(--[^\]]+)\]", lambda m: re.sub(r"(\S+)\|\S+", r"\1", m.group(1)), cmd)


def _checkout(tiny: Path, work: Path) -> Path:
    """A copy of the tiny run laid out as a checkout whose default config is the tiny run's."""
    from snakemake.utils import update_config

    shutil.copytree(tiny, work, symlinks=True)
    shutil.copytree(ROOT / "config", work / "config")
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((tiny / "config.yaml").read_text()))
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name in ("Snakefile", "workflow", "profiles", "pipeline_lib"):
        (work / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "bench", work / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(work / "config.yaml", work / "my.yaml")
    for lang, tag, text in (("es", 'srcset setid="IWSLT17.TED.tst2015" srclang="es"',
                             ["En el principio creó Dios los cielos y la tierra.", "Jesús lloró."]),
                            ("en", 'refset setid="IWSLT17.TED.tst2015" srclang="es" trglang="en"',
                             ["In the beginning God created the heavens and the earth.",
                              "Jesus wept."])):   # README's --reader iwslt example, Es-En
        segs = "".join(f'<seg id="{i}"> {t} </seg>\n' for i, t in enumerate(text, 1))
        (work / f"IWSLT17.TED.tst2015.es-en.{lang}.xml").write_text(
            f'<?xml version="1.0" encoding="UTF-8"?>\n<mteval>\n<{tag}>\n'
            f'<doc docid="1" genre="lectures">\n<talkid>1</talkid>\n{segs}</doc>\n'
            f'</{tag.split()[0]}>\n</mteval>\n', encoding="utf-8")
    return work


def _how(cmd: str, work: Path) -> list[str] | str:
    """The shell command that runs README's ``cmd`` here, or why it is not run."""
    for pattern, why in NOT_RUN.items():
        if re.search(pattern, cmd):
            return why
    for old, new in SUBSTITUTE.items():
        cmd = cmd.replace(old, new)
    if cmd.startswith("make "):
        return f"make -n -C {ROOT} {cmd[5:]}"
    if cmd.startswith(".venv/bin/python bench/"):
        return f"{sys.executable} {_optional(cmd[len('.venv/bin/python '):])} --smoke"
    if cmd.startswith("snakemake"):
        preset = re.search(r"preset=(\S+)", cmd)
        if preset:
            stage(preset.group(1), work, downloads=False)
            (work / "fixture.yaml").write_text(yaml.safe_dump(fixture_overrides(preset.group(1))))
            cmd += " --configfile fixture.yaml"
        if preset or "--forcerun" in cmd or "profiles/slurm" in cmd:
            cmd += " -n"
    return cmd


def test_readme_commands_are_found_and_every_exemption_is_used():
    assert sorted(ROOT.glob("docs/*.md")) == sorted(DOCS[1:-1])   # a new page is listed here
    cmds = [c for _, c in documented_commands()]
    assert {_half(w) for w, _ in documented_commands()} == set(HALVES)   # every page has one
    # the two opening commands, a Snakemake example, a translation example and a bench command
    assert cmds[:2] == ["make reproduce", "make test"]
    assert any(c.startswith("snakemake --cores all --until") for c in cmds)
    assert any(c.startswith("python -m pipeline_lib.translate") for c in cmds)
    assert any(c.startswith(".venv/bin/python bench/") for c in cmds)
    for pattern in NOT_RUN:
        assert any(re.search(pattern, c) for c in cmds), f"NOT_RUN {pattern!r} matches nothing"
    for old in SUBSTITUTE:
        assert any(old in c for c in cmds), f"SUBSTITUTE {old!r} matches nothing"
    assert _strip_comment("a 'b # c' # d") == "a 'b # c'"
    assert _optional("x [--profile 12] [--clock cpu|wall]") == "x --profile 12 --clock cpu"


#: the pages whose commands each half runs, in its own copy of the tiny run: nine minutes of
#: commands in one test kept one xdist worker busy while the other had finished (each half
#: runs its pages in DOCS order; no command reads what a command of the other half wrote)
HALVES = {"readme-to-training-and-cluster": ("README.md", "profiles", "pipeline", "inputs",
                                             "preprocessing", "models", "training", "cluster"),
          "evaluation-development-config": ("evaluation", "development", "limitations",
                                            "config/README.md")}


def _half(where: str) -> str:
    page = where.split(":")[0]
    name = page if page.endswith("README.md") else Path(page).stem
    return next(h for h, pages in HALVES.items() if name in pages)


@pytest.mark.parametrize("half", sorted(HALVES))
def test_every_readme_command_runs_as_written(tiny_pipeline, tmp_path, half):
    work = _checkout(tiny_pipeline, tmp_path / "checkout")
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    failed, ran, seen = [], 0, set()
    for where, cmd in documented_commands():
        if cmd in seen:      # `make test` and `snakemake -n` are shown several times: once,
            continue         # where first shown
        seen.add(cmd)
        if _half(where) != half:
            continue
        how = _how(cmd, work)
        if how in NOT_RUN.values():
            continue
        proc = subprocess.run(["bash", "-c", how], cwd=work, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
        ran += 1
        if proc.returncode != 0 or "Traceback (most recent call last)" in proc.stderr:
            failed.append(f"{where}: {cmd}\n  ran: {how}\n  rc {proc.returncode}\n"
                          f"{proc.stdout[-1500:]}{proc.stderr[-2500:]}")
    assert ran >= 15, ran
    assert not failed, "\n\n".join(failed)

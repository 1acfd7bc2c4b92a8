"""The Layout section (docs/development.md) against the tree: every module of pipeline_lib's top level is named
there, and the packages whose line lists modules list exactly the modules they hold (a renamed
or added module fails this test until the README says so)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pipeline_lib"
#: packages whose Layout line lists their modules one by one
LISTED = ("parse", "preprocess", "training", "evaluate")


def _layout() -> str:
    readme = (ROOT / "docs" / "development.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1]


def _names(directory: Path) -> set[str]:
    return {p.stem for p in directory.iterdir()
            if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
            or (p.is_dir() and (p / "__init__.py").exists())}


def _package_lines(block: str) -> dict[str, set[str]]:
    """``  <package>/  a, b, c`` (continued on indented lines) -> {a, b, c}."""
    out: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"^  (\w+)/\s+(.*)$", line)
        if m:
            current, text = m.group(1), m.group(2)
        elif current and re.match(r"^ {20,}\S", line):
            text = line
        else:
            current = None
            continue
        out.setdefault(current, set()).update(
            re.findall(r"\b([a-z_0-9]+)\b", text.split("<->")[0]))
    return out


def test_every_top_level_module_is_named():
    block = _layout()
    named = set(re.findall(r"\b([a-z_0-9]+)\b", block))
    assert _names(PACKAGE) - named == set()


def test_listed_packages_list_exactly_their_modules():
    lines = _package_lines(_layout())
    for pkg in LISTED:
        assert lines.get(pkg) == _names(PACKAGE / pkg), pkg

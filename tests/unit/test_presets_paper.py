"""Every preset job trains the paper's budget, schedule, stop rule and checkpoint choice, as its
table of paper values says (``config/presets/paper/<preset>.yaml``, each value with its section,
table or equation), and the preset's header points at that table rather than restating it.

WHY the tables sit in ``config/presets/paper/`` and not beside the presets as
``<preset>.paper.yaml``: every ``config/presets/*.yaml`` is taken for a preset (``--config
preset=<name>``, ``pipeline_lib.presets.available``, and the tests and fixtures that plan each
one), so a table there would be planned as a preset."""

from __future__ import annotations

import fnmatch
import math
import re
from pathlib import Path

import pytest

from pipeline_lib.config_files import load_yaml
from pipeline_lib.plan import Plan
from pipeline_lib.plan.training import chain_jobs
from pipeline_lib.run_config import PRESET_DIR, load_config
from pipeline_lib.presets import PAPER_DIR, paper_values

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ROOT.parent / "shared" / "papers"
PRESETS = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
#: the values each job's row must give: learning rate, warm-up, budget, stop rule, averaging
KEYS = ("lr", "warmup", "max_steps", "patience", "stop_metric", "average_last_k")
#: what a source may start with: the paper's section, table, equation, footnote or appendix, a
#: value computed from the paper's numbers, our choice where the paper is silent, or a departure
CITES = ("Sec.", "Tab.", "Table", "Eq.", "fn.", "footnote", "App.")
KINDS = ("derived:", "paper silent", "departure:")


def _preset_jobs(config: dict) -> list[str]:
    """The preset's own jobs: its models and the jobs they start from (not matched controls)."""
    return chain_jobs(config["models"], config["model_settings"])


def _header(preset: str) -> list[str]:
    lines = []
    for line in (PRESET_DIR / f"{preset}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def test_every_preset_has_a_table_and_every_table_a_preset():
    tables = sorted(p.stem for p in (PRESET_DIR / PAPER_DIR).glob("*.yaml"))
    assert tables == PRESETS
    for preset in PRESETS:          # load_yaml refuses a key given twice
        assert load_yaml(PRESET_DIR / PAPER_DIR / f"{preset}.yaml")["jobs"], preset


@pytest.mark.parametrize("preset", PRESETS)
def test_every_table_value_names_its_source(preset):
    table = paper_values(PRESET_DIR, preset)
    if PAPERS.is_dir():
        assert (PAPERS / table["paper"]).is_file(), table["paper"]
    for job, row in table["jobs"].items():
        assert row.get("experiment"), f"{preset} {job}: which experiment of the paper"
        for key in KEYS + tuple(k for k in row if k not in KEYS + ("experiment",)):
            assert key in row, f"{preset} {job}: no {key}"
            entry = row[key]
            assert set(entry) == {"value", "source"}, (preset, job, key)
            source = entry["source"]
            assert source.startswith(CITES + KINDS), f"{preset} {job}.{key}: {source!r}"
            if source.startswith(("derived:", "departure:")):  # computed from, or differing from,
                assert any(c in source for c in CITES), (preset, job, key)   # a cited value


@pytest.mark.parametrize("preset", PRESETS)
def test_planned_jobs_train_the_tables_values(preset):
    """lr, warm-up, max_steps, stop rule (patience, min_delta, dev metric) and checkpoint
    averaging of every job of the preset are the table's, and the table has a row for each job;
    each matched control keeps its model's schedule, and its stop rule unless it copies the
    model's updates (budget_of: rule off)."""
    config = load_config(overrides={"preset": preset})
    plan, table = Plan(config), paper_values(PRESET_DIR, preset)["jobs"]
    assert sorted(table) == sorted(_preset_jobs(config)), preset
    wrong = []
    for name, row in table.items():
        train = plan.jobs[name].train
        for key, entry in row.items():
            if key == "experiment":
                continue
            want, got = entry["value"], train[key]
            same = (math.isclose(got, want, rel_tol=1e-12) if isinstance(want, float)
                    else got == want)
            if not same:
                wrong.append(f"{name}.{key}: planned {got!r}, the paper's table {want!r}")
        if train["patience"] > 0 and "min_delta" not in row:
            wrong.append(f"{name}: a plateau rule, but the table gives no min_delta")
        if train["stop_metric"] == "bleu" and not train["dev_bleu"]:
            wrong.append(f"{name}: stop_metric bleu without dev_bleu")
    for model, control in plan.controls.items():
        got, want = plan.jobs[control].train, plan.jobs[model].train
        # a matched control (issue 34) trains its model's updates with the stop rule off
        rule = (("patience", "min_delta", "stop_metric") if not plan.jobs[control].budget_of
                else ())
        for key in ("lr", "warmup", *rule, "average_last_k"):
            if got[key] != want[key]:
                wrong.append(f"control {control}.{key} {got[key]!r}, its model {model}'s "
                             f"{want[key]!r}")
    assert not wrong, f"{preset}:\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize("preset", PRESETS)
def test_a_plateau_rule_only_where_the_header_marks_it_ours(preset):
    """A job stops on a dev plateau only where the paper gives no budget or we depart from it:
    its table row says which and why, and the preset's header marks the plateau as ours."""
    table = paper_values(PRESET_DIR, preset)["jobs"]
    plateau = [job for job, row in table.items() if row["patience"]["value"] > 0]
    for job in plateau:
        assert table[job]["patience"]["source"].startswith(("paper silent", "departure:")), job
    marked = [line for line in _header(preset) if "plateau" in line
              and ("our choice" in line or "departure" in line)]
    assert bool(marked) == bool(plateau), (preset, plateau, marked)


#: numbers a header's `here` column may give, and the table key each must agree with
HERE_NUMBERS = {
    "warmup": re.compile(r"warm-up ([\d,.]+K?)\b"),
    "lr": re.compile(r"peak (\d(?:\.\d+)?e-\d+)"),
    "max_steps": re.compile(r"([\d,.]+K?) updates"),
    "patience": re.compile(r"patience (\d+)"),
}


def _number(text: str) -> float:
    text = text.replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("K") else float(text)


@pytest.mark.parametrize("preset", PRESETS)
def test_header_points_at_the_table_and_restates_no_other_number(preset):
    """One source: the header's `here` column names the table, and any learning rate, warm-up,
    number of updates or patience it still gives is one of the table's values."""
    header = _header(preset)
    assert any(f"paper/{preset}.yaml" in line for line in header), preset
    here = " ".join(line.split("|")[-1] for line in header if line.count("|") == 2)
    table = paper_values(PRESET_DIR, preset)["jobs"]
    for key, pattern in HERE_NUMBERS.items():
        allowed = {float(row[key]["value"]) for row in table.values()}
        for found in pattern.findall(here):
            value = _number(found)
            assert any(math.isclose(value, a, rel_tol=0.01) for a in allowed), \
                f"{preset}: header says {key} {found}, the table {sorted(allowed)}"


def test_readme_models_section_points_at_the_tables():
    models = (ROOT / "docs" / "models.md").read_text()
    assert "\n## Models" in models and "config/presets/paper/" in models


@pytest.mark.parametrize("preset", PRESETS)
def test_paper_figures_are_read_in_the_papers_metric_on_a_scored_test_set(preset):
    """Issue 37 item 2: a table's `bleu` figures name their table row, belong to the preset's
    jobs, and are compared with the score that is the paper's metric (tokenized BLEU only where
    the preset computes it) on a test set the run scores."""
    figures = paper_values(PRESET_DIR, preset).get("bleu")
    if figures is None:
        assert preset.startswith("chen2021"), f"{preset}: no paper figures"   # see its table
        return
    config = load_config(overrides={"preset": preset})
    plan = Plan(config)
    assert set(figures["figures"]) <= set(_preset_jobs(config)), preset
    for job, figure in figures["figures"].items():
        assert set(figure) == {"value", "source"} and figure["source"].startswith(CITES), job
    assert figures["score"] in ("bleu", "tokenized_bleu")
    if figures["score"] == "tokenized_bleu":
        assert config["score"]["tokenized_bleu"], f"{preset}: tokenized BLEU is not computed"
    sets = [f"{c}/{s}" for c in plan.test_corpora for s in config["score"]["test_splits"]]
    assert figures["test_set"] in sets + (["All"] if len(sets) > 1 else []), (preset, sets)
    assert plan.paper_bleu == figures


#: keys that name the experiment rather than set it (the languages, corpora, jobs and their
#: data: the header's corpus and job rows say which of the paper's they are)
IDENTITY = ("src_lang", "tgt_lang", "models", "extends", "train.corpus", "train.dev_corpus",
            "score.corpora", "score.test_splits", "model_settings.*.data",
            "model_settings.*.corpus", "model_settings.*.init_from")
#: how a run is carried out, not what a paper sets: logging, saving and loading, the device and
#: the cluster's shape, where models and treebanks come from, the greedy dev BLEU record (the
#: stop metric, which the table gives, decides whether it selects), rows cut to a multiple of
#: 8 on a GPU (the token budget holds), the seeds
RUN = ("train.seed", "train.save_every", "train.log_every", "train.keep_last",
       "train.num_workers", "train.buffer_sents", "train.device", "train.compile",
       "train.dev_bleu", "train.pad_multiple", "cluster.*", "parse.threads", "parse.shards",
       "parse.batch_size", "stanza.model_dir", "stanza.download", "stanza.resources_url",
       "stanza.model_url", "stanza.ud_url", "stanza.training.seed")
#: the values each job's row of the paper table gives with its source (checked above)
TABLE = tuple(f"train.{k}" for k in KEYS + ("min_delta",)) + ("model_settings.*.train.*",)
PRESET_FILES = sorted(PRESET_DIR.glob("*.yaml")) + sorted((PRESET_DIR / "base").glob("*.yaml"))


def _sources(text: str) -> dict[str, str]:
    """Each leaf key of a preset file (dotted) -> its source: its inline comment, else the
    comment block right above it, else its nearest ancestor's; the file's opening comment
    block is the header, no key's."""
    stack: list[tuple[int, str, str]] = []
    block: list[str] = []
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            block = [] if not s else (block + [s[1:].strip()] if stack or out else [])
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_@.-]+):(?:\s+(.*))?$", line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3) or ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, _, inline = rest.partition(" #")
        own = inline.strip().lstrip("#").strip() or " ".join(block)
        dotted = ".".join([k for _, k, _ in stack] + [key])
        block = []
        if value.strip():
            out[dotted] = own or next((c for *_, c in reversed(stack) if c), "")
        else:
            stack.append((indent, key, own))
    return out


@pytest.mark.parametrize("path", PRESET_FILES, ids=lambda p: p.stem)
def test_every_key_a_preset_sets_has_its_source(path):
    """Issue 37 item 4: every setting of a preset (and of its base) says where it comes from:
    the paper (section, table, equation, footnote), a value derived from it, the paper's
    silence with our choice, or a departure with its reason, beside the value; per-job
    schedules and stop rules are the paper table's rows; the corpus/data keys and how a run is
    carried out are named above (IDENTITY, RUN)."""
    exempt = IDENTITY + RUN + TABLE + ("corpora.*", "downloads.*", "report.*")
    missing = [f"{key}: {source[:60]!r}" for key, source in _sources(path.read_text()).items()
               if not any(fnmatch.fnmatch(key, p) or fnmatch.fnmatch(key, p + ".*")
                          for p in exempt)
               and not source.startswith(CITES + KINDS)]
    assert not missing, f"{path.name}: keys without a source:\n  " + "\n  ".join(missing)

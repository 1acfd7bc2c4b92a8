"""Each rule's conda environment (envs/*.yaml, `--software-deployment-method conda`) lists every
third-party module the code its rule runs imports, and building the DAG imports none of the
stages' libraries (the Snakemake driver needs only snakemake, pyyaml and jsonschema)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from pipeline_lib.codehash import PACKAGE_ROOT, closure

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "workflow" / "rules").glob("*.smk"))
# import name -> package name in conda-forge / PyPI
PACKAGE = {"yaml": "pyyaml", "torch": "pytorch", "pysword": "pysword"}
# modules present wherever their importer is (torch brings its own helpers)
PROVIDED = {"typing_extensions"}
RULE = re.compile(r"^(?:rule|checkpoint) (\w+):\n((?:[ \t]+.*\n|\n)*)", re.M)


def _rules() -> list[tuple[str, str, list[str]]]:
    """(rule, env file, modules its shell runs) of every rule with a conda environment."""
    out = []
    for f in RULE_FILES:
        for name, body in RULE.findall(f.read_text()):
            env = re.search(r'conda:\s*\n\s*"\.\./\.\./envs/([\w.]+)"', body)
            mods = re.findall(r"python -m (pipeline_lib[\w.]*)", body)
            if env and mods:
                out.append((name, env.group(1), mods))
    return out


def _third_party(modules: list[str]) -> set[str]:
    names: set[str] = set()
    for mod in modules:
        rel = mod.removeprefix("pipeline_lib").lstrip(".").removesuffix(".__main__")
        # `python -m <package>` runs its __main__.py (the package alone is its __init__.py)
        if (PACKAGE_ROOT.joinpath(*rel.split(".")) / "__main__.py").exists():
            rel += ".__main__"
        for f in closure(rel):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "pipeline_lib"
            and n != "__future__" and n not in PROVIDED}


def _env_packages(env: str) -> set[str]:
    spec = yaml.safe_load((ROOT / "envs" / env).read_text())
    pkgs: set[str] = set()
    for dep in spec["dependencies"]:
        for d in (dep["pip"] if isinstance(dep, dict) else [dep]):
            pkgs.add(re.split(r"[<>=!~ ]", d, maxsplit=1)[0].lower())
    return pkgs


def test_every_conda_rule_was_found():
    rules = {r for r, _, _ in _rules()}
    assert {"ingest_corpus", "stanza_models", "parse_shard", "train_bpe", "make_shards",
            "train_model", "decode_test", "score_test", "report", "download_corpus"} <= rules


@pytest.mark.parametrize("rule,env,modules", _rules(), ids=lambda x: x if isinstance(x, str) else "")
def test_environment_lists_what_the_rule_imports(rule, env, modules):
    needed = {PACKAGE.get(n, n).lower() for n in _third_party(modules)}
    missing = needed - _env_packages(env)
    assert not missing, f"rule {rule}: envs/{env} lacks {sorted(missing)} (imported by {modules})"


def test_building_the_dag_imports_no_stage_library():
    """What the Snakefile does before any job runs: validate, plan, list every rule's inputs."""
    code = textwrap.dedent("""
        import sys
        from pipeline_lib.ingest import reader_module
        from pipeline_lib.plan import Plan
        from pipeline_lib.run_config import load_config
        mono = {"corpora": {"bible": {}, "gigaword": {"reader": "mono_sgml", "splits": {"mono": {
            "src": "tests/data/corpora/mono/afp_eng_199405.sgml"}}}}}
        for overrides in (None, {"preset": "jiang2019_es-en_ted"}, mono):
            plan = Plan(load_config(overrides=overrides))
            plan.final_targets(), plan.test_set_args(), plan.systems
            for spec in plan.config["corpora"].values():   # rule ingest_corpus's input
                reader_module(spec["reader"]).input_files(spec)
        # numpy is not listed: snakemake imports it itself (yte, its config templating)
        heavy = ("torch", "pysword", "stanza", "sentencepiece", "pyarrow", "pandas",
                 "sacrebleu", "matplotlib")
        print(sorted(m for m in heavy if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]", out.stdout

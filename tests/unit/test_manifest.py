import json

import pytest

from pipeline_lib.codehash import code_hash
from pipeline_lib.manifest import Manifest, sha256_path


def test_manifest_records_inputs_rejections_and_versions(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    m = Manifest(stage="demo", params={"k": 1})
    m.add_input(src)
    m.reject("empty_segment")
    m.reject("empty_segment")
    m.reject("too_long")
    m.counts = {"kept": 5}
    rec = m.write(tmp_path / "out" / "manifest.json")
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(rec, default=str))
    assert on_disk["inputs"][str(src)] == sha256_path(src)
    assert on_disk["rejected"] == {"empty_segment": 2, "too_long": 1}
    assert on_disk["rejected_total"] == 3
    assert "pyarrow" in on_disk["versions"]
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_directory_checksum_sees_content_and_names(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a").write_text("1")
    before = sha256_path(d)
    (d / "a").write_text("2")
    assert sha256_path(d) != before
    (d / "a").write_text("1")
    assert sha256_path(d) == before
    (d / "a").rename(d / "b")
    assert sha256_path(d) != before


def test_code_hash_changes_only_with_the_named_modules(tmp_path, monkeypatch):
    import pipeline_lib.codehash as ch

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("alpha", "beta"):
        (pkg / f"{name}.py").write_text(f"# {name}\n")
    (pkg / "sub" / "x.py").write_text("x = 1\n")
    monkeypatch.setattr(ch, "PACKAGE_ROOT", pkg)
    a, sub = code_hash("alpha"), code_hash("sub.x")
    (pkg / "beta.py").write_text("# changed\n")
    assert code_hash("alpha") == a
    (pkg / "alpha.py").write_text("# changed\n")
    assert code_hash("alpha") != a
    (pkg / "sub" / "x.py").write_text("x = 2\n")
    assert code_hash("sub.x") != sub


def test_a_package_import_is_its_init_and_a_module_hashes_its_packages(tmp_path, monkeypatch):
    """``from pipeline_lib.models import X`` runs models/__init__.py, not every model: the
    registry's siblings stay out of a job's hash (issue 20); the packages Python initialises
    before a module (their ``__init__.py``) are in it."""
    import pipeline_lib.codehash as ch

    pkg = tmp_path / "pkg"
    (pkg / "models").mkdir(parents=True)
    (pkg / "models" / "__init__.py").write_text("from pipeline_lib.models.core import Core\n")
    (pkg / "models" / "core.py").write_text("class Core: ...\n")
    (pkg / "models" / "cache.py").write_text("# the cache\n")
    (pkg / "models" / "doct.py").write_text("from pipeline_lib.models.core import Core\n")
    (pkg / "train.py").write_text("from pipeline_lib.models import Core\n")
    monkeypatch.setattr(ch, "PACKAGE_ROOT", pkg)
    train, doct = code_hash("train"), code_hash("models.doct")
    (pkg / "models" / "cache.py").write_text("# the cache, edited\n")
    assert (code_hash("train"), code_hash("models.doct")) == (train, doct)
    (pkg / "models" / "__init__.py").write_text("from pipeline_lib.models.core import Core  # !\n")
    assert code_hash("models.doct") != doct


def test_code_hash_follows_package_imports_even_lazy_ones(tmp_path, monkeypatch):
    import pipeline_lib.codehash as ch

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "other.py").write_text("# other\n")
    (pkg / "alpha.py").write_text("import json\nfrom pipeline_lib.beta import f\n")
    (pkg / "beta.py").write_text("def f():\n    from pipeline_lib.sub import x\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "x.py").write_text("from .y import z\n")
    (pkg / "sub" / "y.py").write_text("z = 1\n")
    monkeypatch.setattr(ch, "PACKAGE_ROOT", pkg)
    before = code_hash("alpha")
    (pkg / "other.py").write_text("# changed\n")          # not reached from alpha
    assert code_hash("alpha") == before
    (pkg / "sub" / "y.py").write_text("z = 2\n")           # alpha -> beta (lazy) -> sub.x -> .y
    assert code_hash("alpha") != before
    with pytest.raises(FileNotFoundError, match="no module pipeline_lib.missing"):
        code_hash("missing")

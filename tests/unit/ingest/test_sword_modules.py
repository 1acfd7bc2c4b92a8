"""Obtaining SWORD modules: the download path against a local HTTP server, safe extraction,
idempotence, and the error message when nothing works. No real network."""

from __future__ import annotations

import functools
import http.server
import threading
import time
import zipfile
from pathlib import Path

import pytest

from pipeline_lib.ingest import sword_modules as sm
from pipeline_lib.ingest.bible import read_module

MODULE = "spaRV1909eb"


def _installed() -> tuple[Path, Path]:
    files = sm.module_files(MODULE, [sm.SYSTEM_LIBRARY])
    if files is None:
        pytest.fail(f"{MODULE} not installed; run `python -m pipeline_lib.ingest.sword_modules --ensure`")
    return files


@pytest.fixture
def module_zip(tmp_path) -> Path:
    """A CrossWire-style rawzip archive of the installed RV1909 module (mods.d + data folder)."""
    conf, data = _installed()
    archive = tmp_path / "served" / f"{MODULE}.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(conf, f"mods.d/{conf.name}")
        for f in sorted(data.iterdir()):
            zf.write(f, f"modules/texts/ztext/{MODULE}/{f.name}")
    return archive


@pytest.fixture
def server(module_zip):
    """HTTP server on 127.0.0.1 serving the archive's folder; yields (base_url, request log)."""
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            requests.append(self.path)

    handler = functools.partial(Handler, directory=str(module_zip.parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", requests
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def no_system_library(monkeypatch, tmp_path):
    """Hide /usr/share/sword, ~/.sword and $SWORD_PATH so the module counts as missing."""
    monkeypatch.setattr(sm, "SYSTEM_LIBRARY", tmp_path / "no-system")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SWORD_PATH", raising=False)


def test_installed_modules_are_found():
    conf, data = _installed()
    assert sm.find_module(MODULE, sm.library_dirs()) == sm.SYSTEM_LIBRARY
    assert (data / "ot.bzz").is_file() and conf.suffix == ".conf"


def test_ensure_downloads_unpacks_and_is_idempotent(server, no_system_library, tmp_path):
    base_url, requests = server
    dest = tmp_path / "resources" / "sword"
    found = sm.ensure([MODULE], dest=dest, base_url=base_url, use_apt=False)
    assert found == {MODULE: dest}
    assert requests == [f"/{MODULE}.zip"]
    # the unpacked library is a working module: pysword reads Genesis 1:1 from it
    text = read_module(MODULE, (str(dest),))
    assert text.verses["Gen"][1][1].text.startswith("EN el principio crió Dios")
    assert str(dest.resolve()) in text.verses["Gen"][1][1].origin_file
    # second call: present, no request, fast
    t0 = time.perf_counter()
    assert sm.ensure([MODULE], dest=dest, base_url=base_url, use_apt=False) == {MODULE: dest}
    assert requests == [f"/{MODULE}.zip"]
    assert time.perf_counter() - t0 < 5.0  # no network, no apt: file checks only


def test_cli_reports_and_ensures(server, no_system_library, tmp_path, capsys):
    base_url, _ = server
    dest = tmp_path / "lib"
    assert sm.main(["--modules", MODULE, "--dest", str(dest)]) == 1  # report only: missing
    assert "MISSING" in capsys.readouterr().out
    assert sm.main(["--ensure", "--no-apt", "--modules", MODULE, "--dest", str(dest),
                    "--base-url", base_url]) == 0
    assert sm.main(["--modules", MODULE, "--dest", str(dest)]) == 0


def test_missing_everywhere_gives_a_clear_message(server, no_system_library, tmp_path):
    base_url, _ = server
    with pytest.raises(sm.ModuleUnavailable) as err:
        sm.ensure(["noSuchModule"], dest=tmp_path / "lib", base_url=base_url, use_apt=False)
    message = str(err.value)
    assert "noSuchModule" in message and "404" in message
    assert "apt-get install sword-text-sparv sword-text-web" in message
    assert str(tmp_path / "lib") in message


def test_not_a_zip_is_refused(server, no_system_library, tmp_path, module_zip):
    base_url, _ = server
    (module_zip.parent / "fake.zip").write_text("<html>not found</html>")
    with pytest.raises(sm.ModuleUnavailable, match="not a zip"):
        sm.download_module("fake", tmp_path / "lib", base_url)


@pytest.mark.parametrize("member", ["../escape.conf", "mods.d/../../escape.conf", "/abs/escape.conf"])
def test_archive_members_outside_the_library_are_refused(server, no_system_library, tmp_path,
                                                         module_zip, member):
    base_url, _ = server
    with zipfile.ZipFile(module_zip.parent / "evil.zip", "w") as zf:
        zf.writestr("mods.d/ok.conf", "[ok]\n")
        zf.writestr(member, "x")
    dest = tmp_path / "dest"
    with pytest.raises(sm.ModuleUnavailable, match="refused"):
        sm.download_module("evil", dest, base_url)
    assert not (tmp_path / "escape.conf").exists() and not (dest / "mods.d" / "ok.conf").exists()


def test_archive_symlinks_are_refused(server, no_system_library, tmp_path, module_zip):
    base_url, _ = server
    info = zipfile.ZipInfo("mods.d/link.conf")
    info.external_attr = (0o120777 << 16)
    with zipfile.ZipFile(module_zip.parent / "link.zip", "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(sm.ModuleUnavailable, match="refused"):
        sm.download_module("link", tmp_path / "dest", base_url)

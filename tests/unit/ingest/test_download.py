"""The downloader against a real HTTP server on 127.0.0.1 that serves archives built here."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import tarfile
import threading
import zipfile

import pytest

from pipeline_lib.ingest.download import (CATALOGUE, DownloadError, Entry, Source, UnsafeArchiveError,
                                   acquire, check_ldc, extract, fetch, main)

BASE = "https://corpora.example.org/pub"


def _tgz(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return buf.getvalue()


class Server:
    """Serves ``files``; can truncate the first response or fail with 500 a few times."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.truncate_first: set[str] = set()
        self.fail_times: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests.append((self.path, self.headers.get("Range")))
                if outer.fail_times.get(self.path, 0) > 0:
                    outer.fail_times[self.path] -= 1
                    self.send_error(500, "try later")
                    return
                data = outer.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = 0
                m = re.match(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if m:
                    start = int(m.group(1))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in outer.truncate_first:
                    outer.truncate_first.discard(self.path)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _entry(name: str, data: bytes, *, sha256: str | None = None, md5: str | None = None,
           file: str = "corpus.tgz") -> Entry:
    return Entry(name, "test corpus", (Source(f"{BASE}/{file}", sha256=sha256, md5=md5),), "test")


def _get(entry, resources, server, **kw):
    return acquire(entry, resources, retries=kw.pop("retries", 3), backoff_s=0.01, timeout_s=5,
                   url_prefix_map={BASE: server.url}, **kw)


ARCHIVE = _tgz({"ted/train.en": b"hello\nworld\n" * 500, "ted/train.de": b"hallo\nwelt\n" * 500})


def test_verified_download_is_extracted_and_recorded(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    entry = _entry("ted", ARCHIVE, sha256=hashlib.sha256(ARCHIVE).hexdigest())
    manifest = _get(entry, tmp_path, server)
    out = tmp_path / "corpora/ted/corpus/ted/train.en"
    assert out.read_bytes() == b"hello\nworld\n" * 500
    record = json.loads((tmp_path / "corpora/ted/manifest.json").read_text())
    assert record["counts"] == {"files": 1, "http_requests": 1, "archive_members": 2}
    assert manifest.inputs[f"{BASE}/corpus.tgz"] == hashlib.sha256(ARCHIVE).hexdigest()


def test_published_md5_is_checked_and_sha256_locked(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    _get(_entry("ted", ARCHIVE, md5=hashlib.md5(ARCHIVE).hexdigest()), tmp_path, server)
    lock = json.loads((tmp_path / "downloads/downloads.lock.json").read_text())
    assert lock == {f"{BASE}/corpus.tgz": hashlib.sha256(ARCHIVE).hexdigest()}


def test_checksum_mismatch_is_refused_and_nothing_extracted(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    with pytest.raises(DownloadError, match="does not match the pinned"):
        _get(_entry("ted", ARCHIVE, sha256="0" * 64), tmp_path, server)
    assert not (tmp_path / "corpora/ted").exists()


def test_unpinned_download_needs_trust_then_the_lock_pins_it(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    entry = _entry("ted", ARCHIVE)
    with pytest.raises(DownloadError, match="--trust-first-download"):
        _get(entry, tmp_path, server)
    _get(entry, tmp_path, server, trust_first=True)
    # The server now serves different bytes: the lock written on first use refuses them.
    (tmp_path / "downloads/ted/corpus.tgz").unlink()
    server.files["/corpus.tgz"] = _tgz({"ted/train.en": b"changed\n"})
    with pytest.raises(DownloadError, match="does not match the pinned"):
        _get(entry, tmp_path, server, trust_first=True)


def test_truncated_download_resumes_with_range(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    server.truncate_first.add("/corpus.tgz")
    dest = tmp_path / "corpus.tgz"
    requests = fetch(f"{server.url}/corpus.tgz", dest, retries=3, backoff_s=0.01, timeout_s=5)
    assert dest.read_bytes() == ARCHIVE and requests == 2
    assert server.requests[0][1] is None
    assert server.requests[1][1] == f"bytes={len(ARCHIVE) // 2}-"


def test_server_errors_are_retried_then_reported(server, tmp_path):
    server.files["/corpus.tgz"] = ARCHIVE
    server.fail_times["/corpus.tgz"] = 2
    assert fetch(f"{server.url}/corpus.tgz", tmp_path / "a.tgz", retries=3, backoff_s=0.01) == 3
    server.fail_times["/corpus.tgz"] = 10
    with pytest.raises(DownloadError, match="gave up after 3 attempts"):
        fetch(f"{server.url}/corpus.tgz", tmp_path / "b.tgz", retries=2, backoff_s=0.01)
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(f"{server.url}/missing.tgz", tmp_path / "c.tgz", retries=2, backoff_s=0.01)


def test_offline_gives_a_clear_message(tmp_path):
    with pytest.raises(DownloadError, match="looks offline"):
        fetch("http://127.0.0.1:9/x.tgz", tmp_path / "x.tgz", retries=1, backoff_s=0.01,
              timeout_s=2)


def test_archive_escaping_the_target_is_refused_over_http(server, tmp_path):
    evil = _tgz({"ok.txt": b"fine", "../../evil.txt": b"pwned"})
    server.files["/evil.tgz"] = evil
    entry = _entry("evil", evil, sha256=hashlib.sha256(evil).hexdigest(), file="evil.tgz")
    with pytest.raises(UnsafeArchiveError, match=r"\.\./\.\./evil\.txt"):
        _get(entry, tmp_path / "resources", server)
    assert not (tmp_path / "evil.txt").exists() and not list(tmp_path.rglob("ok.txt"))


@pytest.mark.parametrize("kind", ["absolute", "symlink_out", "zip_dotdot"])
def test_unsafe_members_are_refused(tmp_path, kind):
    archive = tmp_path / "a.bin"
    if kind == "absolute":
        archive.write_bytes(_tgz({"/etc/evil": b"x"}))
    elif kind == "symlink_out":
        archive.write_bytes(_tgz({"d/ok": b"x"}, links={"d/link": "../../outside"}))
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("../evil.txt", "x")
    with pytest.raises(UnsafeArchiveError):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_symlink_inside_target_is_allowed(tmp_path):
    archive = tmp_path / "a.tgz"
    archive.write_bytes(_tgz({"d/real.txt": b"x"}, links={"d/alias.txt": "real.txt"}))
    assert extract(archive, tmp_path / "out") == 2
    assert (tmp_path / "out/d/alias.txt").read_bytes() == b"x"


def test_missing_ldc_corpora_are_all_listed(tmp_path):
    (tmp_path / "LDC2002E18").mkdir()
    dirs = {"LDC2002E18": str(tmp_path / "LDC2002E18"), "LDC2003E07": str(tmp_path / "nope")}
    with pytest.raises(DownloadError) as err:
        check_ldc(dirs, ["LDC2002E18", "LDC2003E07", "LDC2004T07", "MT02"])
    msg = str(err.value)
    assert "LDC2003E07" in msg and "LDC2004T07" in msg and "MT02" in msg
    assert "LDC2002E18:" not in msg
    check_ldc(dirs, ["LDC2002E18"])


def test_catalogue_names_real_https_urls_and_pins():
    for entry in CATALOGUE.values():
        for s in entry.sources:
            assert s.url.startswith("https://"), s.url
            assert s.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", s.sha256)
            assert s.md5 is None or re.fullmatch(r"[0-9a-f]{32}", s.md5)
            assert s.sha256 or s.md5 or s.note, f"{entry.name}: unpinned source needs a note"


def test_cli_reports_errors_without_traceback():
    with pytest.raises(SystemExit, match="missing"):
        main(["check-ldc", "--dirs", "{}", "--required", "LDC2005T06"])


def test_cli_get_through_a_mirror_refuses_then_trusts(server, tmp_path):
    """The rule's command line: an unpinned entry fails with the hint, then succeeds when trusted."""
    data = _tgz({"es-en/train.tags.es-en.es": b"<talkid>1</talkid>\nHola .\n"})
    server.files["/2014-01/texts/es/en/es-en.tgz"] = data
    entry = CATALOGUE["iwslt14_es_en"]
    prefix = entry.sources[0].url.split("/2014-01/")[0]
    argv = ["get", "--name", "iwslt14_es_en", "--resources", str(tmp_path), "--retries", "0",
            "--mirror", f"{prefix}={server.url}"]
    with pytest.raises(SystemExit, match="--trust-first-download"):
        main(argv)
    main([*argv, "--trust-first-download"])
    assert (tmp_path / "corpora/iwslt14_es_en/es-en/es-en/train.tags.es-en.es").exists()
    lock = json.loads((tmp_path / "downloads/downloads.lock.json").read_text())
    assert lock[entry.sources[0].url] == hashlib.sha256(data).hexdigest()

"""Find, or obtain, the SWORD Bible modules of the embedded default corpus.

Order of preference (``ensure``), chosen so that a fresh machine gets the corpus the way a user's
would, without credentials:

1. the modules are already in one of the SWORD libraries searched (``library_dirs``): nothing
   to do, which keeps ``make corpus`` idempotent and instant;
2. Debian/Ubuntu as root with ``apt-get``: install the packages that ship them
   (``sword-text-sparv``, ``sword-text-web``; public domain, into /usr/share/sword);
3. otherwise download each module's zip from a SWORD repository (CrossWire's ``rawzip``
   layout: ``<base_url>/<Module>.zip``) and unpack it into ``dest`` (``resources/sword``).

A SWORD library is a folder with ``mods.d/<module>.conf`` files naming each module's
``DataPath``; zip archives hold exactly that layout, so an unpacked archive is a library.
Archive members that would land outside ``dest`` (absolute paths, ``..``, links) are refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger("sword_modules")

DEFAULT_MODULES = ("spaRV1909eb", "engWEB2015eb")
# Debian package that ships each module.
DEBIAN_PACKAGES = {"spaRV1909eb": "sword-text-sparv", "engWEB2015eb": "sword-text-web"}
SYSTEM_LIBRARY = Path("/usr/share/sword")
DEFAULT_DEST = Path("resources/sword")
DEFAULT_BASE_URL = "https://www.crosswire.org/ftpmirror/pub/sword/packages/rawzip"


class ModuleUnavailable(RuntimeError):
    """No way to obtain a module worked; the message says what was tried."""


def library_dirs(extra: list[str | Path] | None = None) -> list[Path]:
    """SWORD libraries to search, first match wins: ``extra``, $SWORD_PATH, system, ~/.sword."""
    dirs = [Path(p) for p in (extra or [])]
    if os.environ.get("SWORD_PATH"):
        dirs += [Path(p) for p in os.environ["SWORD_PATH"].split(os.pathsep) if p]
    dirs += [SYSTEM_LIBRARY, Path.home() / ".sword"]
    return dirs


def _conf_module_name(conf: Path) -> str | None:
    try:
        for line in conf.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                return line[1:-1]
    except OSError:
        return None
    return None


def module_files(module: str, dirs: list[Path]) -> tuple[Path, Path] | None:
    """(conf file, data folder) of ``module`` in the first library holding both, or None.

    Conf file names vary in case between distributions (``engWEB2015eb.conf`` vs
    ``engweb2015eb.conf``), so the ``[Module]`` header inside the file decides.
    """
    for lib in dirs:
        mods = lib / "mods.d"
        if not mods.is_dir():
            continue
        for conf in sorted(mods.glob("*.conf")):
            if conf.stem.lower() == module.lower() and _conf_module_name(conf) == module:
                data = _data_path(conf, lib)
                if data is not None and data.is_dir():
                    return conf, data
    return None


def find_module(module: str, dirs: list[Path]) -> Path | None:
    """The SWORD library (folder with ``mods.d/``) holding ``module``, or None."""
    files = module_files(module, dirs)
    return files[0].parent.parent if files else None


def _data_path(conf: Path, lib: Path) -> Path | None:
    for line in conf.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.lower().startswith("datapath="):
            return (lib / line.split("=", 1)[1].strip()).resolve()
    return None


def download_module(module: str, dest: Path, base_url: str, timeout: float = 60.0,
                    retries: int = 3) -> Path:
    """Fetch ``<base_url>/<module>.zip`` (pipeline_lib.fetch: retries, resume, safe
    extraction) and unpack it into the library ``dest``."""
    from pipeline_lib.fetch import DownloadError, UnsafeArchiveError, extract, fetch

    url = f"{base_url.rstrip('/')}/{module}.zip"
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        archive = Path(tmp) / f"{module}.zip"
        log.info("downloading %s", url)
        try:
            fetch(url, archive, retries=retries, timeout_s=timeout)
            if not zipfile.is_zipfile(archive):
                raise ModuleUnavailable(f"{url}: not a zip archive")
            unpacked = Path(tmp) / "unpacked"
            extract(archive, unpacked)
        except (DownloadError, UnsafeArchiveError) as e:
            raise ModuleUnavailable(str(e)) from e
        # a library holds many modules: merge this one's mods.d/ and modules/ into it
        shutil.copytree(unpacked, dest, dirs_exist_ok=True)
    if find_module(module, [dest]) is None:
        raise ModuleUnavailable(f"{url}: archive has no mods.d conf or data folder for {module}")
    return dest


def apt_install(modules: list[str]) -> bool:
    """Install the Debian packages for ``modules`` when apt-get exists and we are root."""
    packages = sorted({DEBIAN_PACKAGES[m] for m in modules if m in DEBIAN_PACKAGES})
    if not packages or shutil.which("apt-get") is None or os.geteuid() != 0:
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    log.info("running %s", " ".join(cmd))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        log.warning("apt-get failed (%d): %s", done.returncode, done.stderr.strip()[-500:])
    return done.returncode == 0


def ensure(modules: list[str], dest: Path = DEFAULT_DEST, base_url: str = DEFAULT_BASE_URL,
           use_apt: bool = True, extra_dirs: list[str | Path] | None = None) -> dict[str, Path]:
    """Module name -> SWORD library holding it, obtaining missing modules (see module doc)."""
    dirs = library_dirs([dest, *(extra_dirs or [])])
    found = {m: find_module(m, dirs) for m in modules}
    missing = [m for m, lib in found.items() if lib is None]
    if missing and use_apt and apt_install(missing):
        found.update({m: find_module(m, dirs) for m in missing})
        missing = [m for m, lib in found.items() if lib is None]
    errors = []
    for m in missing:
        try:
            found[m] = download_module(m, dest, base_url)
        except (OSError, zipfile.BadZipFile, ModuleUnavailable) as e:
            errors.append(f"{m}: {e}")
    if errors:
        raise ModuleUnavailable(
            "could not obtain SWORD modules. Tried: the libraries "
            f"{[str(d) for d in dirs]}; apt-get (needs root on Debian/Ubuntu: "
            f"apt-get install {' '.join(sorted(DEBIAN_PACKAGES.values()))}); download from "
            f"{base_url}: " + "; ".join(errors)
            + f". Put the unpacked module zips under {dest} (mods.d/ and modules/) and rerun.")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ensure", action="store_true", help="obtain missing modules (else only report)")
    ap.add_argument("--modules", nargs="+", default=list(DEFAULT_MODULES))
    ap.add_argument("--dest", type=Path, default=DEFAULT_DEST, help="library for downloaded modules")
    ap.add_argument("--base-url", default=DEFAULT_BASE_URL, help="SWORD repository with <Module>.zip")
    ap.add_argument("--no-apt", action="store_true", help="never call apt-get")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not args.ensure:
        dirs = library_dirs([args.dest])
        found = {m: find_module(m, dirs) for m in args.modules}
        for m, lib in found.items():
            print(f"{m}\t{lib if lib else 'MISSING'}")
        return 0 if all(found.values()) else 1
    try:
        found = ensure(args.modules, args.dest, args.base_url, use_apt=not args.no_apt)
    except ModuleUnavailable as e:
        log.error("%s", e)
        return 2
    for m, lib in found.items():
        print(f"{m}\t{lib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

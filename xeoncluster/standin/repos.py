"""Packages as a company mirror would serve them to the nodes: a flat apt repository of the
.debs the playbooks install (with the dependencies the base tree lacks), and a PEP 503 simple
index of the stack's wheels. Built on the host (which reaches Debian and PyPI), cached by a hash
of what goes in, and served over HTTP on the bridge's host address by the daemon."""
from __future__ import annotations

import hashlib
import html
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

APT_PACKAGES = ("libgoogle-perftools4", "numactl")
# The stock stack of xeoncluster/ami/stacks.yaml, for the nodes' python (cp311, manylinux x86_64).
PIP_PACKAGES = ("torch==2.13.0", "transformers==5.23.0", "accelerate==1.15.0", "datasets==5.2.0",
                "impi-rt==2021.18.1", "tensorboardX==2.6.5", "boto3==1.43.11", "fabric==3.2.3")
# The local provider's wheelhouse of exactly these packages, keyed the same way (provider local).
PROJECT_WHEELS = Path("/var/cache/xeoncluster/wheels")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# -- apt --------------------------------------------------------------------------------------------
def ensure_apt_repo(cache: Path, base: Path, packages: tuple[str, ...] = APT_PACKAGES,
                    log: Callable[[str], None] = print) -> Path:
    repo = cache / f"apt-{_digest(base.name, *packages)}"
    if (repo / "Release").exists():
        return repo
    log(f"building the apt repository {repo.name} ({', '.join(packages)} and dependencies)")
    staging = repo.with_name(repo.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "partial").mkdir(parents=True)
    # The host is bookworm too: its apt resolves against the base tree's dpkg status, so exactly
    # the packages a fresh node lacks are downloaded.
    subprocess.run(["apt-get", "install", "--download-only", "-y", "-q", "--no-install-recommends",
                    "-o", f"Dir::State::status={base}/var/lib/dpkg/status",
                    "-o", f"Dir::Cache::archives={staging}", "-o", "Debug::NoLocking=1", *packages],
                   check=True, capture_output=True)
    shutil.rmtree(staging / "partial")
    (staging / "lock").unlink(missing_ok=True)
    index_apt_repo(staging)
    staging.rename(repo)
    return repo


def index_apt_repo(repo: Path) -> None:
    packages = subprocess.run(["apt-ftparchive", "packages", "."], cwd=repo, check=True,
                              capture_output=True, text=True).stdout
    (repo / "Packages").write_text(packages)
    subprocess.run(["gzip", "-kf", "Packages"], cwd=repo, check=True)
    release = subprocess.run(["apt-ftparchive", "release", "."], cwd=repo, check=True,
                             capture_output=True, text=True).stdout
    (repo / "Release").write_text(release)


# -- pip --------------------------------------------------------------------------------------------
def ensure_wheelhouse(cache: Path, packages: tuple[str, ...] = PIP_PACKAGES,
                      log: Callable[[str], None] = print) -> Path:
    reused = PROJECT_WHEELS / _digest(*sorted(packages))
    if reused.is_dir() and any(reused.glob("*.whl")):
        return reused
    house = cache / f"wheels-{_digest(*sorted(packages))}"
    if (house / ".complete").exists():
        return house
    log(f"downloading the wheelhouse {house.name} ({' '.join(packages)}); this takes a while once")
    house.mkdir(parents=True, exist_ok=True)
    subprocess.run(["python3", "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_34_x86_64",
                    "--dest", str(house), *packages], check=True)
    (house / ".complete").write_text("")
    return house


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    return normalize(filename.split("-")[0])


def ensure_simple_index(cache: Path, house: Path) -> Path:
    """<index>/<project>/index.html linking ../../wheels/<file>#sha256=... (served as /simple/)."""
    names = sorted(p.name for p in house.iterdir() if p.suffix == ".whl" or p.name.endswith(".tar.gz"))
    index = cache / f"simple-{_digest(str(house), *names)}"
    if not (index / "index.html").exists():
        staging = index.with_name(index.name + ".tmp")
        build_simple_index(house, staging)
        staging.rename(index)
        for old in cache.glob("simple-*"):
            if old != index:
                shutil.rmtree(old, ignore_errors=True)
    return index


def build_simple_index(house: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    by_project: dict[str, list[Path]] = {}
    for wheel in sorted(house.glob("*.whl")) + sorted(house.glob("*.tar.gz")):
        by_project.setdefault(project_of(wheel.name), []).append(wheel)
    target.mkdir(parents=True)
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(by_project))
    (target / "index.html").write_text(_page("Simple index", links))
    for project, files in by_project.items():
        anchors = "".join(f'<a href="../../wheels/{html.escape(f.name)}#sha256={_sha256(f)}">'
                          f'{html.escape(f.name)}</a>\n' for f in files)
        (target / project).mkdir()
        (target / project / "index.html").write_text(_page(f"Links for {project}", anchors))


def _page(title: str, body: str) -> str:
    return f"<!DOCTYPE html>\n<html><head><title>{title}</title></head><body>\n{body}</body></html>\n"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- the mirror's document root ---------------------------------------------------------------------
def build_docroot(docroot: Path, apt_repo: Path, wheelhouse: Path, simple: Path) -> None:
    """/ is the flat apt repo (`deb [trusted=yes] http://GW:PORT/ ./`), /simple/ the pip index."""
    shutil.rmtree(docroot, ignore_errors=True)
    docroot.mkdir(parents=True)
    for item in apt_repo.iterdir():
        (docroot / item.name).symlink_to(item)
    (docroot / "wheels").symlink_to(wheelhouse)
    (docroot / "simple").symlink_to(simple)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def serve_directory(address: str, port: int, docroot: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), partial(_QuietHandler, directory=str(docroot)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

"""The folder a user's warm servers listen in: made with mode 0700 in the user's home, and used only while it is
still the user's own and closed to everyone else. Only the user can then bind a server's address or reach one.
An abstract socket name gave neither: it has no permissions, and anyone in the network namespace may bind it
first."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pwd
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

# In the home beside the node's package (~/xeoncluster/lib, wire/layout.py, which node code ships without).
# Not $XDG_RUNTIME_DIR: logind removes it once the user's last session ends, and a server outlives the ssh
# session of the rank that started it; the next job's ranks come in sessions of their own.
HOME_FOLDER = "xeoncluster/warm"
SUN_PATH = 108  # sockaddr_un's sun_path, the NUL that ends it included
LOCK = ".lock"


def home(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir)


def for_home(user_home: Path, name_length: int) -> Path:
    """Where the sockets live. A home too long for a socket address moves the folder to /tmp, under a name
    of this user's and this home's; a folder there that another user made first is refused as any other."""
    mine = user_home / HOME_FOLDER
    if len(os.fsencode(mine)) + 1 + name_length < SUN_PATH:
        return mine
    digest = hashlib.sha256(os.fsencode(user_home)).hexdigest()[:12]
    return Path("/tmp") / f"xeoncluster-warm-{os.getuid()}-{digest}"


def unusable(folder: Path) -> str | None:
    """Why no server may listen in `folder` (made when missing); None when only this user may enter it."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        info = folder.lstat()
    except OSError as exc:
        return f"cannot make the warm rank servers' folder {folder}: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"the warm rank servers' folder {folder} is not a folder"
    if info.st_uid != os.getuid():
        return f"the warm rank servers' folder {folder} belongs to uid {info.st_uid}"
    if info.st_mode & 0o077:
        return f"others may enter the warm rank servers' folder {folder} (mode {stat.S_IMODE(info.st_mode):o})"
    return None


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """One server at a time binds in `folder`: a socket bound but not yet listening refuses a connect as a
    dead server's does, and must not be taken for one."""
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sockets(folder: Path, prefix: str) -> list[Path]:
    """The sockets in `folder` whose names start with `prefix`."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    return sorted(path for path in entries if path.name.startswith(prefix) and path.is_socket())

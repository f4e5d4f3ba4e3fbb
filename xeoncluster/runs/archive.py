"""Unpacking an archive that came from the cluster, by this tool's own rule on any Python: regular files
and folders only, every name checked under the target before the first byte is written, no links,
and caps on size and member count.

`tarfile`'s `filter="data"` is not the rule: before Python 3.11.13 / 3.12.11 / 3.13.4 a chain of
symlinks whose real path stays inside the target until its last hop lets a later member write outside
it (CVE-2025-4517). Here no link is ever made, and each file is created through folder descriptors
opened without following links, so no name can reach outside the target whatever is already there.

Every member is checked before anything is written, so an archive refused for what it holds leaves
the target as it was. The files go straight into the target rather than into a folder renamed into
place: callers unpack into folders that already hold files (a results folder fetched again, the
downloaded archive itself). A clash with those (a file where a folder is) or a failure while writing
(a full disk) may leave some of the files, all inside the target.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

from xeoncluster.cluster import untrusted

MAX_BYTES = 64 * 2**30  # a model of several billion float32 parameters, with room to spare
MAX_MEMBERS = 100_000
# For GNU tar on the packing side: two names of one file would arrive as a hard link, which is refused here.
HARD_LINKS_AS_FILES = "--hard-dereference"
FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
KINDS = {tarfile.SYMTYPE: "a symbolic link", tarfile.LNKTYPE: "a hard link", tarfile.CHRTYPE: "a device",
         tarfile.BLKTYPE: "a device", tarfile.FIFOTYPE: "a fifo", tarfile.CONTTYPE: "a contiguous file",
         tarfile.GNUTYPE_SPARSE: "a sparse file"}
# Errors the archive's own names cause where they land (a file where a folder is, or the reverse, or a
# link already in the target); any other OSError (a full disk) is this machine's and passes as it is.
CONFLICTS = {errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EMLINK}
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Entry:
    member: tarfile.TarInfo
    parts: tuple[str, ...]  # its name below the target, checked

    @property
    def name(self) -> str:
        return "/".join(self.parts)


def unpack(archive: Path, target: Path, source: str, max_bytes: int = MAX_BYTES,
           max_members: int = MAX_MEMBERS) -> list[str]:
    """Unpack the tar (compressed or not) `archive` into `target`; the regular files written, as
    '/'-separated names below it. `source` says where the archive came from, in a refusal."""
    target.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive) as tar:
            entries = _checked(tar, target, source, max_bytes, max_members)
            _write_all(tar, target, entries, source)
    except (tarfile.TarError, EOFError) as exc:  # a truncated or corrupt archive
        raise untrusted.refused(source, "archive", archive.name, f"not a readable tar archive: {exc}") from None
    return list(dict.fromkeys(e.name for e in entries if e.member.type in FILE_TYPES))


def _checked(tar: tarfile.TarFile, target: Path, source: str, max_bytes: int, max_members: int) -> list[Entry]:
    """Every member, each found to be a file or folder with a sound name under `target`, within the caps."""
    entries: list[Entry] = []
    total = 0
    for count, member in enumerate(tar, start=1):
        if count > max_members:
            raise _refused(source, member, f"more than {max_members} members")
        if member.size < 0:
            raise _refused(source, member, "a negative size")
        total += member.size if member.type in FILE_TYPES else 0
        if total > max_bytes:
            raise _refused(source, member, f"the files exceed {max_bytes} bytes")
        parts = _parts(member, source)
        if parts:
            try:
                untrusted.under(target, "/".join(parts))
            except untrusted.Refused:  # only a link already in the target leads out, names have no '..'
                raise _refused(source, member, f"it leads out of {target}") from None
            entries.append(Entry(member, parts))
    return entries


def _parts(member: tarfile.TarInfo, source: str) -> tuple[str, ...]:
    """The member's name as segments below the target; () for the target itself (the './' of `tar -C DIR .`)."""
    if member.type not in (*FILE_TYPES, tarfile.DIRTYPE):
        kind = KINDS.get(member.type, f"of tar type {member.type!r}")
        raise _refused(source, member, f"{kind}; only files and folders are unpacked")
    name = member.name
    why = ("a control character" if untrusted.CONTROL.search(name) else "an absolute name" if name.startswith("/")
           else "a '..' segment" if ".." in name.split("/") else "")
    if why:
        raise _refused(source, member, why)
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if not parts and member.type != tarfile.DIRTYPE:
        raise _refused(source, member, "a file in the target's own place")
    return parts


def _write_all(tar: tarfile.TarFile, target: Path, entries: list[Entry], source: str) -> None:
    root = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for entry in entries:
            _write(tar, root, entry, source)
    finally:
        os.close(root)


def _refused(source: str, member: tarfile.TarInfo, why: str) -> untrusted.Refused:
    return untrusted.refused(source, "archive member", member.name, why)


def _write(tar: tarfile.TarFile, root: int, entry: Entry, source: str) -> None:
    is_file = entry.member.type in FILE_TYPES
    try:
        folder = _folder(root, entry.parts[:-1] if is_file else entry.parts)
        try:
            if is_file:
                _write_file(tar, folder, entry)
        finally:
            os.close(folder)
    except OSError as exc:
        if exc.errno not in CONFLICTS:
            raise
        raise _refused(source, entry.member, f"cannot be written there: {exc.strerror}") from None


def _folder(root: int, parts: tuple[str, ...]) -> int:
    """A descriptor of root/parts, made where missing; a link or file on the way fails (ELOOP, ENOTDIR)."""
    fd = os.dup(root)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            inner = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_file(tar: tarfile.TarFile, folder: int, entry: Entry) -> None:
    """A new file in place of whatever file had the name (unlinking a link removes the link, never its
    target); executable for its owner if it was, never setuid or writable by others."""
    name = entry.parts[-1]
    try:
        if stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            raise IsADirectoryError(errno.EISDIR, "a folder has its name", name)
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    mode = 0o755 if entry.member.mode & 0o100 else 0o644
    data = tar.extractfile(entry.member)
    if data is None:  # never for a regular member; typed so
        raise IsADirectoryError(errno.EISDIR, "no data", name)
    with os.fdopen(os.open(name, FILE_FLAGS, mode, dir_fd=folder), "wb") as out, data:
        shutil.copyfileobj(data, out, 1 << 20)

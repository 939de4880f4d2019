"""Local directory trees as tar, for upload_tree and download_tree.

make_tar writes a local directory as a pax tar (symlinks stored as links,
never followed; hard links inside the tree stored once; FIFOs, sockets and
devices left out); extract_tar unpacks a tar into a local directory and
never writes outside it: absolute names, ".." components, names that pass
through a symlink, symlinks whose target leaves the directory, hard links
to anything but an earlier entry, and special files are refused with
UnsafeArchive before anything of that entry is written. Neither talks to
the server.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from typing import IO, Iterable, Iterator, List, Optional, Set


class UnsafeArchive(ValueError):
    """download_tree met an entry that would land (or point) outside the
    target directory, or one it never makes (a device, FIFO, socket).
    `entry` is the entry's name as the archive spells it, `problem` one of
    "absolute", "dotdot", "through_symlink", "link_outside", "special",
    "bad_name"."""

    def __init__(self, entry: str, problem: str) -> None:
        super().__init__("unsafe archive entry %r: %s" % (entry, problem))
        self.entry = entry
        self.problem = problem


def _parts(name: str) -> List[str]:
    """The components of an entry name, "." and empty ones dropped;
    UnsafeArchive for an absolute name, a ".." component or a NUL."""
    if not name or "\0" in name:
        raise UnsafeArchive(name, "bad_name")
    if name.startswith("/"):
        raise UnsafeArchive(name, "absolute")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(name, "dotdot")
    return parts


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


class _Extractor:
    def __init__(self, local_dir: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        self.root = os.path.realpath(local_dir)
        # Names (component tuples) this archive made, by kind.
        self.files: Set[str] = set()

    def _target(self, m: tarfile.TarInfo) -> Optional[str]:
        """The host path of entry m, after checking that every directory on
        the way is a real directory inside root (None for the root itself)."""
        parts = _parts(m.name)
        if not parts:
            return None
        parent = self.root
        for p in parts[:-1]:
            parent = os.path.join(parent, p)
            try:
                st = os.lstat(parent)
            except FileNotFoundError:
                os.mkdir(parent, 0o755)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise UnsafeArchive(m.name, "through_symlink")
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeArchive(m.name, "bad_name")
        return os.path.join(parent, parts[-1])

    @staticmethod
    def _clear(path: str, keep_dir: bool) -> None:
        """Makes room for an entry at `path`: an existing file or symlink
        goes (a directory stays for a directory entry)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if not keep_dir:
                raise IsADirectoryError(path)
            return
        os.unlink(path)

    def entry(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        if m.isdev() or m.isfifo() or not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchive(m.name, "special")
        path = self._target(m)
        if path is None:
            if not m.isdir():
                raise UnsafeArchive(m.name, "bad_name")
            return
        if m.isdir():
            self._clear(path, keep_dir=True)
            if not os.path.isdir(path):
                os.mkdir(path, 0o755)
            os.chmod(path, (m.mode & 0o777) | 0o700)
            return
        if m.issym():
            target = m.linkname
            if not target or target.startswith("/"):
                raise UnsafeArchive(m.name, "link_outside")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
            if not _inside(self.root, resolved):
                raise UnsafeArchive(m.name, "link_outside")
            self._clear(path, keep_dir=False)
            os.symlink(target, path)
            return
        if m.islnk():
            link_parts = _parts(m.linkname)
            key = "/".join(link_parts)
            if key not in self.files:
                raise UnsafeArchive(m.name, "link_outside")
            self._clear(path, keep_dir=False)
            os.link(os.path.join(self.root, *link_parts), path)
            self.files.add("/".join(_parts(m.name)))
            return
        self._clear(path, keep_dir=False)
        src = tf.extractfile(m)
        assert src is not None
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
        os.chmod(path, m.mode & 0o777)
        os.utime(path, (m.mtime, m.mtime))
        self.files.add("/".join(_parts(m.name)))


def extract_tar(fileobj: IO[bytes], local_dir: str, gzip: bool = False) -> int:
    """Unpacks the tar read (sequentially) from `fileobj` into local_dir
    (made when missing); returns the number of entries made. Raises
    UnsafeArchive for an entry that would leave local_dir (what was
    extracted before it stays)."""
    ex = _Extractor(local_dir)
    count = 0
    with tarfile.open(fileobj=fileobj, mode="r|gz" if gzip else "r|") as tf:
        for m in tf:
            ex.entry(tf, m)
            count += 1
    # tarfile stops at the end-of-archive blocks; what follows (padding,
    # and for a stream the rest of the call) is read to its end.
    while fileobj.read(1 << 16):
        pass
    return count


class ChunkReader(io.RawIOBase):
    """A binary reader over an iterator of bytes chunks (the server's
    archive stream), for tarfile's stream mode."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: "bytearray") -> int:  # type: ignore[override]
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _tarinfo_filter(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
    if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
        return None  # FIFOs, sockets and devices are never sent
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def make_tar(local_dir: str, out: IO[bytes], gzip: bool = False) -> None:
    """Writes local_dir's contents (not the directory itself) as a pax tar
    into `out`: names relative to local_dir, sorted, symlinks as links."""
    if not os.path.isdir(local_dir):
        raise NotADirectoryError(local_dir)
    with tarfile.open(fileobj=out, mode="w|gz" if gzip else "w|", format=tarfile.PAX_FORMAT) as tf:
        for name in sorted(os.listdir(local_dir)):
            tf.add(os.path.join(local_dir, name), arcname=name, recursive=True, filter=_tarinfo_filter)

"""Writing files where other people can write too: no symlink, no foreign directory, no race.

An output root is often shared (``/tmp/runs``, a team directory, mode 1777), and a run directory
received from someone else may hold planted entries. Everything the library writes goes through
this module, under three rules:

- **On the way down**, a directory that neuronscope makes or owns (the capture name's directory
  and the run directory, the *private tail*) must be a real directory owned by this user: a
  symbolic link or another user's directory there is refused. Above it, the path is the user's
  choice, but a symbolic link owned by another user (the classic ``/tmp`` plant), or a directory
  another user owns that others may write to without the sticky bit, is refused too.
- **Directories are held open**: the walk goes component by component with ``dir_fd`` and
  ``O_NOFOLLOW``, and files are created relative to the run directory's descriptor, so a
  directory renamed or swapped for a symlink after it was checked still receives nothing: the
  writes land in the directory that was checked.
- **Temporary files are created exclusively** (``O_CREAT | O_EXCL | O_NOFOLLOW``, random names),
  written through their descriptor, then renamed into place (a rename replaces a planted link
  instead of following it).

Writers that only take a path (``torch.profiler``'s ``export_chrome_trace``) get a path through
``/proc/self/fd/N``, which the kernel resolves to the directory held open, not by name. Where
``/proc`` is missing (macOS) that path falls back to the checked name.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from neuronscope.errors import NeuronscopeError

__all__ = [
    "UnsafePathError",
    "create_exclusive",
    "fd_path",
    "make_dir_at",
    "open_dir",
    "replace_at",
    "write_bytes_at",
]

# getattr: Windows has neither flag (nor dir_fd); importing must still work there.
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Directories neuronscope makes are never writable by every user (even under ``umask 0``):
#: in a shared root, another user could otherwise rename a run directory away and plant a link.
_DIR_MODE = 0o775


class UnsafePathError(NeuronscopeError):
    """A path on the way to a write was a symbolic link or a directory of another user."""


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0) if hasattr(os, "geteuid") else True


def _own(uid: int) -> bool:
    return uid == os.geteuid() if hasattr(os, "geteuid") else True


def _shown(parts: list[str], i: int) -> str:
    return os.path.join(os.sep, *parts[: i + 1])


def open_dir(path: Path | str, *, create: bool = False, private_tail: int = 0) -> int:
    """Open the directory ``path`` for writing into it, and return its descriptor (the caller
    closes it). With ``create``, missing components are made (mode 0o775 less the umask).

    The last ``private_tail`` components must be real directories owned by this user. Raises
    :class:`UnsafePathError` for a refused component, ``OSError`` for the rest.
    """
    parts = [p for p in os.path.abspath(os.fspath(path)).split(os.sep) if p]
    fd = os.open(os.sep, _DIR_FLAGS)
    try:
        for i, part in enumerate(parts):
            private = i >= len(parts) - private_tail
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, _DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            new = _open_component(fd, part, st, private, _shown(parts, i))
            os.close(fd)
            fd = new
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_component(fd: int, part: str, st: os.stat_result, private: bool, where: str) -> int:
    """Open one checked component relative to ``fd``; refuse what the module docstring says."""
    if stat.S_ISLNK(st.st_mode):
        if private:
            raise UnsafePathError(
                f"{where} is a symbolic link (to {os.readlink(part, dir_fd=fd)!r}); neuronscope writes only into "
                f"directories it made: remove the link, or choose another output directory"
            )
        if not _trusted_owner(st.st_uid):
            raise UnsafePathError(
                f"{where} is a symbolic link owned by another user (uid {st.st_uid}); refusing to follow it: "
                f"remove it, or choose another output directory"
            )
        return os.open(part, _DIR_FLAGS, dir_fd=fd)  # a link of ours or root's: follow it
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, "Not a directory", where)
    if private and not _own(st.st_uid):
        raise UnsafePathError(
            f"{where} belongs to another user (uid {st.st_uid}); neuronscope writes its runs only into "
            f"directories of its own: remove it, or choose another output directory"
        )
    sticky = st.st_mode & stat.S_ISVTX
    if private and st.st_mode & stat.S_IWOTH and not sticky:
        raise UnsafePathError(
            f"{where} is writable by every user (mode {stat.S_IMODE(st.st_mode):o}), so anyone could swap a run "
            f"directory in it for a link: chmod o-w it, or choose another output directory"
        )
    others_write = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky
    if not private and others_write and not _trusted_owner(st.st_uid):
        raise UnsafePathError(
            f"{where} belongs to another user (uid {st.st_uid}) and others may rename what is in it "
            f"(writable, no sticky bit); choose another output directory"
        )
    new = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
    now = os.fstat(new)
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):  # swapped between the check and the open
        os.close(new)
        raise UnsafePathError(f"{where} changed while it was being opened; try again")
    return new


def make_dir_at(dir_fd: int, name: str) -> int:
    """Make the new directory ``name`` in ``dir_fd`` (``FileExistsError`` if it exists; mode 0o775
    less the umask) and return its descriptor."""
    os.mkdir(name, _DIR_MODE, dir_fd=dir_fd)
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    return _open_component(dir_fd, name, st, True, name)


def create_exclusive(dir_fd: int, name: str, mode: int = 0o644) -> int:
    """A new file ``name`` in ``dir_fd``, opened for writing; never an existing file or link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(name, flags, mode, dir_fd=dir_fd)


def temp_name(name: str) -> str:
    """A hidden temporary name for ``name`` (random: a planted guess of it is never reused)."""
    return f".{name[:180]}.tmp{os.getpid()}.{secrets.token_hex(4)}"


def replace_at(dir_fd: int, src: str, dest: str) -> None:
    """Rename ``src`` onto ``dest`` inside ``dir_fd`` (a link at ``dest`` is replaced, not followed)."""
    os.replace(src, dest, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def unlink_quietly(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def write_bytes_at(dir_fd: int, name: str, data: bytes) -> None:
    """Write ``name`` in ``dir_fd`` atomically: an exclusive temporary file, fsync, rename.

    A reader sees no file or the whole file; the temporary file is removed on failure."""
    tmp = temp_name(name)
    fd = create_exclusive(dir_fd, tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            view = memoryview(data)
            while view:
                view = view[fh.write(view) :]
            fh.flush()
            os.fsync(fh.fileno())
        replace_at(dir_fd, tmp, name)
    except BaseException:
        unlink_quietly(dir_fd, tmp)
        raise


def fd_path(dir_fd: int, fallback: Path) -> Path:
    """A path naming the directory held open as ``dir_fd``: ``/proc/self/fd/N`` on Linux (the
    kernel follows the descriptor, not the name), else ``fallback``."""
    proc = Path(f"/proc/self/fd/{dir_fd}")
    try:
        if proc.is_dir():
            return proc
    except OSError:
        pass
    return fallback


@contextmanager
def opened_dir(path: Path | str, *, create: bool = False, private_tail: int = 0) -> Iterator[int]:
    """:func:`open_dir` as a context manager that closes the descriptor."""
    fd = open_dir(path, create=create, private_tail=private_tail)
    try:
        yield fd
    finally:
        os.close(fd)

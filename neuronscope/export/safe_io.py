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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from neuronscope.errors import NeuronscopeError

__all__ = [
    "NOFOLLOW",
    "WORK_PREFIX",
    "UnsafePathError",
    "atomic_write_text",
    "atomic_write_with",
    "create_exclusive",
    "empty_dir",
    "fd_path",
    "held_dir",
    "make_dir_at",
    "open_dir",
    "private_dir_at",
    "replace_at",
    "write_bytes_at",
    "write_text_at",
]

# getattr: Windows has neither flag (nor dir_fd); importing must still work there.
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: Directories neuronscope makes are writable by their owner only, whatever the umask (``umask
#: 002`` on a group-shared, setgid root included): in a directory a teammate may write, they
#: could rename a run directory away, or plant a link at a name torch opens with ``O_TRUNC``
#: (its trace writer's fixed ``<name>.tmp``), and turn a capture into an overwrite of any file
#: the capturing user can write. Readable by all, so that a team can still read the runs.
_DIR_MODE = 0o755
#: Write bits stripped from a directory just made (a default ACL or a umask may have set them).
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: Prefix of the private directories (mode 0700) that writers by path (torch) write into.
WORK_PREFIX = ".ns-work."


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
    closes it). With ``create``, missing components are made (mode 0o755 less the umask).

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
                    made = True
                except FileExistsError:
                    made = False
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
                if made and private:  # the root and above: the user's, made with their umask
                    st = _owner_writes_only(fd, part, st)
            new = _open_component(fd, part, st, private, _shown(parts, i))
            os.close(fd)
            fd = new
        return fd
    except BaseException:
        os.close(fd)
        raise


def _owner_writes_only(fd: int, part: str, st: os.stat_result) -> os.stat_result:
    """Strip group and other write from a directory this process just made (see _DIR_MODE)."""
    if stat.S_ISDIR(st.st_mode) and _own(st.st_uid) and st.st_mode & _OTHERS_WRITE:
        os.chmod(part, stat.S_IMODE(st.st_mode) & ~_OTHERS_WRITE, dir_fd=fd, follow_symlinks=False)
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
    return st


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


def make_dir_at(dir_fd: int, name: str, mode: int = _DIR_MODE) -> int:
    """Make the new directory ``name`` in ``dir_fd`` (``FileExistsError`` if it exists; ``mode``
    less the umask, never writable by group or others) and return its descriptor."""
    os.mkdir(name, mode, dir_fd=dir_fd)
    st = _owner_writes_only(dir_fd, name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    return _open_component(dir_fd, name, st, True, name)


@contextmanager
def private_dir_at(dir_fd: int) -> Iterator[int]:
    """A new directory of mode 0700 inside ``dir_fd``, for writers that take a path and open
    names of their own (torch's trace writer opens ``<path>.tmp`` with ``O_TRUNC``, following
    links): nobody else can plant a name in it. Gives its descriptor; on the way out every
    file in it is truncated (space comes back even where the writer still holds the file open,
    as torch's does after a failed write) and removed, and then the directory."""
    name = f"{WORK_PREFIX}{os.getpid()}.{secrets.token_hex(4)}"
    fd = make_dir_at(dir_fd, name, 0o700)
    try:
        yield fd
    finally:
        try:
            empty_dir(fd)
        finally:
            os.close(fd)
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except OSError:
                pass


def empty_dir(fd: int) -> None:
    """Truncate and remove the files in the directory held as ``fd`` (links are removed, never
    followed; subdirectories are left)."""
    for entry in os.listdir(fd):
        try:
            held = os.open(entry, os.O_WRONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
        except OSError:
            pass
        else:
            try:
                if stat.S_ISREG(os.fstat(held).st_mode):
                    os.ftruncate(held, 0)
            except OSError:
                pass
            finally:
                os.close(held)
        unlink_quietly(fd, entry)


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


def atomic_write_with(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp_path)`` on a new, exclusively created temporary file beside ``path``,
    fsync it, then rename it onto ``path``.

    For directories neuronscope made (``path`` under :func:`fd_path`): ``write`` opens
    the temporary file by name. A reader sees either no file or the whole file; the temporary
    file is removed on failure.
    """
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        tmp_name = temp_name(path.name)
        os.close(create_exclusive(dir_fd, tmp_name))
        try:
            write(path.parent / tmp_name)
            fd = os.open(tmp_name, os.O_RDWR | NOFOLLOW, dir_fd=dir_fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            replace_at(dir_fd, tmp_name, path.name)
        except BaseException:
            unlink_quietly(dir_fd, tmp_name)
            raise
    finally:
        os.close(dir_fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``path`` atomically through its directory's descriptor, in any directory (one
    received from someone else too): planted links or temporary names are never followed."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_bytes_at(dir_fd, path.name, text.encode("utf-8", "backslashreplace"))
    finally:
        os.close(dir_fd)


@contextmanager
def held_dir(path: Path | str) -> Iterator[int]:
    """The directory ``path``, opened once (no link followed at its last component) and held:
    writes through :func:`write_text_at` land in it even if its name is swapped meanwhile."""
    fd = os.open(path, _DIR_FLAGS | NOFOLLOW)
    try:
        yield fd
    finally:
        os.close(fd)


def write_text_at(dir_fd: int, name: str, text: str) -> None:
    """Write ``name`` atomically in the directory held as ``dir_fd`` (see :func:`held_dir`)."""
    write_bytes_at(dir_fd, name, text.encode("utf-8", "backslashreplace"))

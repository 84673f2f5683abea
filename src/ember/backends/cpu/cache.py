"""The compiled-code cache, verified: Ember loads only what it wrote.

Every entry (a model library, the kernel library's object) has a sidecar `NAME.sha256`
holding the SHA-256 and size Ember recorded when it wrote the entry. Before an entry is used
it must be a regular file (not a symlink, FIFO or directory) owned by this user, of the
recorded size and hash; anything else (truncated, garbage, another model's library, a planted
file, no sidecar) is removed and rebuilt, so no constructor of a file Ember did not write
runs. A library is checked right before it is loaded, by its path: loading through the
checked descriptor (/proc/self/fd/N) would be tighter, but the dynamic loader recognises
libraries by path name, and a reused descriptor number would hand back a library loaded
earlier. What remains is a race with a process of this same user rewriting the cache
between the check and the load, which could as well rewrite Ember itself.

The cache folder itself must belong to this user and not be writable by others."""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ember.support.errors import EmberError
from ember.support.paths import cache_dir

SIDECAR = ".sha256"


def cache_folder(name: str) -> Path:
    """cache_dir()/name, created private (0700) if new; refused if another user owns it or
    others may write to it (they could plant code in it)."""
    folder = cache_dir() / name
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = folder.lstat()
    except OSError as err:
        raise EmberError(f"cannot use the cache folder {folder}: {err.strerror or err}; set EMBER_CACHE_DIR to a "
                         "writable folder of yours") from None
    if not stat.S_ISDIR(info.st_mode):
        raise EmberError(f"the cache folder {folder} is not a folder (a symlink or a file); remove it or set "
                         "EMBER_CACHE_DIR")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise EmberError(f"the cache folder {folder} belongs to another user: set EMBER_CACHE_DIR to a folder of yours")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise EmberError(f"the cache folder {folder} is writable by other users, who could plant code in it: "
                         f"chmod go-w it or set EMBER_CACHE_DIR")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise EmberError(f"the cache folder {folder} is not writable; set EMBER_CACHE_DIR to a writable folder")
    return folder


def commit(built: Path, entry: Path) -> None:
    """Moves a freshly built file into the cache as `entry`, its sidecar recorded first in a
    temporary name (two processes committing one entry at once both succeed, one wins)."""
    data = built.read_bytes()
    # The entry's own name too: another entry's library copied over with its sidecar is refused.
    record = f"{hashlib.sha256(data).hexdigest()} {len(data)} {entry.name}\n"
    sidecar_tmp = built.with_name(built.name + SIDECAR)
    sidecar_tmp.write_text(record)
    # Both renames under the folder's lock: a reader never sees one process's library with
    # another's record (two builds of one source can differ, e.g. sanitized ones, which embed
    # their build folder's name; that mix was taken for tampering and discarded under the
    # other process, whose dlopen then failed).
    with _locked(entry.parent, exclusive=True):
        _clear_non_file(entry)
        os.replace(built, entry)
        os.replace(sidecar_tmp, entry.with_name(entry.name + SIDECAR))


@contextlib.contextmanager
def _locked(folder: Path, exclusive: bool):
    """flock on the cache folder's lock file: exclusive to commit or discard entries, shared to
    check and load them (where flock is missing, no lock)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover  (not POSIX)
        yield
        return
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(folder / ".lock", flags, 0o600)
    except OSError as err:
        raise EmberError(f"cannot lock the cache folder {folder}: {err.strerror or err}; set EMBER_CACHE_DIR to a "
                         "writable folder of yours") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def _discard_if_bad(entry: Path) -> None:
    """Removes `entry` if it is still bad once no commit is under way."""
    with _locked(entry.parent, exclusive=True):
        try:
            os.close(_open_checked(entry))
        except _Bad:
            discard(entry)
        except FileNotFoundError:
            pass


def intact(entry: Path) -> bool:
    """Whether `entry` is exactly what Ember recorded; a bad entry is removed."""
    try:
        with _locked(entry.parent, exclusive=False):
            fd = _open_checked(entry)
    except _Bad:
        _discard_if_bad(entry)
        return False
    except FileNotFoundError:
        return False
    os.close(fd)
    return True


def load_library(entry: Path) -> ctypes.CDLL:
    """dlopen of a cache entry checked just before (no commit can come in between)."""
    try:
        with _locked(entry.parent, exclusive=False):
            os.close(_open_checked(entry))
            try:
                return ctypes.CDLL(str(entry))
            except OSError as err:
                raise EmberError(f"cannot load the compiled library {entry}: {err}") from None
    except (_Bad, FileNotFoundError) as err:
        _discard_if_bad(entry)
        raise EmberError(f"the compiled library {entry.name} changed in the cache after it was built ({err}); "
                         "compile again") from None


def discard(entry: Path) -> None:
    """Removes a cache entry (whatever it is: file, symlink, FIFO, folder) and its sidecar."""
    for path in (entry, entry.with_name(entry.name + SIDECAR)):
        _clear_non_file(path)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            pass  # the next commit's os.replace reports what is wrong


class _Bad(Exception):
    """A cache entry that is not what Ember wrote (the message says how)."""


def _open_checked(entry: Path) -> int:
    """An open descriptor of `entry` whose content matches its sidecar (raises _Bad if not,
    FileNotFoundError if there is no entry)."""
    recorded = _recorded(entry)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(entry, flags)
    except FileNotFoundError:
        raise
    except OSError as err:  # a symlink (ELOOP), a folder, no permission...
        raise _Bad(f"cannot open it: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Bad("not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise _Bad("owned by another user")
        if recorded is None:
            raise _Bad("no record of it being written by Ember")
        digest, size = recorded
        if info.st_size != size:
            raise _Bad(f"{info.st_size} bytes where {size} were written")
        hasher = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
        if hasher.hexdigest() != digest:
            raise _Bad("its content is not what was written")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _recorded(entry: Path) -> tuple[str, int] | None:
    sidecar = entry.with_name(entry.name + SIDECAR)
    try:
        if not stat.S_ISREG(sidecar.lstat().st_mode) or sidecar.lstat().st_size > 256:
            return None
        digest, size, name = sidecar.read_text().split()
        return (digest, int(size)) if name == entry.name else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _clear_non_file(path: Path) -> None:
    """A folder squatting on an entry's name would make os.replace fail: remove it."""
    try:
        if stat.S_ISDIR(path.lstat().st_mode):
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def build_folder(folder: Path) -> tempfile.TemporaryDirectory[str]:
    """A private temporary folder inside the cache folder to build in."""
    try:
        return tempfile.TemporaryDirectory(dir=folder, prefix="build-")
    except OSError as err:
        raise EmberError(f"cannot build in the cache folder {folder}: {err.strerror or err}; set EMBER_CACHE_DIR "
                         "to a writable folder") from None

"""Writing what a compile produces without harming anything else in the file system.

The bundle: written into a temporary directory inside the destination, its files moved into
place only when all are complete (a failed or interrupted move puts the previous files back), and
only over files a glowpy manifest claims. Compiles into one directory take turns: each holds
`.glowpy.lock` there (fcntl.flock) from the check of the existing files to the last clean-up.

`-dump-*` files: written through the path the user gave, so a symbolic link keeps pointing at
its target and a FIFO is written to (a reader may be waiting on it)."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time

from glowpy import signals
from glowpy.codegen import bundle as bw
from glowpy.errors import UsageError, show

BUNDLE_SUFFIXES = (".o", ".h", ".weights.bin", ".weights.txt", ".json")
LOCK = ".glowpy.lock"
LOCK_WAIT = 300.0  # seconds: a publish takes seconds, so a longer hold is a hung compile


def write_dump(option: str, path: str, text: str):
    """-dump-* output: a new regular file, or written through an existing regular file, a
    symbolic link to one, a FIFO or a character device (/dev/null, /dev/stdout); anything else
    (a directory, a socket, a block device, a dangling link) is refused before it is opened."""
    signals.checkpoint()  # a signal swallowed while the text was made: no file
    where = f"-{option}={show(path)}"
    try:
        st = os.stat(path)  # follows a symbolic link
    except FileNotFoundError:
        if os.path.islink(path):
            raise UsageError(f"{where}: is a symbolic link to nothing; give a file, a link to a "
                             "file, a FIFO or a new path") from None
        st = None
    except OSError as e:
        raise UsageError(f"{where}: cannot write: {e.strerror}") from None
    if st is not None and not _writable_kind(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "neither a regular file, a FIFO nor a character device"
        raise UsageError(f"{where}: is {what}; give a file, a link to a file, a FIFO or a new path")
    flags = os.O_WRONLY | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if st is None else os.O_TRUNC)
    fd = None
    try:
        with signals.deferred():  # a file this call creates is known before a signal strikes
            fd = os.open(path, flags, 0o666)
        if not _writable_kind(os.fstat(fd).st_mode):
            raise UsageError(f"{where}: is neither a regular file, a FIFO nor a character device")  # swapped meanwhile
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = None
            f.write(text)
    except OSError as e:
        _forget(path, st, fd)
        raise UsageError(f"{where}: cannot write: {e.strerror}") from None
    except BaseException:
        _forget(path, st, fd)
        raise


def _writable_kind(mode) -> bool:
    return stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _forget(path: str, st, fd):
    """A failed dump: close it, and remove the file if this call created it."""
    if fd is not None:
        os.close(fd)
    if st is None:
        try:
            os.unlink(path)
        except OSError:
            pass


def glowpy_manifest(path: str, name: str) -> bool:
    """Is `path` the manifest of a bundle named `name` that glowpy wrote?"""
    if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > 64 << 20:
        return False
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(m, dict) and "glowpy_version" in m and m.get("network_name") == name


def check_replaceable(output_dir: str, name: str):
    """Existing NAME.* files may only be replaced when they are a bundle glowpy wrote; a
    directory, a symbolic link or a foreign file there is an error and stays untouched."""
    if not os.path.isdir(output_dir):
        return
    existing = [name + sfx for sfx in BUNDLE_SUFFIXES
                if os.path.lexists(os.path.join(output_dir, name + sfx))]
    if not existing:
        return
    ours = glowpy_manifest(os.path.join(output_dir, name + ".json"), name)
    for f in existing:
        p = os.path.join(output_dir, f)
        if os.path.islink(p) or not os.path.isfile(p) or not ours:
            what = ("a symbolic link" if os.path.islink(p) else "a directory" if os.path.isdir(p)
                    else "not a file" if not os.path.isfile(p) else
                    f"not part of a bundle glowpy wrote (no matching {name}.json)")
            raise UsageError(f"-emit-bundle={show(output_dir)}: '{show(f)}' exists and is {what}; "
                             "glowpy will not replace it: move it away, or choose another "
                             "-emit-bundle or -network-name")


def precheck(output_dir: str, name: str):
    """check_replaceable before compiling (to fail fast), under the lock: another compile's
    moves leave a NAME.o without its NAME.json for a moment."""
    if not os.path.isdir(output_dir):
        return
    lock = None
    try:
        with signals.deferred():  # see _Lock: `lock` names the held lock before a signal strikes
            lock = _Lock(output_dir, LOCK_WAIT)
        check_replaceable(output_dir, name)
    finally:
        if lock is not None:
            with signals.deferred():
                lock.release()


class _Lock:
    """`.glowpy.lock` in the output directory, held with flock. The compile that created the file
    removes it (while still holding it); one whose file was removed meanwhile locks the new one,
    so every holder holds the file that is there. A file left by a killed compile stays, empty,
    and is reused (flock itself ends with the process).

    Callers construct it inside signals.deferred() and assign it there, within the try whose
    finally releases it: a signal handled between the constructor's return and the assignment
    would otherwise leave the flock held by an fd nobody closes, and a later lock of the same
    directory in the process would wait LOCK_WAIT for it. So that the wait stays interruptible,
    a signal held back while waiting ends the wait (`_acquire`)."""

    def __init__(self, output_dir: str, wait: float):
        self.path = os.path.join(output_dir, LOCK)
        self.fd, self.created = None, False
        deadline = time.monotonic() + wait
        where = f"-emit-bundle={show(output_dir)}"
        try:
            self._acquire(where, wait, deadline)
        except BaseException:  # the wait timed out or a signal came: hold nothing
            self.release()
            raise

    def _acquire(self, where: str, wait: float, deadline: float):
        while True:
            self._open(where)
            while True:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    signum = signals.held()
                    if signum is not None:  # a signal came while waiting: it ends the wait
                        raise signals.Interrupted(signum) from None
                    if time.monotonic() > deadline:
                        raise UsageError(f"{where}: another compile into this directory has held "
                                         f"{LOCK} for more than {wait:g} s; try again when it has "
                                         "finished") from None
                    time.sleep(0.05)
            try:
                now = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            st = os.fstat(self.fd)
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return
            self.created = False  # removed by its creator meanwhile: lock the new one
            self.release()

    def _open(self, where: str):
        with signals.deferred():  # `created` is set before a signal can strike
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC |
                                  os.O_NOFOLLOW, 0o644)
                self.created = True
            except FileExistsError:
                try:
                    self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
                except OSError as e:
                    what = "is a symbolic link" if e.errno == errno.ELOOP else e.strerror
                    raise UsageError(f"{where}: cannot lock {LOCK}: {what}") from None
            except OSError as e:
                raise UsageError(f"{where}: cannot lock {LOCK}: {e.strerror}") from None
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            raise UsageError(f"{where}: cannot lock {LOCK}: it is not a regular file")

    def release(self):
        if self.fd is None:
            return
        if self.created:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self.fd)
        self.fd, self.created = None, False


def publish(output_dir: str, name: str, files: dict, lock_wait: float | None = None) -> dict:
    """Writes all files to a temporary directory inside output_dir, then moves them into
    place. If anything fails, the files already moved are taken back, the previous bundle's
    files restored and the directories this call created removed again."""
    created = []
    d = os.path.abspath(output_dir)
    while not os.path.lexists(d):
        created.append(d)
        d = os.path.dirname(d)
    tmp, moved, ok, lock = None, [], False, None  # moved: (dest, backup path or None)
    try:
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create output directory '{show(output_dir)}': "
                             f"{e.strerror}") from None
        with signals.deferred():  # `lock` names the held lock before a signal strikes
            lock = _Lock(output_dir, LOCK_WAIT if lock_wait is None else lock_wait)
        check_replaceable(output_dir, name)  # again: something may have appeared meanwhile
        try:
            with signals.deferred():  # so that `tmp` names the directory before a signal
                tmp = tempfile.mkdtemp(prefix=".glowpy-", dir=output_dir)
            new, old = os.path.join(tmp, "new"), os.path.join(tmp, "old")
            os.mkdir(new)
            os.mkdir(old)
            bw.write_bundle(new, name, files)
            paths = {}
            signals.checkpoint()  # nothing moved yet: a swallowed signal ends the compile here
            # a signal during the moves is raised after them, before `ok`: all are taken back
            with signals.deferred():
                for suffix in files:
                    dest = os.path.join(output_dir, name + suffix)
                    backup = os.path.join(old, name + suffix) if os.path.lexists(dest) else None
                    if backup:
                        os.replace(dest, backup)
                    moved.append((dest, backup))
                    os.replace(os.path.join(new, name + suffix), dest)
                    paths[suffix] = dest
        except OSError as e:
            raise UsageError(f"cannot write the bundle into '{show(output_dir)}': "
                             f"{e.strerror}") from None
        ok = True
        return paths
    finally:
        # no second signal may cut the restore short; once the bundle is in place the compile
        # has succeeded, and a signal arriving during the last clean-up is dropped
        with signals.deferred(raise_pending=not ok):
            _undo(moved, tmp, created, ok, lock)


def _undo(moved: list, tmp: str | None, created: list[str], ok: bool, lock):
    """publish's clean-up: without `ok`, the previous bundle back and created directories gone."""
    if not ok:
        for dest, backup in reversed(moved):
            try:
                if backup is None or os.path.lexists(backup):
                    if os.path.lexists(dest):
                        os.unlink(dest)
                    if backup is not None:
                        os.replace(backup, dest)
            except OSError:
                pass
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    if lock is not None:
        lock.release()  # before the directories: the lock file is inside
    if not ok:
        for d in created:  # innermost first; only if still empty
            try:
                os.rmdir(d)
            except OSError:
                break

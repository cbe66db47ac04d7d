"""The one atomic file writer: every file evalkit keeps is written through `write_atomic`.

A temp file beside the target, written, flushed, given the target's mode (an existing
file's, else what a plain open() gives: 0666 minus the umask, never mkstemp's 0600),
fsynced, optionally checked, renamed over the target, and the folder fsynced. A reader sees
the old file or the new one, never half of one; a crash leaves at most a `.name.*.tmp`
beside it, and an error removes it. Eight hand-kept copies of this had drifted (one never
fsynced and left TREC files 0600); this module has no evalkit import, so any layer can use it.

A whole folder (a merged run, a redacted copy, an imported vault) is built the same way by
`staged_dir`: out of sight beside its final place, then renamed into it.

No file is written through a symbolic link evalkit did not make: the rename replaces a link
at the target (its target is left as it was), and a file appended to or changed in place is
opened with `open_no_follow`, which refuses a link.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; writers proceed unlocked there
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "STAGE_SUFFIX",
    "append_fsynced",
    "backup",
    "default_mode",
    "folder_lock",
    "fsync_dir",
    "open_no_follow",
    "read_appended",
    "remove_stale_stages",
    "staged_dir",
    "write_atomic",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation under os.fdopen(fd, "ab")
SYMLINK_REFUSED = "is a symbolic link; evalkit never writes through one (remove it, or name the real file)"
# A folder being built by staged_dir: `.<final name>.<random>.stage.tmp/<final name>/`.
STAGE_SUFFIX = ".stage.tmp"


def default_mode() -> int:
    """What a plain open() would create: 0666 minus the umask (results are meant to be shared)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def open_no_follow(path: str | Path, flags: int) -> int:
    """`os.open(path, flags)` for a file appended to or changed in place, never through a
    symbolic link: one planted there would make evalkit write outside its folder. A file it
    creates gets what a plain open() gives (0666 minus the umask). Returns the descriptor.

    Raises:
        OSError: ELOOP with SYMLINK_REFUSED when `path` is a symbolic link; else the OS's.
    """
    if not _NOFOLLOW and os.path.islink(path):  # no O_NOFOLLOW (Windows): check, then open
        raise OSError(errno.ELOOP, SYMLINK_REFUSED, os.fspath(path))
    try:
        return os.open(path, flags | _NOFOLLOW | _BINARY, 0o666)
    except OSError:
        if os.path.islink(path):
            raise OSError(errno.ELOOP, SYMLINK_REFUSED, os.fspath(path)) from None
        raise


def append_fsynced(path: str | Path, data: bytes) -> None:
    """Append `data` (whole lines) to the log file `path` in one write, flushed and fsynced,
    never through a symbolic link (`open_no_follow`); the file is made when missing.

    A torn last line (a writer killed mid-line) is cut first, so that it cannot glue onto
    the first line appended now. The caller holds whatever lock keeps writers apart (a
    run's `RunDir.writer`): this is the write, not the lock.

    Raises:
        OSError: the OS refused (a full disk, a symbolic link at `path`).
    """
    with os.fdopen(open_no_follow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT), "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.seek(0)
                old = f.read()
                f.truncate(old.rfind(b"\n") + 1)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_appended(path: str | Path, check: Callable[[dict], list[str]]) -> list[dict]:
    """Every line of a log `append_fsynced` writes, parsed and checked, in file order. The
    unterminated last line a killed writer leaves is not read: the next append cuts it.

    Args:
        path: the log; a missing file holds no line.
        check: a line's problems (empty when it is valid).

    Raises:
        OSError: the file could not be read.
        InputError: every line that is not JSON, too deep or fails `check`, at its line.
    """
    from evalkit.errors import InputError, Problem
    from evalkit.jsonio import MAX_WRITTEN_DEPTH, loads

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    lines.pop()  # b"" when the file ends with a newline; else the line being written when a writer died
    out: list[dict] = []
    problems: list[Problem] = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            x = loads(raw, max_depth=MAX_WRITTEN_DEPTH, path=str(path), line=lineno)
        except InputError as e:  # not JSON, not UTF-8 or too deep, said at its line
            problems.extend(e.problems)
            continue
        bad = check(x) if isinstance(x, dict) else ["expected a JSON object"]
        if bad:
            problems += [Problem(b, path=str(path), line=lineno) for b in bad]
            continue
        out.append(x)
    if problems:
        raise InputError(problems)
    return out


def fsync_dir(path: Path) -> None:
    """Make renames in `path` durable; some filesystems refuse fsync on a folder."""
    with suppress(OSError):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(
    path: str | Path,
    payload: bytes | str | Iterable[bytes],
    *,
    mode: int | None = None,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Replace `path` with `payload` (bytes; str as UTF-8; or pieces of bytes, streamed).

    Args:
        mode: permission bits; default the existing file's, else `default_mode()` (also
            when `path` is a symbolic link: the link is replaced, its target left untouched).
        check: called with the finished temp file before it replaces `path` (e.g. validate
            what was written); whatever it raises leaves `path` untouched.

    Returns:
        The path written.

    Raises:
        OSError: the OS refused; the temp file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        # lstat: a symbolic link at `path` is replaced, not followed, so its target's mode is not ours.
        try:
            st = path.lstat()
        except FileNotFoundError:
            st = None
        mode = st.st_mode & 0o7777 if st is not None and stat.S_ISREG(st.st_mode) else default_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(payload, str):
                f.write(payload.encode("utf-8"))
            elif isinstance(payload, bytes | bytearray | memoryview):
                f.write(payload)
            else:
                for piece in payload:
                    f.write(piece)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.filename is None or e.filename == tmp:
            # A full disk or an I/O error on write or fsync names no file, or our temp one:
            # the message must name the file the user asked for.
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


@contextmanager
def folder_lock(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """An advisory lock (flock) on a folder itself; yields whether it was taken.

    The one inter-process lock for files several processes update: a run folder's files,
    and the `eval_sets.lock` manifest beside eval set files (a read-modify-write inside it
    cannot lose another writer's entry). The kernel drops it when its process dies, so a
    temp file found while holding it was left by a killed process. Not re-entrant: a
    process must not take it twice on one folder. Where flock is unsupported, everything
    proceeds unlocked.
    """
    if fcntl is None:
        yield True
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            locked = True
        except OSError as e:
            # Held by another process: False. Any other failure means no flock here.
            locked = e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN)
        yield locked
    finally:
        os.close(fd)  # releases the lock


def backup(path: str | Path) -> Path:
    """Copy `path` to the first free name of `<name>.bak`, `<name>.bak.1`, `<name>.bak.2`, ...
    beside it, and return that name.

    Each name is created exclusively (O_EXCL, never through a symlink), so an older backup is
    never overwritten, not even by a writer racing this one. The copy keeps the file's
    permission bits and is fsynced before the caller replaces the original.

    Raises:
        OSError: `path` cannot be read, or no backup can be created.
    """
    src = Path(path)
    data = src.read_bytes()
    mode = src.stat().st_mode & 0o7777
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    n = 0
    while True:
        dest = src.with_name(f"{src.name}.bak" + (f".{n}" if n else ""))
        try:
            fd = os.open(dest, flags, mode)
        except FileExistsError:
            n += 1
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        fsync_dir(src.parent)
        return dest


@contextmanager
def staged_dir(final: str | Path, *, replace: bool = False) -> Iterator[Path]:
    """Build a folder out of sight, then put it at `final` whole.

    Yields `<parent>/.<name>.<random>.stage.tmp/<name>/`, a new empty folder with the mode a
    plain mkdir gives (the umask's, not mkdtemp's 0700) that already carries its final name
    (a run folder's id is its name). When the block ends, every file and folder in it is
    fsynced, it is renamed to `final` and the parent is fsynced; when the block raises, it is
    removed and `final` is left as it was. A hidden folder is nothing any reader lists.

    The stage is flock'ed while in use (`folder_lock`), created under the parent's lock, so
    one a killed process left is removed by the next `staged_dir` in the same parent
    (`remove_stale_stages`) and a live one never is.

    Args:
        final: where the folder goes. Its parent is created if missing.
        replace: `final` may be a non-empty folder (the caller checked it may go): it is
            moved into the stage, the new folder renamed in, then the old one removed (put
            back if the rename fails; a kill between the two renames leaves it in the
            stage). Without it only an absent or empty `final` is taken.

    Raises:
        FileExistsError: `final` is a non-empty folder at the rename and `replace` is not set
            (nothing is replaced; the staged folder is removed).
        OSError: the OS refused; the staged folder is removed.
    """
    final = Path(final)
    parent = final.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    held = ExitStack()
    with folder_lock(parent):
        # Made and locked under the parent's lock: the clean-up, under it too, never sees a
        # stage that is not locked yet.
        for gone in remove_stale_stages(parent, locked=True):
            logging.getLogger("evalkit").warning("evalkit: removed %s, left by a killed process", gone)
        stage = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=STAGE_SUFFIX, dir=parent))
        held.enter_context(folder_lock(stage))
    try:
        with held:
            work = stage / final.name
            work.mkdir()
            yield work
            _fsync_tree(work)
            _rename_into_place(work, final, stage if replace else None)
            fsync_dir(parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _rename_into_place(work: Path, final: Path, aside: Path | None) -> None:
    """Rename `work` to `final`; with `aside` (a folder to move an old `final` into), a
    non-empty `final` is swapped out, and put back if the rename fails."""
    try:
        os.replace(work, final)  # onto nothing, or onto an empty folder
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        if aside is None:
            raise FileExistsError(errno.EEXIST, "exists and is not empty", os.fspath(final)) from None
    old = aside / ".previous"
    os.rename(final, old)
    try:
        os.rename(work, final)
    except BaseException:
        os.rename(old, final)
        raise


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root` (and `root`): a rename of the folder is only
    as durable as what is in it."""
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue  # a link is the name of something else; a fifo would block the open
            fd = os.open(path, os.O_RDONLY | _BINARY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def remove_stale_stages(parent: str | Path, *, locked: bool = False) -> list[Path]:
    """Remove the `staged_dir` stages in `parent` that a killed process left: hidden folders
    named `*.stage.tmp` whose lock is free. A live one (its lock held) is never removed. Where
    flock is unsupported nothing is removed, since a live stage cannot be told from a dead one.

    Args:
        parent: the folder to clean.
        locked: the caller holds `parent`'s `folder_lock` already.

    Returns:
        The folders removed.
    """
    parent = Path(parent)
    if fcntl is None or not parent.is_dir():
        return []
    if not locked:
        with folder_lock(parent):
            return remove_stale_stages(parent, locked=True)
    removed = []
    for p in parent.iterdir():
        if not (p.name.startswith(".") and p.name.endswith(STAGE_SUFFIX)) or p.is_symlink() or not p.is_dir():
            continue
        try:
            with folder_lock(p, wait=False) as free:
                if free:
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(p)
        except OSError:  # gone meanwhile, or not ours to open: not a stage to clean
            continue
    return removed

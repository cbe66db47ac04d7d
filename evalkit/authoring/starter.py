"""`evalkit init`: a starter project in an empty folder, from the installed package alone.

It writes what a first `evalkit run` needs and nothing it would overwrite:

    evalkit.toml      every run setting, commented out at its default ([run], [eval_set]), as
                      evalkit.cli.init.project_config_text writes it
    eval_set.jsonl    a few example cases about the sample notes, one of each kind
    sample_vault/     the sample notes those cases are about (the reference chatbot indexes them)
    .gitignore        the lines that keep note text out of git (appended to one that exists)

The sample notes and cases ship inside the wheel (`evalkit/bundled/`, copied there by
setup.py at build time); in a source checkout they are read from the repository itself.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from evalkit.config import (
    DEFAULT_EVAL_SET,
    DEFAULT_VAULT,
)
from evalkit.errors import BadConfig, Problem
from evalkit.project import PROJECT_CONFIG
from evalkit.store.atomic import (
    SYMLINK_REFUSED,
    default_mode,
    open_no_follow,
    staged_dir,
    write_atomic,
)

# One case of each kind the bundled set holds: single note, reasoning, multi-hop with support
# groups, a recency rule, and two unanswerable ones (in-domain and general knowledge).
STARTER_CASE_IDS = ("sv-002", "sv-021", "sv-030", "sv-037", "sv-049", "sv-055")

# What keeps note text out of git (docs/sharing.md, "What to commit"): results.jsonl holds answers and
# chunk text, the HTML reports and TREC topics show them, the judge cache holds prompts.
GITIGNORE_LINES = (
    "# evalkit: files that hold note text, answers or keys",
    "results/*/results.jsonl",
    "results/*/*.tmp",
    "results/*/.lock",
    "results/*/report.html",
    "results/compare-*.html",
    "topics.tsv",
    "results/latest",
    "results/latest.json",
    "results/runs.sqlite*",
    "cache/",
    ".env",
)


@dataclass
class InitResult:
    """What `init_project` wrote (paths relative to the project folder)."""

    folder: Path
    written: list[str] = field(default_factory=list)
    gitignore_added: list[str] = field(default_factory=list)


def bundled_root() -> Path:
    """The folder holding the bundled `sample_vault/` and `eval_set.jsonl`.

    In an installed wheel that is `evalkit/bundled/` (package data); in a source checkout
    (or an editable install) it is the repository root, where the originals live.
    """
    packaged = Path(str(resources.files("evalkit") / "bundled"))
    if (packaged / DEFAULT_EVAL_SET).is_file():
        return packaged
    checkout = Path(str(resources.files("evalkit"))).parent
    if (checkout / DEFAULT_EVAL_SET).is_file() and (checkout / DEFAULT_VAULT).is_dir():
        return checkout
    raise BadConfig(Problem("the sample notes are missing from this installation of evalkit; reinstall it"))


def starter_cases(root: Path | None = None) -> list[str]:
    """The JSONL lines of STARTER_CASE_IDS, byte for byte as in the bundled eval set."""
    lines = (root or bundled_root()).joinpath(DEFAULT_EVAL_SET).read_text(encoding="utf-8").splitlines()
    by_id = {json.loads(line)["id"]: line for line in lines if line.strip()}
    return [by_id[case_id] for case_id in STARTER_CASE_IDS]


def init_project(folder: Path, config_text: str) -> InitResult:
    """Write a starter project into `folder` (created if missing). Never overwrites a file.

    `config_text` is the evalkit.toml to write (`evalkit.cli.init.project_config_text`: it is
    made from run_eval's flags, which live in the CLI).

    Everything that can be checked is checked before the first write (issue 38 item 10): the
    names it would take, `.gitignore` (a regular file, read as bytes in any encoding, never
    through a link nor waited on as a FIFO), the bundled notes and cases. Then the notes are
    built out of sight and renamed in whole, eval_set.jsonl and evalkit.toml written
    atomically, and `.gitignore` appended to last. When a write fails (a full disk), what
    this call put in place is taken back, so the same command can simply be run again.

    A piece already there exactly as init writes it (a killed init placed it) counts as done,
    so the rerun finishes the project; a finished project is refused as before.

    Raises:
        BadConfig: a file or folder it would write exists already (not as init writes it, or
            the whole project is there), `.gitignore` is a link or
            not a regular file, or is too large (nothing is written); a write failed (what
            was written is removed, `.gitignore` keeps its old bytes).
    """
    # ---- the plan: nothing below writes
    root = bundled_root()
    vault = root / DEFAULT_VAULT
    sources = [vault, *sorted(vault.rglob("*"))]
    eval_set = ("\n".join(starter_cases(root)) + "\n").encode("utf-8")
    payloads = {DEFAULT_EVAL_SET: eval_set, PROJECT_CONFIG: config_text.encode("utf-8")}
    # A piece that is there already exactly as init writes it was placed by an init that was
    # killed before it finished: it counts as done, so running the command again finishes
    # the project. Anything else there is the user's, and is never overwritten.
    done = {name for name in (PROJECT_CONFIG, DEFAULT_EVAL_SET, DEFAULT_VAULT) if _placed_already(folder, name, payloads, vault)}
    existing = [name for name in (PROJECT_CONFIG, DEFAULT_EVAL_SET, DEFAULT_VAULT)
                if name not in done and os.path.lexists(folder / name)]
    if existing:
        raise BadConfig(
            [Problem("exists already; evalkit init writes only into a folder without it", path=str(folder / name))
             for name in existing]
        )
    gitignore = folder / ".gitignore"
    old = _read_gitignore(gitignore)
    missing, appended = _gitignore_addition(old)
    if len(done) == 3 and not appended:  # a finished project, not a killed init: nothing to do is refused
        raise BadConfig([Problem("exists already; evalkit init writes only into a folder without it",
                                 path=str(folder / name)) for name in (PROJECT_CONFIG, DEFAULT_EVAL_SET, DEFAULT_VAULT)])

    # ---- the writes, taken back when one fails
    result = InitResult(folder=folder)
    placed: list[Path] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if DEFAULT_VAULT not in done:
            with staged_dir(folder / DEFAULT_VAULT) as work:  # a killed init leaves a hidden stage, not half a vault
                for src in sources:  # the umask's modes, not the installation's (copytree kept those)
                    dest = work / src.relative_to(vault)
                    if src.is_dir():
                        dest.mkdir(exist_ok=True)
                    else:
                        shutil.copyfile(src, dest)
            placed.append(folder / DEFAULT_VAULT)
        result.written.append(DEFAULT_VAULT + "/")
        for name, payload in payloads.items():
            if name in done:
                result.written.append(name)
                continue
            write_atomic(folder / name, payload, mode=default_mode())
            placed.append(folder / name)
            result.written.append(name)
        if appended:
            _append_gitignore(gitignore, old, appended)
            result.gitignore_added = missing
    except BaseException as e:  # a full disk, a .gitignore swapped for a FIFO, Ctrl-C: take back what was placed
        for path in reversed(placed):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        where = e.filename if e.filename is not None else folder
        raise BadConfig(Problem(f"cannot write the starter project ({e.strerror or e}); nothing of it was kept, "
                                "run evalkit init again when this is fixed", path=str(where))) from None
    return result


def _placed_already(folder: Path, name: str, payloads: dict[str, bytes], vault: Path) -> bool:
    """Whether `folder/name` is a regular file (a real folder, for the notes) holding exactly
    what init writes there: what a killed init left in place."""
    path = folder / name
    try:
        st = path.lstat()
    except OSError:
        return False
    if name in payloads:
        return stat.S_ISREG(st.st_mode) and st.st_size == len(payloads[name]) and path.read_bytes() == payloads[name]
    if not stat.S_ISDIR(st.st_mode):
        return False
    ours = {p.relative_to(vault): p for p in vault.rglob("*")}
    theirs = {p.relative_to(path): p for p in path.rglob("*")}
    if ours.keys() != theirs.keys():
        return False
    for rel, src in ours.items():
        dest = theirs[rel]
        if dest.is_symlink() or src.is_dir() != dest.is_dir():
            return False
        if src.is_file() and src.read_bytes() != dest.read_bytes():
            return False
    return True


# A .gitignore is a few KB; past this it is not one (and is not read whole).
MAX_GITIGNORE_BYTES = 16 << 20
_KIND = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(path: Path, mode: int) -> BadConfig:
    kind = next((name for test, name in _KIND if test(mode)), "not a regular file")
    return BadConfig(Problem(f"is {kind}, not a regular file: evalkit init appends its lines only to a file "
                             "(nothing was written)", path=str(path)))


def _read_gitignore(path: Path) -> bytes | None:
    """The bytes of `.gitignore`, or None when there is none. Refuses a link, anything that is
    not a regular file (a FIFO would block the read forever) and a file over
    MAX_GITIGNORE_BYTES, before any write. Any encoding: the bytes are never decoded."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BadConfig(Problem(f"cannot read ({e.strerror or e})", path=str(path))) from None
    if stat.S_ISLNK(info.st_mode):  # appended to below: never through a link
        raise BadConfig(Problem(SYMLINK_REFUSED, path=str(path)))
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(path, info.st_mode)
    try:
        # O_NONBLOCK: a FIFO put here since the lstat opens at once and is refused below.
        fd = open_no_follow(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise BadConfig(Problem(f"cannot read ({e.strerror or e})", path=str(path))) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        data = f.read(MAX_GITIGNORE_BYTES + 1)
    if len(data) > MAX_GITIGNORE_BYTES:
        raise BadConfig(Problem(f"is over {MAX_GITIGNORE_BYTES >> 20} MB: not a .gitignore evalkit init appends to "
                                "(nothing was written)", path=str(path)))
    return data


def _gitignore_addition(old: bytes | None) -> tuple[list[str], bytes]:
    """(the GITIGNORE_LINES `old` lacks, the bytes that append them), or ([], b"") when it
    lacks none. Lines are compared as bytes, so a .gitignore in any encoding keeps every
    byte it has; the new lines end as its lines do (CRLF when it uses CRLF)."""
    have = set((old or b"").splitlines())
    missing = [line for line in GITIGNORE_LINES if line.encode("utf-8") not in have]
    if not [line for line in missing if not line.startswith("#")]:
        return [], b""
    eol = b"\r\n" if old and b"\r\n" in old else b"\n"
    text = eol.join(line.encode("utf-8") for line in missing) + eol
    if old:
        lines = old.splitlines()
        text = (eol if lines[-1].strip() else b"") + text  # a blank line before ours
        if not old.endswith((b"\n", b"\r")):
            text = eol + text  # end its last line first
    return missing, text


def _append_gitignore(path: Path, old: bytes | None, text: bytes) -> None:
    """Append `text` to `path` (created when `old` is None). A failed write leaves the file
    as it was: cut back to its old length, or removed when this call made it."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | (os.O_CREAT | os.O_EXCL if old is None else 0)
    fd = open_no_follow(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for a FIFO since it was read
            raise _not_regular(path, info.st_mode)
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            if old is None:
                path.unlink(missing_ok=True)
            else:
                os.ftruncate(fd, info.st_size)
            raise OSError(e.errno, e.strerror, str(path)) from None  # said with the file it was writing
    finally:
        os.close(fd)

"""What an import writes: the eval set, validated before it replaces anything, and the vault
of notes a format's fixtures carry (hindsight's seedFacts, a BEIR corpus), built out of
sight and renamed into place, with the marker that lets `--force` replace it later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, BadEvalSet, InputError, Problem
from evalkit.interop.importers.base import ImportedCase
from evalkit.jsonio import read_json
from evalkit.store.atomic import backup, staged_dir, write_atomic

__all__ = [
    "VAULT_MARKER",
    "check_output",
    "check_replaceable",
    "check_vault_out",
    "dumps_cases",
    "write_eval_set",
    "write_marker",
    "write_vault",
]

# What a format's notes are, for check_vault_out's message (hindsight's seed facts otherwise).
_NOTES_OF = {"mtrag": "gold passages"}
# Left in a folder write_vault made: what `--force` may replace (hidden: no chatbot indexes it).
VAULT_MARKER = ".evalkit-import.json"


def _hashes(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`, the marker left out."""
    import hashlib

    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if (p.is_file() or p.is_symlink()) and p.name != VAULT_MARKER
    }


def write_marker(folder: Path, info: Mapping[str, Any]) -> None:
    """Leave the marker `--force` checks: `info` plus every file written, with its sha256."""
    body = {**info, "files": _hashes(folder)}
    (folder / VAULT_MARKER).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")


def check_replaceable(vault_out: Path, field: str) -> None:
    """`--force` may replace `vault_out` only when an import wrote every file in it, as it is
    now: its marker lists each file with its sha256 (a forged or old marker, a note the user
    added or edited, a symbolic link: refused, naming the file).

    Raises:
        BadConfig: no marker, an unreadable one, or a file it does not vouch for.
    """
    marker = vault_out / VAULT_MARKER
    how = "remove it yourself or choose another folder"
    if marker.is_symlink() or not marker.is_file():
        raise BadConfig(Problem(f"holds files evalkit import did not write (no {VAULT_MARKER}); not replacing it even "
                                f"with --force: {how}", path=str(vault_out), field=field))
    try:
        listed = read_json(marker).get("files")
    except (InputError, AttributeError):
        listed = None
    if not isinstance(listed, dict):
        raise BadConfig(Problem(f"its {VAULT_MARKER} does not list the files an import wrote; not replacing it even "
                                f"with --force: {how}", path=str(vault_out), field=field))
    for rel, sha in _hashes(vault_out).items():
        if (vault_out / rel).is_symlink() or listed.get(rel) != sha:
            raise BadConfig(Problem(f"{rel} was not written by evalkit import, or changed since; not replacing the "
                                    f"folder even with --force: {how}", path=str(vault_out), field=field))


def dumps_cases(cases: Sequence[ImportedCase]) -> bytes:
    """The JSONL bytes: one case per line, in the house style of eval_set.jsonl."""
    return b"".join(json.dumps(c.case, ensure_ascii=False).encode("utf-8") + b"\n" for c in cases)


def check_output(output: str | Path, inputs: Sequence[str | Path]) -> None:
    """Refuse an `--output` that is one of the files (or inside a folder) being imported:
    writing it would replace the fixture with its own conversion.

    Raises:
        BadConfig: `output` resolves to an input, or lies inside an input folder.
    """
    out = Path(output).resolve()
    for given in inputs:
        src = Path(given).resolve()
        if out == src or (src.is_dir() and src in out.parents):
            raise BadConfig(Problem(f"is the input {given}: write the eval set elsewhere", path=str(output),
                                    field="--output"))


def write_eval_set(
    cases: Sequence[ImportedCase],
    output: str | Path,
    *,
    force: bool = False,
    extra_categories: Sequence[str] | None = None,
) -> Path | None:
    """Validate `cases` with `dataset.read_eval_set`, then write them to `output` atomically.

    The JSONL is written to a temporary file beside `output`, loaded with evalkit's own
    eval-set loader, and renamed over `output` only when it loads without a problem; a
    problem is reported against the fixture item the case came from.

    Args:
        cases: from `import_cases`.
        output: the eval set to write.
        force: overwrite an existing `output`, after copying it to a `.bak` (`store.atomic.backup`:
            `.bak`, `.bak.1`, ..., never an older one overwritten), so no command destroys labels.
        extra_categories: categories allowed beyond the built-in ones; None reads evalkit.toml.

    Returns:
        The backup of the file `output` replaced, or None.

    Raises:
        BadConfig: `output` exists and `force` is not set, or the `eval_sets.lock` beside
            it locks its name (a baselined eval set is immutable).
        BadEvalSet: a converted case that evalkit's loader rejects.
    """
    from evalkit.evalset.load import read_eval_set
    from evalkit.evalset.lock import check_writable

    output = Path(output)
    check_writable(output)  # a baselined (locked) eval set is immutable, even with --force
    if output.exists() and not force:
        raise BadConfig(Problem("already exists; pass --force to overwrite it", path=str(output), field="--output"))
    if not cases:
        raise BadEvalSet(Problem("the fixtures hold no case", field="PATH"))
    def validated(tmp: Path) -> None:  # the file as written must load, or nothing replaces output
        _, problems = read_eval_set([tmp], extra_categories)
        if problems:
            raise BadEvalSet([_locate(p, cases) for p in problems])

    payload = dumps_cases(cases)
    kept = None
    if output.exists():
        kept = backup(output)  # removed again below if the new cases are refused
    try:
        write_atomic(output, payload, check=validated)
    except BaseException:
        if kept is not None:
            kept.unlink(missing_ok=True)  # nothing was replaced: the backup would only confuse
        raise
    return kept


def _locate(problem: Problem, cases: Sequence[ImportedCase]) -> Problem:
    """A loader problem (temp file, line N) restated against the fixture item of case N."""
    if problem.line is None or not 1 <= problem.line <= len(cases):
        return Problem(problem.message, field=problem.field)
    c = cases[problem.line - 1]
    message = f"{problem.message} (in the converted case {c.case.get('id')!r})"
    if c.line is not None:
        return Problem(message, path=c.path, line=c.line, field=problem.field)
    return Problem(message, path=c.path, field=f"[{c.index}]" + (f" -> {problem.field}" if problem.field else ""))


def check_vault_out(
    cases: Sequence[ImportedCase],
    vault_out: str | Path | None,
    *,
    output: str | Path | None = None,
    force: bool = False,
    fmt: str | None = None,
) -> None:
    """Refuse, before anything is written, a vault folder `write_vault` could not fill.

    Args:
        cases: from `import_cases`.
        vault_out: the folder the cases' notes go to (--vault-out); None = not given.
        output: the eval set about to be written; it may not be inside `vault_out`.
        force: allow replacing a folder an earlier import wrote.
        fmt: the format's name, for the messages.

    Raises:
        BadConfig: the cases carry notes and no `vault_out` is given; `vault_out` is given
            but no case carries a note; `vault_out` is a file, or a non-empty folder (without
            `force`, or, even with it, one that `write_vault` did not write); `output` is
            inside `vault_out`.
    """
    n_notes = sum(len(c.files) for c in cases)
    name = f"--format {fmt}" if fmt else "this format"
    if vault_out is None:
        if n_notes:
            raise BadConfig(Problem(
                f"{name} writes the fixtures' {_NOTES_OF.get(fmt or '', 'seed facts')} as notes ({n_notes} here) "
                "and needs a folder for them: "
                "pass --vault-out DIR (a new or empty folder), then run the eval set with --vault DIR",
                field="--vault-out",
            ))
        return
    vault_out = Path(vault_out)
    if not n_notes:
        raise BadConfig(Problem(f"{name} has no notes to write; drop --vault-out", path=str(vault_out), field="--vault-out"))
    if output is not None and Path(os.path.abspath(output)).is_relative_to(os.path.abspath(vault_out)):
        raise BadConfig(Problem(
            f"the eval set {str(output)!r} would be inside the vault folder; write it elsewhere",
            path=str(vault_out), field="--vault-out",
        ))
    if vault_out.exists() and not vault_out.is_dir():
        raise BadConfig(Problem("exists and is not a folder", path=str(vault_out), field="--vault-out"))
    if vault_out.is_dir() and any(vault_out.iterdir()):
        if not force:
            raise BadConfig(Problem("is a non-empty folder; pass --force to replace it", path=str(vault_out), field="--vault-out"))
        check_replaceable(vault_out, "--vault-out")  # --force replaces the whole folder: never the user's notes


def write_vault(cases: Sequence[ImportedCase], vault_out: str | Path, *, force: bool = False) -> int:
    """Write every case's notes (`ImportedCase.files`) under `vault_out`, all or nothing.

    The notes go to a folder built out of sight beside `vault_out` (`store.atomic.staged_dir`),
    then renamed into place; with `force`, a folder an earlier import wrote is replaced
    (moved aside, then deleted). Text is written as UTF-8 bytes, unchanged (no newline
    translation).

    Returns:
        The number of notes written.

    Raises:
        BadConfig: what `check_vault_out` refuses; two cases giving the same note path, or
            a path leaving the folder (a converter bug, said with the case id).
    """
    check_vault_out(cases, vault_out, force=force)
    vault_out = Path(vault_out)
    files: dict[str, tuple[str, str]] = {}
    for c in cases:
        for rel, text in c.files.items():
            parts = Path(rel).parts
            if Path(rel).is_absolute() or not parts or ".." in parts:
                raise BadConfig(Problem(f"note path {rel!r} of case {c.case.get('id')!r} leaves the vault folder"))
            if rel in files:
                raise BadConfig(Problem(f"note {rel!r} of case {c.case.get('id')!r} is also a note of case {files[rel][0]!r}"))
            files[rel] = (str(c.case.get("id")), text)
    # Built out of sight and renamed into place whole; with force, the earlier import's
    # folder (check_vault_out vouched for it) is swapped out.
    with staged_dir(vault_out, replace=force) as tmp:
        for rel, (_, text) in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode("utf-8"))
        sources = sorted({c.path for c in cases})
        write_marker(tmp, {"written_by": "evalkit import", "sources": sources, "cases": len(cases), "notes": len(files)})
    return len(files)

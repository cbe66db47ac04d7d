"""lock_eval_set.py: mark eval set files as baselined (immutable) in `eval_sets.lock`.

`evalkit lock eval_set.v1.jsonl` validates the file and records its name and sha256 in
`eval_sets.lock` beside it (commit that file). From then on every script that loads the
file refuses it once its bytes differ, and the labeler and `evalkit import` refuse to
write it: changes go to the next version (`eval_set.v2.jsonl`). run_eval locks by itself
the versioned files (`*.v<N>.jsonl`) of each finished run, and every file a run gated
against `--baseline`. `--remove` unlocks, `--list` shows the manifest. Exit 0 ok; 2 bad
input (an invalid or changed file, a name that is not locked, a broken manifest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import exit_on_known_errors, plain_metavars

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Lock baselined eval set files (name -> sha256 in eval_sets.lock beside them): a locked file that "
    "changes is refused by every script; write a new version instead. Exit 0 ok, 2 bad input.",
)


@app.command()
def main(
    paths: Optional[list[Path]] = typer.Argument(
        None, metavar="PATH", help="Eval set files, or folders of *.jsonl files. (--list default: .)"
    ),
    remove: bool = typer.Option(False, "--remove", help="Unlock PATH... (runs before and after an edit are not comparable)."),
    list_: bool = typer.Option(
        False, "--list", help="Show the eval_sets.lock of PATH... (their folders) and whether each file still matches."
    ),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="The baseline run to record with the lock."),
) -> None:
    """Lock PATH... as baselined eval sets."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.evalset import lock as lk

        if remove and list_:
            raise BadConfig(Problem("give --remove or --list, not both", field="--remove"))
        if list_:
            _list(paths or [Path(".")])
            return
        if not paths:
            raise BadConfig(Problem("no eval set file given", field="PATH"))
        if remove:
            for path in paths:
                lk.unlock_eval_set(path)
                typer.echo(f"evalkit: unlocked {path} in {lk.manifest_path(path)}")
            return
        from evalkit.evalset.load import load_eval_set, resolve_eval_set_paths

        for path, _ in resolve_eval_set_paths(paths):
            before = lk.locked(path)
            eval_set = load_eval_set([path])  # validates it; refuses a locked file that changed
            entry = lk.lock_eval_set(path, run_id, sha256=eval_set.version, cases=len(eval_set))
            said = "already locked" if before is not None else "locked"
            by = f", run {entry.run_id}" if entry.run_id else ""
            typer.echo(
                f"evalkit: {said} {path} in {lk.manifest_path(path)} "
                f"(sha256 {entry.sha256[:12]}…, {entry.cases} cases{by})"
            )


def _list(paths: list[Path]) -> None:
    from evalkit.evalset import lock as lk
    folders = dict.fromkeys(p if p.is_dir() else p.parent for p in paths)
    for folder in folders:
        lock = folder / lk.LOCK_NAME
        rows = lk.manifest_status(folder)
        if not rows:
            typer.echo(f"{lock}: no eval set locked")
            continue
        typer.echo(f"{lock}:")
        for entry, state in rows:
            run = entry.run_id or "-"
            cases = "?" if entry.cases is None else entry.cases
            typer.echo(
                f"  {entry.name}  sha256 {entry.sha256[:12]}…  {cases} cases  run {run}  locked {entry.locked_at}  {state}"
            )


plain_metavars(app)

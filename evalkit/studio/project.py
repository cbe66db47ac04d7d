"""What the studio may show: the project's eval sets, notes and runs, each named, never a path.

Every file the studio reads is looked up by a name in a list made at start (an eval set's
name, a note's rel_path in the vault listing, a run id of the results folder), and its
resolved path must lie inside the folder it was found in. A request naming anything else,
`..` or a symbolic link that leads out included, finds nothing (None); there is no route
that opens a path it was given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["NoteHit", "StudioProject", "heading_at", "inside"]

# Runs whose records are kept in memory (the runs looked at last): one per tab is the usual use.
KEPT_RUNS = 3
# Search hits listed per query: a word found on every line of a vault is not worth 10,000 rows.
MAX_HITS = 100


def inside(path: Path, folder: Path) -> bool:
    """`path`, resolved (links followed), lies in `folder` (resolved)."""
    try:
        return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(folder)))
    except OSError:
        return False


@dataclass(frozen=True)
class NoteHit:
    """A search hit: the note, the 1-based line, the heading chain it sits under, the line."""

    rel_path: str
    line: int
    heading_path: str
    text: str


@dataclass
class StudioProject:
    """The eval sets, notes folder and results folder one studio serves.

    Args:
        eval_sets: the eval set files that may be shown and edited (named by their path
            relative to `root` when under it, else by their file name).
        vault: the notes folder (None: no notes panel).
        results_dir: the folder of run folders.
        root: the working directory names are relative to.
        review: the candidates to review (`--candidates`, `--into`), or None.
    """

    eval_sets: Sequence[Path]
    vault: Path | None
    results_dir: Path
    root: Path = field(default_factory=Path.cwd)
    review: Any = None  # reviewing.Review: generated candidates to review into a new version, or None
    _corpus: Any = field(default=None, repr=False)
    _records: dict[str, tuple[tuple[int, int], dict[str, dict[str, Any]]]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ eval sets

    def set_names(self) -> list[str]:
        """The eval sets' names, in the order given."""
        return [self._name(p) for p in self.eval_sets]

    def eval_set(self, name: str | None) -> Path | None:
        """The eval set file called `name`, or None (not one of ours)."""
        for p in self.eval_sets:
            if self._name(p) == name and p.is_file() and inside(p, p.parent):
                return p
        return None

    def set_name(self, path: Path) -> str:
        """The name `path` is shown and found by."""
        return self._name(path)

    def add_eval_set(self, path: Path) -> None:
        """Serve `path` too (a new version the studio wrote); a file already served is not added twice."""
        if all(os.path.realpath(p) != os.path.realpath(path) for p in self.eval_sets):
            self.eval_sets = [*self.eval_sets, Path(path)]

    def _name(self, path: Path) -> str:
        try:
            return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(self.root))).as_posix()
        except ValueError:
            return path.name

    # ------------------------------------------------------------------ runs

    def runs(self) -> list[str]:
        """Run ids of the results folder, newest first (store.runs.list_runs)."""
        from evalkit.store.runs import list_runs

        return list_runs(self.results_dir)

    def run_records(self, run_id: str | None) -> dict[str, dict[str, Any]] | None:
        """A run's records by case id, or None when `run_id` is not a run of the results folder.

        Read again when results.jsonl changed (size or mtime), else kept (the KEPT_RUNS last read).
        A `--trials` run holds several records of a case: the last one is shown.
        """
        if not run_id or run_id not in self.runs():
            return None
        from evalkit.store.runlog import Rec
        from evalkit.store.runs import RunDir

        run = RunDir.open(self.results_dir, run_id)
        if not inside(run.path, self.results_dir) or (run.results_path.exists() and not inside(run.results_path, run.path)):
            return None
        try:
            st = run.results_path.stat()
            stamp = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            return {}
        cached = self._records.get(run_id)
        if cached is None or cached[0] != stamp:
            by_id = {str(r.get(Rec.CASE_ID)): r for r in run.iter_results()}
            self._records.pop(run_id, None)
            while len(self._records) >= KEPT_RUNS:  # a large run's records are big: keep the last few read
                self._records.pop(next(iter(self._records)))
            self._records[run_id] = cached = (stamp, by_id)
        return cached[1]

    # ------------------------------------------------------------------ notes

    @property
    def corpus(self) -> Any:
        """The notes as anchorcheck reads them (the labeler's and validate's Corpus), or None."""
        if self._corpus is None and self.vault is not None:
            from evalkit.evalset.anchorcheck import corpus_from_vault

            self._corpus = corpus_from_vault(self.vault)
        return self._corpus

    def notes(self) -> list[str]:
        """rel_paths of the vault's markdown notes whose real path is in the vault, sorted."""
        from evalkit.reference.corpus import MARKDOWN_SUFFIXES

        if self.corpus is None or self.vault is None:
            return []
        return [f for f in self.corpus.files if Path(f).suffix.lower() in MARKDOWN_SUFFIXES and inside(self.vault / f, self.vault)]

    def outline(self, rel_path: str | None) -> Any:
        """The note's outline (anchorcheck.NoteOutline), or None when it is not a note of ours."""
        if not rel_path or rel_path not in self.notes():
            return None
        return self.corpus.outline(rel_path)

    def search(self, query: str, limit: int = MAX_HITS) -> list[NoteHit]:
        """Lines of the notes holding `query` (case-folded, words in any order), in note order."""
        words = query.casefold().split()
        if not words:
            return []
        hits: list[NoteHit] = []
        for rel in self.notes():
            outline = self.corpus.outline(rel)
            if outline is None:
                continue
            for number, text in enumerate(outline.lines, start=1):
                folded = text.casefold()
                if all(w in folded for w in words):
                    hits.append(NoteHit(rel, number, heading_at(outline, number), text))
                    if len(hits) >= limit:
                        return hits
        return hits


def heading_at(outline: Any, line: int) -> str:
    """The heading chain ("# A > ## B") of the piece holding `line`, "" when none does."""
    for chain, start, end in outline.pieces:
        if start <= line <= end:
            return " > ".join(chain)
    return ""

"""Nothing a user commits by default holds the notes' text (issue 28 item 6).

A project with this repository's .gitignore runs the everyday commands (a judged run, a
retrieval-only run, the HTML report, an HTML comparison, a TREC export); then every file git
would offer to commit is read, and none may hold a sentence of a retrieved chunk or of an
answer that is not already in the eval set (the eval set's own questions and snippets are the
user's to commit or not). The files that hold note text must be ignored, as docs/sharing.md
("What to commit") says."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _evalkit(args: list[str], cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "from evalkit.cli.main import app; app()", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("ignore", ["this repository's .gitignore", "the lines evalkit init appends"])
def test_no_file_git_would_commit_holds_note_text(tmp_path: Path, ignore: str) -> None:
    from evalkit.authoring.starter import GITIGNORE_LINES

    if ignore.startswith("this"):
        shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    else:
        (tmp_path / ".gitignore").write_text("\n".join(GITIGNORE_LINES) + "\n")
    subprocess.run(["git", "init", "-q", "."], cwd=tmp_path, check=True)
    es, vault = str(ROOT / "eval_set.jsonl"), str(ROOT / "sample_vault")
    _evalkit(["run", "--eval-set", es, "--vault", vault, "--judge-provider", "heuristic", "--run-id", "a", "--quiet"],
             tmp_path)
    _evalkit(["run", "--eval-set", es, "--vault", vault, "--retrieval-only", "--run-id", "b", "--quiet"], tmp_path)
    _evalkit(["report", "--run-id", "a"], tmp_path)
    _evalkit(["report", "--compare", "a", "b"], tmp_path)
    _evalkit(["export", "--run-id", "a", "--format", "trec"], tmp_path)

    eval_set = (ROOT / "eval_set.jsonl").read_text(encoding="utf-8")
    private: set[str] = set()
    for line in (tmp_path / "results" / "a" / "results.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        pieces = [c.get("text") or "" for c in rec.get("retrieved_chunks") or []] + [rec.get("answer") or ""]
        private |= {p.strip() for text in pieces for p in re.split(r"[.\n]", text) if len(p.strip()) >= 30}
    private = {p for p in private if p not in eval_set}
    assert len(private) > 100  # the check has something to find

    listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    committable = [line[3:] for line in listed]
    assert "results/a/metrics.json" in committable and "results/a/summary.md" in committable
    assert not [f for f in committable if f.endswith(("results.jsonl", "report.html", ".tsv")) or "compare-" in f]
    leaks = {f: [p for p in private if p in (tmp_path / f).read_text(encoding="utf-8", errors="replace")][:2]
             for f in committable}
    assert {f: hits for f, hits in leaks.items() if hits} == {}

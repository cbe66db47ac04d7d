"""What the adapter tests share: where the corpus and the documented examples are, the
skip-or-fail rule for a missing extra, and the checks every contract chunk must pass.

CI sets EVALKIT_ADAPTERS_REQUIRED=1 where it installed the extras (.ci/run): there a missing
framework or corpus fails the tests instead of skipping them, so a green CI means they ran.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evalkit.notes.markdown import Note, read_note

REPO = Path(__file__).resolve().parents[3]
CORPUS = (REPO.parent / "shared" / "corpora" / "obsidian-tasks" / "vault").resolve()
EVAL_SET = REPO / "tests" / "data" / "adapters" / "obsidian_tasks.jsonl"
DOC = REPO / "docs" / "adapters.md"
REQUIRED = os.environ.get("EVALKIT_ADAPTERS_REQUIRED") == "1"

# One component of a contract heading path: its `#` level, a space, the heading text.
_COMPONENT = re.compile(r"^#{1,6} \S")


def need(module: str) -> ModuleType:
    """Import `module`, or skip (fail when EVALKIT_ADAPTERS_REQUIRED=1) when it is missing."""
    if REQUIRED:
        return importlib.import_module(module)
    return pytest.importorskip(module)


def need_corpus() -> Path:
    """The Obsidian Tasks guide (../shared/corpora/obsidian-tasks/vault), or skip/fail."""
    if not CORPUS.is_dir():
        if REQUIRED:
            pytest.fail(f"the corpus is not at {CORPUS}")
        pytest.skip("../shared/corpora/obsidian-tasks is not here")
    return CORPUS


def doc_command(example: str) -> list[str]:
    """The run_eval command docs/adapters.md gives for `example` (a docs/examples file name),
    as argv: the bash block line naming it, with its continuation lines."""
    text = DOC.read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            if f"docs/examples/{example}" in line and "run_eval.py" in line:
                argv = shlex.split(line)
                return [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
    raise AssertionError(f"docs/adapters.md has no run_eval command for {example}")


def doc_python_block(example: str) -> str:
    """The python block of docs/adapters.md that follows the line naming `example`."""
    text = DOC.read_text(encoding="utf-8")
    at = text.index(f"docs/examples/{example}")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, at)
    assert match is not None, f"no python block after docs/examples/{example} in docs/adapters.md"
    return match.group(1)


def example_code(example: str) -> str:
    """The example file's code below its docstring."""
    text = (REPO / "docs" / "examples" / example).read_text(encoding="utf-8")
    return text.split('"""', 2)[2].lstrip("\n")


def run_documented_command(example: str, results: Path, run_id: str) -> subprocess.CompletedProcess:
    """Run the documented command from the repository root, into `results`."""
    argv = [*doc_command(example), "--results-dir", str(results), "--run-id", run_id, "--vault", str(CORPUS)]
    env = {**os.environ, "NOTES_DIR": str(CORPUS)}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def check_contract_chunks(chunks: list[dict[str, Any]], notes: Path) -> None:
    """What the contract asks of an answer's chunks, checked against the notes themselves:
    ranks 1..n, ids unique, rel_path a relative `/` path of a note, a line span whose first
    line holds the text's first line, and the heading path of the section where the text
    begins, in the `# A > ## B` form, from evalkit's Markdown reader."""
    assert [c["rank"] for c in chunks] == list(range(1, len(chunks) + 1))
    ids = [c["chunk_id"] for c in chunks]
    assert len(set(ids)) == len(ids), ids
    for c in chunks:
        rel = c["rel_path"]
        assert not rel.startswith("/") and "\\" not in rel and ".." not in rel.split("/"), rel
        path = notes / rel
        assert path.is_file(), rel
        heading = c["heading_path"]
        assert heading == "" or all(_COMPONENT.match(part) for part in heading.split(" > ")), heading
        start, end = c["start_line"], c["end_line"]
        assert isinstance(start, int) and isinstance(end, int) and 1 <= start <= end, (rel, start, end)
        note = _read(path)
        first = next(line for line in c["text"].splitlines() if line.strip())
        assert _squash(first) in _squash(note.lines[start - 1]), (rel, start, first)
        heading_lines = {n for h in note.headings for n in range(h.line, h.end_line + 1)}
        body = next(
            (n for n in range(start, end + 1) if note.lines[n - 1].strip() and n not in heading_lines), end
        )
        section = note.section_at(body)  # None in the front matter: the whole-file scope
        assert heading == (section.path if section is not None else ""), (rel, start, heading)


@functools.lru_cache(maxsize=256)
def _read(path: Path) -> Note:
    return read_note(path.read_text(encoding="utf-8"))


def _squash(line: str) -> str:
    return "".join(ch for ch in line if ch.isprintable() and not ch.isspace())

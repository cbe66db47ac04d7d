"""Issue 43 (seed 002 `evalite watch`): `run_eval --watch` re-runs the cases a change touches.
Bounded by a run count (the test hook), never by the clock."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from evalkit.run.watch import (
    ADDED,
    MODIFIED,
    affected_cases,
    eval_set_lines,
    watch_runs,
)
from tests.support import ROOT

IDS = ("sv-001", "sv-002", "sv-004", "sv-005")


def _project(tmp_path: Path) -> tuple[Path, Path]:
    vault = tmp_path / "notes"
    shutil.copytree(ROOT / "sample_vault", vault)
    lines = [x for x in (ROOT / "eval_set.jsonl").read_text(encoding="utf-8").splitlines()
             if json.loads(x)["id"] in IDS]
    es = tmp_path / "es.jsonl"
    es.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return es, vault


def _ids(result: Any) -> list[str]:
    return [json.loads(x)["test_case_id"] for x in (result.run_dir / "results.jsonl").read_text().splitlines()]


def _edit_case(es: Path, case_id: str) -> None:
    lines = es.read_text(encoding="utf-8").splitlines()
    out = []
    for line in lines:
        case = json.loads(line)
        if case["id"] == case_id:
            case["question"] += " Please."
        out.append(json.dumps(case))
    es.write_text("\n".join(out) + "\n", encoding="utf-8")


def test_a_changed_line_and_a_changed_note_rerun_only_their_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    es, vault = _project(tmp_path)
    note = vault / "personal" / "recipes" / "Sourdough.md"

    def changes():
        _edit_case(es, "sv-005")
        yield {(MODIFIED, str(es))}
        note.write_text(note.read_text(encoding="utf-8") + "\nFed Gus twice today.\n", encoding="utf-8")
        yield {(MODIFIED, str(note))}
        yield {(ADDED, str(vault / "new.md"))}

    said: list[str] = []
    results = watch_runs(dict(eval_set=[str(es)], vault=str(vault), results_dir=str(tmp_path / "results"),
                              retrieval_only=True, no_probe=True),
                         lambda v: run_eval(**v), say=said.append, max_runs=4, changes=changes())
    assert len(results) == 4
    assert sorted(_ids(results[0])) == sorted(IDS)
    assert _ids(results[1]) == ["sv-005"]
    rerun = set(_ids(results[2]))
    assert "sv-002" in rerun  # its gold note
    records = [json.loads(x) for x in (results[0].run_dir / "results.jsonl").read_text().splitlines()]
    pointing = {r["test_case_id"] for r in records
                if "personal/recipes/Sourdough.md" in {s["rel_path"] for s in r["case"]["gold_supports"]}
                | {c["rel_path"] for c in r["retrieved_chunks"]}}
    assert rerun == pointing
    assert sorted(_ids(results[3])) == sorted(IDS)  # a note added: every case, and said why
    assert any("added" in line and "every case" in line for line in said)


def test_nothing_touched_runs_nothing() -> None:
    line = b'{"id":"a"}'
    assert affected_cases([(MODIFIED, "/x/es.jsonl")], eval_set=["/x/es.jsonl"], vault=None, before={"a": line},
                          after={"a": line}, notes_of={}, case_ids=["a"]) is None


def test_a_line_reformatted_but_equal_is_unchanged(tmp_path: Path) -> None:
    es = tmp_path / "es.jsonl"
    es.write_text('{"id": "a", "question": "q"}\n', encoding="utf-8")
    before = eval_set_lines([str(es)])
    es.write_text('{"question":"q","id":"a"}\n', encoding="utf-8")
    assert eval_set_lines([str(es)]) == before


def test_watchfiles_sees_a_changed_eval_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real watcher (watchfiles): the file is edited until the second run happens; the
    loop is bounded by the run count, and the edits by a count."""
    pytest.importorskip("watchfiles")
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    es, vault = _project(tmp_path)
    watching = threading.Event()
    results: list[Any] = []

    def say(line: str) -> None:
        if line.startswith("watching"):
            watching.set()

    def go() -> None:
        results.extend(watch_runs(dict(eval_set=[str(es)], vault=str(vault), results_dir=str(tmp_path / "results"),
                                       retrieval_only=True, no_probe=True),
                                  lambda v: run_eval(**v), say=say, max_runs=2))

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    assert watching.wait(120)
    for _ in range(60):  # the watcher starts on its first wait: edit until it has seen one
        _edit_case(es, "sv-004")
        thread.join(2)
        if not thread.is_alive():
            break
    assert not thread.is_alive()
    assert len(results) == 2 and _ids(results[1]) == ["sv-004"]


def test_the_flag_runs_and_stops_at_the_hooks_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import run_eval_cli

    monkeypatch.chdir(tmp_path)
    es, vault = _project(tmp_path)
    result = run_eval_cli("--watch", "--watch-max-runs", "1", eval_set=str(es), vault=str(vault),
                          results_dir=str(tmp_path / "results"), retrieval_only=True, no_probe=True, quiet=True)
    assert result.exit_code == 0, result.output
    assert len([d for d in (tmp_path / "results").iterdir() if (d / "results.jsonl").is_file() and not d.is_symlink()]) == 1

"""`evalkit serve-studio`'s bad input: exit 2 with one line naming the flag, before any server."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from tests.studio_project import write_project


def _run(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(app, ["serve-studio", *args], catch_exceptions=False)
    return out.exit_code, out.output


def test_the_default_eval_set_missing_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: RunSettings' default eval set is a list; Path(list) was an internal error (exit 70)
    monkeypatch.chdir(tmp_path)
    code, said = _run("--vault", str(tmp_path))
    assert code == 2 and "eval_set.jsonl: --eval-set: no such eval set file" in said


def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path) -> None:
    p = write_project(tmp_path, run=False)
    ok = ["--eval-set", str(p["eval_set"]), "--vault", str(p["vault"]), "--results-dir", str(p["results"])]
    code, said = _run(*ok[:2], "--vault", str(tmp_path / "nope"))
    assert code == 2 and "--vault: notes folder not found" in said
    code, said = _run(*ok, "--candidates", str(p["eval_set"]))
    assert code == 2 and "--into: --candidates and --into go together" in said
    code, said = _run(*ok, "--candidates", str(tmp_path / "nope.jsonl"), "--into", str(p["eval_set"]))
    assert code == 2 and "nope.jsonl" in said

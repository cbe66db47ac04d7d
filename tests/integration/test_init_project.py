"""`evalkit init` (issue 24 item 4) and evalkit.toml's [run] table: from an empty folder to a first run.

The wheel path (build, a fresh venv, init and run from an empty folder) is
tests/packaging/test_wheel.py; here the same path runs from the source checkout.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.authoring.starter import GITIGNORE_LINES, STARTER_CASE_IDS
from evalkit.cli.init import project_config_text
from evalkit.cli.main import app
from evalkit.config import RunSettings

ROOT = Path(__file__).resolve().parents[2]


def _init(folder: Path, *args: str):
    return CliRunner().invoke(app, ["init", str(folder), *args])


def test_init_then_run_gives_a_first_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "my-evals"
    res = _init(project)
    assert res.exit_code == 0, res.output
    assert "evalkit run" in res.output  # says what to do next
    assert sorted(p.name for p in project.iterdir()) == [".gitignore", "eval_set.jsonl", "evalkit.toml", "sample_vault"]
    cases = [json.loads(line) for line in (project / "eval_set.jsonl").read_text().splitlines()]
    assert [c["id"] for c in cases] == list(STARTER_CASE_IDS)
    # the starter cases are the bundled eval set's lines, byte for byte
    bundled = {json.loads(line)["id"]: line for line in (ROOT / "eval_set.jsonl").read_text().splitlines()}
    assert (project / "eval_set.jsonl").read_text().splitlines() == [bundled[i] for i in STARTER_CASE_IDS]
    assert {False, True} == {c["answerable"] for c in cases}
    assert sorted(p.relative_to(project / "sample_vault") for p in (project / "sample_vault").rglob("*.md")) == sorted(
        p.relative_to(ROOT / "sample_vault") for p in (ROOT / "sample_vault").rglob("*.md")
    )

    monkeypatch.chdir(project)
    res = CliRunner().invoke(app, ["run", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["aggregate_metrics"]["n_cases"] == len(STARTER_CASE_IDS)
    assert out["aggregate_metrics"]["k"] == 5
    assert (project / out["run_dir"] / "metrics.json").is_file()


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "eval_set.jsonl").write_text("mine\n")
    res = _init(tmp_path)
    assert res.exit_code == 2
    assert "eval_set.jsonl: exists already" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_set.jsonl"]
    assert (tmp_path / "eval_set.jsonl").read_text() == "mine\n"
    # twice in a row: the second refuses, naming all three
    other = tmp_path / "other"
    assert _init(other).exit_code == 0
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    res = _init(other)
    assert res.exit_code == 2
    assert all(name in res.output for name in ("evalkit.toml", "eval_set.jsonl", "sample_vault"))
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before


def test_an_existing_gitignore_keeps_its_lines_and_gains_only_the_missing_ones(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("node_modules/\ncache/")  # no final newline
    assert _init(tmp_path).exit_code == 0
    lines = (tmp_path / ".gitignore").read_text().splitlines()
    assert lines[:2] == ["node_modules/", "cache/"]
    assert lines.count("cache/") == 1
    assert set(GITIGNORE_LINES) <= set(lines)


def test_the_starter_toml_lists_every_run_setting_commented_at_its_default() -> None:
    text = project_config_text()
    doc = tomllib.loads(text)
    assert doc == {"run": {}, "eval_set": {}}  # everything is commented out
    # uncommenting every `# name = value` line gives the defaults back
    setting = re.compile(r"^# ([a-z_]+) = (?!.*not set by default)")
    uncommented = "\n".join(
        line[2:] if (m := setting.match(line)) and m.group(1) in RunSettings.model_fields else line
        for line in text.splitlines()
    )
    run = tomllib.loads(uncommented)["run"]
    assert RunSettings.model_validate(run) == RunSettings()
    for name in ("eval_set", "vault", "api_url", "k", "judge_model", "concurrency", "baseline", "thresholds"):
        assert f"# {name} = " in text, name
    assert "# results_dir" not in text and "# run_id" not in text  # per-run, not project settings


def test_run_table_sets_defaults_under_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _init(tmp_path).exit_code == 0
    toml = tmp_path / "evalkit.toml"
    toml.write_text(toml.read_text().replace("[run]\n", '[run]\nk = [3, 10]\nretrieval_only = true\n', 1))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    config = json.loads((tmp_path / out["run_dir"] / "config.json").read_text())
    assert config["settings"]["k"] == [3, 10] and config["settings"]["retrieval_only"] is True
    res = CliRunner().invoke(app, ["run", "--quiet", "--json", "--k", "5"])  # the flag wins
    out = json.loads(res.stdout.strip().splitlines()[-1])
    config = json.loads((tmp_path / out["run_dir"] / "config.json").read_text())
    assert config["settings"]["k"] == [5] and config["settings"]["retrieval_only"] is True


def test_a_bad_run_table_names_the_file_and_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _init(tmp_path).exit_code == 0
    toml = tmp_path / "evalkit.toml"
    toml.write_text(toml.read_text().replace("[run]\n", '[run]\nkk = 3\nrun_id = "x"\nconcurrency = 0\n', 1))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", "--quiet"])
    assert res.exit_code == 2
    assert "evalkit.toml: run.kk: unknown setting (did you mean k?)" in res.output
    assert "evalkit.toml: run.run_id: names one run" in res.output
    assert "evalkit.toml: run.concurrency: Input should be greater than or equal to 1" in res.output
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
    toml.write_text("[run\n")
    res = CliRunner().invoke(app, ["run", "--quiet"])
    assert res.exit_code == 2 and "evalkit.toml: not valid TOML" in res.output


def test_the_starter_ignores_what_this_repository_ignores() -> None:
    # one list of what keeps note text out of git: the starter's lines are all in ours
    ours = set((ROOT / ".gitignore").read_text().splitlines())
    assert [line for line in GITIGNORE_LINES if not line.startswith("#") and line not in ours] == []


# --------------------------------------------------------------------------- .gitignore (issue 38 item 10)


def test_a_gitignore_that_is_not_utf8_gains_the_lines_byte_exact(tmp_path: Path) -> None:
    # Latin-1, CRLF, no final newline: read as text it exited 70 after writing the rest, and
    # the rerun then refused ("exists already").
    old = b"caf\xe9/\r\n*.pyc"
    (tmp_path / ".gitignore").write_bytes(old)
    res = _init(tmp_path)
    assert res.exit_code == 0, res.output
    ours = b"".join(line.encode() + b"\r\n" for line in GITIGNORE_LINES)
    assert (tmp_path / ".gitignore").read_bytes() == old + b"\r\n" + b"\r\n" + ours
    assert _init(tmp_path).exit_code == 2  # the usual refusal: everything is there


def test_a_gitignore_that_holds_the_lines_already_is_left_alone(tmp_path: Path) -> None:
    old = b"\xff\xfe junk\n" + "\n".join(GITIGNORE_LINES).encode() + b"\n"
    (tmp_path / ".gitignore").write_bytes(old)
    assert _init(tmp_path).exit_code == 0
    assert (tmp_path / ".gitignore").read_bytes() == old


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_gitignore_that_is_not_a_file_is_refused_before_anything_is_written(tmp_path: Path, kind: str) -> None:
    import os
    import subprocess
    import sys

    project = tmp_path / "p"
    project.mkdir()
    gitignore = project / ".gitignore"
    os.mkfifo(gitignore) if kind == "fifo" else gitignore.mkdir()
    # A child process: were the FIFO opened for reading, it would wait for a writer for ever
    # (the timeout only bounds that failure; the test asserts the exit and the folder).
    done = subprocess.run([sys.executable, "-c", "from evalkit.cli.main import app; app()", "init", str(project)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    assert done.stderr == (f"evalkit: {gitignore}: is {said}, not a regular file: evalkit init appends its lines "
                           "only to a file (nothing was written)\n")
    assert [p.name for p in project.iterdir()] == [".gitignore"]
    gitignore.unlink() if kind == "fifo" else gitignore.rmdir()
    assert _init(project).exit_code == 0  # then it runs


def test_a_write_that_fails_takes_back_what_init_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while .gitignore is appended to (the last write): the notes, the eval set and
    evalkit.toml are taken back and .gitignore keeps its bytes, so the rerun works."""
    import errno
    import os

    old = b"node_modules/\n"
    (tmp_path / ".gitignore").write_bytes(old)
    real_write = os.write
    calls = []

    def full_disk(fd: int, data: bytes) -> int:  # the first piece goes in, then the disk is full
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    res = _init(tmp_path)
    monkeypatch.undo()
    assert res.exit_code == 2, res.output
    assert len(calls) == 2  # a part was written before the failure: it was cut off again
    assert res.stderr == (f"evalkit: {tmp_path / '.gitignore'}: cannot write the starter project (No space left on device); nothing "
                          "of it was kept, run evalkit init again when this is fixed\n")
    assert [p.name for p in tmp_path.iterdir()] == [".gitignore"]
    assert (tmp_path / ".gitignore").read_bytes() == old
    assert _init(tmp_path).exit_code == 0  # the rerun finishes the job
    assert (tmp_path / ".gitignore").read_bytes().startswith(old + b"\n# evalkit")


@pytest.mark.parametrize("left", [("sample_vault",), ("sample_vault", "eval_set.jsonl"),
                                  ("sample_vault", "eval_set.jsonl", "evalkit.toml")])
def test_a_killed_init_is_finished_by_running_it_again(tmp_path: Path, left: tuple[str, ...]) -> None:
    """Issue 38 (the fault loops): init killed after placing some pieces. What it placed is
    exactly what it writes, so the rerun counts it as done and finishes the project; a
    piece the user changed is still refused."""
    whole = tmp_path / "whole"
    assert _init(whole).exit_code == 0
    expected = {p.relative_to(whole): p.read_bytes() for p in whole.rglob("*") if p.is_file()}
    killed = tmp_path / "killed"
    assert _init(killed).exit_code == 0
    for name in ("sample_vault", "eval_set.jsonl", "evalkit.toml", ".gitignore"):
        if name not in left:  # as if the kill came before these were written
            path = killed / name
            if path.is_dir():
                import shutil

                shutil.rmtree(path)
            else:
                path.unlink()
    res = _init(killed)
    assert res.exit_code == 0, res.output
    assert {p.relative_to(killed): p.read_bytes() for p in killed.rglob("*") if p.is_file()} == expected
    # a piece that is not what init writes is the user's: refused, nothing changed
    (killed / "evalkit.toml").unlink()
    (killed / "eval_set.jsonl").write_text("mine\n")
    res = _init(killed)
    assert res.exit_code == 2 and "eval_set.jsonl: exists already" in res.output
    assert not (killed / "evalkit.toml").exists()

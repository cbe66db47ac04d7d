"""The `evalkit` console command itself (its sub-commands are tested with their scripts)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import evalkit
from evalkit.cli.main import app


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_package_version(flag: str) -> None:
    # regression: issue 8, `evalkit --version` was "No such option"
    out = CliRunner().invoke(app, [flag])
    assert out.exit_code == 0, out.output
    assert out.stdout == f"evalkit {evalkit.__version__}\n"


def test_no_arguments_still_shows_the_commands() -> None:
    out = CliRunner().invoke(app, [])
    assert "run" in out.output and "--version" in out.output


@pytest.mark.parametrize(
    "command", ["run", "judge", "validate", "serve-reference", "label", "compare", "score-retrieval", "score-abstention"]
)
def test_help_shows_plain_value_names(command: str) -> None:
    # regression: issue 8, help showed typer's `<list[Path]>`, `<str>`, `<float range>`
    import re

    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    # Options only: typer always appends a type to positional arguments (compare's RUN_A RUN_B).
    options = [line for line in out.stdout.splitlines() if line.lstrip().startswith("--")]
    assert options
    assert not [line for line in options if re.search(r"<(list\[|str|int|float|path|bool)", line)], options
    if command == "run":
        text = "\n".join(options)
        assert re.search(r"--eval-set PATH\b", text) and re.search(r"--api-url URL\b", text)


def test_validate_labels_is_label_validate(tmp_path) -> None:
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    case = json.loads((root / "eval_set.jsonl").read_text().splitlines()[1])
    case["gold_supports"][0]["heading_path"] = "# Sourdough > ## The startr"  # a typo: stale
    path = tmp_path / "set.jsonl"
    path.write_text(json.dumps(case) + "\n")
    out = CliRunner().invoke(app, ["validate-labels", "--eval-set", str(path), "--vault", str(root / "sample_vault"), "--no-retrieval"])
    assert out.exit_code == 1, out.output
    assert "did you mean '# Sourdough > ## The starter'" in out.stdout

"""evalkit.toml, --matrix-file and --suite read bounded (issue 38 item 7): TOML nested 5,000
deep was a RecursionError in tomllib (exit 70); now it is bad input (BadConfig, exit 2) that
names the file, like JSON nested too deeply."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from evalkit.errors import BadConfig
from evalkit.jsonio import MAX_DEPTH
from evalkit.metrics.suite import load_suite
from evalkit.project import MAX_PROJECT_BYTES, PROJECT_CONFIG, TomlError, parse_toml, read_project_config
from evalkit.run.matrix import load_matrix_file


def _arrays(n: int) -> str:
    return "a = " + "[" * n + "]" * n + "\n"


def _tables(n: int) -> str:
    return "a = " + "{b = " * n + "1" + "}" * n + "\n"


@pytest.mark.parametrize("text", [_arrays(5000), _tables(5000), _arrays(MAX_DEPTH), _tables(MAX_DEPTH + 1)])
def test_deep_toml_is_an_input_error_not_a_recursion_error(text: str) -> None:
    # 5,000: tomllib's own recursion gives out; MAX_DEPTH: it parses, and the walk refuses it
    # (`a = [[...]]` is one level more than its brackets: the top table).
    with pytest.raises(TomlError, match=rf"nested too deeply: more than {MAX_DEPTH} levels"):
        parse_toml(text)


def test_toml_within_the_bound_parses_as_tomllib_does() -> None:
    for text in (_arrays(MAX_DEPTH - 1), _tables(MAX_DEPTH - 1)):  # the deepest it reads
        assert parse_toml(text) == tomllib.loads(text)
    assert parse_toml('[run]\nk = [5, 10]\n[eval_set]\nextra_categories = ["x"]\n') == {
        "run": {"k": [5, 10]}, "eval_set": {"extra_categories": ["x"]}}
    with pytest.raises(TomlError, match="line 1"):  # tomllib's message, with where
        parse_toml("[run\n")


def test_project_file_nested_5000_deep_names_the_file(tmp_path: Path) -> None:
    (tmp_path / PROJECT_CONFIG).write_text(_arrays(5000))
    with pytest.raises(BadConfig) as caught:
        read_project_config(tmp_path)
    (problem,) = caught.value.problems
    assert problem.path == str(tmp_path / PROJECT_CONFIG)
    assert problem.message == f"not valid TOML (nested too deeply: more than {MAX_DEPTH} levels of tables and arrays)"


def test_project_file_too_large_or_not_a_file(tmp_path: Path) -> None:
    path = tmp_path / PROJECT_CONFIG
    path.write_bytes(b"# " + b"x" * MAX_PROJECT_BYTES + b"\n")
    with pytest.raises(BadConfig, match="evalkit.toml is too large"):
        read_project_config(tmp_path)
    path.unlink()
    path.mkdir()  # not a regular file: as if absent, never opened
    assert read_project_config(tmp_path) is None


def test_matrix_and_suite_files_are_bounded_too(tmp_path: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text(_tables(5000))
    with pytest.raises(BadConfig, match="nested too deeply"):
        load_matrix_file(deep)
    with pytest.raises(BadConfig, match="nested too deeply"):
        load_suite(deep)

"""Issue 37 item 6, "one way to do each thing on the command line": `evalkit --help` lists
every sub-command under its job with a whole one-line description, each sub-command's --help
is its own text, names follow docs/development.md's rule, and every old name (a folded or
renamed command, or a flag that is another command's job) runs the code of the command it
names, with none of its flags lost."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from evalkit.cli import main as cli_main
from evalkit.cli.main import ALIASES, COMMANDS, GROUPS, app

# docs/development.md, "CLI names": a verb, or verb-noun. A new verb goes here with its command.
VERBS = {"embed", "init", "generate", "import", "label", "validate", "run", "merge", "reproduce", "check", "serve", "score",
         "compare", "report", "export", "redact", "lock", "show", "promote", "index", "query"}


def _group():
    return typer.main.get_command(app)


def _help(args: list[str], columns: int = 80) -> str:
    out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert out.exit_code == 0, out.output
    return out.stdout


def _listed(text: str) -> dict[str, list[tuple[str, str]]]:
    """{section title: [(command, its whole description)]} of `evalkit --help`, wrapped lines joined."""
    sections: dict[str, list[tuple[str, str]]] = {}
    title = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = []
        elif title is not None and (m := re.match(r"  (\S+)\s{2,}(\S.*)$", line)) and not line.startswith("  -"):
            sections[title].append((m.group(1), m.group(2)))
        elif title is not None and line.startswith("     ") and sections[title]:
            name, text_ = sections[title][-1]
            sections[title][-1] = (name, f"{text_} {line.strip()}")
    return sections


@pytest.mark.parametrize("columns", [80, 200])
def test_the_help_lists_every_command_under_its_job_with_a_whole_line(columns: int) -> None:
    sections = _listed(_help([], columns))
    groups = {t: rows for t, rows in sections.items() if t not in ("Usage", "Options")}
    assert list(groups) == list(GROUPS)  # every job has a command, in the order a project goes
    listed = [name for rows in groups.values() for name, _ in rows]
    visible = sorted(n for n, c in _group().commands.items() if not c.hidden)
    assert sorted(listed) == visible == sorted(n for n, *_ in COMMANDS)
    for name, description in (row for rows in groups.values() for row in rows):
        assert "..." not in description and description.endswith("."), (name, description)
        assert description == next(d for n, _m, _g, d in COMMANDS if n == name)  # whole, never cut


def test_every_description_fits_one_line_of_an_80_column_terminal() -> None:
    text = _help([], 80).split("Options:", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("  ") and not line.startswith("  -")]
    assert len(rows) == len(COMMANDS)  # no description wrapped onto a second line


def _all_commands() -> dict[str, object]:
    """Every sub-command, hidden ones and a group's leaves too: {"cache merge": command, ...}."""
    out = {}
    for name, command in _group().commands.items():
        for leaf, cmd in (getattr(command, "commands", None) or {"": command}).items():
            out[f"{name} {leaf}".strip()] = cmd
    return out


def _first_line(name: str) -> str:
    text = _help(name.split(), 200)
    body = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    return body[0]


def test_every_command_shows_its_own_help() -> None:
    # regression: `validate-labels --help` printed the labeler's help
    firsts = {name: _first_line(name) for name in _all_commands()}
    seen: dict[str, str] = {}
    for name, first in firsts.items():
        assert first not in seen, f"{name} and {seen.get(first)} open their --help alike: {first!r}"
        seen[first] = name
    assert "label" not in firsts["validate-labels"].lower().split()[0]
    assert firsts["validate-labels"].startswith("`evalkit validate --labels`")


def test_names_are_a_verb_or_verb_noun() -> None:
    for name, *_ in COMMANDS:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)?", name), name
        assert name.split("-")[0] in VERBS, f"{name}: not a verb (docs/development.md, CLI names)"


def test_aliases_are_hidden_and_still_answer() -> None:
    commands = _group().commands
    for alias, *_ in ALIASES:
        assert commands[alias].hidden, alias
    assert not {n for n, *_ in COMMANDS} & {a for a, *_ in ALIASES}


def _callback(name: str):
    # `evalkit` builds each sub-command when it is used (main.LazyCommands); mounted(name) is
    # what it is built from
    return next(c.callback for c in cli_main.mounted(name).registered_commands if c.name == name)


def test_renamed_commands_run_the_same_callback() -> None:
    assert _callback("repro") is _callback("reproduce")
    assert _callback("validate-labels") is _callback("validate")
    cache = next(g.typer_instance for g in cli_main.mounted("cache").registered_groups if g.name == "cache")
    stats = next(c.callback for c in cache.registered_commands if c.callback.__name__ == "stats")
    assert _callback("show-cache") is stats


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, dict]]:
    """Every call of the one implementation behind each folded door, recorded, not run."""
    seen: list[tuple[str, tuple, dict]] = []

    def record(name: str, result: object = None):
        def fake(*args: object, **kwargs: object) -> object:
            seen.append((name, args, kwargs))
            return result

        return fake

    from evalkit.cli import merge, repro, score, validate

    monkeypatch.setattr(score, "score_run", record("score_run"))
    monkeypatch.setattr(validate, "check_labels", record("check_labels"))
    monkeypatch.setattr(merge, "merge_shards", record("merge_shards"))
    monkeypatch.setattr(repro, "reproduce", record("reproduce", 0))
    return seen


def _invoke(args: list[str]) -> None:
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, (args, out.output)


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["score-retrieval"], ("retrieval",)),
        (["score", "--retrieval"], ("retrieval",)),
        (["score-abstention"], ("abstention",)),
        (["score", "--abstention"], ("abstention",)),
        (["judge"], ("answers",)),
        (["score", "--answers"], ("answers",)),
        (["score"], ("retrieval", "abstention")),
        (["score", "--answers", "--retrieval"], ("retrieval", "answers")),
    ],
)
def test_the_rescoring_doors_run_score_run(calls, args: list[str], parts: tuple[str, ...]) -> None:
    _invoke([*args, "--run-id", "r"])
    ((name, given, kwargs),) = calls
    assert name == "score_run" and given == (parts,) and kwargs["run_id"] == "r"


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "--labels"],
        ["validate", "--fix"],
        ["validate-labels"],
        ["validate-labels", "--no-retrieval"],
        ["label", "--validate"],
        ["label", "--fix"],
        ["label", "--validate", "--fix"],
    ],
)
def test_the_label_checks_run_check_labels(calls, args: list[str]) -> None:
    _invoke([*args, "--eval-set", "eval_set.jsonl"])
    ((name, _, kwargs),) = calls
    assert name == "check_labels"
    assert kwargs["fix"] == ("--fix" in args) and kwargs["no_retrieval"] == ("--no-retrieval" in args)


def test_validate_without_labels_does_not_check_them(calls) -> None:
    _invoke(["validate", "--eval-set", "eval_set.jsonl"])
    assert calls == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["merge", "a", "b", "--run-id", "m"], (["a", "b"], "m", [])),
        (["merge", "--cache", "x.sqlite"], ([], None, ["x.sqlite"])),
        (["cache", "merge", "x.sqlite"], ([], None, ["x.sqlite"])),
    ],
)
def test_both_shard_merges_run_merge_shards(calls, args: list[str], expected: tuple) -> None:
    _invoke(args)
    ((name, given, kwargs),) = calls
    assert name == "merge_shards"
    assert (given[0], kwargs["run_id"], [str(p) for p in kwargs["caches"]]) == expected


@pytest.mark.parametrize("args", [["reproduce", "--run-id", "r"], ["repro", "--run-id", "r"], ["run", "--repro"]])
def test_both_reproducibility_doors_run_reproduce(calls, args: list[str]) -> None:
    _invoke(args)
    ((name, _, kwargs),) = calls
    assert name == "reproduce"
    assert (kwargs.get("run_id") == "r") if args[0] != "run" else isinstance(kwargs["values"], dict)


def _flags(name: str) -> set[str]:
    return {opt for p in _all_commands()[name].params for opt in p.opts if opt.startswith("-")}


@pytest.mark.parametrize(
    ("folded", "kept"),
    [
        ("score-retrieval", "score"),
        ("score-abstention", "score"),
        ("judge", "score"),
        ("cache merge", "merge"),
        ("repro", "reproduce"),
        ("cache stats", "show-cache"),
    ],
)
def test_no_flag_is_lost_in_a_fold(folded: str, kept: str) -> None:
    assert _flags(folded) <= _flags(kept)


def test_no_flag_of_the_label_checks_is_lost() -> None:
    # the flags label --validate / --fix read (validate.check_labels' parameters), on validate
    read = {"--eval-set", "--vault", "--api-url", "--target", "--param", "--timeout", "--retries", "--k",
            "--no-retrieval", "--fix", "--output", "--yes", "--force", "--results-dir"}
    assert read <= _flags("label") and read <= _flags("validate")


def test_flag_aliases_name_the_function_they_share() -> None:
    import importlib

    for _door, _runs, _how, dotted in cli_main.FLAG_ALIASES:
        module, _, function = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), function)), dotted

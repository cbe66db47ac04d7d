"""The `evalkit` console command: the scripts' apps as sub-commands (one implementation, two doors).

One way to do each thing: every job has one sub-command, named by the rule in
docs/development.md ("CLI names": a verb, or verb-noun), listed by `evalkit --help` under the
job it belongs to with a whole one-line description. The old names of folded or renamed
commands still work as hidden aliases (ALIASES below), each the same code as the command it
names; `--help` of every one shows its own text.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

BUILD = "Build an eval set"
RUN = "Run"
SCORE = "Score and judge"
COMPARE = "Compare and decide"
REPORT = "Report and share"
MAINTAIN = "Maintain"
GROUPS = (BUILD, RUN, SCORE, COMPARE, REPORT, MAINTAIN)

# (sub-command, module under evalkit.cli, group, its line in `evalkit --help`): whole, and
# short enough for one line of an 80-column terminal.
COMMANDS = [
    ("init", "init", BUILD, "Write a starter project that `evalkit run` runs."),
    ("generate", "generate", BUILD, "Draft candidate eval cases from the notes, for review."),
    ("import", "import_cases", BUILD, "Convert another harness's fixtures into an eval set."),
    ("label", "label_eval", BUILD, "Label gold supports: the labeler and its batch modes."),
    ("validate", "validate", BUILD, "Check an eval set and its gold labels against the notes."),
    ("serve-studio", "studio", BUILD, "Label gold supports in a local browser workbench."),
    ("promote", "promote", BUILD, "Add questions of a run or log to an eval set for labeling."),
    ("run", "run_eval", RUN, "Run an eval set against a chatbot into a run folder."),
    ("merge", "merge", RUN, "Join the shard runs of one run, and their judge caches."),
    ("reproduce", "repro", RUN, "Re-run a stored run; check every record comes out the same."),
    ("check-target", "check_target", RUN, "Check a chatbot against the /api/v1/ask contract."),
    ("serve-reference", "serve_reference", RUN, "Serve the built-in reference chatbot over HTTP."),
    ("score", "score", SCORE, "Score a stored run again: retrieval, abstention, answers."),
    ("embed", "embed", SCORE, "Embed a run's texts: far gold, clusters of failing questions."),
    ("compare", "compare_runs", COMPARE, "Compare two runs and decide whether the change may merge."),
    ("report", "report", REPORT, "Write an HTML report: a run, two runs, or the trend."),
    ("export", "export", REPORT, "Export a run as TREC files for trec_eval or ranx."),
    ("redact", "redact", REPORT, "Write a shareable copy of a run, its texts hashed."),
    ("query-runs", "query_runs", REPORT, "Query the results database of every run with plain SQL."),
    ("lock", "lock_eval_set", MAINTAIN, "Lock baselined eval set files against edits."),
    ("show-cache", "cache:stats", MAINTAIN, "Count the judge cache's judgments by kind and model."),
    ("index-runs", "index_runs", MAINTAIN, "Index every run folder into an SQLite results database."),
]
# The long help of a command mounted from one command of a group app (the group's own text
# is its old door's).
HELP = {
    "show-cache": "Count the judgments of a judge cache (SQLite) by judge kind, model and prompt version. "
    "Exit 0 ok, 2 a file that is not a judge cache.",
}

# Old names, hidden from `evalkit --help`, that still work: (alias, module[:command], what it
# runs, its own help, extra command settings). Each runs the code of the command it names:
# the same callback (repro, validate-labels), or a script app that calls the same
# implementation with its own flags (score-retrieval, score-abstention, judge: score.score_run;
# cache merge: merge.merge_shards; cache stats: show-cache's callback).
ALIASES: list[tuple[str, str, str, str | None, dict[str, Any]]] = [
    ("repro", "repro", "reproduce", "The old name of `evalkit reproduce`: re-run a stored run's config and compare the "
     "two runs record by record. Exit 0 reproducible, 1 a difference beyond --tolerance, 2 bad input, 130 interrupted.",
     {}),
    ("validate-labels", "validate", "validate --labels", "`evalkit validate --labels` under its old name (label_eval.py "
     "--validate): check every gold support against the notes and the target's retrieval; --fix writes the suggested "
     "paths into a new version. Exit 1 when a label is stale.", {"context_settings": {"default_map": {"labels": True}}}),
    ("score-retrieval", "score_retrieval", "score --retrieval", None, {}),
    ("score-abstention", "score_abstention", "score --abstention", None, {}),
    ("judge", "judge_answers", "score --answers", None, {}),
    ("cache", "cache", "merge --cache, show-cache", None, {}),  # its leaves, by name: cache merge, cache stats
]

# Flags that are another command's job under an old door, kept working (and documented as
# aliases in docs/cli.md): (command and flag, the command it is, how, the function both end in).
FLAG_ALIASES = [
    ("label --validate", "validate --labels", "", "evalkit.cli.validate.check_labels"),
    ("label --fix", "validate --fix", "", "evalkit.cli.validate.check_labels"),
    ("run --repro", "reproduce", "on the run it makes first", "evalkit.cli.repro.reproduce"),
]


class LazyCommands(MutableMapping[str, Any]):
    """The sub-commands by name, in listing order, each built on first use (its module imported
    then): `evalkit --help` lists them from COMMANDS and imports none of them, and `evalkit run`
    imports run_eval's module only (issue 39 item 5: importing every command's module was most of
    a start-up's CPU)."""

    def __init__(self, names: list[str], build: Callable[[str], Any]):
        self._names = list(names)
        self._build = build
        self._built: dict[str, Any] = {}

    def built(self, name: str) -> Any:
        """The command if it was built already, else None (builds nothing)."""
        return self._built.get(name)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._names:
                raise KeyError(name)
            self._built[name] = self._build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


class GroupedCommands(TyperGroup):
    """`evalkit --help` with the sub-commands listed by job (their rich_help_panel, in GROUPS
    order), each with its whole short help: wrapped to the terminal, never cut with "...",
    in one column across the groups. The commands are LazyCommands: the listing comes from
    COMMANDS and ALIASES, a command's module is imported when that command is used."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        commands = LazyCommands(list(_MOUNTS), _build)
        for name, command in self.commands.items():  # none are registered on `app` itself
            commands[name] = command
        self.commands = commands

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names: TyperGroup's own would build every command

    def _listing(self, name: str) -> tuple[str | None, str, bool]:
        """(panel, short help, hidden) of sub-command `name`, from the command if it was built,
        else from what it is mounted with (the same values, without importing its module)."""
        command = self.commands.built(name) if isinstance(self.commands, LazyCommands) else self.commands.get(name)
        if command is None:
            _spec, options = _MOUNTS[name]
            return options.get("group"), options.get("short_help") or "", bool(options.get("hidden"))
        text = command.short_help or command.get_short_help_str(limit=10_000)
        return getattr(command, "rich_help_panel", None), text, command.hidden

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        shown = [(n, *self._listing(n)) for n in self.list_commands(ctx)]
        shown = [(n, panel, text) for n, panel, text, hidden in shown if not hidden]
        width = max((len(n) for n, *_ in shown), default=0)
        for name, panel, text in shown:
            rows.setdefault(panel or "Commands", []).append((name.ljust(width), text))
        for title in [*GROUPS, *(t for t in rows if t not in GROUPS)]:
            if rows.get(title):
                with formatter.section(title):
                    formatter.write_dl(rows[title])


app = typer.Typer(
    cls=GroupedCommands, add_completion=False, rich_markup_mode=None, no_args_is_help=True,
    help="Evaluate a retrieval-backed chatbot.",
)


def _print_version(value: bool) -> None:
    if value:
        from evalkit import __version__

        typer.echo(f"evalkit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Evaluate a retrieval-backed chatbot."""


def mounted(name: str) -> typer.Typer:
    """A Typer app holding sub-command `name` alone, mounted as `evalkit` mounts it (its
    module imported now): what its click command is built from, and where tests find its callback."""
    spec, options = _MOUNTS[name]
    holder = typer.Typer(add_completion=False, rich_markup_mode=app.rich_markup_mode)
    _mount(holder, name, spec, **options)
    return holder


def _build(name: str) -> Any:
    """Sub-command `name` as a click command, built as typer builds a group's commands."""
    holder = mounted(name)
    if holder.registered_commands:
        return typer.main.get_command_from_info(
            holder.registered_commands[0], pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
    # suggest_commands came in typer 0.20; pyproject's lower bound (0.19) has none.
    suggest = {"suggest_commands": app.suggest_commands} if hasattr(app, "suggest_commands") else {}
    return typer.main.get_group_from_info(
        holder.registered_groups[0], pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode, **suggest,
    )


def _mount(into: typer.Typer, name: str, spec: str, *, group: str | None = None, short_help: str | None = None,
           help: str | None = None, hidden: bool = False, settings: dict[str, Any] | None = None) -> None:
    """Mount `spec` (a module under evalkit.cli, or module:command for one command of a
    group app) as sub-command `name` of `into`."""
    module, _, leaf = spec.partition(":")
    sub: typer.Typer = importlib.import_module(f"evalkit.cli.{module}").app
    commands = sub.registered_commands
    if leaf:
        commands = [c for c in commands if (c.name or c.callback.__name__) == leaf]
    if leaf or (sub.registered_callback is None and len(commands) == 1):
        # A one-command script app: mount its command itself, so `evalkit run --flag` takes
        # the same flags as `scripts/run_eval.py --flag` (add_typer would make a group).
        cmd = commands[0]
        text = help or (sub.info.help if isinstance(sub.info.help, str) and not leaf else cmd.help)
        # cls: the script's command class (PanelledCommand lists --help by panel).
        into.command(name=name, help=text, short_help=short_help, cls=cmd.cls,
                     rich_help_panel=group, hidden=hidden, **(settings or {}))(cmd.callback)
    else:
        into.add_typer(sub, name=name, short_help=short_help, rich_help_panel=group, hidden=hidden)


# name -> (spec, how it is mounted), in the order `evalkit --help` and list_commands give them.
_MOUNTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (spec, {"group": group, "short_help": short, "help": HELP.get(name)}) for name, spec, group, short in COMMANDS},
    **{name: (spec, {"help": help_, "hidden": True, "settings": settings}) for name, spec, _runs, help_, settings in ALIASES},
}

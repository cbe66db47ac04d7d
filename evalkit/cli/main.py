"""The `evalkit` console command: the scripts' apps as sub-commands (one implementation, two doors).

One way to do each thing: every job has one sub-command, named by the rule in
docs/development.md ("CLI names": a verb, or verb-noun), listed by `evalkit --help` under the
job it belongs to with a whole one-line description. The old names of folded or renamed
commands still work as hidden aliases (ALIASES below), each the same code as the command it
names; `--help` of every one shows its own text.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
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
    ("run", "run_eval", RUN, "Run an eval set against a chatbot into a run folder."),
    ("merge", "merge", RUN, "Join the shard runs of one run, and their judge caches."),
    ("reproduce", "repro", RUN, "Re-run a stored run; check every record comes out the same."),
    ("check-target", "check_target", RUN, "Check a chatbot against the /api/v1/ask contract."),
    ("serve-reference", "serve_reference", RUN, "Serve the built-in reference chatbot over HTTP."),
    ("score", "score", SCORE, "Score a stored run again: retrieval, abstention, answers."),
    ("compare", "compare_runs", COMPARE, "Compare two runs and decide whether the change may merge."),
    ("report", "report", REPORT, "Write an HTML report: a run, two runs, or the trend."),
    ("export", "export", REPORT, "Export a run as TREC files for trec_eval or ranx."),
    ("redact", "redact", REPORT, "Write a shareable copy of a run, its texts hashed."),
    ("lock", "lock_eval_set", MAINTAIN, "Lock baselined eval set files against edits."),
    ("show-cache", "cache:stats", MAINTAIN, "Count the judge cache's judgments by kind and model."),
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


class GroupedCommands(TyperGroup):
    """`evalkit --help` with the sub-commands listed by job (their rich_help_panel, in GROUPS
    order), each with its whole short help: wrapped to the terminal, never cut with "...",
    in one column across the groups."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        shown = [(n, c) for n in self.list_commands(ctx) if (c := self.get_command(ctx, n)) is not None and not c.hidden]
        width = max((len(n) for n, _ in shown), default=0)
        for name, command in shown:
            panel = getattr(command, "rich_help_panel", None) or "Commands"
            text = command.short_help or command.get_short_help_str(limit=10_000)
            rows.setdefault(panel, []).append((name.ljust(width), text))
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


def _mount(name: str, spec: str, *, group: str | None = None, short_help: str | None = None, help: str | None = None,
           hidden: bool = False, settings: dict[str, Any] | None = None) -> None:
    """Mount `spec` (a module under evalkit.cli, or module:command for one command of a
    group app) as sub-command `name`."""
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
        app.command(name=name, help=text, short_help=short_help, cls=cmd.cls,
                    rich_help_panel=group, hidden=hidden, **(settings or {}))(cmd.callback)
    else:
        app.add_typer(sub, name=name, short_help=short_help, rich_help_panel=group, hidden=hidden)


for _name, _spec, _group, _short in COMMANDS:
    _mount(_name, _spec, group=_group, short_help=_short, help=HELP.get(_name))
for _name, _spec, _runs, _help, _settings in ALIASES:
    _mount(_name, _spec, help=_help, hidden=True, settings=_settings)

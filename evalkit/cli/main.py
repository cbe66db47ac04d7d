"""The `evalkit` console command: the scripts' apps as sub-commands (one implementation, two doors)."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True, help="Evaluate a retrieval-backed chatbot.")


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

# (sub-command, module under evalkit.cli). Modules that do not exist yet are skipped,
# so the console command grows as scripts land without editing this table twice.
_COMMANDS = [
    ("init", "init"),
    ("run", "run_eval"),
    ("label", "label_eval"),
    ("score-retrieval", "score_retrieval"),
    ("judge", "judge_answers"),
    ("score-abstention", "score_abstention"),
    ("score", "score"),
    ("compare", "compare_runs"),
    ("serve-reference", "serve_reference"),
    ("validate", "validate"),
    ("redact", "redact"),
    ("report", "report"),
    ("import", "import_cases"),
    ("repro", "repro"),
    ("lock", "lock_eval_set"),
    ("merge", "merge"),
    ("export", "export"),
    ("cache", "cache"),
    ("generate", "generate"),
    ("check-target", "check_target"),
]

for _name, _module in _COMMANDS:
    try:
        _mod = importlib.import_module(f"evalkit.cli.{_module}")
    except ModuleNotFoundError as e:
        if e.name != f"evalkit.cli.{_module}":
            raise
        continue
    _sub: typer.Typer = _mod.app
    if _sub.registered_callback is None and len(_sub.registered_commands) == 1:
        # A one-command script app: mount its command itself, so `evalkit run --flag`
        # takes the same flags as `scripts/run_eval.py --flag` (add_typer would make a group).
        _cmd = _sub.registered_commands[0]
        _help = _sub.info.help if isinstance(_sub.info.help, str) else _cmd.help
        # cls: the script's command class (PanelledCommand lists --help by panel).
        app.command(name=_name, help=_help, cls=_cmd.cls)(_cmd.callback)
    else:
        app.add_typer(_sub, name=_name)


@app.command(
    "validate-labels",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    help="Check every gold support against the notes and the target (the same as `evalkit label --validate`; "
    "its flags apply). Exit 1 when a label is stale.",
)
def validate_labels(ctx: typer.Context) -> None:
    from evalkit.cli.label_eval import app as label_app

    command = typer.main.get_command(label_app)
    command.main(args=["--validate", *ctx.args], prog_name="evalkit validate-labels")

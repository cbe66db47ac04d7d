"""The `evalkit` console command: the scripts' apps as sub-commands (one implementation, two doors)."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Evaluate a retrieval-backed chatbot.")

# (sub-command, module under evalkit.cli). Modules that do not exist yet are skipped,
# so the console command grows as scripts land without editing this table twice.
_COMMANDS = [
    ("run", "run_eval"),
    ("label", "label_eval"),
    ("score-retrieval", "score_retrieval"),
    ("judge", "judge_answers"),
    ("score-abstention", "score_abstention"),
    ("compare", "compare_runs"),
    ("serve-reference", "serve_reference"),
]

for _name, _module in _COMMANDS:
    try:
        _mod = importlib.import_module(f"evalkit.cli.{_module}")
    except ModuleNotFoundError as e:
        if e.name != f"evalkit.cli.{_module}":
            raise
        continue
    app.add_typer(_mod.app, name=_name)

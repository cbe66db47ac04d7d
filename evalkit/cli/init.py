"""evalkit init: a starter project in the current (or given) folder, so `evalkit run` runs.

Writes evalkit.toml (every run setting, commented out at its default), eval_set.jsonl (a
few example cases), sample_vault/ (the notes they are about) and .gitignore lines. Refuses,
writing nothing, when evalkit.toml, eval_set.jsonl or sample_vault/ exists, or .gitignore is
not a regular file; a write that fails is taken back (evalkit.authoring.starter.init_project).
Exit 0 ok, 2 when something is in the way.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import typer

from evalkit.cli.common import exit_on_known_errors

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Write a starter project (evalkit.toml, eval_set.jsonl, sample_vault/, .gitignore lines) so that "
    "`evalkit run` runs. Never overwrites: exit 2 when one of them exists.",
)


@app.command()
def main(
    folder: Path = typer.Argument(Path("."), metavar="FOLDER", help="Where to write the project (created if missing)."),
) -> None:
    """Write a starter project into FOLDER (default: here)."""
    with exit_on_known_errors():
        from evalkit.authoring.starter import init_project

        result = init_project(folder, project_config_text())
        for name in result.written:
            typer.echo(f"evalkit: wrote {folder / name}" + ("/" if name.endswith("/") else ""))
        if result.gitignore_added:
            typer.echo(f"evalkit: added {len([x for x in result.gitignore_added if not x.startswith('#')])} lines "
                       f"to {folder / '.gitignore'}")
        cd = "" if folder.resolve() == Path.cwd().resolve() else f"cd {shlex.quote(str(folder))} && "
        typer.echo(
            "\nNext:\n"
            f"  {cd}evalkit run            the example cases against the reference chatbot over sample_vault/\n"
            "  evalkit report --run-id latest   the run as an HTML page\n"
            "Your own notes: set vault (or api_url for your chatbot) in evalkit.toml, or pass --vault / --api-url."
        )


def project_config_text() -> str:
    """evalkit.toml: every run setting commented out at its default, with its --help text.

    Generated from run_eval's own flags and RunSettings' defaults, so it cannot drift from them.
    """
    lines = [
        "# evalkit project settings. `evalkit run` reads [run] from the folder it runs in:",
        "# a flag on the command line wins over a value here, and a value here over the default.",
        "# Every setting below is at its default; uncomment a line to change it.",
        "#",
        "# Your own notes: set vault to their folder (the reference chatbot indexes it), or point",
        "# api_url at your chatbot's /api/v1/ask API. Then draft cases for your notes with",
        "#   evalkit generate --vault ~/notes --output candidates.jsonl",
        "# and review them into an eval set (docs/labeling.md, 'Growing the eval set').",
        "",
        "[run]",
    ]
    for name, help_text in _run_flags():
        lines.append("")
        lines.extend(f"# {part}" for part in _wrap(help_text))
        default = _default_of(name)
        shown = "   (not set by default)" if default is None else _toml_value(default)
        lines.append(f"# {name} = {shown}")
    lines += [
        "",
        "[eval_set]",
        "# Categories a case may use beyond the built-in ones (factual, reasoning, multi_hop,",
        "# recency/conflict, general, adversarial).",
        "# categories = []",
        "",
    ]
    return "\n".join(lines)


def _run_flags() -> list[tuple[str, str]]:
    """(RunSettings field, help text) of each run_eval flag a project may set, in --help order."""
    import typer.main

    from evalkit.cli.run_eval import app
    from evalkit.config import NOT_PROJECT_SETTINGS, RunSettings

    renamed = {"json_output": "json_output", "threshold": "thresholds"}
    out = []
    for param in typer.main.get_command(app).params:
        name = renamed.get(param.name or "", param.name or "")
        if name in RunSettings.model_fields and name not in NOT_PROJECT_SETTINGS:
            text = " ".join((getattr(param, "help", None) or "").split())
            # the default is on the line below, as a value: drop the help's "(default: ...)"
            out.append((name, re.sub(r"\s*\(default: [^)]*\)", "", text).strip()))
    return out


def _default_of(name: str) -> Any:
    from evalkit.config import RunSettings

    info = RunSettings.model_fields[name]
    return info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {value!r}")  # pragma: no cover - RunSettings holds none


def _wrap(text: str, width: int = 92) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]

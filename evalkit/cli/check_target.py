"""check_target.py: is a chatbot speaking the contract? (`evalkit check-target`, issue 26)

Asks the target a handful of questions (an eval set's first ones with --eval-set, else
generic ones) and prints one row per contract rule: pass, FAIL or warn, with an example
from a response and the fix (`evalkit.targets.conformance`). Exit 0 when no rule fails,
1 when one does, 2 bad flags.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from evalkit.cli.common import (
    eval_set_option,
    exit_on_known_errors,
    json_option,
    k_option,
    plain_metavars,
    target_options,
    vault_id_option,
)

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Check a chatbot against the /api/v1/ask contract (docs/api-contract.md): ask it a few questions and print "
    "a pass/FAIL/warn row per rule, each failure with an example and the fix. Exit 0 ok, 1 a rule failed, 2 bad input.",
)

_TARGET = target_options(None)
N_QUESTIONS = 5


@app.command()
def main(
    api_url: Optional[str] = _TARGET["api_url"],
    target: Optional[str] = _TARGET["target"],
    vault: Optional[Path] = _TARGET["vault"],
    vault_id: Optional[str] = vault_id_option(),
    param: Optional[list[str]] = _TARGET["param"],
    timeout: Optional[float] = _TARGET["timeout"],
    eval_set: Optional[list[Path]] = eval_set_option(
        f"Ask the first {N_QUESTIONS} questions of this eval set; when it is not there, {N_QUESTIONS} generic ones."
    ),
    k: Optional[list[int]] = k_option("The largest is the number of chunks asked for. (default: 5)"),
    json_output: bool = json_option("target, questions, passed, rows; instead of the table"),
) -> None:
    """Check a chatbot against the contract."""
    with exit_on_known_errors():
        from evalkit.config import build_settings
        from evalkit.targets import parse_param_options
        from evalkit.targets.conformance import DEFAULT_QUESTIONS, check_target

        values = {"api_url": api_url or None, "target": target, "vault": str(vault) if vault else None,
                  "vault_id": vault_id, "timeout": timeout, "params": parse_param_options(param) if param else None}
        settings = build_settings(values)  # the same validation (and messages) as run_eval's flags
        questions = list(DEFAULT_QUESTIONS)
        paths = [str(p) for p in eval_set] if eval_set else [s for s in settings.eval_set if Path(s).exists()]
        if paths:  # a given eval set must load; the default one only when it is there
            from evalkit.evalset.load import load_eval_set

            cases = load_eval_set(paths).cases
            questions = [c.question for c in cases[:N_QUESTIONS]] or questions
        report = check_target(
            api_url=settings.api_url, target=settings.target, vault=settings.vault, vault_id=settings.vault_id,
            questions=questions, k=max(k) if k else 5, timeout=settings.timeout, params=dict(settings.params),
        )
    if json_output:
        import orjson

        sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        _print(report)
    raise typer.Exit(0 if report.passed else 1)


def _print(report) -> None:  # noqa: ANN001 - ConformanceReport, imported lazily
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    desc = report.target
    where = desc.get("api_url") or desc.get("target") or f"the reference chatbot over {desc.get('vault')}"
    table = Table(title=f"{where}: {report.questions} questions", title_justify="left", show_lines=False)
    table.add_column("rule")
    table.add_column("result")
    table.add_column("detail / fix", overflow="fold")
    style = {"pass": "green", "FAIL": "bold red", "warn": "yellow"}
    for row in report.rows:
        detail = row.detail + (f"\nfix: {row.fix}" if row.fix and row.status != "pass" else "")
        table.add_row(row.title, Text(row.status, style=style[row.status]), Text(detail))
    console = Console()
    console.print(table)
    console.print("passed" if report.passed else "FAILED: a run against this target would not measure what it seems to")


plain_metavars(app)

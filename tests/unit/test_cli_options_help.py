"""Issue 25 item 9: `--help` reads by task (every option in a named panel) and shows run
defaults from one source, evalkit.config.RunSettings."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from evalkit.cli.common import PanelledCommand

ROOT = Path(__file__).resolve().parents[2]
BIG = ["run_eval", "compare_runs", "judge_answers", "generate", "label_eval"]


def _command(module: str):
    return typer.main.get_command(importlib.import_module(f"evalkit.cli.{module}").app)


def _help(module: str) -> str:
    out = CliRunner().invoke(importlib.import_module(f"evalkit.cli.{module}").app, ["--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    return out.stdout


def _sections(text: str) -> dict[str, list[str]]:
    """{section title: the flags listed under it} of a plain click help page."""
    sections: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = []
        elif title is not None and re.match(r"  (-\w, )?--", line):
            sections[title].append(re.findall(r"--[\w-]+", line)[0])
    return sections


@pytest.mark.parametrize("module", BIG)
def test_every_option_of_a_big_script_sits_in_a_named_panel(module: str) -> None:
    unpanelled = [p.opts[0] for p in _command(module).params
                  if p.param_type_name == "option" and not getattr(p, "rich_help_panel", None)]
    assert unpanelled == []
    sections = _sections(_help(module))
    assert sections["Options"] == ["--help"]  # the plain help shows the panels, --help alone is left
    assert len(sections) >= 4


def test_run_eval_help_reads_by_task() -> None:
    sections = _sections(_help("run_eval"))
    assert list(sections) == [
        "Target", "Selection", "Scoring", "Judge", "Regression gate", "Output", "Config matrix", "Reproducibility", "Options",
    ]
    assert {"--api-url", "--concurrency", "--rps", "--timeout"} <= set(sections["Target"])
    assert {"--eval-set", "--ids", "--tag", "--shard"} <= set(sections["Selection"])
    assert {"--baseline", "--threshold", "--regression-threshold-recall"} <= set(sections["Regression gate"])
    assert {"--results-dir", "--json", "--quiet"} <= set(sections["Output"])


def test_the_console_command_keeps_the_panels() -> None:
    # `evalkit run` mounts run_eval's command; without its command class the panels vanish
    from evalkit.cli.main import app

    out = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "Regression gate" in _sections(out.stdout) and _sections(out.stdout)["Options"] == ["--help"]


def test_a_command_with_panels_lists_them() -> None:
    # typer drops rich_help_panel from the plain help (rich_markup_mode=None): a panelled
    # option on a command without PanelledCommand would silently land in "Options"
    for path in sorted((ROOT / "evalkit" / "cli").glob("*.py")):
        if path.stem in ("__init__", "common", "door", "main", "label_app", "run_matrix"):
            continue
        command = _command(path.stem)
        for cmd in (getattr(command, "commands", None) or {None: command}).values():
            if any(getattr(p, "rich_help_panel", None) for p in cmd.params):
                assert isinstance(cmd, PanelledCommand), path.stem


def test_usage_errors_stay_plain() -> None:
    out = CliRunner().invoke(importlib.import_module("evalkit.cli.run_eval").app, ["--concurrency", "x"])
    assert out.exit_code == 2 and "╭" not in out.output and "Invalid value for '--concurrency'" in out.output


def _shown(value: object) -> str:
    # RunSettings' default as the help writes it; worked out here, not by the code under test
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else ", ".join(map(str, value))
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else str(value)
    return str(value)


def test_every_run_setting_with_a_default_shows_that_default() -> None:
    # "defaults shown from one source": each flag whose RunSettings field has a default to
    # say (not None, False or empty) says it, and says the true one
    from evalkit.cli.run_eval import FIELD_OF
    from evalkit.config import RunSettings

    checked = []
    for param in _command("run_eval").params:
        field = FIELD_OF.get(param.name, param.name)
        if field not in RunSettings.model_fields:
            continue
        default = RunSettings.model_fields[field].get_default(call_default_factory=True)
        shown = re.findall(r"\(default: ([^)]*)\)", param.help or "")
        if default is None or default is False or default in ([], {}):
            assert not [s for s in shown if re.fullmatch(r"[-0-9.]+", s)], (param.opts[0], shown)
            continue
        assert len(shown) == 1, (param.opts[0], param.help)
        assert shown[0].split(",")[0] == _shown(default), (param.opts[0], shown[0], default)
        checked.append(field)
    # the ones that have a default to show: eval set, vault, K, weights, request limits, gate...
    assert {"eval_set", "vault", "k", "timeout", "retries", "concurrency", "results_dir", "judge_temperature",
            "max_response_bytes", "trials", "regression_threshold_recall"} <= set(checked)
    assert len(checked) >= 25


def test_a_changed_run_default_changes_the_help_with_no_second_edit() -> None:
    # The defaults live in evalkit.defaults (plain values, so --help need not build the
    # pydantic models): change two there, and RunSettings, run_eval --help and label_eval's
    # shared --vault all follow
    code = (
        "from evalkit.defaults import RUN_DEFAULTS\n"
        "RUN_DEFAULTS['concurrency'] = 7\n"
        "RUN_DEFAULTS['vault'] = 'my_notes'\n"
        "import typer.main\n"
        "from evalkit.cli import run_eval, label_eval\n"
        "for app in (run_eval.app, label_eval.app):\n"
        "    params = {p.name: p.help for p in typer.main.get_command(app).params}\n"
        "    print(params.get('concurrency'), '|', params['vault'])\n"
        "from evalkit.config import RunSettings\n"
        "print(RunSettings().concurrency, RunSettings().vault)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    run, label, model = out.stdout.splitlines()
    assert "(default: 7)" in run and "(default: my_notes)" in run
    assert "(default: my_notes)" in label
    assert model == "7 my_notes"


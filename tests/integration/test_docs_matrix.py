"""docs/running.md's config-matrix example is the output of the command it shows (issue 43
item 6): the table there once came from a unit-test fixture, over a `thoroughness` option
the reference chatbot ignores (its three presets were one run three times). This runs the
first command of the section, as written, on the repository's eval_set.jsonl and
sample_vault, and compares every column of the docs' table but the latencies."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from evalkit.reference.chatbot import OPTIONS
from evalkit.run.matrix import RUN_FLAGS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    return text.split("\n## Config matrix\n", 1)[1].split("\n## ", 1)[0]


def _blocks(section: str, lang: str) -> list[str]:
    """The fenced blocks of `section` opened with ```lang (lang "" for a bare fence)."""
    blocks: list[str] = []
    fence: str | None = None  # the language of the block we are in, None outside one
    lines: list[str] = []
    for line in section.splitlines():
        if line.startswith("```"):
            if fence is None:
                fence, lines = line[3:].strip(), []
            else:
                if fence == lang:
                    blocks.append("\n".join(lines) + "\n")
                fence = None
        elif fence is not None:
            lines.append(line)
    return blocks


def _command(section: str) -> list[str]:
    first = _blocks(section, "bash")[0].replace("\\\n", " ").splitlines()[0]
    return shlex.split(first)


def _masked(table: str) -> list[list[str]]:
    """The table's lines as words, the p50/p95 column (this machine's latency) masked."""
    rows = []
    for line in table.strip().splitlines():
        words = line.split()
        if words and re.fullmatch(r"[\d.]+/[\d.]+", words[5] if len(words) > 5 else ""):
            words[5] = "<latency>"
        rows.append(words)
    return rows


def test_the_matrix_example_is_what_its_command_prints(tmp_path: Path) -> None:
    section = _section()
    argv = _command(section)
    assert argv[:2] == ["python", "scripts/run_eval.py"] and "--matrix" in argv
    for name in ("eval_set.jsonl", "sample_vault", "scripts"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    env.pop("EVAL_API_URL", None)
    done = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = next(b for b in _blocks(section, "") if b.startswith("config matrix"))
    assert _masked(done.stdout) == _masked(shown)


def test_the_matrix_examples_use_knobs_the_reference_chatbot_honours() -> None:
    section = _section()
    argv = _command(section)
    keys = [v.split("=", 1)[0] for flag, v in zip(argv, argv[1:]) if flag == "--matrix"]
    for preset in tomllib.loads(_blocks(section, "toml")[0])["presets"].values():
        keys += [k for k in preset if k != "params"] + list(preset.get("params", {}))
    assert keys and set(keys) <= OPTIONS | set(RUN_FLAGS), keys

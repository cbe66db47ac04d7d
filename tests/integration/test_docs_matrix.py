"""docs/running.md's config-matrix example sweeps knobs the reference chatbot honours (issue 43
item 6): the table there once came from a unit-test fixture, over a `thoroughness` option
the reference chatbot ignores (its three presets were one run three times). That the table is
what its command prints is tests/integration/test_docs_examples.py's check, as for every
example output of the docs."""

from __future__ import annotations

import shlex
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


def test_the_matrix_examples_use_knobs_the_reference_chatbot_honours() -> None:
    section = _section()
    argv = _command(section)
    keys = [v.split("=", 1)[0] for flag, v in zip(argv, argv[1:]) if flag == "--matrix"]
    for preset in tomllib.loads(_blocks(section, "toml")[0])["presets"].values():
        keys += [k for k in preset if k != "params"] + list(preset.get("params", {}))
    assert keys and set(keys) <= OPTIONS | set(RUN_FLAGS), keys

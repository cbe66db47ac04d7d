"""serve_reference.py starts fast: --help and the CLI import load no index, numpy or httpx."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_cli_import_is_light() -> None:
    code = (
        "import evalkit.cli.serve_reference, sys; "
        "bad = [m for m in ('openai', 'anthropic', 'httpx', 'numpy', 'evalkit.reference.chatbot') if m in sys.modules]; "
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_chatbot_import_does_not_load_httpx() -> None:
    # httpx only comes in when an embeddings or chat endpoint is configured
    code = "import evalkit.reference.server, sys; assert 'httpx' not in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_help_lists_the_flags() -> None:
    out = subprocess.run([sys.executable, "scripts/serve_reference.py", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    assert out.returncode == 0, out.stderr
    for flag in ("--vault", "--port", "--host", "--vault-id", "--max-tokens", "--abstain-threshold"):
        assert flag in out.stdout, flag

"""Module boundaries of STYLE.md §6.1, checked in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("openai", "anthropic")


def _loaded_after(import_stmt: str, names: tuple[str, ...]) -> list[str]:
    code = f"import sys\n{import_stmt}\nprint(' '.join(n for n in {names!r} if n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_import_evalkit_is_light() -> None:
    assert _loaded_after("import evalkit", ("httpx", "openai", "anthropic", "rich", "numpy")) == []


@pytest.mark.parametrize(
    "module",
    ["evalkit.evalset.anchors", "evalkit.metrics.retrieval", "evalkit.metrics.abstention", "evalkit.metrics.aggregate"],
)
def test_metrics_and_anchors_import_no_io_layers(module: str) -> None:
    forbidden = ("evalkit.store.runs", "evalkit.targets", "evalkit.judges", "rich", "httpx", *HEAVY)
    assert _loaded_after(f"import {module}", forbidden) == []


@pytest.mark.parametrize(
    "module",
    ["evalkit.cli.main", "evalkit.run", "evalkit.judges", "evalkit.targets", "evalkit.reference.server"],
)
def test_sdks_are_loaded_lazily(module: str) -> None:
    assert _loaded_after(f"import {module}", HEAVY) == []

"""The layout table (docs/development.md) names every module and package of evalkit/ (issue
25 item 6: the table left out about 20 of them). A new module fails this until the table says
what it holds."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _listed() -> set[str]:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    start = text.index("| path | holds |", text.index("Layout:\n"))
    table = text[start : text.index("\n\n", start)]
    out = set()
    for line in table.splitlines()[2:]:
        out |= {path.rstrip("/") for path in re.findall(r"`([^`]+)`", line.split("|")[1])}
    return out


def test_every_module_and_package_is_in_the_layout_table() -> None:
    listed = _listed()
    top = [p for p in (ROOT / "evalkit").iterdir()
           if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").is_file())]
    missing = sorted(p.relative_to(ROOT).as_posix() for p in top if p.relative_to(ROOT).as_posix() not in listed)
    assert missing == []
    gone = sorted(path for path in listed if path.startswith("evalkit/") and not (ROOT / path).exists())
    assert gone == []

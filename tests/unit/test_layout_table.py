"""The layout table (docs/development.md) is checked against the tree (issue 25 item 6):
it names every module and package of evalkit/ (the old table left out about 20), names none
that is gone, and lists them in import order, so that a row imports only rows above it and
the table is the house's floor plan by pipeline stage, not a wish."""

from __future__ import annotations

import re

from tests.import_graph import ROOT, unit_graph, unit_of


def _rows() -> list[set[str]]:
    """The table's rows, in order: the backticked paths of each row's first column."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    start = text.index("| path | holds |", text.index("Layout, by pipeline stage"))
    table = text[start : text.index("\n\n", start)]
    return [{path.rstrip("/") for path in re.findall(r"`([^`]+)`", line.split("|")[1])}
            for line in table.splitlines()[2:]]


def _units() -> dict[str, int]:
    """unit (`run`, `config`) -> its row in the table."""
    return {unit_of(path.removesuffix(".py").replace("/", ".")): i
            for i, row in enumerate(_rows()) for path in row if path.startswith("evalkit/")}


def test_every_module_and_package_is_in_the_layout_table() -> None:
    listed = set().union(*_rows())
    top = [p for p in (ROOT / "evalkit").iterdir()
           if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").is_file())]
    missing = sorted(p.relative_to(ROOT).as_posix() for p in top if p.relative_to(ROOT).as_posix() not in listed)
    assert missing == []
    gone = sorted(path for path in listed if path.startswith("evalkit/") and not (ROOT / path).exists())
    assert gone == []


def test_a_row_imports_only_rows_above_it() -> None:
    row = _units()
    upward = [f"{a} (row {row[a] + 1}) imports {b} (row {row[b] + 1}) at {where}"
              for a, targets in unit_graph().items() if a in row
              for b, where in targets.items() if b in row and row[b] >= row[a]]
    assert upward == []


def test_the_order_check_can_fail() -> None:
    # the table's first row (errors) imports nothing of evalkit; the cli (near the end) imports
    # most of it: read upside down, the same check would list many rows
    row = _units()
    assert row["errors"] < row["store"] < row["run"] < row["cli"]
    flipped = {u: -i for u, i in row.items()}
    assert any(b in flipped and flipped[b] >= flipped[a] for a, t in unit_graph().items() if a in flipped for b in t)

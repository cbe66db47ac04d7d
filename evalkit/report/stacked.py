"""Terminal tables that keep each row's label whole at any width (issue 36 item 8).

A rich `Table` narrower than its natural width wraps or cuts its cells: at 80 columns (CI
logs, pipes, where rich assumes 80) compare's metric names became "met…" and rows went
blank. `Fit` prints a table only where it fits as it is, else a narrower layout; `Stacked`
is the narrowest: each row's label on a line of its own, its cells on the next, aligned
under one header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Fit", "Stacked", "fits"]

_GAP = 2  # spaces between two cells of a stacked row


def fits(table: Table, console: Console, width: int | None = None) -> bool:
    """True when `table` prints at its natural width within `width` (the console's by default)."""
    # Measured without the console's limit: within it, rich reports at most its width (by cutting cells).
    natural = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
    return natural <= (console.width if width is None else width)


class Fit:
    """The first of `layouts` that fits the width it is printed at; the last one otherwise.

    Every layout but the last is a `Table` (measured); the last is printed whatever its width,
    so it should be one that never cuts a label (a `Stacked`, or plain text)."""

    def __init__(self, *layouts: RenderableType) -> None:
        self.layouts = layouts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for layout in self.layouts[:-1]:
            if isinstance(layout, Table) and fits(layout, console, options.max_width):
                yield layout
                return
        yield self.layouts[-1]


@dataclass
class _Row:
    label: Text | None
    cells: list[Text]
    note: Text | None
    lead: str


@dataclass
class Stacked:
    """Rows as a label line (with an optional note after it) and a line of cells aligned under
    `columns`; a row without a label is a continuation line of the row above.

    Args:
        title: printed first, as a rich table's title.
        label_header: what the label lines hold ("metric  significance").
        columns: (header, justify) of each cell.
    """

    title: str
    label_header: str
    columns: list[tuple[str, Literal["left", "right"]]]
    rows: list[_Row] = field(default_factory=list)
    indent: int = 2

    def add_row(self, label: Text | str | None, cells: list[Text | str], *, note: Text | str | None = None, lead: str = "") -> None:
        """A row: `label` on its own line (None: a continuation, cells only), `note` after the label
        (a continuation's: after its cells), or under it when the two do not fit one line; `lead`
        in the cells line's indent ("†")."""
        as_text = [c if isinstance(c, Text) else Text(c) for c in cells]
        self.rows.append(_Row(Text(label) if isinstance(label, str) else label, as_text,
                              Text(note) if isinstance(note, str) else note, lead))

    def _widths(self) -> list[int]:
        return [max([cell_len(h), *(cell_len(r.cells[i].plain) for r in self.rows)]) for i, (h, _) in enumerate(self.columns)]

    def _line(self, cells: list[Text], widths: list[int], lead: str = "") -> Text:
        line = Text(lead[: self.indent].ljust(self.indent))
        for i, (cell, w, (_, justify)) in enumerate(zip(cells, widths, self.columns, strict=True)):
            pad = " " * (w - cell_len(cell.plain))
            line.append_text(Text(pad) + cell if justify == "right" else cell + Text(pad if i < len(widths) - 1 else ""))
            if i < len(widths) - 1:
                line.append(" " * _GAP)
        line.rstrip()
        return line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self._widths()
        width = options.max_width
        aligned = self.indent + sum(widths) + _GAP * (len(widths) - 1) <= width
        yield Text(self.title, style="table.title")
        yield Text(self.label_header, style="table.header")
        if aligned:
            yield self._line([Text(h, style="table.header") for h, _ in self.columns], widths)
            yield Text("─" * min(width, self.indent + sum(widths) + _GAP * (len(widths) - 1)), style="table.header")
        for row in self.rows:
            if row.label is not None:
                if row.note is not None and cell_len(row.label.plain) + _GAP + cell_len(row.note.plain) <= width:
                    yield row.label + Text(" " * _GAP) + row.note
                else:
                    yield row.label
                    if row.note is not None:
                        yield Text(" " * self.indent) + row.note
            note = row.note if row.label is None else None
            if aligned:
                line = self._line(row.cells, widths, row.lead)
                if note is not None and cell_len(line.plain) + _GAP + cell_len(note.plain) <= width:
                    yield line + Text(" " * _GAP) + note
                else:
                    yield line
                    if note is not None:
                        yield Text(" " * self.indent) + note
            else:  # even the cells alone are too wide: each as "header value", wrapped
                pairs = [Text(f"{h} ") + c for (h, _), c in zip(self.columns, row.cells, strict=True) if c.plain]
                yield Text(row.lead[: self.indent].ljust(self.indent)) + Text(" · ").join([*pairs, *([note] if note else [])])

"""HTML reports: one self-contained file per report (inline CSS, JS, SVG and data; no network).

    render_page("run.html.j2", page=..., run=...) -> str      any template of templates/
    write_run_report("20260102T030405Z-1a2b3c")  -> Path     results/<id>/report.html

Templates autoescape everything; charts come from `charts` as Markup whose labels are
escaped. jinja2 is imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalkit.store.runs import RunDir

__all__ = ["page_context", "render_page", "write_page", "write_run_report"]


def render_page(template_name: str, **context: Any) -> str:
    """Render `templates/<template_name>` with `context` (autoescaped, StrictUndefined).

    Pages that extend base.html.j2 expect `page` (see `page_context`); the rest is the
    template's own view model.
    """
    from evalkit.report.html.env import environment

    return environment().get_template(template_name).render(**context)


def page_context(
    title: str,
    *,
    run_ids: Sequence[str] = (),
    created_at: str | None = None,
    nav: Sequence[tuple[str, str]] = (),
    subtitle: str | None = None,
) -> dict[str, Any]:
    """The `page` object base.html.j2 reads: the title, the run ids and their time, the
    section links (anchor id, label), and when and by which evalkit the page was made."""
    from datetime import datetime, timezone

    from evalkit import __version__

    return {
        "title": title,
        "subtitle": subtitle,
        "run_ids": list(run_ids),
        "created_at": created_at,
        "nav": list(nav),
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "evalkit_version": __version__,
    }


def write_page(path: str | Path, html: str) -> Path:
    """Write `html` to `path` atomically: a temp file in the same folder, then a rename, so a
    reader never sees half a page."""
    from evalkit.store.atomic import write_atomic

    return write_atomic(path, html)


def write_run_report(
    run: str | RunDir, results_dir: str | Path = "results", output: str | Path | None = None, *, max_cases: int | None = None
) -> Path:
    """Write the HTML report of one run: `<run folder>/report.html` unless `output` says where.

    Args:
        run: a run id under `results_dir`, or an opened RunDir.
        results_dir: the folder holding run folders (ignored when `run` is a RunDir).
        output: the file to write (default: report.html in the run folder).
        max_cases: keep only this many cases in the per-case table, the lowest case indexes
            (default: every case; the page stays fast at 100,000).

    Returns:
        The path written.

    Raises:
        evalkit.errors.RunNotFound: no such run; InputError: unreadable config or metrics.
    """
    from evalkit.report.html.run import write_run_report as _write

    return _write(run, results_dir=results_dir, output=output, max_cases=max_cases)

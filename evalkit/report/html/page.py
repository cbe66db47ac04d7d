"""The page every HTML report is: a template of templates/ rendered with its `page` header,
and written atomically. run.py, compare.py and trend.py each build a view model and call
these; nothing here knows what a run or a comparison is.

jinja2 is imported on first use (`env.environment`), so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["page_context", "render_page", "write_page"]


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

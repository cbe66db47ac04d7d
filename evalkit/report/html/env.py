"""The Jinja2 environment of the HTML reports: autoescaping everywhere, strict undefined,
number filters, and the page's own CSS and JS inlined (a report is one file, no network).

Templates live in `templates/`, static files in `static/`, both shipped as package data.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

__all__ = ["environment", "fmt_ms", "fmt_num", "fmt_pct", "fmt_signed", "fmt_usd", "static_text"]

DASH = "—"


def _missing(v: Any) -> bool:
    return v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v))


def fmt_num(v: Any, digits: int = 3) -> str:
    """`0.8627` -> "0.863"; ints keep no decimals and get thousands separators;
    True/False -> "yes"/"no"; None or NaN -> "—"."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if _missing(v):
        return DASH
    if isinstance(v, int):
        return f"{v:,}"
    try:
        return f"{float(v):,.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def fmt_pct(v: Any, digits: int = 1) -> str:
    """A rate in [0, 1] as a percentage: 0.8627 -> "86.3%"; None -> "—"."""
    if _missing(v):
        return DASH
    return f"{float(v) * 100:.{digits}f}%"


def fmt_signed(v: Any, digits: int = 3) -> str:
    """A delta with its sign always shown: 0.05 -> "+0.050", -0.05 -> "−0.050", 0 -> "±0.000"."""
    if _missing(v):
        return DASH
    x = float(v)
    if x == 0:
        return f"±{0:.{digits}f}"
    # U+2212 (minus sign) lines up with "+" in proportional fonts, unlike "-".
    return f"{'+' if x > 0 else '−'}{abs(x):.{digits}f}"


def fmt_ms(v: Any) -> str:
    """Milliseconds for people: 3.94 -> "3.9 ms", 1834 -> "1,834 ms"; None -> "—"."""
    if _missing(v):
        return DASH
    x = float(v)
    return f"{x:.1f} ms" if abs(x) < 10 else f"{x:,.0f} ms"


def fmt_usd(v: Any) -> str:
    """Dollars with four decimals (judge costs are often fractions of a cent); None -> "—"."""
    if _missing(v):
        return DASH
    return f"${float(v):,.4f}"


def static_text(name: str) -> Markup:
    """The text of `static/<name>` as Markup, for a `<style>`/`<script>` element of the page.

    Our own files, trusted: they are checked not to contain a closing tag that would end
    the element early.
    """
    text = _read_static(name)
    return Markup(text)


@lru_cache(maxsize=None)
def _read_static(name: str) -> str:
    text = resources.files("evalkit.report.html").joinpath("static", name).read_text(encoding="utf-8")
    lowered = text.lower()
    if "</script" in lowered or "</style" in lowered:
        raise ValueError(f"static/{name} contains a closing </script> or </style> tag; it cannot be inlined")
    return text


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The shared Environment (built once): PackageLoader over templates/, autoescape on
    for every template whatever its extension, StrictUndefined (a typo is an error, not a
    blank cell), and the filters num, pct, signed, ms, usd plus the global `static`."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evalkit.report.html", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=fmt_num, pct=fmt_pct, signed=fmt_signed, ms=fmt_ms, usd=fmt_usd)
    env.globals["static"] = static_text
    return env

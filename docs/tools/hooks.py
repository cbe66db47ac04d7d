"""MkDocs hook: EVAL.md as the page metrics.md, the repository-relative links of EVAL.md and docs/*.md as site links, and an output marked illustrative said so.

On GitHub, EVAL.md (at the root) links `docs/running.md#...` and the pages link `../EVAL.md`
or `EVAL.md`; on the site EVAL.md is the page metrics.md beside the others. Rewriting here
keeps one text that works in both places.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"\]\((?!https?:|#)([^)\s]+)\)")
# docs/tools/examples.py's marker of an output no command here can make: said on the site
_ILLUSTRATIVE = re.compile(r"^( *)<!-- illustrative: (.*?) -->$", flags=re.M)


def _site_target(target: str, page: str) -> str:
    path, sep, anchor = target.partition("#")
    if page == "metrics.md" and path.startswith("docs/"):
        path = path.removeprefix("docs/")
    if path in ("EVAL.md", "../EVAL.md"):
        path = "metrics.md"
    return path + sep + anchor


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001, ARG001 - mkdocs' hook signature
    name = page.file.src_uri
    if name == "metrics.md":  # the page stands for EVAL.md, which stays at the repository root
        markdown = (ROOT / "EVAL.md").read_text(encoding="utf-8")
    markdown = _ILLUSTRATIVE.sub(lambda m: f"{m.group(1)}*Illustrative output ({m.group(2)}).*\n", markdown)
    return _LINK.sub(lambda m: f"]({_site_target(m.group(1), name)})", markdown)

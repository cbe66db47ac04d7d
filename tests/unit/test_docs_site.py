"""The documentation holds together (issue 28, "Docs a newcomer reads"): every link between
README.md, EVAL.md and docs/*.md reaches a file that exists and a heading it names; the CLI
reference is what the apps print; no page promises what is not built. `mkdocs build --strict`
(CI, .ci/run) checks the site too; this test needs no mkdocs, so `pytest -q` catches a broken
link first."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "EVAL.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (and the site's: mkdocs.yml uses pymdownx's GitHub slugs)."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading)  # inline markup goes, its text stays
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.strip().replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n, name = 0, base
            while name in out:  # GitHub numbers repeated headings: x, x-1, x-2
                n += 1
                name = f"{base}-{n}"
            out.add(name)
    return out


def links(path: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))
            if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Top\n\n## The `run` job: step 2\n\n[ok](#the-run-job-step-2) [bad](#missing) [gone](b.md)\n")
    assert anchors(page) == {"top", "the-run-job-step-2"}
    assert links(page) == ["#the-run-job-step-2", "#missing", "b.md"]


def test_the_cli_reference_is_what_the_apps_print() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "tools" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    page, fresh = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8"), module.render()
    made_with = re.search(r"generated with typer (\S+) ", page)
    import typer

    stale = "docs/cli.md is stale: run python docs/tools/cli_reference.py"
    if made_with and made_with.group(1) == getattr(typer, "__version__", "?"):
        assert page == fresh, stale
    else:
        # another typer words and wraps help its own way: the commands and their flags must agree
        def flags(text: str) -> dict[str, set[str]]:
            sections = re.split(r"^#+ `(evalkit [^`]+)`$", text, flags=re.M)
            # the flags an option line starts with (not flags quoted in help prose, which
            # another typer may cut short)
            return {name: set(re.findall(r"^\s{2,}(?:-\w, )?(--[a-z][a-z0-9-]*)", body, flags=re.M))
                    for name, body in zip(sections[1::2], sections[2::2])}

        assert flags(page) == flags(fresh), stale


def test_the_scripts_stored_help_is_what_the_apps_print() -> None:
    # evalkit/cli/script_help.json: what scripts/*.py --help prints in a Python without typer
    import importlib.util
    import json

    import typer

    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "tools" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    stored = json.loads((ROOT / "evalkit" / "cli" / "script_help.json").read_text(encoding="utf-8"))
    fresh = json.loads(module.render_script_help())
    stale = "evalkit/cli/script_help.json is stale: run python docs/tools/cli_reference.py"
    assert sorted(stored["help"]) == sorted(p.name for p in (ROOT / "scripts").glob("*.py")), stale
    if stored["typer"] == getattr(typer, "__version__", "?"):  # another typer wraps its own way
        assert stored == fresh, stale


def test_every_page_is_in_the_site_and_no_page_promises_unbuilt_work() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name not in nav]
    assert missing == []
    stale = re.compile(r"will be built|when it lands|not built yet|coming soon|\bTODO\b", re.I)
    found = [f"{p.relative_to(ROOT)}: {m.group()}" for p in PAGES for m in stale.finditer(p.read_text(encoding="utf-8"))]
    assert found == []

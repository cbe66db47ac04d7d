"""The vault as the LLM generator reads it: sections, and notes joined by wikilinks.

A section is one heading chain of a note with its own text (heading line + body, sub-sections
and fenced code out; anchorcheck.outline_note, so heading paths are the chatbot's).
`sample_sections` spreads a seeded sample over the top-level folders; `wikilink_pairs` finds
the pairs of notes one links to the other, resolving links as Obsidian does.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.authoring.generate import own_lines, unfenced
from evalkit.evalset.anchorcheck import Chain, NoteOutline, outline_note
from evalkit.reference.corpus import MARKDOWN_SUFFIXES, walk_vault

__all__ = [
    "LinkPair",
    "Section",
    "WikiLink",
    "note_sections",
    "parse_wikilinks",
    "resolve_wikilink",
    "sample_sections",
    "vault_sections",
    "wikilink_pairs",
]

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Section:
    """One heading chain of a note with its own text (heading line + body, fenced code out).

    `full_text` keeps fenced code (the answer_in_vault check reads it too).
    """

    rel_path: str
    chain: Chain
    text: str
    body_words: int
    first_line: int
    full_text: str = ""

    @property
    def heading_path(self) -> str:
        return " > ".join(self.chain)

    @property
    def title(self) -> str:
        return f"{self.rel_path} > {self.heading_path}" if self.chain else self.rel_path

    @property
    def folder(self) -> str:
        return self.rel_path.split("/", 1)[0] if "/" in self.rel_path else ""

    def anchor(self) -> dict[str, str]:
        return {"rel_path": self.rel_path, "heading_path": self.heading_path}


def note_sections(rel_path: str, outline: NoteOutline) -> list[Section]:
    """Every section of one note with at least one word of body, in file order."""
    out = []
    for chain in dict.fromkeys(c for c, _, _ in outline.pieces):
        own = own_lines(outline, chain)
        lines = unfenced(own)
        if not lines:
            continue
        # The heading's own lines (one, or two for a setext heading), as the reader found them.
        path = " > ".join(chain) if isinstance(chain, tuple) else chain
        heading = next((h for h in outline.note.headings if h.path == path), None) if outline.note else None
        if heading is not None:
            body = [(n, text) for n, text in lines if not heading.line <= n <= heading.end_line]
        else:
            body = lines[1:] if chain and lines[0][1].lstrip().startswith("#") else lines
        words = sum(len(_WORD.findall(t)) for _, t in body)
        if words == 0:
            continue
        text = "\n".join(t for _, t in lines).strip()
        out.append(Section(rel_path, chain, text, words, lines[0][0], "\n".join(t for _, t in own)))
    return out


def vault_sections(vault: Path | str) -> dict[str, list[Section]]:
    """rel_path -> the note's sections (note_sections), for every markdown note of the vault.

    Raises:
        InputError: the vault folder does not exist.
    """
    root = Path(vault)
    out: dict[str, list[Section]] = {}
    for rel in walk_vault(root):
        if rel.lower().endswith(MARKDOWN_SUFFIXES):
            out[rel] = note_sections(rel, outline_note((root / rel).read_bytes(), rel))
    return out


def sample_sections(sections: Sequence[Section], n: int, seed: int) -> list[Section]:
    """`n` sections spread over top-level folders: each folder's sections and the folder
    order shuffled with random.Random(seed), then taken round-robin."""
    rng = random.Random(seed)
    groups: dict[str, list[Section]] = defaultdict(list)
    for s in sections:
        groups[s.folder].append(s)
    folders = sorted(groups)
    for f in folders:
        rng.shuffle(groups[f])
    rng.shuffle(folders)
    out: list[Section] = []
    depth = 0
    while len(out) < n and any(depth < len(groups[f]) for f in folders):
        for f in folders:
            if depth < len(groups[f]) and len(out) < n:
                out.append(groups[f][depth])
        depth += 1
    return out


@dataclass(frozen=True)
class WikiLink:
    """`[[target#heading|alias]]`: target as written (no .md needed), heading or None."""

    target: str
    heading: str | None = None
    alias: str | None = None
    line: int = 0


def parse_wikilinks(text: str, *, first_line: int = 1) -> list[WikiLink]:
    """The `[[...]]` links of `text`, in order, as the Markdown reader finds them (so none in
    code, inline code or a `%%` comment); embeds (`![[...]]`) and same-note links
    (`[[#Heading]]`) are skipped."""
    from evalkit.notes.markdown import read_note

    out: list[WikiLink] = []
    for link in read_note(text, front_matter=False).wikilinks:
        target = link.target.removesuffix("\\").strip()  # `[[T\\|alias]]` inside a table
        if link.embed or not target:
            continue
        heading = (link.heading or "").strip().lstrip("#").strip() or None
        alias = link.alias.strip() if link.alias is not None else None
        out.append(WikiLink(target, heading, alias, first_line + link.line - 1))
    return out


def _stem(rel_path: str) -> str:
    name = rel_path.rsplit("/", 1)[-1]
    for suffix in MARKDOWN_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _no_suffix(rel_path: str) -> str:
    for suffix in MARKDOWN_SUFFIXES:
        if rel_path.lower().endswith(suffix):
            return rel_path[: -len(suffix)]
    return rel_path


def resolve_wikilink(target: str, notes: Sequence[str]) -> str | None:
    """The note `target` names, Obsidian style: the exact vault-relative path (with or
    without .md), else a note whose path ends with it / whose file stem equals it, compared
    case-insensitively (the shortest path when several match, then the first in order)."""
    t = target.strip().replace("\\", "/").lstrip("/")
    if not t:
        return None
    t_bare = _no_suffix(t)
    for rel in notes:
        if rel == t or _no_suffix(rel) == t_bare:
            return rel
    folded = t_bare.casefold()
    if "/" in folded:
        hits = [r for r in notes if _no_suffix(r).casefold() == folded or _no_suffix(r).casefold().endswith("/" + folded)]
    else:
        hits = [r for r in notes if _stem(r).casefold() == folded]
    if not hits:
        return None
    return min(hits, key=lambda r: (len(r), r))


@dataclass(frozen=True)
class LinkPair:
    """Two notes joined by a wikilink: `a` links to `b` (the first such link found)."""

    a: str
    b: str
    a_chain: Chain  # the section of `a` holding the link
    b_heading: str | None  # the `#heading` of the link, if any

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "a_heading_path": " > ".join(self.a_chain), "b_heading": self.b_heading}


def wikilink_pairs(sections: Mapping[str, Sequence[Section]]) -> list[LinkPair]:
    """Every unordered pair of distinct notes where one links to the other, in file order of
    the linking note; a pair is recorded once, from its first link."""
    notes = sorted(sections)
    seen: set[tuple[str, str]] = set()
    out: list[LinkPair] = []
    for rel in notes:
        for sec in sections[rel]:
            for link in parse_wikilinks(sec.text):
                target = resolve_wikilink(link.target, notes)
                if target is None or target == rel or not sections.get(target):
                    continue
                key = tuple(sorted((rel, target)))
                if key in seen:
                    continue
                seen.add(key)  # type: ignore[arg-type]
                out.append(LinkPair(rel, target, sec.chain, link.heading))
    return out

"""The one Markdown reader: a note's headings, sections, code, comments, callouts and links.

`read_note(text)` parses a note with markdown-it-py (CommonMark, plus GFM tables and
strikethrough), so what is a heading, a code block or an HTML block is what CommonMark says,
never what a line looks like. Positions come from markdown-it's token maps; lines are
1-based and spans inclusive, as the reference chunker reports `start_line`/`end_line`.
Obsidian's additions are read as plugins and over the tokens:

- Front matter: a first line `---` up to the next line `---` or `...` (an unclosed block is
  text, so its `---` is a thematic break or a setext underline). Its lines are given to the
  parser as blank lines, so every line number stays the file's.
- `%%comments%%`: an inline rule turns each `%%` into a marker, except inside code spans,
  code blocks, HTML and autolinks, which the parser consumes first. Markers toggle in
  document order across blocks, so a comment may span paragraphs and headings; an unclosed
  comment runs to the end of the note. A heading that starts inside a comment is hidden.
- Callouts: a blockquote whose first line is `[!type]`, `[!type]+` or `[!type]-`, then a title.
- Wikilinks: `[[target#heading|alias]]` and embeds `![[...]]`, outside code and comments.

Sections follow the reference chunker's rules (EVAL.md, "reference chatbot"): a heading at
the top level of the note (not inside a list item, a blockquote or a callout, not in a
comment) opens a section that runs to the next such heading of any level. Its heading path
is the stack of enclosing headings, `# A > ## B`: each component is the heading's level as
`#`s (setext: `===` is 1, `---` is 2), a space and its source text with whitespace runs
collapsed and an ATX closing `#` run dropped. That is `normalize_heading_path`'s normal form,
except that the text is kept as written (no NFC), because chunk ids hash it. Text before the
first heading is a section with the heading path "" (the whole-file scope).
"""

from __future__ import annotations

import bisect
import codecs
import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # markdown-it is imported on first parse: `import evalkit` stays light
    from markdown_it import MarkdownIt
    from markdown_it.rules_inline import StateInline
    from markdown_it.token import Token

__all__ = ["Callout", "Comment", "FrontMatter", "Heading", "Note", "Section", "WikiLink", "read_note"]

_CALLOUT = re.compile(r"\[!([^\]\n]+)\]([+-]?)[ \t]*(.*)")
_MAX_WIKILINK = 2000  # characters between [[ and ]]: bounds the search on a line full of `[[`


@dataclass(frozen=True, slots=True)
class Heading:
    """A section heading.

    Attributes:
        level: 1-6.
        text: its source text, whitespace runs collapsed, a closing `#` run dropped.
        line: its first line; end_line: its last (a setext heading's underline).
        path: the heading path of its section, `# A > ## B`.
        setext: underlined (`===` / `---`) rather than `#`-prefixed.
    """

    level: int
    text: str
    line: int
    end_line: int
    path: str
    setext: bool = False


@dataclass(frozen=True, slots=True)
class Section:
    """A heading and the lines under it up to the next heading of any level.

    Attributes:
        path: the heading path; "" for the text before the first heading.
        level: the heading's level; 0 before the first heading.
        start_line, end_line: inclusive; from the heading line (or the first line after the
            front matter) to the line before the next heading (or the last line).
        heading: the heading, None for the text before the first heading.
    """

    path: str
    level: int
    start_line: int
    end_line: int
    heading: Heading | None


@dataclass(frozen=True, slots=True)
class FrontMatter:
    """YAML front matter: lines `start_line` (always 1) to `end_line`, markers included; `text`
    is what lies between the markers."""

    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True, slots=True)
class Comment:
    """An Obsidian `%%comment%%` from its opening to its closing `%%` (inclusive lines);
    an unclosed one (`closed` False) runs to the last line."""

    start_line: int
    end_line: int
    closed: bool = True


@dataclass(frozen=True, slots=True)
class Callout:
    """An Obsidian callout `> [!kind]± title`: kind lower-cased, fold "", "+" or "-"."""

    kind: str
    title: str
    fold: str
    start_line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class WikiLink:
    """`[[target#heading|alias]]` (`embed` for `![[...]]`); target "" links into the same note."""

    target: str
    heading: str | None
    alias: str | None
    line: int
    embed: bool = False


@dataclass(frozen=True)
class Note:
    """What `read_note` found in one note.

    Attributes:
        lines: the note's lines (a BOM, `\\r` line ends and the final newline removed).
        front_matter: the YAML front matter, or None.
        headings: section headings in file order (see the module docstring for which count).
        sections: every section in file order; together they cover every line after the
            front matter (the text before the first heading only when there is some).
        code_lines: lines of fenced (``` or ~~~, fences included) and indented code blocks,
            at any depth (in lists and blockquotes too).
        comments: Obsidian comments in file order.
        comment_lines: lines wholly inside a comment (nothing but the comment on them).
        callouts: callouts in file order (not those inside a comment).
        wikilinks: wikilinks in file order (not those in code or in a comment).
    """

    lines: tuple[str, ...]
    front_matter: FrontMatter | None
    headings: tuple[Heading, ...]
    sections: tuple[Section, ...]
    code_lines: frozenset[int]
    comments: tuple[Comment, ...]
    comment_lines: frozenset[int]
    callouts: tuple[Callout, ...]
    wikilinks: tuple[WikiLink, ...]

    @property
    def n_lines(self) -> int:
        return len(self.lines)

    @property
    def body_start(self) -> int:
        """The first line after the front matter (1 without front matter)."""
        return self.front_matter.end_line + 1 if self.front_matter else 1

    def section_at(self, line: int) -> Section | None:
        """The section holding `line`; None for front matter lines and lines past the end."""
        if not self.sections or line < self.sections[0].start_line or line > self.n_lines:
            return None
        starts = [s.start_line for s in self.sections]
        return self.sections[bisect.bisect_right(starts, line) - 1]


def split_lines(text: str | bytes) -> list[str]:
    """A note's lines as the reader and the chunker count them: split at `\\n` only, a `\\r`
    before it dropped, a leading BOM dropped, no empty line after a final newline. Bytes are
    decoded as UTF-8 with bad bytes replaced."""
    if isinstance(text, bytes):
        text = text.removeprefix(codecs.BOM_UTF8).decode("utf-8", "replace")
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another
    return [ln.removesuffix("\r") for ln in lines]


def read_note(text: str | bytes, *, front_matter: bool = True) -> Note:
    """Read one Markdown note's structure.

    Args:
        text: the note (bytes are decoded as UTF-8, bad bytes replaced).
        front_matter: look for front matter; False for a piece of a note (a section), whose
            first line `---` is a thematic break.

    Returns:
        The Note: its lines, front matter, headings and sections, code and comment lines,
        callouts and wikilinks, with 1-based line numbers into the file.
    """
    lines = split_lines(text)
    front = _front_matter(lines) if front_matter else None
    skip = front.end_line if front else 0
    # The parser sees front matter as blank lines and a lone `\r` as a space: it splits lines
    # at `\r` too, and its line numbers must stay ours.
    src = "\n".join("" if i < skip else ln.replace("\r", " ") for i, ln in enumerate(lines))
    md = _parser()
    walk = _Walk(md, len(lines))
    walk.run(md.parse(src + "\n", {}))
    return Note(
        lines=tuple(lines),
        front_matter=front,
        headings=tuple(walk.headings),
        sections=_sections(walk.headings, skip + 1, len(lines)),
        code_lines=frozenset(walk.code_lines),
        comments=tuple(walk.comments),
        comment_lines=frozenset(walk.comment_lines),
        callouts=tuple(walk.callouts),
        wikilinks=tuple(walk.wikilinks),
    )


def _front_matter(lines: list[str]) -> FrontMatter | None:
    """Obsidian's rule: `---` on the first line, closed by `---` (or YAML's `...`)."""
    if lines and lines[0].rstrip() == "---":
        for i in range(1, len(lines)):
            if lines[i].rstrip() in ("---", "..."):
                return FrontMatter(1, i + 1, "\n".join(lines[1:i]))
    return None


def _sections(headings: list[Heading], body_start: int, n_lines: int) -> tuple[Section, ...]:
    out: list[Section] = []
    first = headings[0].line if headings else n_lines + 1
    if body_start < first:
        out.append(Section("", 0, body_start, first - 1, None))
    for i, h in enumerate(headings):
        end = headings[i + 1].line - 1 if i + 1 < len(headings) else n_lines
        out.append(Section(h.path, h.level, h.line, end, h))
    return tuple(out)


class _Walk:
    """One pass over the block tokens, in document order, with the comment state."""

    def __init__(self, md: MarkdownIt, n_lines: int):
        self.md = md
        self.n_lines = n_lines
        self.headings: list[Heading] = []
        self.code_lines: set[int] = set()
        self.comments: list[Comment] = []
        self.comment_lines: set[int] = set()
        self.callouts: list[Callout] = []
        self.wikilinks: list[WikiLink] = []
        self._stack: list[tuple[int, str]] = []
        self._open: tuple[int, bool] | None = None  # (line, nothing before it on that line)

    def run(self, tokens: list[Token]) -> None:
        for i, tok in enumerate(tokens):
            if tok.type == "heading_open" and tok.level == 0 and tok.map and self._open is None:
                self._heading(tok, tokens[i + 1])
            elif tok.type in ("fence", "code_block") and tok.map:
                self.code_lines.update(range(tok.map[0] + 1, tok.map[1] + 1))
            elif tok.type == "blockquote_open" and self._open is None and tokens[i + 1].type == "paragraph_open":
                self._callout(tok, tokens[i + 2])
            elif tok.type == "inline" and tok.map and ("%%" in tok.content or "[[" in tok.content):
                in_heading = tokens[i - 1].type == "heading_open"
                self._inline(tok.content, tok.map[0] + 1, in_heading)
        if self._open is not None:  # Obsidian hides an unclosed comment to the end of the note
            line, whole = self._open
            self.comments.append(Comment(line, self.n_lines, closed=False))
            self.comment_lines.update(range(line if whole else line + 1, self.n_lines + 1))

    def _heading(self, tok: Token, inline: Token) -> None:
        level = int(tok.tag[1])
        text = " ".join(inline.content.split())
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, f"{'#' * level} {text}".rstrip()))
        path = " > ".join(c for _, c in self._stack)
        lo, hi = tok.map or (0, 0)
        self.headings.append(Heading(level, text, lo + 1, hi, path, setext=tok.markup in ("=", "-")))

    def _callout(self, quote: Token, inline: Token) -> None:
        if not quote.map:
            return
        m = _CALLOUT.match(inline.content.split("\n", 1)[0])
        if m:
            self.callouts.append(
                Callout(m.group(1).strip().lower(), m.group(3).strip(), m.group(2), quote.map[0] + 1, quote.map[1])
            )

    def _inline(self, content: str, first_line: int, in_heading: bool) -> None:
        children: list[Token] = []
        self.md.inline.parse(content, self.md, {}, children)
        seen, line = 0, first_line  # markers come in source order: count line breaks once
        for ch in children:
            if ch.type not in ("obsidian_comment", "wikilink"):
                continue
            off = ch.meta["offset"]
            if off < seen:
                seen, line = 0, first_line
            line += content.count("\n", seen, off)
            seen = off
            if ch.type == "wikilink":
                if self._open is None:
                    self.wikilinks.append(_wikilink(ch.content, line, ch.meta["embed"]))
                continue
            # A line is wholly comment when nothing but blanks (or a container's `>`/list
            # marker, which the parser strips) sits beside the comment on it; never a heading line.
            line_start = content.rfind("\n", 0, off) + 1
            if self._open is None:
                self._open = (line, not in_heading and not content[line_start:off].strip())
                continue
            end = content.find("\n", off)
            after_blank = not in_heading and not content[off + 2 : len(content) if end < 0 else end].strip()
            start, whole_start = self._open
            self.comments.append(Comment(start, line))
            self.comment_lines.update(range(start if whole_start else start + 1, line + 1 if after_blank else line))
            self._open = None


def _wikilink(inner: str, line: int, embed: bool) -> WikiLink:
    target, bar, alias = inner.partition("|")
    target = target.removesuffix("\\")  # `[[T\|alias]]`: the pipe escaped inside a table
    target, hash_, heading = target.partition("#")
    return WikiLink(target.strip(), heading.strip() if hash_ else None, alias.strip() if bar else None, line, embed)


def _comment_rule(state: StateInline, silent: bool) -> bool:
    # `%` ends markdown-it's text runs, so this rule sees every `%` that code spans, HTML,
    # autolinks and escapes did not consume first.
    if not state.src.startswith("%%", state.pos):
        return False
    if not silent:
        tok = state.push("obsidian_comment", "", 0)
        tok.meta = {"offset": state.pos}
    state.pos += 2
    return True


def _wikilink_rule(state: StateInline, silent: bool) -> bool:
    src, pos = state.src, state.pos
    embed = src.startswith("![[", pos)
    if not embed and not src.startswith("[[", pos):
        return False
    start = pos + (3 if embed else 2)
    end = src.find("]]", start, start + _MAX_WIKILINK)
    inner = src[start:end] if end >= 0 else ""
    if not inner.strip() or "\n" in inner or "[" in inner:
        return False
    if not silent:
        tok = state.push("wikilink", "", 0)
        tok.content = inner
        tok.meta = {"offset": pos, "embed": embed}
    state.pos = end + 2
    return True


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt  # ~25 ms to import: only when a note is read

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    # Block structure only: inline parsing (the slow part) runs just where a `%%` or `[[` is.
    md.disable(["inline", "text_join"])
    md.inline.ruler.before("link", "wikilink", _wikilink_rule)
    md.inline.ruler.before("link", "obsidian_comment", _comment_rule)
    return md

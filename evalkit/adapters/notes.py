"""Where a framework's chunk sits in its note: path, line span, heading path, id.

Frameworks hand back a chunk as text plus metadata (a file path, perhaps a character
offset, perhaps their own idea of the headings). The contract (docs/api-contract.md) wants
the note's path relative to the notes folder, the 1-based line span, the heading path as
`# Note > ## Section` ending with the chunk's own section, and a stable id. The note is
the authority for all of them, so the chunk is found in it (`Note.locate`):

1. at the framework's character offset, when the note holds the chunk's text there;
2. else as a substring of the note;
3. else line by line, each line compared without whitespace and unprintable characters
   (LangChain's MarkdownHeaderTextSplitter strips every line and joins them with "  \\n");
   the first and last line may be cut (a text splitter split inside them), and heading
   lines of the note may come in between (splitters that strip headers drop them);
4. else by its first line as is, and its last line as is a little below it (a reader that
   rewrites text, e.g. removing links, still leaves most lines alone); the end is unknown
   when the last line was rewritten.

When the text occurs more than once, the occurrences under the headings the framework's
metadata names win, then the one nearest the framework's offset, then the first.

A located chunk's heading path (`Note.heading_path`) is the chain of the section where its
text begins: the section of its first line that is not a heading, so a chunk that opens
with `# A` and then `## B` is under `# A > ## B` (LangChain merges an empty parent section
into its first child); a chunk of headings only is under its last one. Headings are those
of evalkit's one Markdown reader (evalkit.notes.markdown: CommonMark, with Obsidian's front
matter and `%% %%` comments), so the reference chatbot and the anchor checks agree: none in
front matter, code, comments, HTML blocks, lists or callouts. A chunk that runs into later
sections keeps the path of the one it begins in; its line span covers the rest.
"""

from __future__ import annotations

import hashlib
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from evalkit.evalset.anchors import heading_components
from evalkit.notes.markdown import read_note

__all__ = ["Note", "Notes", "Outline", "chunk_id", "heading_titles", "outline"]

# Beyond this many occurrences of a chunk's text in one note, the first ones are enough.
_MAX_CANDIDATES = 200
# Step 4 places a chunk by its first line only when that line has at least this many
# non-space characters.
_MIN_FIRST_LINE = 4


@dataclass(frozen=True)
class Outline:
    """A note's section headings: the line each section starts on and its heading path.

    Attributes:
        starts: 1-based first line of every heading, ascending.
        paths: per heading, the heading path of the section it opens ("# A > ## B").
        heading_lines: every line of a heading (a setext heading has two).
    """

    starts: tuple[int, ...]
    paths: tuple[str, ...]
    heading_lines: frozenset[int]

    def path_at(self, line: int) -> str:
        """Heading path of the section holding 1-based `line`; "" before the first heading."""
        i = bisect_right(self.starts, line) - 1
        return self.paths[i] if i >= 0 else ""

    def is_heading(self, line: int) -> bool:
        """Whether 1-based `line` is (part of) a section heading."""
        return line in self.heading_lines


def outline(text: str) -> Outline:
    """A note's section headings, as evalkit's one Markdown reader (evalkit.notes.markdown)
    and so the reference chatbot and the anchor checks see them.

    Args:
        text: the note's text.

    Returns:
        Its Outline.
    """
    headings = read_note(text).headings
    lines = frozenset(n for h in headings for n in range(h.line, h.end_line + 1))
    return Outline(tuple(h.line for h in headings), tuple(h.path for h in headings), lines)


def heading_titles(heading_path: str | None) -> tuple[str, ...]:
    """The heading texts of a path without their levels, case-folded: for telling which of
    two places a framework meant when its metadata has no levels (LlamaIndex)."""
    return tuple(c.lstrip("#").strip().casefold() for c in heading_components(heading_path))


def chunk_id(rel_path: str, heading_path: str, start_line: int | None, end_line: int | None, text: str) -> str:
    """Stable chunk id: the first 32 hex of sha256 over `rel_path|heading_path|start|end|text`.

    It changes only when the chunk does, whatever ids the framework gave its nodes (random
    UUIDs by default in LlamaIndex; an `id_func` that is handed index 0 for every node of a
    note repeats them).
    """
    key = f"{rel_path}|{heading_path}|{start_line}|{end_line}|{text}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _key(line: str) -> str:
    """A line for comparison: without whitespace and unprintable characters."""
    return "".join(ch for ch in line if ch.isprintable() and not ch.isspace())


class Note:
    """One note's text and outline, and where a chunk of it sits.

    Args:
        rel_path: path relative to the notes folder, with `/`.
        text: the note's text (newlines as `\\n`).
    """

    def __init__(self, rel_path: str, text: str):
        self.rel_path = rel_path
        self.text = text
        self.outline = outline(text)
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._keys: list[tuple[int, str]] | None = None

    def line(self, number: int) -> str:
        """The text of 1-based line `number` ("" past the end)."""
        if not 1 <= number <= len(self._line_starts):
            return ""
        start = self._line_starts[number - 1]
        end = self._line_starts[number] - 1 if number < len(self._line_starts) else len(self.text)
        return self.text[start:end].removesuffix("\r")

    def heading_path(self, start_line: int, end_line: int | None) -> str:
        """Heading path of the chunk on lines `start_line`..`end_line` (see the module doc):
        the section of its first line that is neither blank nor a heading, else of its last.
        An unknown `end_line` reads as `start_line`."""
        end_line = start_line if end_line is None else end_line
        for number in range(start_line, end_line + 1):
            if self.line(number).strip() and not self.outline.is_heading(number):
                return self.outline.path_at(number)
        return self.outline.path_at(end_line)

    def line_of(self, offset: int) -> int:
        """1-based line holding character `offset`."""
        return bisect_right(self._line_starts, offset)

    def locate(
        self, text: str, *, char_start: int | None = None, heading_path: str | None = None
    ) -> tuple[int, int | None] | None:
        """The 1-based inclusive line span of `text` in this note (see the module doc).

        Args:
            text: the chunk's text as the framework has it.
            char_start: the framework's character offset of the chunk in the note, if any.
            heading_path: the section the framework's metadata names, in any form
                `heading_titles` reads; it only breaks ties.

        Returns:
            (start_line, end_line); end_line None when only the first line was found (the
            framework rewrote the text: step 4); None when the text is not in the note.
        """
        body = text.strip()
        if not body:
            return None
        if char_start is not None and char_start >= 0:
            lead = len(text) - len(text.lstrip())
            if self.text.startswith(body, char_start + lead):
                return self._span(char_start + lead, len(body))
            if self.text.startswith(body, char_start):
                return self._span(char_start, len(body))
        hint_line = self.line_of(char_start) if char_start is not None and char_start >= 0 else None
        spans = [self._span(pos, len(body)) for pos in self._occurrences(body)]
        if not spans:
            spans = self._line_matches(body)
        if not spans:
            spans = self._ends_matches(body)
        return self._choose(spans, hint_line, heading_titles(heading_path))

    def _span(self, pos: int, length: int) -> tuple[int, int]:
        return self.line_of(pos), self.line_of(pos + max(length, 1) - 1)

    def _occurrences(self, body: str) -> list[int]:
        found: list[int] = []
        pos = self.text.find(body)
        while pos >= 0 and len(found) < _MAX_CANDIDATES:
            found.append(pos)
            pos = self.text.find(body, pos + 1)
        return found

    def _note_keys(self) -> list[tuple[int, str]]:
        """(line number, comparison key) of every line that is not blank."""
        if self._keys is None:
            keys = ((n, _key(line)) for n, line in enumerate(self.text.split("\n"), start=1))
            self._keys = [(n, k) for n, k in keys if k]
        return self._keys

    def _line_matches(self, body: str) -> list[tuple[int, int]]:
        wanted = [k for k in map(_key, body.split("\n")) if k]
        if not wanted:
            return []
        found: list[tuple[int, int]] = []
        for i in range(len(self._note_keys())):
            span = self._match_from(i, wanted)
            if span is not None:
                found.append(span)
                if len(found) >= _MAX_CANDIDATES:
                    break
        return found

    def _ends_matches(self, body: str) -> list[tuple[int, int | None]]:
        """Step 4: the first line found as is, the last line as is not far below it (else
        the end is unknown)."""
        wanted = [k for k in map(_key, body.split("\n")) if k]
        if not wanted or len(wanted[0]) < _MIN_FIRST_LINE:
            return []  # "-" or "---" is on too many lines to place a chunk by
        keys = self._note_keys()
        reach = 2 * len(wanted) + 10  # a rewrite drops or merges lines, not many
        found: list[tuple[int, int | None]] = []
        for i, (line, key) in enumerate(keys):
            if key != wanted[0]:
                continue
            end: int | None = line if len(wanted) == 1 else None
            for number, later in keys[i + 1 :] if len(wanted) > 1 else ():
                if number - line > reach:
                    break
                if later == wanted[-1]:
                    end = number
                    break
            found.append((line, end))
            if len(found) >= _MAX_CANDIDATES:
                break
        return found

    def _match_from(self, i: int, wanted: list[str]) -> tuple[int, int] | None:
        keys, last = self._note_keys(), len(wanted) - 1
        j, pos, first_line, end_line = 0, i, 0, 0
        while j <= last:
            if pos >= len(keys):
                return None
            line, key = keys[pos]
            want = wanted[j]
            if last == 0:
                ok = want in key  # one line, possibly cut at both ends
            elif j == 0:
                ok = key.endswith(want)  # the first line may be cut at its start
            elif j == last:
                ok = key.startswith(want)  # the last line may be cut at its end
            else:
                ok = key == want
            if ok:
                if j == 0:
                    first_line = line
                end_line = line
                j += 1
            elif j == 0 or not self.outline.is_heading(line):
                return None  # only a heading line the splitter dropped may come in between
            pos += 1
        return first_line, end_line

    def _choose(
        self, spans: list[tuple[int, int | None]], hint_line: int | None, titles: tuple[str, ...]
    ) -> tuple[int, int | None] | None:
        if len(spans) <= 1:
            return spans[0] if spans else None
        if titles:
            named = [s for s in spans if heading_titles(self.heading_path(*s))[: len(titles)] == titles]
            spans = named or spans
        if hint_line is not None:
            return min(spans, key=lambda s: abs(s[0] - hint_line))
        return spans[0]


class Notes:
    """The notes folder: paths relative to it, and each note read once.

    Args:
        notes_dir: the folder the gold labels' `rel_path`s are relative to.

    Raises:
        NotADirectoryError: `notes_dir` is not a folder.
    """

    def __init__(self, notes_dir: str | Path):
        self.root = Path(notes_dir).expanduser().resolve()
        if not self.root.is_dir():
            raise NotADirectoryError(f"notes_dir {str(notes_dir)!r} is not a folder")
        self._notes: dict[str, Note | None] = {}
        self._lock = threading.Lock()

    def rel_path(self, path: str | Path) -> str:
        """`path` relative to the notes folder, with `/`.

        A relative `path` is taken relative to the notes folder when the note is there,
        else relative to the current directory.

        Raises:
            ValueError: the file is outside the notes folder.
        """
        p = Path(path).expanduser()
        if not p.is_absolute():
            p = self.root / p if (self.root / p).exists() else Path.cwd() / p
        try:
            return p.resolve().relative_to(self.root).as_posix()
        except ValueError:
            raise ValueError(f"{str(path)!r} is not inside the notes folder {str(self.root)!r}") from None

    def note(self, rel_path: str) -> Note | None:
        """The note at `rel_path`, read once (UTF-8); None when it cannot be read."""
        with self._lock:
            if rel_path not in self._notes:
                try:
                    text = (self.root / rel_path).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    self._notes[rel_path] = None
                else:
                    self._notes[rel_path] = Note(rel_path, text)
            return self._notes[rel_path]

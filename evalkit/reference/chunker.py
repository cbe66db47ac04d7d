"""Heading-aware markdown chunking with a token budget and stable chunk ids.

Rules (EVAL.md "reference-chatbot" states them for users):

- YAML front matter (a first line `---` up to the next `---` or `...`) is not indexed, but
  line numbers and byte offsets stay those of the original file.
- ATX headings only, CommonMark style: up to 3 spaces, 1-6 `#`, then a space, a tab or the
  end of the line. `#NoSpace` is not a heading (CommonMark; in Obsidian it is a tag).
  Setext headings (underlines) are not recognised. Lines inside fenced code blocks
  (``` or ~~~, any fence length, closed by the same character at least as long), inside
  HTML comments `<!-- -->` and inside Obsidian comments `%% %%` are never headings.
- A heading opens a section that runs to the next heading of any level. Its heading path
  is the stack of enclosing headings, `# A > ## B > ### C`, each written as its `#`s and
  its text with whitespace collapsed and a closing `#` sequence removed. Text before the
  first heading has heading path "" (whole-file scope).
- A section's chunk starts at its heading line. Sections over `max_tokens` (or
  `max_chunk_bytes`) are split on blank-line paragraphs (never inside a fenced block),
  then on lines, then on tokens (hard windows); the parts are packed greedily, in order,
  into pieces under both budgets, and each piece keeps the section's heading path.
- Skipped pieces: `empty` (a heading with no body and no sub-headings), `too_small`
  (fewer than `min_tokens` tokens), `context_limit_exceeded` (a single token longer than
  `max_chunk_bytes`, the only thing that cannot be split further).
- chunk_id = first 32 hex of sha256(`vault_id|rel_path|heading_path|start_byte|end_byte|text`)
  (seed 000 option A), with byte offsets into the original file.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from dataclasses import dataclass, field
from itertools import accumulate

from evalkit.reference.tokens import count_tokens, token_spans

CHUNKER_VERSION = "md-heading-v1"

SKIP_EMPTY = "empty"
SKIP_TOO_SMALL = "too_small"
SKIP_CONTEXT = "context_limit_exceeded"

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")


@dataclass(frozen=True)
class ChunkerConfig:
    """Chunking parameters; they are part of the index build version.

    Attributes:
        max_tokens: token budget per chunk (regex tokens, see tokens.py).
        min_tokens: pieces with fewer tokens are skipped as `too_small`.
        max_chunk_bytes: byte budget per chunk; a single token longer than this is
            skipped as `context_limit_exceeded`.
    """

    max_tokens: int = 256
    min_tokens: int = 2
    max_chunk_bytes: int = 16_000

    def describe(self) -> str:
        return f"{CHUNKER_VERSION}+t{self.max_tokens}/{self.min_tokens}+b{self.max_chunk_bytes}"


@dataclass(frozen=True, slots=True)
class Chunk:
    chunk_id: str
    rel_path: str
    heading_path: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    text: str
    token_count: int


@dataclass(frozen=True, slots=True)
class SkippedPiece:
    rel_path: str
    heading_path: str
    start_line: int
    end_line: int
    reason: str
    token_count: int


@dataclass
class DocChunks:
    """What chunking one note produced: the indexed chunks and the skipped pieces."""

    rel_path: str
    chunks: list[Chunk] = field(default_factory=list)
    skipped: list[SkippedPiece] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        return len(self.chunks) + len(self.skipped)


def chunk_id(vault_id: str, rel_path: str, heading_path: str, start_byte: int, end_byte: int, text: str) -> str:
    """Stable chunk id: first 32 hex chars of sha256 over the pipe-joined fields (seed option A)."""
    key = f"{vault_id}|{rel_path}|{heading_path}|{start_byte}|{end_byte}|{text}"
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


# --------------------------------------------------------------------------- lines


@dataclass(slots=True)
class _Line:
    number: int  # 1-based
    start: int  # byte offset of the first byte
    end: int  # byte offset just past the content (newline excluded)
    text: str  # decoded with surrogateescape so it encodes back to the exact bytes
    tokens: int = 0
    in_fence: bool = False  # fence lines and their content: blank lines there do not split


def _split_lines(data: bytes) -> list[_Line]:
    lines: list[_Line] = []
    pos = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    number = 1
    while pos < len(data):
        nl = data.find(b"\n", pos)
        next_pos = len(data) if nl == -1 else nl + 1
        end = len(data) if nl == -1 else nl
        if end > pos and data[end - 1] == 0x0D:  # CRLF
            end -= 1
        text = data[pos:end].decode("utf-8", "surrogateescape")
        lines.append(_Line(number, pos, end, text, count_tokens(text)))
        pos, number = next_pos, number + 1
    return lines


def _front_matter_end(lines: list[_Line]) -> int:
    """Index of the first line after YAML front matter (0 when there is none or it is unclosed)."""
    if lines and lines[0].text.rstrip() == "---":
        for i in range(1, len(lines)):
            if lines[i].text.rstrip() in ("---", "..."):
                return i + 1
    return 0


def _heading(text: str) -> tuple[int, str] | None:
    m = _ATX.match(text)
    if not m:
        return None
    title = _CLOSING_HASHES.sub("", m.group(2) or "")
    return len(m.group(1)), " ".join(title.split())


def _scan_comments(text: str, html: bool, pct: bool) -> tuple[bool, bool]:
    """Comment state after `text`, given the state before it (HTML `<!-- -->`, Obsidian `%% %%`)."""
    i = 0
    while i < len(text):
        if html:
            j = text.find("-->", i)
            if j < 0:
                return True, pct
            html, i = False, j + 3
        elif pct:
            j = text.find("%%", i)
            if j < 0:
                return html, True
            pct, i = False, j + 2
        else:
            h, p = text.find("<!--", i), text.find("%%", i)
            if h < 0 and p < 0:
                break
            if p < 0 or (0 <= h < p):
                html, i = True, h + 4
            else:
                pct, i = True, p + 2
    return html, pct


@dataclass
class _Section:
    heading_path: str
    level: int  # 0 for the text before the first heading
    first: int  # index of the heading line (or of the first body line for level 0)
    stop: int = 0  # index just past the last line


def _sections(lines: list[_Line], body_start: int) -> list[_Section]:
    """Split the body into heading sections, marking fenced lines on the way."""
    sections = [_Section("", 0, body_start)]
    stack: list[tuple[int, str]] = []
    fence: tuple[str, int] | None = None  # (char, length) of the open fence
    html = pct = False
    for i in range(body_start, len(lines)):
        line = lines[i]
        text = line.text
        if fence is not None:
            line.in_fence = True
            close = text.strip(" \t")
            if len(text) - len(text.lstrip(" ")) <= 3 and close and set(close) == {fence[0]} and len(close) >= fence[1]:
                fence = None
            continue
        if html or pct:
            html, pct = _scan_comments(text, html, pct)
            continue
        m = _FENCE_OPEN.match(text)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = (m.group(1)[0], len(m.group(1)))
            line.in_fence = True
            continue
        h = _heading(text)
        if h is not None:
            level, title = h
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, f"{'#' * level} {title}".rstrip()))
            sections[-1].stop = i
            sections.append(_Section(" > ".join(s for _, s in stack), level, i))
        html, pct = _scan_comments(text, html, pct)
    sections[-1].stop = len(lines)
    return sections


# --------------------------------------------------------------------------- splitting


@dataclass(slots=True)
class _Unit:
    start: int  # byte offsets into the file
    end: int
    start_line: int
    end_line: int
    tokens: int
    oversized: bool = False


def _blocks(lines: list[_Line], first: int, stop: int, has_heading: bool) -> list[list[_Line]]:
    """Blank-line separated paragraphs; the heading line is a block of its own."""
    blocks: list[list[_Line]] = []
    cur: list[_Line] = []
    i = first
    if has_heading:
        blocks.append([lines[first]])
        i += 1
    for line in lines[i:stop]:
        if not line.text.strip() and not line.in_fence:
            if cur:
                blocks.append(cur)
                cur = []
            continue
        cur.append(line)
    if cur:
        blocks.append(cur)
    # a fence's blank lines belong to it, but a block never ends on blank lines
    for b in blocks:
        while len(b) > 1 and not b[-1].text.strip():
            b.pop()
    return blocks


def _token_units(line: _Line, cfg: ChunkerConfig) -> list[_Unit]:
    """One unit per token of a line too long for the budget; packing turns them into windows."""
    text = line.text
    if text.isascii():
        prefix = None
    else:
        prefix = [0, *accumulate(len(ch.encode("utf-8", "surrogateescape")) for ch in text)]
    units = []
    for s, e in token_spans(text):
        bs, be = (s, e) if prefix is None else (prefix[s], prefix[e])
        units.append(_Unit(line.start + bs, line.start + be, line.number, line.number, 1, be - bs > cfg.max_chunk_bytes))
    return units


def _units(block: list[_Line], cfg: ChunkerConfig) -> list[_Unit]:
    tokens = sum(ln.tokens for ln in block)
    start, end = block[0].start, block[-1].end
    if tokens <= cfg.max_tokens and end - start <= cfg.max_chunk_bytes:
        return [_Unit(start, end, block[0].number, block[-1].number, tokens)]
    units: list[_Unit] = []
    for ln in block:
        if not ln.text.strip():
            continue
        if ln.tokens <= cfg.max_tokens and ln.end - ln.start <= cfg.max_chunk_bytes:
            units.append(_Unit(ln.start, ln.end, ln.number, ln.number, ln.tokens))
        else:
            units.extend(_token_units(ln, cfg))
    return units


def _pack(units: list[_Unit], cfg: ChunkerConfig) -> list[_Unit]:
    """Greedy packing of consecutive units into pieces under both budgets."""
    pieces: list[_Unit] = []
    cur: _Unit | None = None
    for u in units:
        if u.oversized:
            if cur:
                pieces.append(cur)
            pieces.append(u)
            cur = None
            continue
        if cur and (cur.tokens + u.tokens > cfg.max_tokens or u.end - cur.start > cfg.max_chunk_bytes):
            pieces.append(cur)
            cur = None
        if cur is None:
            cur = _Unit(u.start, u.end, u.start_line, u.end_line, u.tokens)
        else:
            cur.end, cur.end_line, cur.tokens = u.end, u.end_line, cur.tokens + u.tokens
    if cur:
        pieces.append(cur)
    return pieces


def chunk_markdown(
    data: bytes, rel_path: str, *, vault_id: str = "default", config: ChunkerConfig | None = None
) -> DocChunks:
    """Chunk one markdown note.

    Args:
        data: the file's bytes (offsets and ids refer to these bytes).
        rel_path: path relative to the vault root, with `/` separators.
        vault_id: goes into the chunk id.
        config: chunking parameters (defaults: ChunkerConfig()).

    Returns:
        DocChunks with the indexed chunks in file order and the skipped pieces.
    """
    cfg = config or ChunkerConfig()
    lines = _split_lines(data)
    sections = _sections(lines, _front_matter_end(lines))
    out = DocChunks(rel_path)
    for idx, sec in enumerate(sections):
        has_heading = sec.level > 0
        body = lines[sec.first + 1 if has_heading else sec.first : sec.stop]
        if not any(ln.text.strip() for ln in body):
            nxt = sections[idx + 1] if idx + 1 < len(sections) else None
            if has_heading and not (nxt is not None and nxt.level > sec.level):
                # a heading nobody wrote anything under; parents of sub-headings are structure
                ln = lines[sec.first]
                out.skipped.append(SkippedPiece(rel_path, sec.heading_path, ln.number, ln.number, SKIP_EMPTY, ln.tokens))
            continue
        units = [u for block in _blocks(lines, sec.first, sec.stop, has_heading) for u in _units(block, cfg)]
        for p in _pack(units, cfg):
            text = data[p.start : p.end].decode("utf-8", "replace")
            reason = SKIP_CONTEXT if p.oversized else SKIP_TOO_SMALL if p.tokens < cfg.min_tokens else None
            if reason:
                out.skipped.append(SkippedPiece(rel_path, sec.heading_path, p.start_line, p.end_line, reason, p.tokens))
                continue
            cid = chunk_id(vault_id, rel_path, sec.heading_path, p.start, p.end, text)
            out.chunks.append(
                Chunk(cid, rel_path, sec.heading_path, p.start_line, p.end_line, p.start, p.end, text, p.tokens)
            )
    return out

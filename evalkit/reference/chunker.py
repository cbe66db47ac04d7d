"""Heading-aware markdown chunking with a token budget and stable chunk ids.

Rules (EVAL.md "reference-chatbot" states them for users):

- Structure comes from the one Markdown reader, `evalkit.notes.markdown.read_note`
  (markdown-it-py: CommonMark, plus Obsidian's front matter, `%%comments%%` and callouts).
  YAML front matter (a first line `---` up to the next `---` or `...`) is not indexed, but
  line numbers and byte offsets stay those of the original file.
- Headings are CommonMark's, ATX (`# A`; `#NoSpace` is a tag) and setext (a paragraph
  underlined with `===` or `---`), at the top level of the note. Lines inside code blocks
  (fenced or indented, at any depth), HTML blocks, list items, blockquotes and callouts, and
  headings that start inside an Obsidian comment `%% %%`, are never section headings; a `%%`
  inside a code span or a code block opens no comment.
- A heading opens a section that runs to the next heading of any level. Its heading path
  is the stack of enclosing headings, `# A > ## B > ### C`, each written as its `#`s and
  its text with whitespace collapsed and a closing `#` sequence removed. Text before the
  first heading has heading path "" (whole-file scope).
- A section's chunk starts at its heading line. Sections over `max_tokens` (or
  `max_chunk_bytes`) are split on blank-line paragraphs (never inside a code block),
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
from dataclasses import dataclass, field
from itertools import accumulate

from evalkit.notes.markdown import Note, read_note
from evalkit.reference.tokens import count_tokens, token_spans

CHUNKER_VERSION = "md-heading-v2"

SKIP_EMPTY = "empty"
SKIP_TOO_SMALL = "too_small"
SKIP_CONTEXT = "context_limit_exceeded"


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
    in_fence: bool = False  # a code block's lines: blank lines there do not split


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


@dataclass
class _Section:
    heading_path: str
    level: int  # 0 for the text before the first heading
    first: int  # index of the heading's first line (or of the first body line for level 0)
    body: int  # index of the first line after the heading (== first for level 0)
    stop: int = 0  # index just past the last line


def _sections(lines: list[_Line], note: Note) -> list[_Section]:
    """The note's heading sections as line indexes, marking code-block lines on the way."""
    for n in note.code_lines:
        lines[n - 1].in_fence = True
    sections = [_Section("", 0, note.body_start - 1, note.body_start - 1)]
    for h in note.headings:
        sections[-1].stop = h.line - 1
        sections.append(_Section(h.path, h.level, h.line - 1, h.end_line))
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


def _blocks(lines: list[_Line], sec: _Section) -> list[list[_Line]]:
    """Blank-line separated paragraphs; the heading's lines are a block of their own."""
    blocks: list[list[_Line]] = []
    cur: list[_Line] = []
    if sec.body > sec.first:
        blocks.append(lines[sec.first : sec.body])
    for line in lines[sec.body : sec.stop]:
        if not line.text.strip() and not line.in_fence:
            if cur:
                blocks.append(cur)
                cur = []
            continue
        cur.append(line)
    if cur:
        blocks.append(cur)
    # a code block's blank lines belong to it, but a block never ends on blank lines
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
    data: bytes,
    rel_path: str,
    *,
    vault_id: str = "default",
    config: ChunkerConfig | None = None,
    note: Note | None = None,
) -> DocChunks:
    """Chunk one markdown note.

    Args:
        data: the file's bytes (offsets and ids refer to these bytes).
        rel_path: path relative to the vault root, with `/` separators.
        vault_id: goes into the chunk id.
        config: chunking parameters (defaults: ChunkerConfig()).
        note: `read_note(data)`, when the caller has read it already.

    Returns:
        DocChunks with the indexed chunks in file order and the skipped pieces.
    """
    cfg = config or ChunkerConfig()
    lines = _split_lines(data)
    sections = _sections(lines, note if note is not None else read_note(data))
    out = DocChunks(rel_path)
    for idx, sec in enumerate(sections):
        if not any(ln.text.strip() for ln in lines[sec.body : sec.stop]):
            nxt = sections[idx + 1] if idx + 1 < len(sections) else None
            if sec.level > 0 and not (nxt is not None and nxt.level > sec.level):
                # a heading nobody wrote anything under; parents of sub-headings are structure
                head = lines[sec.first : sec.body]
                out.skipped.append(SkippedPiece(rel_path, sec.heading_path, head[0].number, head[-1].number,
                                                SKIP_EMPTY, sum(ln.tokens for ln in head)))
            continue
        units = [u for block in _blocks(lines, sec) for u in _units(block, cfg)]
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

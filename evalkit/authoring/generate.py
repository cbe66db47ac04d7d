"""Offline candidate eval cases from the notes' own structure (issue 16, no LLM).

`generate_candidates(vault)` reads every note with the Markdown reader and the reference
chunker (through `anchorcheck.outline_note`, so heading paths are spelled as the chatbot's
chunks spell them) and turns four shapes of text into candidate cases:

- `heading_question`: a heading phrased as a question (it ends in `?`, or opens with an
  interrogative and an auxiliary: "How do I rotate keys"). Question = the heading text;
  evidence = the section's own body; snippet = its first sentence (not an HTML-only line
  when there is another). A question with at most 3 content words, none in the note's
  title, gets the title in front ("Deploy process (v2): who to ask?"); a heading that
  repeats in its note gets its parent heading instead ("HarborIndexLag: what to do?").
- `qa_pair` / `faq`: inside a section, a `Q:` line answered by the next `A:` line, or a
  bold (`**How ...?**`) or list (`- How ...?`) question whose answer is the text that
  follows it (the rest of the line, else the next non-blank line, but not the next item of
  the same list, and not an "answer" that ends in `?`: a list of open questions).
- `definition`: `**Term**: definition`, `- Term: definition` (a term of at most six words
  with a letter in it, not a callout word such as Note or Tip), and definition lists
  (`Term` then `: definition`). Question = "What is Term?".
- `table_cell`: a markdown table row whose first cell has a letter answers
  "What is <first cell>'s <column header>?" for each cell; snippet = the cell. Cells that
  answer no "what is" question (yes / no / ticks / dashes: a feature matrix) and first
  cells or headers with `<br>` or `[[links]]` are skipped.

Anchors: the section's heading path. A candidate from a note's top section (the intro under
`# Title`, or text before any heading) in a note with deeper sections also carries that
section's line span: `# Title` alone would match every chunk of the note by the prefix rule
(issue 28 item 7). A question that is the top heading itself asks about the whole note and
keeps the bare heading.

Lines inside code blocks (fenced or indented, as CommonMark reads them) and lines wholly
inside an Obsidian `%%comment%%` (hidden in Obsidian) are never read, nor are heading lines
but the section's own (`## Q?` setext or ATX). Every candidate has one gold support, the
anchor (rel_path + heading_path) of the section the text is in, with a snippet copied from
that section, so it validates against the vault by construction (anchorcheck).

Category guess: "reasoning" for questions opening with how/why (after a "Title: " in
front), else "factual".
Difficulty guess (with the retrieval check): the reference retriever's rank of the first
chunk matching the gold anchor, 1 -> easy, 2-10 -> medium, lower or missed -> hard.

Filters, in order, each counted in the report with its reason:

0. Template screens (evalkit.authoring.screening, offline only): `name` ("What is Alex?"),
   `not_a_definition` (the text after the term does not say what it is), `table_header`,
   `table_key`, `table_value` (a table that is not rows of things with attributes).
   `table_cap`: at most `per_table` (3) table_cell candidates per table, spread over its
   rows (cap_tables).
1. `no_content_words`: the question has no search term left (tokens.terms) - nothing to ask.
   `bare_term`: "What is X?" about a day, a month or a quantity (is_bare_term).
   `vague`: a pronoun (it, this, they...) and at most 2 content words ("Is it already
   known?"), an auxiliary whose subject is a pronoun ("Is it really a problem?") or an
   opening conjunction: it leans on a context the reader of the question does not have.
2. `overlap`: share of the question's distinct content words (tokens.terms: lowercased,
   stopwords out, plural fold) found in the candidate's *evidence* (the text that answers
   it: section body, answer, definition or cell; never the heading or line the question
   was taken from) above `max_overlap` -> dropped as too easy.
3. `duplicate`: normalised question text (casefolded, runs of non-word characters as one
   space) whose difflib ratio to an earlier kept question is >= `duplicate_ratio` -> the
   later one is dropped.
4. `mix` / `limit`: with `mix`, per-category target counts of `limit` (else of all kept),
   each a seeded sample (apply_mix); without, a seeded sample of `limit` (file order kept).
5. `unretrievable` (flag, never a drop): the reference chatbot over the same vault,
   lexical only, does not retrieve a chunk matching the gold anchor in its top `k` (50):
   the case gets the tag "unretrievable" for the reviewer.
"""

from __future__ import annotations

import difflib
import hashlib
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.authoring.labeling import GENERATED
from evalkit.authoring.screening import FLAG_CELLS, MAX_TERM_WORDS, VaultWords, screen_reason, vault_words
from evalkit.errors import BadConfig, Problem
from evalkit.evalset.anchorcheck import Chain, NoteOutline, outline_note
from evalkit.notes.markdown import read_note
from evalkit.reference.corpus import MARKDOWN_SUFFIXES, walk_vault
from evalkit.reference.tokens import terms

__all__ = [
    "GENERATED",
    "PATTERNS",
    "Candidate",
    "GenerationResult",
    "apply_mix",
    "candidate_id",
    "extract_candidates",
    "filter_candidates",
    "finish_candidates",
    "flag_unretrievable",
    "generate_candidates",
    "mix_report",
    "overlap",
    "parse_mix",
    "screen_templates",
]

PATTERNS = ("heading_question", "qa_pair", "faq", "definition", "table_cell")

# Defaults, argued in EVAL.md and docs/labeling.md, "Growing the eval set":
# 0.8: with 1-4 content words only a question whose every word is in the evidence is
# dropped; a section naturally repeats its topic noun, so a lower bar drops good questions.
DEFAULT_MAX_OVERLAP = 0.8
DEFAULT_DUPLICATE_RATIO = 0.9
DEFAULT_K = 50
# A table gives one question per cell; a long table would flood the candidates with one template.
DEFAULT_PER_TABLE = 3
_SNIPPET_CHARS = 120

_INTERROGATIVE = re.compile(
    r"^(how|what|why|when|where|which|who|whom|whose)\s+(do|does|did|is|are|was|were|can|could|should|would|will|to|much|many|long|often)\b",
    re.IGNORECASE,
)
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_QUOTE = re.compile(r"^\s*(?:>\s*)+")
_Q_LINE = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?Q(?:uestion)?\s*[:.](?:\*\*|__)?\s*(?:\*\*|__)?(?P<text>.+?)(?:\*\*|__)?\s*$")
_A_LINE = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?A(?:nswer)?\s*[:.](?:\*\*|__)?\s*(?P<text>\S.*?)\s*$")
_BOLD_Q = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)(?P<q>[^*_]+?\?)\s*(?:\*\*|__)\s*(?P<rest>.*?)\s*$")
_LIST_Q = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?P<q>[^*_:]+\?)\s*$")
_BOLD_DEF = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)(?P<term>[^*_:]+?)(?::(?:\*\*|__)|(?:\*\*|__)\s*:)\s*(?P<def>\S.*?)\s*$")
_LIST_DEF = re.compile(r"^\s*[-*+]\s+(?P<term>[^:*`\[\]]+?):\s+(?P<def>\S.*?)\s*$")
_DL_DEF = re.compile(r"^\s{0,3}:\s+(?P<def>\S.*?)\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
# Callout words written as `**Note**: ...`: labels, not terms anyone asks about.
_NOT_TERMS = frozenset("note notes tip tips warning important example examples beware caution info hint todo see also why".split())
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass
class Candidate:
    """One candidate case before it is written.

    Attributes:
        case: the eval-set case (a plain dict, EvalCase-shaped).
        pattern: which of PATTERNS produced it.
        evidence: the text that answers it (what the overlap filter compares with).
        line: 1-based line of the note the question came from.
    """

    case: dict[str, Any]
    pattern: str
    evidence: str
    line: int = 0
    group: str = ""  # table_cell: "<rel_path>:<header line>", so a table's rows can be capped
    # The template's slots, for the offline screens (screen_templates): definition ->
    # term, definition, section; table_cell -> key, header, value, first_header.
    parts: dict[str, str] = field(default_factory=dict)

    @property
    def rel_path(self) -> str:
        """The first gold support's note ("" for an unanswerable candidate, which has none)."""
        supports = self.case.get("gold_supports") or []
        return (supports[0].get("rel_path") or "") if supports else ""


@dataclass
class GenerationResult:
    """What `generate_candidates` produced: the cases to write and the report."""

    candidates: list[Candidate] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def cases(self) -> list[dict[str, Any]]:
        return [c.case for c in self.candidates]


# --------------------------------------------------------------------------- building


def candidate_id(rel_path: str, heading_path: str, question: str) -> str:
    """Stable id: "gen-" + the first 12 hex of sha256(rel_path|heading_path|question)."""
    key = f"{rel_path}|{heading_path}|{question}"
    return "gen-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def category_guess(question: str) -> str:
    """ "reasoning" for how/why questions ("Title: how ...?" too), "factual" otherwise (a guess
    for the reviewer)."""
    return "reasoning" if re.match(r"\s*(?:[^?]*:\s+)?(how|why)\b", question, re.IGNORECASE) else "factual"


def _snippet(text: str) -> str:
    """The first sentence of `text`, cut at a word boundary to _SNIPPET_CHARS: a substring of it."""
    text = text.strip()
    m = _SENTENCE_END.search(text)
    s = text[: m.start()] if m else text
    if len(s) > _SNIPPET_CHARS:
        cut = s.rfind(" ", 0, _SNIPPET_CHARS)
        s = s[: cut if cut > 20 else _SNIPPET_CHARS]
    return s.strip()


def _make(
    rel_path: str, chain: Chain, question: str, snippet: str, evidence: str, pattern: str, line: int, group: str = "",
    *, span: tuple[int, int] | None = None, parts: dict[str, str] | None = None,
) -> Candidate:
    heading_path = " > ".join(chain)
    question = " ".join(question.split())
    support: dict[str, Any] = {"rel_path": rel_path, "heading_path": heading_path, "snippets": [snippet]}
    if span is not None:
        support.update(start_line=span[0], end_line=span[1])
    case = {
        "id": candidate_id(rel_path, heading_path, question),
        "question": question,
        "answerable": True,
        "gold_supports": [support],
        "category": category_guess(question),
        "tags": [GENERATED],
        "notes": f"generated by pattern {pattern} from {rel_path} line {line}",
        "label_source": GENERATED,
    }
    return Candidate(case, pattern, evidence, line, group, dict(parts or {}))


def own_lines(outline: NoteOutline, chain: Chain) -> list[tuple[int, str]]:
    """(line number, text) of the section's own lines (sub-sections excluded), heading included."""
    numbers = sorted({n for c, s, e in outline.pieces if c == chain for n in range(s, e + 1)})
    return [(n, outline.lines[n - 1]) for n in numbers if n <= len(outline.lines)]


def unfenced(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """`lines` without the ones inside code blocks (fenced or indented), as the Markdown reader
    parses them.

    Args:
        lines: (number, text) in order; numbers may skip blank lines (a section's own lines,
            `own_lines`) or run from 0 (`enumerate(text.split("\n"))`).
    """
    if not lines:
        return []
    first = lines[0][0]
    text = [""] * (lines[-1][0] - first + 1)  # the gaps are blank lines: parse them as such
    for n, t in lines:
        text[n - first] = t
    code = read_note("\n".join(text), front_matter=False).code_lines
    return [(n, t) for n, t in lines if n - first + 1 not in code]


def _readable(outline: NoteOutline, chain: Chain) -> tuple[tuple[int, str] | None, list[tuple[int, str]]]:
    """The section's heading line (None before the first heading) and the body lines a
    question may come from: no code, no line wholly inside a comment, no heading line."""
    own = own_lines(outline, chain)
    note = outline.note
    if note is None:  # an outline built by hand: the plain reading
        own = unfenced(own)
        if chain and own and own[0][1].lstrip().startswith("#"):
            return own[0], own[1:]
        return None, own
    starts = {h.line: h for h in note.headings}
    head_lines = {n for h in note.headings for n in range(h.line, h.end_line + 1)}
    hidden = note.code_lines | note.comment_lines | head_lines
    heading = own[0] if chain and own and own[0][0] in starts else None
    return heading, [(n, t) for n, t in own if n not in hidden]


def _prose(text: str) -> str:
    """A line without its list, quote and heading markers."""
    text = _QUOTE.sub("", text)
    text = _LIST.sub("", text)
    return text.strip()


# Words a heading question may open with, lowercased when the note's title goes in front.
_OPENERS = frozenset("how what why when where which who whom whose is are was were do does did can could should would will".split())
# A line that is only HTML markup (`<span class="related-pages">#css</span>`): no snippet.
_MARKUP_LINE = re.compile(r"^\s*<[^>]+>.*</[^>]+>\s*$|^\s*<[^>]+/?>\s*$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_question_heading(title: str) -> bool:
    return title.endswith("?") or bool(_INTERROGATIVE.match(title))


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [c.strip() for c in re.split(r"(?<!\\)\|", row)]


def _table_key(key: str) -> bool:
    """A first cell or header that names a thing: a letter in it, no line break or link markup."""
    return bool(re.search(r"[^\W\d_]", key)) and "<br" not in key.casefold() and "[[" not in key


def _table_value(cell: str) -> bool:
    return bool(cell) and cell.strip("*_` ").casefold() not in FLAG_CELLS


def _possessive(key: str) -> str:
    return "'" if key.endswith("s") else "'s"


def _header_phrase(header: str) -> str:
    h = header.strip("*_ ")
    return h[0].lower() + h[1:] if len(h) > 1 and not h[1].isupper() else h


def _note_title(rel_path: str, outline: NoteOutline) -> str:
    """The note's title: its first `# ` heading, else its file name without the suffix."""
    note = outline.note
    if note is not None:
        top = next((h for h in note.headings if h.level == 1), None)
        if top is not None and top.text.strip():
            return top.text.strip()
    return Path(rel_path).stem


def _with_context(question: str, title: str) -> str:
    """A heading question with at most 3 content words, none of them in the note's title
    ("Who to ask?", "What did not work?"), leans on the note it sits in: it gets the title
    in front ("Deploy process (v2): who to ask?"). Others are returned as they are."""
    words = set(terms(question))
    if len(words) > 3 or words & set(terms(title)) or not title:
        return question
    first, _, rest = question.partition(" ")
    if re.sub(r"['’]s$", "", first.casefold()) in _OPENERS:
        question = first.lower() + (" " + rest if rest else "")
    return f"{title}: {question}"


def _top_span(outline: NoteOutline, chain: Chain) -> tuple[int, int] | None:
    """The line span of a note's top section's own text (the intro under `# Title`, or the
    text before the first heading) when the note has deeper sections, else None.

    Such a section's heading path matches every chunk of the note by the prefix rule
    (issue 28 item 7): the span keeps the anchor to the lines the evidence is in.
    """
    top = not chain or (len(chain) == 1 and chain[0].startswith("# "))
    if not top or not any(len(c) > len(chain) and c[: len(chain)] == chain for c, _, _ in outline.pieces):
        return None
    own = [(s, e) for c, s, e in outline.pieces if c == chain]
    return (min(s for s, _ in own), max(e for _, e in own)) if own else None


def _section_candidates(rel_path: str, outline: NoteOutline, chain: Chain) -> Iterable[Candidate]:
    heading, body = _readable(outline, chain)
    body_text = "\n".join(t for _, t in body)
    span = _top_span(outline, chain)
    if heading is not None:
        title = chain[-1].lstrip("#").strip()
        prose = [_prose(t) for _, t in body if _prose(t) and not _TABLE_SEP.match(t) and not t.lstrip().startswith("|")]
        first = next((p for p in prose if not _MARKUP_LINE.match(p)), prose[0] if prose else "")
        if _is_question_heading(title) and first:
            q = title if title.endswith("?") else title + "?"
            # A heading that repeats in its note ("#### What to do" under each alert) is told
            # apart by its parent heading; any other by the note's title.
            repeats = sum(1 for h in (outline.note.headings if outline.note else ()) if h.text.strip() == title) > 1
            context = chain[-2].lstrip("#").strip() if repeats and len(chain) > 1 else _note_title(rel_path, outline)
            q = _with_context(q, context)
            # The note's own top heading as a question asks about the whole note: no span.
            yield _make(rel_path, chain, q, _snippet(first), body_text, "heading_question", heading[0])
    i = 0
    while i < len(body):
        n, text = body[i]
        nxt = next(((m, t) for m, t in body[i + 1 :] if t.strip()), None)
        m = _Q_LINE.match(text)
        if m and nxt and _A_LINE.match(nxt[1]):
            answer = _A_LINE.match(nxt[1]).group("text")
            yield _make(rel_path, chain, m.group("text").strip("*_ "), _snippet(answer), answer, "qa_pair", n, span=span)
            i += 1
            continue
        m = _BOLD_Q.match(text) or _LIST_Q.match(text)
        if m and not _Q_LINE.match(text):
            rest = (m.groupdict().get("rest") or "").strip()
            # The next list item of a list of questions is the next point, not the answer.
            sibling = nxt is not None and bool(_LIST.match(text)) and bool(_LIST.match(nxt[1])) \
                and _indent(nxt[1]) == _indent(text)
            answer = rest or (_prose(nxt[1]) if nxt and not sibling and not _BOLD_Q.match(nxt[1]) and not _LIST_Q.match(nxt[1]) else "")
            # An "answer" that is itself a question (a list of open questions) answers nothing.
            if answer and not answer.startswith(("#", "|")) and not answer.rstrip("*_ ").endswith("?"):
                yield _make(rel_path, chain, m.group("q").strip(), _snippet(answer), answer, "faq", n, span=span)
                i += 1
                continue
        m = _BOLD_DEF.match(text) or _LIST_DEF.match(text)
        if m and not _A_LINE.match(text) and not _Q_LINE.match(text):
            term = m.group("term").strip()
            if 0 < len(term.split()) <= MAX_TERM_WORDS and not term.endswith("?") and re.search(r"[^\W\d_]", term) \
                    and term.casefold() not in _NOT_TERMS:
                d = m.group("def")
                yield _make(rel_path, chain, f"What is {term}?", _snippet(d), d, "definition", n, span=span,
                            parts={"term": term, "definition": d, "section": body_text})
                i += 1
                continue
        if nxt and nxt[0] == n + 1 and _DL_DEF.match(nxt[1]) and text.strip() and not _LIST.match(text):
            term = text.strip()
            if len(term.split()) <= MAX_TERM_WORDS and not term.startswith(("#", "|", ":")):
                d = _DL_DEF.match(nxt[1]).group("def")
                yield _make(rel_path, chain, f"What is {term}?", _snippet(d), d, "definition", n, span=span,
                            parts={"term": term, "definition": d, "section": body_text})
                i += 2
                continue
        if text.lstrip().startswith("|") and nxt and nxt[0] == n + 1 and _TABLE_SEP.match(nxt[1]):
            headers = _cells(text)
            table = f"{rel_path}:{n}"
            j = i + 2
            while j < len(body) and body[j][1].lstrip().startswith("|") and body[j][0] == body[j - 1][0] + 1:
                row = _cells(body[j][1])
                key = row[0].strip("*_ ") if row else ""
                for col in range(1, min(len(headers), len(row))):
                    if _table_key(key) and _table_key(headers[col].strip("*_ ")) and _table_value(row[col]):
                        q = f"What is {key}{_possessive(key)} {_header_phrase(headers[col])}?"
                        parts = {"key": key, "header": headers[col].strip("*_ "), "value": row[col], "first_header": headers[0]}
                        yield _make(rel_path, chain, q, row[col], row[col], "table_cell", body[j][0], table, span=span, parts=parts)
                j += 1
            i = j
            continue
        i += 1


def extract_candidates(vault: Path | str) -> list[Candidate]:
    """Every candidate the note structure offers, in file order (no filter applied).

    Raises:
        InputError: the vault folder does not exist.
    """
    root = Path(vault)
    out: list[Candidate] = []
    for rel in walk_vault(root):
        if not rel.lower().endswith(MARKDOWN_SUFFIXES):
            continue
        outline = outline_note((root / rel).read_bytes(), rel)
        chains = list(dict.fromkeys(c for c, _, _ in outline.pieces))
        for chain in chains:
            out.extend(_section_candidates(rel, outline, chain))
    return out


# --------------------------------------------------------------------------- filters


def overlap(question: str, evidence: str) -> float | None:
    """Share of the question's distinct content words (tokens.terms) that occur in `evidence`.

    None when the question has no content word.
    """
    q = set(terms(question))
    if not q:
        return None
    return len(q & set(terms(evidence))) / len(q)


_PRONOUNS = frozenset("it its this that these those they them he she him her".split())


_AUX = frozenset("is are was were do does did can could should would will has have".split())
_CONJUNCTIONS = frozenset("but and so or then also".split())


def is_vague(question: str) -> bool:
    """A question that leans on a context the reader does not have: a pronoun and at most 2
    content words (tokens.terms: "Is it already known?", "What does this do?"), an auxiliary
    whose subject is a pronoun ("Is it really a problem with Tasks?": what is "it"?), or an
    opening conjunction ("But even if I do that, ...": the rest of a conversation)."""
    words = re.findall(r"[^\W\d_]+", question.casefold())
    if not words:
        return False
    if words[0] in _CONJUNCTIONS:
        return True
    if len(words) > 1 and words[0] in _AUX and words[1] in _PRONOUNS - {"that"}:
        return True
    return any(w in _PRONOUNS for w in words) and len(set(terms(question))) <= 2


_WHAT_IS = re.compile(r"^What is (.+?)\?$")
_DAYS = frozenset(
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday "
    "january february march april may june july august september october november december".split()
)


def is_bare_term(question: str) -> bool:
    """"What is X?" where X is a day or month ("What is Friday?", from a schedule's `Friday: ...`
    line) or starts with a number ("What is 1 cup flour's metric?", from a table of quantities): the
    definition and table patterns make these from lines that are not definitions, and a
    reviewer rejects them (issue 28). A one-word name ("What is Alex?") cannot be told from a
    glossary term ("What is Crema?") by its spelling alone: the offline `name` screen decides
    it from how the vault writes the word (screening.VaultWords)."""
    m = _WHAT_IS.match(question.strip())
    if m is None:
        return False
    term = m.group(1).strip()
    words = term.split()
    return term[:1].isdigit() or bool(words and words[0].casefold().rstrip("'s") in _DAYS)


def screen_templates(candidates: Sequence[Candidate], words: VaultWords) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Drop the template questions a reviewer would reject (screen_reason), counted per reason.

    Returns:
        (kept candidates in input order, one record per dropped one: id, question, pattern,
        reason, detail).
    """
    kept: list[Candidate] = []
    dropped: list[dict[str, Any]] = []
    for c in candidates:
        why = screen_reason(c.pattern, c.parts, words)
        if why is None:
            kept.append(c)
        else:
            dropped.append({"id": c.case["id"], "question": c.case["question"], "pattern": c.pattern, "reason": why[0], "detail": why[1]})
    return kept, dropped


def cap_tables(candidates: Sequence[Candidate], per_table: int) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """At most `per_table` table_cell candidates from each table, spread evenly over its
    rows (first, last and evenly between); the rest are dropped with reason `table_cap`.

    A long table would otherwise flood the candidates with one template ("What is X's Y?").
    """
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(candidates):
        if c.pattern == "table_cell" and c.group:
            groups.setdefault(c.group, []).append(i)
    out_idx: set[int] = set()
    for idx in groups.values():
        if len(idx) <= per_table:
            continue
        keep = {idx[0]} if per_table == 1 else {idx[round(j * (len(idx) - 1) / (per_table - 1))] for j in range(per_table)}
        out_idx.update(i for i in idx if i not in keep)
    kept = [c for i, c in enumerate(candidates) if i not in out_idx]
    dropped = [
        {"id": c.case["id"], "question": c.case["question"], "pattern": c.pattern, "reason": "table_cap",
         "detail": f"more than {per_table} candidates from the table at {c.group}"}
        for i, c in enumerate(candidates) if i in out_idx
    ]
    return kept, dropped


def _normal(question: str) -> str:
    return " ".join(re.sub(r"\W+", " ", question.casefold()).split())


def filter_candidates(
    candidates: Sequence[Candidate],
    *,
    max_overlap: float = DEFAULT_MAX_OVERLAP,
    duplicate_ratio: float = DEFAULT_DUPLICATE_RATIO,
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Drop questions without content words, too-easy ones and near-duplicates.

    Returns:
        (kept candidates in input order, one record per dropped candidate: id, question,
        pattern, reason ("no_content_words" | "overlap" | "duplicate") and detail).
    """
    kept: list[Candidate] = []
    seen: list[tuple[str, str]] = []  # (normalised question, id)
    dropped: list[dict[str, Any]] = []

    def drop(c: Candidate, reason: str, detail: str) -> None:
        dropped.append({"id": c.case["id"], "question": c.case["question"], "pattern": c.pattern, "reason": reason, "detail": detail})

    for c in candidates:
        share = overlap(c.case["question"], c.evidence)
        if share is None:
            drop(c, "no_content_words", "the question has no content word")
            continue
        if is_bare_term(c.case["question"]):
            drop(c, "bare_term", "'What is X?' about a day, a month or a quantity: nothing a reader would ask")
            continue
        if is_vague(c.case["question"]):
            drop(c, "vague", "leans on a context it does not give (a pronoun subject, an opening conjunction, "
                             "or a pronoun and at most 2 content words)")
            continue
        if share > max_overlap:
            drop(c, "overlap", f"{share:.2f} of its content words are in the evidence (> {max_overlap})")
            continue
        norm = _normal(c.case["question"])
        twin = next(
            (cid for prev, cid in seen
             if prev == norm or (difflib.SequenceMatcher(None, prev, norm).quick_ratio() >= duplicate_ratio
                                 and difflib.SequenceMatcher(None, prev, norm).ratio() >= duplicate_ratio)),
            None,
        )
        if twin is not None:
            drop(c, "duplicate", f"near-duplicate of {twin}")
            continue
        seen.append((norm, c.case["id"]))
        kept.append(c)
    return kept, dropped


def difficulty_from_rank(rank: int | None) -> str:
    """The offline difficulty guess: the reference retriever's rank of the first chunk
    matching a gold support. 1 -> easy, 2-10 -> medium, lower or missed -> hard."""
    if rank is None or rank > 10:
        return "hard"
    return "easy" if rank == 1 else "medium"


def flag_unretrievable(
    candidates: Sequence[Candidate], vault: Path | str, *, k: int = DEFAULT_K, chatbot: Any = None, guess_difficulty: bool = False
) -> list[str]:
    """Tag answerable candidates whose gold anchor the reference retriever misses at top `k`.

    The reference chatbot is built over `vault` with ReferenceConfig() (lexical BM25 only,
    no endpoint read from the environment) unless `chatbot` is given. Candidates are
    edited in place (tag "unretrievable"; with `guess_difficulty`, a `difficulty` from
    difficulty_from_rank where the case has none); the flagged ids are returned in order.
    """
    from evalkit.evalset.anchors import match_support

    if chatbot is None:
        from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig

        chatbot = ReferenceChatbot(vault, config=ReferenceConfig())
    flagged = []
    for c in candidates:
        if not c.case.get("answerable"):
            continue
        chunks = chatbot.ask({"question": c.case["question"], "k": k})["debug"]["retrieved_chunks"]
        supports = c.case["gold_supports"]
        rank = next((ch.get("rank") or pos for pos, ch in enumerate(chunks, start=1)
                     if any(match_support(s, ch) for s in supports)), None)
        if guess_difficulty and not c.case.get("difficulty"):
            c.case["difficulty"] = difficulty_from_rank(rank)
        if rank is None:
            if "unretrievable" not in c.case["tags"]:
                c.case["tags"].append("unretrievable")
            flagged.append(c.case["id"])
    return flagged


# --------------------------------------------------------------------------- mix


def parse_mix(text: str | None) -> dict[str, float] | None:
    """`factual=0.4,multi_hop=0.2` -> {"factual": 0.4, "multi_hop": 0.2}.

    Raises:
        BadConfig: an item that is not `name=share` with a share from 0 to 1.
    """
    if not text:
        return None
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            share = float(value)
        except ValueError:
            share = -1.0
        if not sep or not name.strip() or not 0 <= share <= 1:
            raise BadConfig(Problem(f"expected name=share with a share from 0 to 1, got {item!r}", field="--mix"))
        out[name.strip()] = share
    return out


DIFFICULTIES = ("easy", "medium", "hard")


def mix_report(
    categories: Mapping[str, int], target: Mapping[str, float], difficulties: Mapping[str, int] | None = None,
    wanted: Mapping[str, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per name of `target` (and per category found): the target share, the actual share
    and n. easy / medium / hard are difficulties, shares of the candidates that have one;
    every other name is a category, a share of all candidates. With `wanted` (apply_mix's
    target counts), each named category also has `n_target`, the count the mix asked for."""
    diffs = difficulties or {}
    out: dict[str, dict[str, Any]] = {}
    names = list(target) + [c for c in sorted(categories) if c not in target]
    for name in names:
        counts = diffs if name in DIFFICULTIES else categories
        total = sum(counts.values())
        out[name] = {
            "dimension": "difficulty" if name in DIFFICULTIES else "category",
            "target": float(target.get(name, 0.0)),
            "actual": round(counts.get(name, 0) / total, 4) if total else 0.0,
            "n": int(counts.get(name, 0)),
        }
        if wanted and name in target and name not in DIFFICULTIES:
            out[name]["n_target"] = int(wanted.get(name, 0))
    return out


def _apportion(shares: Mapping[str, float], total: int, room: Mapping[str, int]) -> dict[str, int]:
    """`total` split by `shares` (largest remainder: floors first, then one more each to the
    largest fractions), never more than a group's `room`."""
    exact = {g: s * total for g, s in shares.items()}
    out = {g: min(room[g], int(x)) for g, x in exact.items()}
    for g in sorted(exact, key=lambda g: (-(exact[g] - int(exact[g])), g)):
        if sum(out.values()) >= total:
            break
        if out[g] < room[g]:
            out[g] += 1
    return out


def apply_mix(
    kept: list[Candidate], mix: Mapping[str, float], seed: int, limit: int | None = None
) -> tuple[list[Candidate], list[dict[str, Any]], list[str], dict[str, int]]:
    """A seeded sample of `kept` per category, toward the counts `mix`'s shares ask for.

    N = `limit`, else len(kept). Categories `mix` does not name share what its named shares
    leave (1 - their sum) as one group (""); the shares (as given, not rescaled) are turned
    into target counts of N by largest remainder. Each group keeps min(its candidates, its
    target), a seeded sample in file order. A group short of its target stays short: no
    other group fills the gap, so no category goes over its share of N. A named category
    with no candidate at all is listed as unmet (the offline generator writes factual and
    how/why questions; an LLM writes the others). Difficulty shares are reported, not
    applied (difficulty is guessed after sampling, from retrieval).

    Returns:
        (the candidates kept, the dropped ones as report records (reason "mix"), the unmet
        categories, the target count per group).
    """
    named = {k: float(v) for k, v in mix.items() if k not in DIFFICULTIES}
    if not any(named.values()):
        return kept, [], [], {}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(kept):
        cat = c.case.get("category")
        groups.setdefault(cat if cat in named else "", []).append(i)
    rest = max(0.0, 1.0 - sum(named.values()))
    shares = dict(named, **({"": rest} if rest > 1e-9 else {}))
    n = len(kept) if limit is None else limit
    wanted = _apportion(shares, n, {g: n for g in shares})
    rng = random.Random(seed)
    keep: set[int] = set()
    for g, want in wanted.items():
        pool = groups.get(g, [])
        keep.update(rng.sample(pool, min(want, len(pool))))
    dropped = [
        {"id": c.case["id"], "question": c.case["question"], "pattern": c.pattern, "reason": "mix",
         "detail": f"over --mix's count for {c.case.get('category')!r} ({wanted.get(c.case.get('category'), wanted.get('', 0))})"}
        for i, c in enumerate(kept) if i not in keep
    ]
    missing = [k for k, v in named.items() if v > 0 and not groups.get(k)]
    return [c for i, c in enumerate(kept) if i in keep], dropped, missing, wanted


# --------------------------------------------------------------------------- entry point


def finish_candidates(
    kept: list[Candidate],
    dropped: list[dict[str, Any]],
    *,
    vault: Path | str,
    config: dict[str, Any],
    generated_by_pattern: Mapping[str, int],
    mix: Mapping[str, float] | None = None,
) -> tuple[list[Candidate], dict[str, Any]]:
    """The steps after the filters, the same for both generators: the seeded `limit`
    sample, the retrievability flags with the difficulty guess (`check_retrieval`), and
    the report. `config` holds seed, limit, k and check_retrieval (and is reported as is).

    Returns:
        (the candidates to write, the report).
    """
    seed, limit = config["seed"], config["limit"]
    mix_missing: list[str] = []
    wanted: dict[str, int] = {}
    if mix:
        # --limit is applied inside the mix (per-category counts), not by a sample after it
        # that would blur the shares.
        kept, mix_dropped, mix_missing, wanted = apply_mix(kept, mix, seed, limit)
        dropped = [*dropped, *mix_dropped]
    sampled_out = 0
    if limit is not None and len(kept) > limit:
        chosen = set(random.Random(seed).sample(range(len(kept)), limit))
        sampled_out = len(kept) - limit
        kept = [c for i, c in enumerate(kept) if i in chosen]
    check = config["check_retrieval"] and any(c.case["answerable"] for c in kept)
    flagged = flag_unretrievable(kept, vault, k=config["k"], guess_difficulty=True) if check else []
    categories = Counter(c.case["category"] for c in kept)
    difficulties = Counter(c.case["difficulty"] for c in kept if c.case.get("difficulty"))
    report: dict[str, Any] = {
        "vault": str(vault),
        "config": config,
        "generated": sum(generated_by_pattern.values()),
        "generated_by_pattern": dict(generated_by_pattern),
        "filtered": dict(Counter(d["reason"] for d in dropped)),
        "filtered_items": dropped,
        "sampled_out": sampled_out,
        "written": len(kept),
        "written_by_pattern": {p: sum(1 for c in kept if c.pattern == p) for p in generated_by_pattern},
        "flagged": {"unretrievable": len(flagged)},
        "flagged_ids": flagged,
        "categories": dict(sorted(categories.items())),
        "difficulties": dict(sorted(difficulties.items())),
    }
    if mix:
        report["mix"] = mix_report(categories, mix, difficulties, wanted)
        report["mix_unmet"] = mix_missing
    return kept, report


def generate_candidates(
    vault: Path | str,
    *,
    seed: int = 0,
    limit: int | None = None,
    max_overlap: float = DEFAULT_MAX_OVERLAP,
    duplicate_ratio: float = DEFAULT_DUPLICATE_RATIO,
    k: int = DEFAULT_K,
    check_retrieval: bool = True,
    mix: Mapping[str, float] | None = None,
    per_table: int = DEFAULT_PER_TABLE,
) -> GenerationResult:
    """Offline candidates from the vault's note structure, screened, filtered, sampled and flagged.

    Args:
        vault: the notes folder.
        seed: seeds the `limit` sample (nothing else is random).
        limit: keep at most this many candidates (a seeded sample, file order kept).
        max_overlap: drop a candidate whose question's content-word overlap with its
            evidence is above this.
        duplicate_ratio: drop a question this similar (difflib ratio) to an earlier one.
        k: retrieval depth of the retrievability check.
        check_retrieval: run the reference retriever and flag unretrievable candidates.
        mix: target category shares, applied with `limit` (apply_mix), and difficulty
            shares; both compared with the candidates' mix in the report.
        per_table: keep at most this many table_cell candidates per table (cap_tables).

    Returns:
        The candidates and the report (see module docstring).

    Raises:
        InputError: the vault does not exist; BadConfig for an out-of-range argument.
    """
    if not 0 <= max_overlap <= 1:
        raise BadConfig(Problem(f"expected a number from 0 to 1, got {max_overlap}", field="--max-overlap"))
    if limit is not None and limit < 1:
        raise BadConfig(Problem(f"expected a positive number, got {limit}", field="--limit"))
    if per_table < 1:
        raise BadConfig(Problem(f"expected a positive number, got {per_table}", field="--per-table"))
    raw = extract_candidates(vault)
    screened, dropped = screen_templates(raw, vault_words(vault))
    capped, capped_out = cap_tables(screened, per_table)
    dropped += capped_out
    kept, filtered = filter_candidates(capped, max_overlap=max_overlap, duplicate_ratio=duplicate_ratio)
    dropped += filtered
    config = {
        "seed": seed, "limit": limit, "max_overlap": max_overlap, "duplicate_ratio": duplicate_ratio,
        "k": k, "check_retrieval": check_retrieval, "per_table": per_table,
    }
    by_pattern = {p: sum(1 for c in raw if c.pattern == p) for p in PATTERNS}
    kept, report = finish_candidates(kept, dropped, vault=vault, config=config, generated_by_pattern=by_pattern, mix=mix)
    return GenerationResult(kept, report)

"""Answering: the abstention rule, the extractive answerer and the chat answerer.

Abstention evidence (a number in [0, 1]):

    evidence = sum(idf(t) for t in Q if t occurs in the top E retrieved chunks)
               / sum(idf(t) for t in Q)

Q is the question's distinct search terms, E = 3 chunks, a chunk's terms include its file
name and heading path, and a term the vault never uses gets the largest idf. So it is the
share of the question's information that the best evidence covers; a question about
something absent from the vault has most of its idf mass in unseen terms. The chatbot
abstains with reason `no_relevant_context` when evidence < threshold (default 0.4), when
nothing was retrieved, when the question has no search terms at all, or when the notes
lack at least half of the question's terms (UNSEEN_SHARE): "What is the capital of Mars?"
has evidence 0.46 from "capital" (in "say so in capital letters") while the vault never
says "mars", and answered with that sentence.

Extractive answer (deterministic): split the top chunks into sentences, score each by
the idf mass of question terms it contains, keep the best 3 that score at least half the
best sentence (ties: chunk rank, then position), print them in (rank, position) order, each followed by `[n]`, where n is the
1-based position of its chunk in `references`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from evalkit.reference.tokens import terms

ABSTAIN_TEXT = "I could not find this in the notes, so I won't guess."
EXTRACTIVE_VERSION = "extractive-v1"
CHAT_PROMPT_VERSION = "chat-prompt-v1"
# Abstain when the notes lack this share of the question's distinct terms or more (a floor
# on what the notes hold; on the bundled eval set only answerable sv-040, which abstains on
# evidence anyway, reaches it).
UNSEEN_SHARE = 0.5
_MAX_SENTENCE_CHARS = 400
_MIN_SHARE_OF_BEST = 0.5

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=\S)")
_LINE_PREFIX = re.compile(r"^\s*(?:>\s*)*(?:\[![^\]]*\][+-]?\s*)?(?:[-*+]\s+(?:\[.\]\s+)?|\d+[.)]\s+)?")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def unseen_share(query_terms: Sequence[str], known: Callable[[str], bool]) -> float:
    """Share of the question's distinct terms that no chunk holds; 0.0 with no terms."""
    q = list(dict.fromkeys(query_terms))
    return sum(1 for t in q if not known(t)) / len(q) if q else 0.0


def evidence(query_terms: Sequence[str], top_term_sets: Sequence[frozenset[str]], idf: Callable[[str], float]) -> float:
    """Share of the question's idf mass found in the top chunks (module docstring); 0.0 with no terms."""
    q = list(dict.fromkeys(query_terms))
    total = sum(idf(t) for t in q)
    if not q or total <= 0:
        return 0.0
    seen = frozenset().union(*top_term_sets) if top_term_sets else frozenset()
    return sum(idf(t) for t in q if t in seen) / total


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _sentences(text: str) -> list[str]:
    """Readable sentences of a chunk: no headings or fence markers, list/quote markers
    removed, and each table row written out with its header (`Port: 8096; ...`)."""
    out: list[str] = []
    lines = text.splitlines()
    header: list[str] | None = None
    for i, line in enumerate(lines):
        if not line.strip() or _HEADING.match(line) or _FENCE.match(line) or _TABLE_RULE.match(line):
            header = header if _TABLE_RULE.match(line) else None
            continue
        if line.lstrip().startswith("|"):
            if i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
                header = _cells(line)
                continue
            cells = _cells(line)
            if header and len(header) == len(cells):
                cells = [f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True)]
            out.append("; ".join(c for c in cells if c)[:_MAX_SENTENCE_CHARS])
            continue
        header = None
        clean = _LINE_PREFIX.sub("", line).strip()
        if not clean:
            continue
        for s in _SENT_SPLIT.split(clean):
            s = s.strip()
            if s:
                out.append(s if len(s) <= _MAX_SENTENCE_CHARS else s[: _MAX_SENTENCE_CHARS - 1] + "…")
    return out


def extractive_answer(
    query_terms: Sequence[str],
    chunks: Sequence[dict],
    idf: Callable[[str], float],
    *,
    max_sentences: int = 3,
    context_chunks: int = 3,
) -> tuple[str, list[int]]:
    """Pick the best sentences of the top chunks and cite them.

    Args:
        query_terms: the question's search terms.
        chunks: retrieved chunks in rank order (dicts with "text").
        idf: term -> idf of the index.
        max_sentences: at most this many sentences.
        context_chunks: only the first this many chunks are read.

    Returns:
        (answer text with [n] markers, indices into `chunks` of the cited chunks in
        citation order). With no chunks: ("", []).
    """
    q = set(query_terms)
    candidates: list[tuple[float, int, int, str]] = []  # (score, rank, position, sentence)
    for rank, ch in enumerate(chunks[:context_chunks]):
        for pos, s in enumerate(_sentences(ch["text"])):
            score = sum(idf(t) for t in q & set(terms(s)))
            candidates.append((score, rank, pos, s))
    if not candidates:
        return "", []
    best = sorted((c for c in candidates if c[0] > 0), key=lambda c: (-c[0], c[1], c[2]))
    # a sentence that shares only a common word with the question is noise next to the best one
    best = [c for c in best if c[0] >= _MIN_SHARE_OF_BEST * best[0][0]]
    picked: list[tuple[float, int, int, str]] = []
    seen: set[str] = set()
    for c in best:
        if c[3] not in seen:
            seen.add(c[3])
            picked.append(c)
        if len(picked) == max_sentences:
            break
    if not picked:
        # the match was on the title or heading only: quote the top chunk's opening sentence
        picked = [min(candidates, key=lambda c: (c[1], c[2]))]
    picked.sort(key=lambda c: (c[1], c[2]))
    cited: list[int] = []
    parts: list[str] = []
    for _, rank, _, s in picked:
        if rank not in cited:
            cited.append(rank)
        parts.append(f"{s} [{cited.index(rank) + 1}]")
    return " ".join(parts), cited


CHAT_SYSTEM = (
    "You answer questions about a collection of markdown notes. Use only the numbered context "
    "passages. After every sentence that uses a passage, cite it as [n] with the passage number. "
    "If the passages do not contain the answer, reply exactly: I don't know."
)


def chat_messages(question: str, chunks: Sequence[dict]) -> list[dict[str, str]]:
    """The chat prompt (version CHAT_PROMPT_VERSION): numbered passages, then the question."""
    blocks = []
    for i, ch in enumerate(chunks, 1):
        where = ch["rel_path"] + (f" — {ch['heading_path']}" if ch["heading_path"] else "")
        blocks.append(f"[{i}] ({where})\n{ch['text']}")
    user = "Context:\n\n" + "\n\n".join(blocks) + f"\n\nQuestion: {question}"
    return [{"role": "system", "content": CHAT_SYSTEM}, {"role": "user", "content": user}]


_MARKER = re.compile(r"\[(\d+)\]")


def renumber_citations(answer: str, n_context: int) -> tuple[str, list[int]]:
    """Map the model's [n] (context numbering) to reference numbering by first citation.

    Returns:
        (answer with markers renumbered, indices into the context of the cited chunks).
        Markers outside 1..n_context are left as written and cite nothing.
    """
    cited: list[int] = []
    for m in _MARKER.finditer(answer):
        i = int(m.group(1)) - 1
        if 0 <= i < n_context and i not in cited:
            cited.append(i)

    def sub(m: re.Match[str]) -> str:
        i = int(m.group(1)) - 1
        return f"[{cited.index(i) + 1}]" if i in cited else m.group(0)

    return _MARKER.sub(sub, answer), cited


def is_decline(answer: str) -> bool:
    """The model followed the prompt's refusal instruction."""
    a = answer.strip().lower().replace("’", "'")
    return a.startswith("i don't know") or a.startswith("i do not know")

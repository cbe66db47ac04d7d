"""The one way the reference chatbot counts and matches tokens.

Two views of the same text:

- **Budget tokens** (`count_tokens`, `token_spans`): every run of word characters is one
  token and every other non-space character is one token, i.e. the regex `\\w+|[^\\w\\s]`.
  `"## Due dates, 2024"` is `#`, `#`, `Due`, `dates`, `,`, `2024`: 6 tokens. Chunk budgets,
  `token_count` in responses and `chunk_token_stats` all use this count. It is a stand-in
  for a model tokenizer: close enough to size chunks, and needs no download.
- **Search terms** (`terms`): the lowercased `\\w+` runs, minus a short English stopword
  list, with a light plural fold (`tasks` -> `task`, `queries` -> `query`). BM25, folder
  selection, sentence picking and the abstention evidence all use these.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
WORD_RE = re.compile(r"\w+")

# Function words only: they carry no topic, and leaving them in would let "what is the"
# count as evidence that the vault can answer a question.
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only
    or other our ours ourselves out over own same she should so some such than that the
    their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would
    you your yours yourself yourselves s t d ll m re ve
    """.split()
)


def count_tokens(text: str) -> int:
    """Number of budget tokens in `text` (regex `\\w+|[^\\w\\s]`)."""
    return sum(1 for _ in TOKEN_RE.finditer(text))


def token_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) character offsets of each budget token, in order."""
    for m in TOKEN_RE.finditer(text):
        yield m.start(), m.end()


def fold(word: str) -> str:
    """Lowercase and fold a plural: `Tasks` -> `task`, `queries` -> `query`, `class` stays."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def terms(text: str) -> list[str]:
    """Search terms of `text`: folded `\\w+` runs that are not stopwords, in order."""
    out = []
    for m in WORD_RE.finditer(text):
        w = m.group().lower()
        if w in STOPWORDS:
            continue
        out.append(fold(w))
    return out

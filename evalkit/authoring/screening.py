"""Which offline template questions a reviewer would reject (issue 28 item 7).

The offline generator (evalkit.authoring.generate) turns a definition line into "What is
<term>?" and a table cell into "What is <key>'s <header>?". Most such lines in real notes are
not definitions and most tables are not "things with attributes": "What is Alex?" (an action
item), "What is Version's before?" (a before/after table), "What is `task.due`'s type 2?". The
rules here drop those, each with a reason the report counts; EVAL.md ("Generated candidates")
states each rule as it is coded. They read only the template's slots and the vault's words,
never an LLM.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from evalkit.reference.corpus import MARKDOWN_SUFFIXES, walk_vault

__all__ = ["FLAG_CELLS", "MAX_TERM_WORDS", "VaultWords", "defines", "screen_reason", "vault_words"]

# A definition's term, a table's first cell: longer is a sentence, not a name.
MAX_TERM_WORDS = 6
# Cells that answer no "what is" question: ticks, yes/no, dashes (a feature matrix).
FLAG_CELLS = frozenset(
    "yes no y n true false x - -- — – n/a na none ✅ ❌ ✔ ✔️ ✓ ✗ ✘ ☑ ☐ 🚫 "
    "matches shown hidden recognised recognized ignored supported unsupported required optional enabled disabled on off".split()
)

# Words that open a sentence rather than name a term: "The Amazon lodge: a night walk ...".
_ARTICLES = frozenset("the a an".split())
# A term holding one of these is a clause ("The operators are case-sensitive"), not a name.
_VERBS = frozenset("is are was were be been being do does did can could should would will must has have had".split())
# What a definition's text opens with when it defines: a genus ("a tool that...", "the foam of...").
# "the one on the corner" points at a thing, it does not say what kind of thing it is.
_GENUS = re.compile(r"^(?:a|an|the|one of|any|each|every)\s+(?!(?:one|same|other)\b)[^\W\d_]", re.IGNORECASE)
# Table headers that name no attribute one asks "what is X's <header>?" about.
_HEADER_OPENERS = frozenset(
    "what why where when who how which whether before after vs versus not in on at for with without from to by".split()
)
_GENERIC_HEADERS = frozenset(
    "value values description notes note comment comments details detail example examples usage meaning remarks "
    "explanation summary result results output behaviour behavior text info information".split()
)
_UNITS = frozenset(
    "g gram grams kg mg µg mcg ml l litre litres liter liters cup cups tbsp tsp oz lb lbs km m cm mm mi mile miles "
    "min mins minute minutes h hr hrs hour hours s sec secs second seconds day days week weeks reps sets count qty "
    "quantity amount number no eur usd gbp dkk chf jpy sek nok € $ £".split()
)
_PREPOSITIONS = frozenset("in on at for with without from to by of until about into".split())
_RELATIVES = frozenset("that which who whose".split())
# A first cell opening with these is a condition ("No global filter", "In query results"), not a thing.
_KEY_OPENERS = _PREPOSITIONS | {"no", "not", "if", "when", "unless"}
_PLACEHOLDER_KEYS = frozenset({"(empty)", "empty", "no value", "none", "other", "others", "everything else", "total", "sum"})


def _bare(text: str) -> str:
    """`text` without emphasis, code and quote marks around it."""
    return text.strip().strip("*_`'\" ").strip()


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+|[%€$£#]", text.casefold())


def defines(term: str, definition: str, section: str) -> bool:
    """Does the text say what `term` is? Its definition opens with a genus ("a", "an", "the",
    "one of", "any", "each", "every" then a word: "Crema: the foam of emulsified oils"), or
    the section holds "<term> is|are|means|refers to" ("Crema is the foam ...")."""
    if _GENUS.match(_bare(definition)):
        return True
    return re.search(rf"(?<![\w-]){re.escape(_bare(term))}\s+(?:is|are|means|refers to)\b", section, re.IGNORECASE) is not None


@dataclass(frozen=True)
class VaultWords:
    """What the vault's notes tell about a capitalised word (vault_words).

    Attributes:
        lower: every word written in lower case somewhere ("pharmacy").
        mid_sentence: every capitalised word written after a lower-case word or a comma
            ("with Alex", "ask Sam, Priya").
    """

    lower: frozenset[str] = frozenset()
    mid_sentence: frozenset[str] = frozenset()

    def is_name(self, word: str) -> bool:
        """One capitalised word (not an acronym) the notes use as a name: capitalised in the
        middle of a sentence and never in lower case. A glossary term ("Crema") is written
        in lower case in prose, or only at the start of its own line."""
        return (word[:1].isupper() and not word.isupper() and word.isalpha()
                and word.casefold() not in self.lower and word in self.mid_sentence)


def screen_reason(pattern: str, p: Mapping[str, str], words: VaultWords) -> tuple[str, str] | None:
    """Why a reviewer would reject this template question, as (reason, detail), or None.

    Args:
        pattern: "definition" or "table_cell" (any other pattern passes).
        p: the template's slots (generate.Candidate.parts): term, definition and section
            for a definition; key, header, value and first_header for a table cell.
        words: the vault's VaultWords (vault_words), which tell a name from a term.
    """
    if pattern == "definition" and p:
        term = _bare(p["term"])
        if " " not in term and words.is_name(term):
            return "name", f"{term!r} is a name in these notes (capitalised mid-sentence, never lower case), not a term"
        low = [w.casefold() for w in term.split()]
        if low[0] in _ARTICLES or _VERBS & set(low) or "," in re.sub(r"\([^)]*\)", "", term):
            return "not_a_definition", f"{term!r} opens a sentence or lists things, it is not a term"
        if not defines(term, p["definition"], p.get("section", "")):
            return "not_a_definition", f"the text after {term!r} does not say what it is"
    if pattern == "table_cell" and p:
        header, key, value = _bare(p["header"]), _bare(p["key"]), p["value"]
        hw = _words(header)
        if not _bare(p.get("first_header", "")):
            return "table_header", "the table's first header is empty: a matrix, not rows of things with attributes"
        if re.search(r"\s\d+$|\d+\.\d+", header):
            return "table_header", f"header {header!r} is a numbered or versioned variant, not an attribute"
        if not hw or hw[0] in _HEADER_OPENERS or header.casefold() in _GENERIC_HEADERS or hw[0] in _UNITS \
                or "%" in header or re.search(r"\sx\s", header) or hw[-1] in _PREPOSITIONS or _RELATIVES & set(hw) \
                or re.fullmatch(r"[A-Z][A-Z_]{3,}", header):
            return "table_header", f"header {header!r} is not an attribute to ask about (a unit, a value, a generic or question word)"
        kw = _words(key)
        if key.endswith(":") or len(re.sub(r"\W", "", key)) <= 2 or len(key.split()) > MAX_TERM_WORDS \
                or key.casefold() in _PLACEHOLDER_KEYS or key.casefold() in FLAG_CELLS or (kw and kw[0] in _KEY_OPENERS) \
                or "," in re.sub(r"\([^)]*\)", "", key) or {"and", "or"} & set(kw) or "](" in key \
                or re.fullmatch(r"`[^`\s.()]+`", p["key"].strip("*_ ")):
            return "table_key", f"first cell {key!r} names no thing (a label, symbol, list, link, condition or placeholder)"
        if "<br" in value.casefold() or re.search(r"<[a-z]+[^>]*>", value) or not re.search(r"[^\W_]", _bare(value)) \
                or len(value.split()) > 12:
            return "table_value", "the cell is a list, an explanation or no value: 'what is X's Y?' does not ask for it"
    return None


def vault_words(vault: Path | str) -> VaultWords:
    """The VaultWords of the notes in `vault` (every markdown file, as its text)."""
    root = Path(vault)
    lower: set[str] = set()
    mid: set[str] = set()
    for rel in walk_vault(root):
        if rel.lower().endswith(MARKDOWN_SUFFIXES):
            text = (root / rel).read_bytes().decode("utf-8", "replace")
            lower.update(w for w in re.findall(r"[^\W\d_]+", text) if w.islower())
            mid.update(re.findall(r"(?:\b[^\W\d_]*[a-z]|,) ([A-Z][^\W\d_]*)", text))
    return VaultWords(frozenset(lower), frozenset(mid))

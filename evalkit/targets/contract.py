"""The contract's rules on what a chatbot returns, checked on its answers (issue 26 item 2).

evalkit matches retrieved chunks against gold labels by the anchor rule (EVAL.md,
"Anchors"). A chatbot that sends a heading path in another form (LlamaIndex's `/A/B/`), the
same chunk id twice, or absolute paths is not wrong in a way HTTP or JSON can see: the
response validates, and every retrieval metric is quietly 0 or quietly lower. These rules
look at the answers and say so, each with an example from the response, the rule and the
fix (docs/api-contract.md, "What evalkit checks").

`ContractCheck` accumulates over the answers of a run (`add` each answer's chunks); the
probe checks the first answer before the run, the run's derive step every answer, and
`evalkit check-target` a handful. `findings()` gives one `Finding` per broken rule.

The rules (`RULES`), each about one answer's `debug.retrieved_chunks` (and references):

- `heading_path_form`: a heading path is in the contract's form, `# Note > ## Section`:
  components joined by ` > `, each with its `#` level. `/A/B/`, `A > B`, `A/B` are not.
- `heading_path_own_section`: the path ends with the chunk's own section heading. A chunk
  whose text starts with `## Tags` is under `... > ## Tags`, not under its parent.
- `chunk_id_unique`: a chunk id occurs once in an answer (ids name chunks: two chunks with
  one id are one chunk to the metrics, and the second earns nothing).
- `rank_order`: ranks, when sent, are 1..n in list order (the metrics use list position;
  other ranks say the list is not what the chatbot ranked).
- `rel_path_relative`: `rel_path` is relative to the notes folder, with `/`, never
  absolute and never leaving the folder (`..`): gold labels are relative paths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter
from typing import Any

from evalkit.evalset.anchors import heading_components

__all__ = ["RULES", "ContractCheck", "Finding", "Rule", "check_answer", "chunk_keys", "chunks_of", "probe_notes"]


@dataclass(frozen=True)
class Rule:
    """One contract rule: what it says, why a breach matters, and the fix."""

    id: str
    title: str  # the breach, as a finding names it
    requirement: str  # the rule in a few words, as a conformance row names it
    rule: str
    fix: str
    # "error": the numbers are wrong while it is broken; "warning": they may be.
    severity: str = "error"


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "heading_path_form",
            "heading paths not in the contract's form",
            "heading_path in the '# Note > ## Section' form",
            "heading_path is the chain of headings from the note's top, each with its # level, "
            "joined by ' > ': \"# Note > ## Section\"",
            "send the full chain with levels (LlamaIndex's header_path \"/A/B/\" and LangChain's "
            "{\"Header 1\": ...} metadata must be converted; evalkit.adapters does it)",
        ),
        Rule(
            "heading_path_own_section",
            "heading paths that leave out the chunk's own section",
            "heading_path ends with the chunk's own section",
            "heading_path ends with the heading of the section the chunk is in: a chunk whose text "
            "starts with \"## Tags\" is under \"# Note > ## Tags\"",
            "append the section's own heading to the path of its parents",
        ),
        Rule(
            "chunk_id_unique",
            "chunk ids repeated within one answer",
            "chunk ids unique within an answer",
            "each retrieved chunk has its own chunk_id: an id names one chunk, so a repeat counts "
            "as a duplicate of the first and earns nothing",
            "make ids unique per chunk, e.g. a hash of path, heading path, position and text "
            "(LlamaIndex: an id_func that uses the node's position, not 0 for every node)",
        ),
        Rule(
            "rank_order",
            "ranks not 1..n in list order",
            "ranks 1..n in list order",
            "rank, when sent, is 1 for the first chunk and goes up by one; evalkit scores the list "
            "in rank order",
            "number the chunks 1..n in the order the retriever ranked them",
            severity="warning",
        ),
        Rule(
            "rel_path_relative",
            "rel_path absolute or outside the notes folder",
            "rel_path relative to the notes folder",
            "rel_path is relative to the notes folder, with '/': \"docs/setup/Home server.md\"",
            "strip the notes folder's own path from the front; gold labels name relative paths",
        ),
    )
}

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_WINDOWS_ABSOLUTE = re.compile(r"^[A-Za-z]:[\\/]")
# A text that opens with headings has a `#` after its leading blank lines and spaces; the
# opening headings are read from its first 4 KB (a run of heading lines longer than that
# is not a chunk's opening).
_OPENS_WITH_HASH = re.compile(r"\s*#")
_OPENING_CHARS = 4096
_EXAMPLE_CHARS = 120


@dataclass
class Finding:
    """A rule some answers broke: how many of how many, the first example, the cases."""

    rule: Rule
    n: int = 0  # answers that broke it
    of: int = 0  # answers checked
    example: str = ""
    ids: list[str] = field(default_factory=list)

    def message(self) -> str:
        return (
            f"{self.n} of {self.of} answers: {self.rule.title}, e.g. {self.example}. "
            f"The contract: {self.rule.rule}. Fix: {self.rule.fix}"
        )

    def to_warning(self, max_ids: int = 20) -> dict[str, Any]:
        """As a run warning in metrics.json (`kind` `contract_<rule>`)."""
        return {
            "kind": f"contract_{self.rule.id}",
            "severity": "warning",
            "n": self.n,
            "of": self.of,
            "ids": self.ids[:max_ids],
            "rule": self.rule.rule,
            "fix": self.rule.fix,
            "example": self.example,
            "message": self.message(),
        }


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _EXAMPLE_CHARS else text[: _EXAMPLE_CHARS - 1] + "…"


@lru_cache(maxsize=1 << 16)
def _heading_form_problem(heading: str) -> str | None:
    """Why `heading` is not in the `# A > ## B` form, or None (split by the anchor rule's
    `heading_components`, as matching will split it). Cached: a run's chunks repeat a few
    thousand headings, and every derive checks every chunk (run_eval's, each re-scoring's)."""
    parts = heading_components(heading)
    if len(parts) == 1 and "/" in heading and not heading.lstrip().startswith("#"):
        return f"heading_path {_short(heading)} is '/'-separated and has no # levels"
    unlevelled = [p for p in parts if not p.startswith("#")]
    if unlevelled:
        return f"heading_path {_short(heading)} has a component without its # level ({_short(unlevelled[0])})"
    return None


def _opening_headings(text: Any) -> list[str]:
    """The headings the chunk text opens with (consecutive heading lines, blank lines
    between them allowed), each as `## Title`; [] when it opens with anything else."""
    if not isinstance(text, str) or _OPENS_WITH_HASH.match(text) is None:
        return []  # the common case, decided without splitting a long text into lines
    out: list[str] = []
    for line in text[:_OPENING_CHARS].splitlines():
        if not line.strip():
            continue
        m = _ATX.match(line)
        if m is None:
            break
        title = " ".join((m.group(2) or "").split())
        if not title:
            break
        out.append(f"{m.group(1)} {title}")
    return out


@lru_cache(maxsize=1 << 16)
def _last_component(heading: str) -> str:
    return (heading_components(heading) or ("",))[-1]  # ">" alone has no component


def _level(component: str) -> int:
    return len(component) - len(component.lstrip("#"))


def _leaves_out_own_section(heading: str, text: Any) -> str | None:
    """The chunk's own heading when its path ends above it: the text opens with a heading
    deeper than the path's last one and the path names none of the opening headings. A
    chunk that opens with its parents' headings and then its own (LangChain's
    strip_headers=False), or with a `#` line the path rightly ignores (a comment in a code
    block cut mid-way), is not flagged."""
    opening = _opening_headings(text)
    if not opening:
        return None
    last = _last_component(heading)
    if any(o.casefold() == last.casefold() for o in opening):
        return None
    return opening[0] if _level(opening[0]) > _level(last) else None


def check_answer(chunks: Sequence[Mapping[str, Any]] | None) -> dict[str, str]:
    """The rules one answer's retrieved chunks break: {rule id: an example}."""
    out: dict[str, str] = {}
    if not chunks:
        return out
    seen: dict[str, int] = {}
    ranks = []
    for pos, c in enumerate(chunks, start=1):
        # Every derive checks every chunk of a run: the plain dict a record holds is told
        # apart without the abstract-class check, and what depends on one string is cached.
        if type(c) is not dict and not isinstance(c, Mapping):
            continue
        ranks.append(c.get("rank"))
        heading = c.get("heading_path")
        if isinstance(heading, str) and heading.strip():
            problem = _heading_form_problem(heading)
            if problem is not None:
                out.setdefault("heading_path_form", problem)
            else:
                own = _leaves_out_own_section(heading, c.get("text"))
                if own is not None:
                    out.setdefault(
                        "heading_path_own_section",
                        f"a chunk whose text starts with {_short(own)} has heading_path {_short(heading)}",
                    )
        cid = c.get("chunk_id")
        if cid is not None:
            key = cid if type(cid) is str else str(cid)
            if key:
                first = seen.setdefault(key, pos)
                if first != pos:
                    out.setdefault("chunk_id_unique", f"chunk_id {_short(key)} at positions {first} and {pos}")
        path = c.get("rel_path")
        if isinstance(path, str) and path:
            problem = _path_problem(path)
            if problem is not None:
                out.setdefault("rel_path_relative", problem)
    if any(r is not None for r in ranks) and ranks != list(range(1, len(ranks) + 1)):
        shown = ranks[:6] + (["…"] if len(ranks) > 6 else [])
        out.setdefault("rank_order", f"ranks {shown} for {len(ranks)} chunks")
    return out


@lru_cache(maxsize=1 << 16)
def _path_problem(path: str) -> str | None:
    """Why `rel_path` is not relative to the notes folder, or None."""
    p = path.replace("\\", "/")
    if p.startswith("/") or _WINDOWS_ABSOLUTE.match(path) or p.startswith("file:"):
        return f"rel_path {_short(path)} is absolute"
    if ".." in p.split("/"):
        return f"rel_path {_short(path)} leaves the notes folder"
    return None


# What one chunk is, for the rules about a chunk alone and the run warnings' record of what
# was retrieved (`derive.health`): every field they read but the rank (the answer's) and the
# text (only a text that opens with a heading matters, told apart without hashing it).
CHUNK_KEY_FIELDS = ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")
_CHUNK_KEY = itemgetter(*CHUNK_KEY_FIELDS)
_CHUNK_ID = itemgetter(0)
_RANK = itemgetter("rank")
_TEXT = itemgetter("text")
_FIRST_CHAR = itemgetter(slice(0, 1))
# A text whose first character is one of these may open with a heading (`_OPENS_WITH_HASH`).
_MAY_OPEN_WITH_HEADING = re.compile(r"[\s#]")
# How many distinct chunks `ContractCheck` remembers before it starts over: a run returns its
# index's chunks again and again (27,000 SciFact sections at 100,000 cases), so 64 K keys hold
# a real run's; a run whose chunks never repeat pays a memo that is reset.
MEMO_CHUNKS = 1 << 16


def chunk_keys(chunks: Sequence[Any]) -> list[tuple] | None:
    """Each chunk's `CHUNK_KEY_FIELDS` values as a tuple (taken in C, one call an answer), or
    None when a chunk is not a dict holding all of them (then read it field by field)."""
    try:
        return list(map(_CHUNK_KEY, chunks))
    except (KeyError, TypeError, IndexError):
        return None


def _chunk_is_clean(key: tuple) -> bool:
    """Whether a chunk with these `CHUNK_KEY_FIELDS` values breaks none of the rules about a
    chunk alone (`check_answer`'s heading form and rel_path tests; the own-section test is
    the text's, see `ContractCheck._breaks_nothing`), with an id whose equality is its
    str()'s (a str or None: 1 and True are equal keys, not equal ids)."""
    cid, path, heading, _, _ = key
    if cid is not None and type(cid) is not str:
        return False
    if isinstance(heading, str) and heading.strip() and _heading_form_problem(heading) is not None:
        return False
    return not (isinstance(path, str) and path and _path_problem(path) is not None)


@lru_cache(maxsize=64)
def _one_to(n: int) -> list[int]:
    return list(range(1, n + 1))


class ContractCheck:
    """The rules over many answers: `add` each, then `findings()`.

    Every derive checks every chunk of a run, and a run returns the same chunks again and
    again: a chunk already found clean (`_chunk_is_clean`, remembered by its `chunk_keys`)
    is not checked again, and an answer of clean chunks whose texts do not open with a
    heading, with distinct ids and ranks 1..n (or none) breaks nothing, told in a few C
    calls. Any other answer is checked by `check_answer`, so the findings, their examples
    and their order are its."""

    def __init__(self) -> None:
        self.checked = 0
        self.broken: dict[str, Finding] = {}
        # chunk key -> clean (`_chunk_is_clean`); a memo, cleared when full.
        self.known: dict[tuple, bool] = {}
        # Whether the last answer `add`ed was chunks all in `known` before it, all clean (so
        # their ids are str or None): `derive.health` then knows it recorded them already,
        # without a lookup of its own (the lookups are the cost: cache misses on the keys).
        self.seen_clean = False

    def add(self, chunks: Sequence[Mapping[str, Any]] | None, case_id: str | None = None,
            keys: list[tuple] | None = None) -> dict[str, str]:
        """Check one answer's retrieved chunks; returns what it broke ({rule: example}).
        `keys`: `chunk_keys(chunks)`, when the caller took them already."""
        self.seen_clean = False
        if not chunks:
            return {}
        self.checked += 1
        if keys is None:
            keys = chunk_keys(chunks)
        if keys is not None and self._breaks_nothing(chunks, keys):
            return {}
        found = check_answer(chunks)
        for rule_id, example in found.items():
            f = self.broken.get(rule_id)
            if f is None:
                f = self.broken[rule_id] = Finding(RULES[rule_id], example=example)
            f.n += 1
            if case_id is not None and len(f.ids) < 20:
                f.ids.append(case_id)
        return found

    def _breaks_nothing(self, chunks: Sequence[Mapping[str, Any]], keys: list[tuple]) -> bool:
        """True: `check_answer(chunks)` is {} (False: it may not be; ask it)."""
        known = self.known
        try:
            flags = list(map(known.get, keys))
            fresh = None in flags
            if fresh:
                if len(known) >= MEMO_CHUNKS:
                    known.clear()
                for k in keys:
                    if k not in known:
                        known[k] = _chunk_is_clean(k)
                flags = list(map(known.__getitem__, keys))
            if flags.count(True) != len(flags):
                return False
            self.seen_clean = not fresh
            ids = list(map(_CHUNK_ID, keys))  # str or None (clean): distinct values, distinct ids
            if len(set(ids)) != len(ids):
                return False
            ranks = list(map(_RANK, chunks))
            if not (ranks == _one_to(len(ranks)) or ranks.count(None) == len(ranks)):
                return False
            firsts = "".join(map(_FIRST_CHAR, map(_TEXT, chunks)))
        except (TypeError, KeyError):  # an unhashable value, a rank or text missing or not a str
            return False
        if _MAY_OPEN_WITH_HEADING.search(firsts) is None:
            return True
        # Some text may open with a heading: the own-section test on those chunks (their
        # heading paths are in form, as `check_answer` tests them).
        for c in chunks:
            heading = c["heading_path"]
            if isinstance(heading, str) and heading.strip() and _leaves_out_own_section(heading, c["text"]) is not None:
                return False
        return True

    def findings(self) -> list[Finding]:
        """The broken rules, in RULES' order, each with n of the answers checked."""
        out = []
        for rule_id in RULES:
            f = self.broken.get(rule_id)
            if f is not None:
                f.of = self.checked
                out.append(f)
        return out


def chunks_of(response: Any) -> list[dict[str, Any]]:
    """A validated AskResponse's retrieved chunks as plain dicts (what a record stores)."""
    debug = getattr(response, "debug", None)
    return [c.model_dump() for c in (getattr(debug, "retrieved_chunks", None) or [])]


def probe_notes(broken: Mapping[str, str]) -> list[str]:
    """One line per rule the probe's answer broke: the example, then the fix."""
    return [f"{RULES[r].title}: {example}. Fix: {RULES[r].fix}" for r, example in broken.items()]

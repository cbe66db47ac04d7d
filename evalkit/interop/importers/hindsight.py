"""Hindsight's eval fixtures (seed 004, `assistant-baseline.v1.jsonl`) -> evalkit cases + notes.

A fixture is JSONL, one case per line: `{id, scenario, description, seedFacts: [{content,
factType, confidence, ...}], query, expected: {mustInclude, mustExclude, orderedHints},
constraints: {tokenBudget, topK}}`. Hindsight seeds a fresh memory with each case's facts;
evalkit's target answers over a folder of notes, so the facts become notes of a generated
vault, one folder per case (docs/interop.md, "Coming from Hindsight", has the table):

- `<folder>/fact-01.md`, `fact-02.md`, ... per fact, in fixture order: YAML front matter
  with the fact's other fields (`factType` as `fact_type`, the rest under their own names;
  lists and objects JSON-encoded into a string), a blank line, then `content` byte for byte
  (must_include is matched against it). The folder is a lower-case slug of the case id,
  made unique (`-2`, `-3`, ...), so `--send-scope folders` reproduces the fresh memory.
- `query` -> `question`; `description` -> `notes`; `scenario` -> `scenario` and the first
  tag (then the line's own `tags`, then `--tag`s); `expected` / `constraints` in snake_case;
  `answerable: true`; `category` from the options unless the line has one;
  `folders: [<folder>]`. Other keys are kept as they are.
- Gold supports: for each mustInclude string, each fact note whose content holds it (the
  phrase rule, `anchors.normalize_phrase`, as must_include is scored) is a whole-note
  support, once, in fact order.
  A string no fact holds is a warning on the ImportedCase, not an error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem
from evalkit.evalset.anchors import normalize_phrase, phrase_in
from evalkit.interop.importers.base import ImportedCase, ImportOptions, jsonl_items

__all__ = ["convert", "fact_note", "folder_slug"]

# Fixture keys this module maps; any other key is copied onto the case unchanged.
_KNOWN = frozenset({"id", "scenario", "description", "seedFacts", "query", "expected", "constraints", "tags", "category"})
# seed 004's camelCase -> evalkit's name (snake_case input is accepted too, as schema.py does).
_EXPECTED = {"mustInclude": "must_include", "mustExclude": "must_exclude", "orderedHints": "ordered_hints"}
_CONSTRAINTS = {"tokenBudget": "token_budget", "topK": "top_k"}
_FACT_RENAMES = {"factType": "fact_type"}
_SLUG_MAX = 64
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def convert(paths: Sequence[Path], options: ImportOptions) -> list[ImportedCase]:
    """Every non-blank line of every file, in order.

    Raises:
        InputError: every problem of every file: `<file>:<line>: <field>: <message>`.
    """
    out: list[ImportedCase] = []
    problems: list[Problem] = []
    seen_ids: dict[str, str] = {}
    seen_folders: set[str] = set()
    for path in paths:
        for index, (line_no, item) in enumerate(_read(path, problems)):
            case, facts, unmatched, item_problems = _convert_line(item, path, line_no, options)
            problems.extend(item_problems)
            if case is None:
                continue
            first = seen_ids.get(case["id"])
            if first is not None:
                problems.append(Problem(f"id {case['id']!r} duplicates {first}", path=str(path), line=line_no, field="id"))
                continue
            seen_ids[case["id"]] = f"{path}:{line_no}"
            folder = _unique(folder_slug(case["id"]), seen_folders)
            case["folders"] = [folder]
            files, supports = _notes(folder, facts, case.get("expected", {}).get("must_include", []))
            case["gold_supports"] = supports
            said = tuple(
                f"{path}:{line_no}: expected.mustInclude[{i}]: {s!r} is in no seedFact of case {case['id']!r}; "
                "the case runs, but no note is its gold support"
                for i, s in unmatched
            )
            out.append(ImportedCase(case, str(path), index, line=line_no, files=files, warnings=said))
    if problems:
        raise InputError(problems)
    return out


def _read(path: Path, problems: list[Problem]) -> list[tuple[int, Any]]:
    """(1-based line number, parsed JSON) of each non-blank line; unparsable lines are problems."""
    return list(jsonl_items(path, problems))


def _convert_line(
    item: Any, path: Path, line: int, options: ImportOptions
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[tuple[int, str]], list[Problem]]:
    """One fixture line -> (case or None, its facts, unmatched mustInclude (index, text), problems)."""

    def bad(field: str | None, message: str) -> Problem:
        return Problem(message, path=str(path), line=line, field=field)

    if not isinstance(item, dict):
        return None, [], [], [bad(None, f"expected a JSON object (one case per line), got {type(item).__name__}")]
    problems: list[Problem] = []

    raw_id = item.get("id")
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        raw_id = str(raw_id)
    if not isinstance(raw_id, str) or not raw_id.strip():
        problems.append(bad("id", f"expected a non-empty string, got {_short(raw_id)}"))
    query = item.get("query")
    if not isinstance(query, str) or not query.strip():
        problems.append(bad("query", f"expected a non-empty string, got {_short(query)}"))
    scenario = item.get("scenario")
    if scenario is not None and (not isinstance(scenario, str) or not scenario.strip()):
        problems.append(bad("scenario", f"expected a scenario name such as 'follow_up_recall', got {_short(scenario)}"))
    description = item.get("description")
    if description is not None and not isinstance(description, str):
        problems.append(bad("description", f"expected a string, got {_short(description)}"))
    own_tags = item.get("tags", [])
    if not isinstance(own_tags, list) or not all(isinstance(t, str) for t in own_tags):
        problems.append(bad("tags", f"expected a list of strings, got {_short(own_tags)}"))

    facts = _facts(item.get("seedFacts"), bad, problems)
    expected, given = _renamed(item.get("expected"), "expected", _EXPECTED, bad, problems, closed=True)
    for key, value in (expected or {}).items():
        if not isinstance(value, list) or not all(isinstance(s, str) and s.strip() for s in value):
            problems.append(bad(f"expected.{given[key]}", f"expected a list of non-empty strings, got {_short(value)}"))
    constraints, given = _renamed(item.get("constraints"), "constraints", _CONSTRAINTS, bad, problems, closed=False)
    for key in ("token_budget", "top_k"):
        value = (constraints or {}).get(key)
        if key in given and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(bad(f"constraints.{given[key]}", f"expected an integer >= 1, got {_short(value)}"))
    if problems:
        return None, [], [], problems

    case: dict[str, Any] = {"id": raw_id, "question": query, "answerable": True}
    if scenario is not None:
        case["scenario"] = scenario
    case["category"] = item.get("category", options.category)
    case["tags"] = list(dict.fromkeys(([scenario] if scenario else []) + own_tags + list(options.tags)))
    if description is not None:
        case["notes"] = description
    if expected is not None:
        case["expected"] = expected
    if constraints is not None:
        case["constraints"] = constraints
    for key, value in item.items():
        if key not in _KNOWN and key not in case:
            case[key] = value
    must_include = (expected or {}).get("must_include", [])
    unmatched = [(i, s) for i, s in enumerate(must_include) if not any(phrase_in(s, f["content"]) for f in facts)]
    return case, facts, unmatched, []


def _facts(raw: Any, bad: Any, problems: list[Problem]) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        problems.append(bad("seedFacts", f"expected a non-empty list of facts ({{content, factType, ...}}), got {_short(raw)}"))
        return []
    facts: list[dict[str, Any]] = []
    for j, fact in enumerate(raw):
        if not isinstance(fact, dict):
            problems.append(bad(f"seedFacts[{j}]", f"expected an object {{content, factType, ...}}, got {_short(fact)}"))
            continue
        content = fact.get("content")
        if not isinstance(content, str) or not content.strip():
            problems.append(bad(f"seedFacts[{j}].content", f"expected a non-empty string, got {_short(content)}"))
            continue
        for camel, snake in _FACT_RENAMES.items():
            if camel in fact and snake in fact:
                problems.append(bad(f"seedFacts[{j}].{snake}", f"given twice, as {camel} and {snake}; keep one"))
        facts.append(fact)
    return facts


def _renamed(
    raw: Any, name: str, renames: dict[str, str], bad: Any, problems: list[Problem], *, closed: bool
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(`raw` with seed 004's camelCase keys in snake_case or None when absent, new key -> key given)."""
    if raw is None:
        return None, {}
    if not isinstance(raw, dict):
        problems.append(bad(name, f"expected an object, got {_short(raw)}"))
        return None, {}
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    snake = set(renames.values())
    for key, value in raw.items():
        new = renames.get(key, key)
        if closed and new not in snake:
            problems.append(bad(f"{name}.{key}", f"unknown key; expected {', '.join(renames)}"))
        elif new in out:
            problems.append(bad(f"{name}.{key}", f"given twice, as {given[new]} and {key}; keep one"))
        else:
            out[new], given[new] = value, key
    return out, given


def _notes(folder: str, facts: list[dict[str, Any]], must_include: list[str]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The case's fact notes (rel_path -> text) and its gold supports."""
    width = max(2, len(str(len(facts))))
    paths = [f"{folder}/fact-{n:0{width}d}.md" for n in range(1, len(facts) + 1)]
    files = {p: fact_note(f) for p, f in zip(paths, facts)}
    wanted = [normalize_phrase(s) for s in must_include]
    supports = [
        {"rel_path": p, "heading_path": ""}
        for p, f in zip(paths, facts)
        if any(w in normalize_phrase(f["content"]) for w in wanted)
    ]
    return files, supports


def fact_note(fact: dict[str, Any]) -> str:
    """The note of one seed fact: YAML front matter (every field but `content`), a blank line,
    then `content` unchanged.

    Scalars are written as JSON scalars (valid YAML); lists and objects as a JSON-encoded
    string, so the front matter stays flat; NaN and infinities as YAML's `.nan` / `.inf`.
    """
    lines = ["---"]
    for key, value in fact.items():
        if key == "content":
            continue
        key = _FACT_RENAMES.get(key, key)
        lines.append(f"{key if _PLAIN_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)}: {_yaml_scalar(value)}")
    lines += ["---", "", ""]
    return "\n".join(lines) + fact["content"]


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if value is None or isinstance(value, (str, int, float, bool)):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(json.dumps(value, ensure_ascii=False), ensure_ascii=False)


def folder_slug(case_id: str) -> str:
    """A filesystem-safe folder name for a case id: lower case (two ids differing in case must
    not share a folder on a case-insensitive disk), runs of other characters as `-`."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", case_id.casefold()).strip("-.")[:_SLUG_MAX].strip("-.")
    return slug or "case"


def _unique(slug: str, taken: set[str]) -> str:
    name, n = slug, 1
    while name in taken:
        n += 1
        name = f"{slug}-{n}"
    taken.add(name)
    return name


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"

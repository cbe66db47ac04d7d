"""GNO's Evalite fixtures (seed 002) -> evalkit cases.

Two fixture shapes, told apart per item (each file is a JSON array):

- `queries.json`: `{id, query, collection?, language?, note?, relevantDocs: [docid],
  judgments: [{docid, relevance}]}`.
- `ask-cases.json`: `{question, expectedTopics: [str]}` (the `AskCase` of ask.eval.ts).

Mapping (docs/interop.md, "Coming from Evalite / GNO", has the table):

- `relevantDocs` is the recall set: each docid is a gold support. `judgments` is graded
  relevance: a judged docid in `relevantDocs` gets its judgment as `relevance`; a judged
  docid outside `relevantDocs` becomes a `graded_only` support (nDCG only). A docid in
  `relevantDocs` with no judgment gets relevance 0 when the item has `judgments` (seed
  002's ndcgAtK reads judgments only, so it counts for recall, not nDCG) and 1 when the
  item has no `judgments` key at all (binary relevance).
- A docid becomes `{"chunk_id": docid}` unless `--docid-map` maps it to a note
  (`rel_path` + `heading_path`, see `docids.py`); with a map, an unmapped docid is an
  error. GNO docids (`#a1b2c3`) are content hashes: no rule turns one into a path.
- `query`/`question` -> `question`; `id` -> `id` (else `<file stem>-<item number>`);
  `language` (or `expectedLang`) -> `language`; `note` -> `notes`; `collection` is kept
  and tagged `collection:<name>`; `expectedTopics` -> `expected_topics` (read by the
  answer-quality judge, `--answer-quality`); every case
  is `answerable: true` with `category` from the options unless the item has one.
  Other keys are kept as they are (unknown fields survive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem
from evalkit.interop.importers.base import ImportedCase, ImportOptions
from evalkit.jsonio import read_json

__all__ = ["convert", "convert_item"]

# Fixture keys this module maps; any other key is copied onto the case unchanged.
_QUERY_KEYS = frozenset({"id", "query", "collection", "language", "expectedLang", "note", "relevantDocs", "judgments", "tags", "category"})
_ASK_KEYS = frozenset({"id", "question", "expectedTopics", "language", "note", "tags", "category", "collection"})


def convert(paths: Sequence[Path], options: ImportOptions) -> list[ImportedCase]:
    """Every item of every file, in order.

    Raises:
        InputError: every problem of every file: `<file>: [<item>].<field>: <message>`.
    """
    out: list[ImportedCase] = []
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for path in paths:
        items = _read(path, problems)
        for i, item in enumerate(items):
            case, item_problems = convert_item(item, i, path, options)
            problems.extend(item_problems)
            if case is None:
                continue
            first = seen.get(case["id"])
            if first is not None:
                problems.append(Problem(f"id {case['id']!r} duplicates {first}", path=str(path), field=f"[{i}].id"))
            seen.setdefault(case["id"], f"{path}[{i}]")
            out.append(ImportedCase(case=case, path=str(path), index=i))
    if problems:
        raise InputError(problems)
    return out


def _read(path: Path, problems: list[Problem]) -> list[Any]:
    try:
        data = read_json(path)
    except InputError as e:  # unreadable, too large, not UTF-8, not JSON or nested too deeply
        problems.extend(e.problems)
        return []
    if not isinstance(data, list):
        problems.append(Problem(f"expected a JSON array of GNO items, got {type(data).__name__}", path=str(path)))
        return []
    return data


def convert_item(
    item: Any, index: int, path: Path, options: ImportOptions
) -> tuple[dict[str, Any] | None, list[Problem]]:
    """One fixture item -> (the case dict, or None when it cannot be built; its problems)."""
    where = str(path)

    def bad(field: str, message: str) -> Problem:
        return Problem(message, path=where, field=f"[{index}].{field}" if field else f"[{index}]")

    if not isinstance(item, dict):
        return None, [bad("", f"expected a JSON object, got {type(item).__name__}")]
    if "query" in item:
        shape, text_key, known = "query", "query", _QUERY_KEYS
    elif "question" in item:
        shape, text_key, known = "ask", "question", _ASK_KEYS
    else:
        return None, [bad("", "expected a `query` (queries.json) or a `question` (ask-cases.json) field")]

    problems: list[Problem] = []
    text = item[text_key]
    if not isinstance(text, str) or not text.strip():
        problems.append(bad(text_key, f"expected a non-empty string, got {_short(text)}"))

    raw_id = item.get("id")
    if raw_id is None:
        case_id = f"{path.stem}-{index + 1}"
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool) and str(raw_id).strip():
        case_id = str(raw_id)
    else:
        problems.append(bad("id", f"expected a non-empty string, got {_short(raw_id)}"))
        case_id = f"{path.stem}-{index + 1}"

    case: dict[str, Any] = {"id": case_id, "question": text, "answerable": True}
    category = item.get("category", options.category)
    case["category"] = category
    language = item.get("language", item.get("expectedLang"))
    if language is not None:
        if isinstance(language, str) and language.strip():
            case["language"] = language
        else:
            problems.append(bad("language" if "language" in item else "expectedLang", f"expected a language code, got {_short(language)}"))

    tags: list[str] = []
    own = item.get("tags", [])
    if not isinstance(own, list) or not all(isinstance(t, str) for t in own):
        problems.append(bad("tags", f"expected a list of strings, got {_short(own)}"))
    else:
        tags.extend(own)
    collection = item.get("collection")
    if collection is not None:
        if isinstance(collection, str) and collection.strip():
            tags.append(f"collection:{collection}")
        else:
            problems.append(bad("collection", f"expected a string, got {_short(collection)}"))
    tags.extend(options.tags)
    case["tags"] = list(dict.fromkeys(tags))

    if shape == "query":
        supports, support_problems = _supports(item, bad, options)
        problems.extend(support_problems)
        case["gold_supports"] = supports
    else:
        topics = item.get("expectedTopics", [])
        if not isinstance(topics, list) or not all(isinstance(t, str) and t.strip() for t in topics):
            problems.append(bad("expectedTopics", f"expected a list of non-empty strings, got {_short(topics)}"))
        else:
            case["expected_topics"] = list(topics)
        case["gold_supports"] = []

    note = item.get("note")
    if note is not None:
        if isinstance(note, str):
            case["notes"] = note
        else:
            problems.append(bad("note", f"expected a string, got {_short(note)}"))
    if collection is not None:
        case["collection"] = collection
    for key, value in item.items():
        if key not in known and key not in case:
            case[key] = value
    return (None if problems else case), problems


def _supports(item: dict[str, Any], bad: Any, options: ImportOptions) -> tuple[list[dict[str, Any]], list[Problem]]:
    """relevantDocs (recall set, relevance from judgments) then judged-only docids (graded_only)."""
    problems: list[Problem] = []
    relevant = item.get("relevantDocs", [])
    if not isinstance(relevant, list):
        return [], [bad("relevantDocs", f"expected a list of docids, got {_short(relevant)}")]
    has_judgments = "judgments" in item
    judgments = item.get("judgments", [])
    if not isinstance(judgments, list):
        return [], [bad("judgments", f"expected a list of {{docid, relevance}}, got {_short(judgments)}")]

    order: list[str] = []
    for j, docid in enumerate(relevant):
        if not isinstance(docid, str) or not docid.strip():
            problems.append(bad(f"relevantDocs[{j}]", f"expected a docid string, got {_short(docid)}"))
        elif docid in order:
            # Seed 002's Recall@K would count it twice in its denominator: say so rather than guess.
            problems.append(bad(f"relevantDocs[{j}]", f"docid {docid!r} is listed twice"))
        else:
            order.append(docid)

    grades: dict[str, float] = {}
    for j, judgment in enumerate(judgments):
        field = f"judgments[{j}]"
        if not isinstance(judgment, dict):
            problems.append(bad(field, f"expected an object {{docid, relevance}}, got {_short(judgment)}"))
            continue
        docid, rel = judgment.get("docid"), judgment.get("relevance")
        if not isinstance(docid, str) or not docid.strip():
            problems.append(bad(f"{field}.docid", f"expected a docid string, got {_short(docid)}"))
            continue
        if isinstance(rel, bool) or not isinstance(rel, (int, float)) or not math.isfinite(rel) or rel < 0:
            problems.append(bad(f"{field}.relevance", f"expected a number >= 0, got {_short(rel)}"))
            continue
        if docid in grades:
            # Seed 002's ndcgAtK keeps the last grade for DCG but sums both in IDCG: ambiguous.
            problems.append(bad(f"{field}.docid", f"docid {docid!r} is judged twice"))
            continue
        grades[docid] = rel

    supports: list[dict[str, Any]] = []
    placed = set(order)  # docids already given a support
    for docid in order:
        rel = grades.get(docid, 0 if has_judgments else 1)
        supports.append(_support(docid, rel, False, options, problems, bad, f"relevantDocs[{relevant.index(docid)}]"))
    fields = [f"relevantDocs[{relevant.index(d)}]" for d in order]
    for j, judgment in enumerate(judgments):
        docid = judgment.get("docid") if isinstance(judgment, dict) else None
        if docid in grades and docid not in placed:
            placed.add(docid)  # once, at its first judgment
            fields.append(f"judgments[{j}].docid")
            supports.append(_support(docid, grades[docid], True, options, problems, bad, fields[-1]))
    # Two docids mapped to one location would be one gold support counted twice.
    located: dict[tuple, str] = {}
    for field, s in zip(fields, supports):
        key = tuple(sorted((k, str(v)) for k, v in s.items() if k not in ("relevance", "graded_only")))
        if key in located:
            problems.append(bad(field, f"maps to the same location as {located[key]} ({dict(key)}); give each docid its own note"))
        located.setdefault(key, field)
    return supports, problems


def _support(
    docid: str, relevance: float, graded_only: bool, options: ImportOptions, problems: list[Problem], bad: Any, field: str
) -> dict[str, Any]:
    if options.docid_map is None:
        location: dict[str, Any] = {"chunk_id": docid}
    else:
        mapped = options.docid_map.get(docid)
        if mapped is None:
            problems.append(bad(field, f"docid {docid!r} is not in the --docid-map file"))
            location = {"chunk_id": docid}
        else:
            location = dict(mapped)
    support = {**location, "relevance": relevance}
    if graded_only:
        support["graded_only"] = True
    return support


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""TREC topics + qrels -> evalkit cases (`evalkit import --format trec --topics T --qrels Q`).

`convert(paths, options)` reads `paths[0]` as the topics file and every further path as a
qrels file (the CLI passes `--topics` then each `--qrels`).

Topics, told apart by their first non-blank text:

- JSONL (`{` first): BEIR's queries.jsonl, `{"_id": ..., "text": ...}` per line (`id` /
  `query` are accepted too).
- SGML (`<top>` first): classic TREC topics, `<top> <num> Number: 401 <title> ... </top>`;
  the question is the title (the description when there is no title).
- otherwise TSV: `qid<TAB>text` per line (what `evalkit export --format trec` writes as
  topics.tsv); a first line `qid<TAB>...` or `query_id<TAB>...` is a header.

Qrels: `qid 0 docid rel` (whitespace-separated; BEIR's 3-column `query-id corpus-id score`
TSV, with its header, is accepted too; a first line is a header only when it names its
columns: a malformed first line is a problem on line 1). A line starting with `#` is a comment
(trec_eval 10.0 reads them so; `#` inside a line, as in a docid `CR#93`, is data). A judgment with
rel <= 0 is dropped (not relevant); a docid judged twice keeps its highest grade. Each judged
docid becomes a gold support with `relevance` = rel (graded, for nDCG): `{"chunk_id": docid}`,
or the location `--docid-map` gives it (`docids.py`; `evalkit export` writes one, docids.tsv). A
docid the map does not hold stays a chunk_id support, with a warning. With a relevance level
L (`--relevance-level`, trec_eval's `-l`), a grade >= L is relevant and a grade in (0, L) a
`graded_only` support: nDCG counts its gain, as trec_eval's ndcg does, and no other metric
does (`supports_of`).

A topic without a relevant judgment is kept as an answerable case with no gold supports
(evalkit counts it as unlabeled: no retrieval metric, still run), with one warning; a
judged qid that is not a topic is skipped, with one warning. Cases are in topics order,
`answerable: true`, `category` and tags from the options.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit.errors import MAX_PROBLEMS_SHOWN, BadConfig, InputError, Problem
from evalkit.interop.importers.base import ImportedCase, ImportOptions, jsonl_items
from evalkit.jsonio import read_text

__all__ = ["check_relevance_level", "convert", "read_qrels", "read_topics", "supports_of"]

_SHOWN = 10


def convert(paths: Sequence[Path], options: ImportOptions) -> list[ImportedCase]:
    """The topics of `paths[0]` with the judgments of `paths[1:]`, as cases.

    Raises:
        InputError: no qrels file; every unreadable or malformed line (file, line).
    """
    problems: list[Problem] = []
    if len(paths) < 2:
        raise InputError(Problem("--format trec needs a topics file and a qrels file (--topics T --qrels Q)", field="--qrels"))
    topics = read_topics(paths[0], problems)
    qrels: dict[str, dict[str, float]] = {}
    for p in paths[1:]:
        for qid, docs in read_qrels(p, problems).items():
            mine = qrels.setdefault(qid, {})
            for d, r in docs.items():
                mine[d] = max(mine.get(d, r), r)
    if problems:
        raise InputError(problems)
    mapping = options.docid_map
    level = check_relevance_level(options.relevance_level)
    out: list[ImportedCase] = []
    unmapped: list[str] = []
    for i, (qid, text, line) in enumerate(topics):
        supports = supports_of(qrels.get(qid, {}), level, mapping, unmapped)
        case = {
            "id": qid, "question": text, "answerable": True, "category": options.category,
            "tags": list(dict.fromkeys(options.tags)), "gold_supports": supports,
        }
        out.append(ImportedCase(case=case, path=str(paths[0]), index=i, line=line))
    warnings: list[str] = []
    no_supports = [c.case["id"] for c in out if not c.case["gold_supports"]]
    if no_supports:
        warnings.append(f"{len(no_supports)} topic(s) have no relevant judgment ({_some(no_supports)}): kept as "
                        "answerable cases without gold supports (unlabeled: no retrieval metric)")
    known = {c.case["id"] for c in out}
    orphans = sorted(q for q in qrels if q not in known)
    if orphans:
        warnings.append(f"{len(orphans)} judged qid(s) are not in the topics ({_some(orphans)}): skipped")
    if unmapped:
        warnings.append(f"{len(unmapped)} docid(s) are not in --docid-map ({_some(sorted(set(unmapped)))}): "
                        "kept as chunk_id supports")
    if out and warnings:
        first = out[0]
        out[0] = ImportedCase(case=first.case, path=first.path, index=first.index, line=first.line, warnings=tuple(warnings))
    return out


def check_relevance_level(level: float | None) -> float | None:
    """`level` when it is a usable relevance level (a finite number > 0), else BadConfig: a
    level <= 0 would make unjudged-as-0 documents relevant, which a gold support cannot say."""
    if level is not None and (not math.isfinite(level) or level <= 0):
        raise BadConfig(Problem(f"--relevance-level must be a number > 0, got {level!r}", field="--relevance-level"))
    return level


def supports_of(
    docs: Mapping[str, float],
    level: float | None = None,
    mapping: Mapping[str, Mapping[str, Any]] | None = None,
    unmapped: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The gold supports of one query's judgments (docid -> grade), in their order: each grade
    > 0 a support with `relevance` = the grade; below `level` (when given) `graded_only`. A docid
    is `{"chunk_id": docid}`, or its location in `mapping` (a docid it lacks is appended to
    `unmapped` and stays a chunk_id)."""
    out: list[dict[str, Any]] = []
    for docid, rel in docs.items():
        if rel <= 0:
            continue
        loc = mapping.get(docid) if mapping is not None else None
        if mapping is not None and loc is None and unmapped is not None:
            unmapped.append(docid)
        support = dict(loc) if loc is not None else {"chunk_id": docid}
        support["relevance"] = float(rel)
        if level is not None and rel < level:
            support["graded_only"] = True
        out.append(support)
    return out


def _some(ids: Sequence[str]) -> str:
    return ", ".join(ids[:_SHOWN]) + (f" … and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def _text(path: Path, problems: list[Problem]) -> str | None:
    try:
        return read_text(path)  # a byte that is not UTF-8: said on its own line
    except InputError as e:
        problems.extend(e.problems)
    return None


def read_topics(path: Path, problems: list[Problem]) -> list[tuple[str, str, int | None]]:
    """[(qid, question, line)] in file order; problems are appended to `problems`."""
    text = _text(path, problems)
    if text is None:
        return []
    head = text.lstrip()
    if head.startswith("{"):
        topics = _jsonl_topics(path, problems)
    elif head.lower().startswith("<top>"):
        topics = _sgml_topics(text, str(path), problems)
    else:
        topics = _tsv_topics(text, str(path), problems)
    seen: dict[str, int | None] = {}
    for qid, _, line in topics:
        if qid in seen:
            problems.append(Problem(f"qid {qid!r} is a topic twice (first at line {seen[qid]})", path=str(path), line=line))
        seen.setdefault(qid, line)
    return topics


def _jsonl_topics(path: Path, problems: list[Problem]) -> list[tuple[str, str, int | None]]:
    out = []
    where = str(path)
    for lineno, item in jsonl_items(path, problems):
        if not isinstance(item, dict):
            problems.append(Problem(f"expected a JSON object, got {type(item).__name__}", path=where, line=lineno))
            continue
        qid = item.get("_id", item.get("id"))
        question = item.get("text", item.get("query"))
        if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
            problems.append(Problem("expected a non-empty `_id`", path=where, line=lineno, field="_id"))
            continue
        if not isinstance(question, str) or not question.strip():
            problems.append(Problem("expected a non-empty `text`", path=where, line=lineno, field="text"))
            continue
        out.append((str(qid).strip(), question.strip(), lineno))
    return out


def _tsv_topics(text: str, where: str, problems: list[Problem]) -> list[tuple[str, str, int | None]]:
    out = []
    first = True
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        qid, tab, question = line.partition("\t")
        if first and qid.strip().casefold() in ("qid", "query_id", "query-id", "id"):
            first = False
            continue
        first = False
        if not tab or not qid.strip() or not question.strip():
            problems.append(Problem("expected qid<TAB>text", path=where, line=lineno))
            continue
        out.append((qid.strip(), question.strip(), lineno))
    return out


# The SGML topic parser is one scan, linear in the file (issue 38 item 11): `_TAG` finds every
# <top> and </top> in one pass (a fixed string, no backtracking), and `_FIELD` reads only the
# text between a <top> and its </top>, each character once. `<top>(.*?)</top>` searched the
# rest of the file again for every <top> without a </top>: 500 KB of them took over a minute.
_TAG = re.compile(r"<(/?)top>", re.I)
_FIELD = re.compile(r"<(num|title|desc|narr)>(.*?)(?=<(?:num|title|desc|narr)>|$)", re.S | re.I)
_LABEL = re.compile(r"^\s*(number|description|narrative|topic)\s*:\s*", re.I)


def _sgml_topics(text: str, where: str, problems: list[Problem]) -> list[tuple[str, str, int | None]]:
    """Each <top> ... </top>, in order. A <top> that another <top> or the end of the file
    reaches before its </top>, and a </top> with no <top> open, are problems at their line
    (the old search joined such a <top> to the next topic, or dropped it unsaid); past
    MAX_PROBLEMS_SHOWN of them, one more problem counts the rest."""
    out: list[tuple[str, str, int | None]] = []
    line, counted = 1, 0  # the line at offset `counted`: line numbers found moving forward only

    def line_at(pos: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, pos)
        counted = pos
        return line

    misplaced = 0

    def shown() -> bool:
        """Count one tag out of place; whether it is said (100,000 problems take seconds to
        make, and say nothing the first ones do not)."""
        nonlocal misplaced
        misplaced += 1
        return misplaced <= MAX_PROBLEMS_SHOWN

    open_at: int | None = None  # where the open <top>'s body starts
    open_line = 0
    for tag in _TAG.finditer(text):
        if not tag.group(1):  # <top>
            if open_at is not None and shown():
                problems.append(Problem(f"a <top> without </top>: another <top> opens at line {line_at(tag.start())}",
                                        path=where, line=open_line))
            open_at, open_line = tag.end(), line_at(tag.start())
            continue
        if open_at is None:
            if shown():
                problems.append(Problem("a </top> without a <top> before it", path=where, line=line_at(tag.start())))
            continue
        body = text[open_at : tag.start()]
        open_at = None
        fields = {name.lower(): _LABEL.sub("", " ".join(value.split())).strip() for name, value in _FIELD.findall(body)}
        qid, question = fields.get("num", ""), fields.get("title") or fields.get("desc", "")
        if not qid or not question:
            problems.append(Problem("a <top> without <num> and <title> (or <desc>)", path=where, line=open_line))
            continue
        out.append((qid, question, open_line))
    if open_at is not None and shown():
        problems.append(Problem("a <top> without </top> before the end of the file", path=where, line=open_line))
    if misplaced > MAX_PROBLEMS_SHOWN:
        problems.append(Problem(f"… and {misplaced - MAX_PROBLEMS_SHOWN} more <top> or </top> out of place", path=where))
    if not out and not problems:
        problems.append(Problem("no <top> topic found", path=where))
    return out


# A qrels header names its columns: these words in the query or the relevance column.
_HEADER_QID = frozenset({"qid", "query-id", "query_id", "queryid", "query", "topic", "topic_id"})
_HEADER_REL = frozenset({"rel", "relevance", "score", "label", "judgment", "judgement", "grade"})


def read_qrels(path: Path, problems: list[Problem]) -> dict[str, dict[str, float]]:
    """qid -> docid -> grade (every grade, also <= 0); problems are appended to `problems`."""
    text = _text(path, problems)
    out: dict[str, dict[str, float]] = {}
    if text is None:
        return out
    first = True
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.startswith("#"):
            continue  # a comment line, as trec_eval 10.0 reads qrels
        cols = line.split()
        if not cols:
            continue
        if len(cols) == 4:
            qid, _, docid, raw = cols
        elif len(cols) == 3:
            qid, docid, raw = cols
        else:
            problems.append(Problem(f"expected `qid 0 docid rel`, got {len(cols)} columns", path=str(path), line=lineno))
            continue
        try:
            rel = float(raw)
        except ValueError:
            if first and (raw.lower() in _HEADER_REL or qid.lower() in _HEADER_QID):  # BEIR: query-id corpus-id score
                first = False
                continue
            # a malformed first line is a problem like any other, never taken for a header
            problems.append(Problem(f"relevance {raw!r} is not a number", path=str(path), line=lineno))
            first = False
            continue
        if not math.isfinite(rel):
            problems.append(Problem(f"relevance {raw!r} is not a finite number", path=str(path), line=lineno))
            first = False
            continue
        first = False
        docs = out.setdefault(qid, {})
        docs[docid] = max(docs.get(docid, rel), rel)
    return out

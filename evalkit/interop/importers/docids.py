"""The `--docid-map` file: another harness's document ids -> evalkit gold-support locations.

Two forms, told apart by the first non-blank character:

- JSON, an object: `{"#a1b2c3": "contracts/termination.md", ...}` (the whole note), or
  `{"#a1b2c3": {"rel_path": "contracts/termination.md", "heading_path": "# Termination"}}`.
  An object value may carry `rel_path`, `heading_path`, `start_line`/`end_line` or
  `chunk_id` (the gold-support location fields) and nothing else.
- TSV: `docid<TAB>rel_path[<TAB>heading_path]` per line; blank lines are skipped and so
  is a first line starting `docid<TAB>` (a header). There are no comment lines: docids
  such as `#a1b2c3` start with `#`.

A mapped docid without a heading path targets the whole note (`heading_path: ""`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.jsonio import loads, read_text

__all__ = ["LOCATION_FIELDS", "load_docid_map"]

LOCATION_FIELDS = ("rel_path", "heading_path", "start_line", "end_line", "chunk_id")


def load_docid_map(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a docid map (JSON or TSV, see the module docstring).

    Returns:
        docid -> gold-support location fields, e.g. {"rel_path": "a.md", "heading_path": ""}.

    Raises:
        BadConfig: the file cannot be read, or every bad entry (file, line or docid, field).
    """
    path = Path(path)
    text = read_text(path, what="the docid map", field="--docid-map", error=BadConfig)
    if text.lstrip().startswith("{"):
        return _from_json(text, str(path))
    return _from_tsv(text, str(path))


def _from_json(text: str, where: str) -> dict[str, dict[str, Any]]:
    data = loads(text.encode("utf-8"), path=where, field="--docid-map", error=BadConfig)  # exact line, bounded depth
    if not isinstance(data, dict):
        raise BadConfig(Problem("expected a JSON object of docid -> rel_path", path=where))
    out: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for docid, value in data.items():
        if isinstance(value, str):
            value = {"rel_path": value}
        if not isinstance(value, dict):
            problems.append(Problem(f"expected a rel_path string or an object, got {type(value).__name__}", path=where, field=docid))
            continue
        unknown = sorted(set(value) - set(LOCATION_FIELDS))
        if unknown:
            problems.append(
                Problem(f"unknown keys {unknown}; expected some of {', '.join(LOCATION_FIELDS)}", path=where, field=docid)
            )
            continue
        entry, problem = _entry(value)
        if problem:
            problems.append(Problem(problem, path=where, field=docid))
            continue
        out[docid] = entry
    if problems:
        raise BadConfig(problems)
    return out


def _from_tsv(text: str, where: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    first = True
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split("\t")]
        if first and cols[0].casefold() == "docid":
            first = False
            continue
        first = False
        if len(cols) not in (2, 3):
            problems.append(
                Problem(f"expected docid<TAB>rel_path[<TAB>heading_path], got {len(cols)} columns", path=where, line=lineno)
            )
            continue
        docid = cols[0]
        if docid in out:
            problems.append(Problem(f"docid {docid!r} is mapped twice", path=where, line=lineno))
            continue
        entry, problem = _entry({"rel_path": cols[1], "heading_path": cols[2] if len(cols) == 3 else ""})
        if problem or not docid:
            problems.append(Problem(problem or "empty docid", path=where, line=lineno))
            continue
        out[docid] = entry
    if problems:
        raise BadConfig(problems)
    return out


def _entry(value: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the location fields, None) or ({}, what is wrong)."""
    rel_path, chunk_id = value.get("rel_path"), value.get("chunk_id")
    if rel_path is not None and (not isinstance(rel_path, str) or not rel_path.strip()):
        return {}, "rel_path must be a non-empty string"
    if chunk_id is not None and not isinstance(chunk_id, (str, int)):
        return {}, "chunk_id must be a string"
    if not rel_path and chunk_id is None:
        return {}, "needs a rel_path (or a chunk_id)"
    heading = value.get("heading_path")
    if heading is not None and not isinstance(heading, str):
        return {}, "heading_path must be a string"
    entry = {k: value[k] for k in LOCATION_FIELDS if value.get(k) is not None}
    if rel_path and "heading_path" not in entry and "start_line" not in entry:
        entry["heading_path"] = ""  # the whole note
    return entry, None

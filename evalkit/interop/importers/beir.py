"""A BEIR dataset folder -> a vault of notes (one per document) + an eval set (`--format beir`).

A BEIR folder holds `corpus.jsonl` (`{"_id", "title", "text"}` per line), `queries.jsonl`
(`{"_id", "text"}`) and `qrels/<split>.tsv` (header `query-id corpus-id score`, then one
tab-separated judgment per line). `import_beir` turns it into:

- a vault folder, flat: one note per document, `note_path(_id)` = a lower-case slug of the
  id plus `.md`, with `-<8 hex of sha256(_id)>` before `.md` whenever the slug is not the
  id itself (ids with `/`, upper case, spaces...), so the path is a pure function of the id
  (no corpus needed to map a run back to BEIR ids) and two ids never share a file, even on
  a case-insensitive disk. The note is `# <title>` (whitespace collapsed), a blank line,
  then `text`; without a title, just `text`. Flat, not sharded into subfolders: ext4, APFS
  and NTFS index large folders, and a fixed path per id is worth more than a shorter `ls`.
- an eval set of the split's queries that have at least one judgment with score > 0, in
  queries.jsonl order: `id` = the query `_id`, `question` = its `text`, one whole-note gold
  support (`heading_path: ""`) per judged document, `relevance` = the qrels score, `doc_id`
  = the BEIR id; judgments with score <= 0 are dropped (BEIR's own evaluation ignores them).

Streaming: the corpus is read line by line and each note written as it is read, into a
temporary folder beside the vault that is renamed into place only when the eval set has
been written and validated; only the qrels, the split's queries and the set of document
ids are held in memory. Problems in the input (a missing file, a line that is not JSON,
a document or query without `_id`, a duplicate id, a malformed qrels line) are errors,
each named by file and line, and nothing is written. A judgment naming a document not in
the corpus or a query not in queries.jsonl is a warning: that judgment is dropped (and a
query left without any judgment is not imported), since published BEIR files do have a few.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, InputError, Problem
from evalkit.interop.importers.base import ImportedCase, ImportOptions, jsonl_items
from evalkit.interop.importers.output import check_replaceable, write_eval_set, write_marker
from evalkit.jsonio import iter_lines
from evalkit.store.atomic import staged_dir

__all__ = ["BeirImport", "convert", "import_beir", "note_path", "note_text"]

_SLUG_MAX = 80
_MAX_PROBLEMS = 200  # per import: a wholly broken corpus must not fill memory with problems


@dataclass(frozen=True)
class BeirImport:
    """What `import_beir` wrote.

    Attributes:
        cases: the eval-set cases (one per query of the split with a judgment).
        n_docs: notes written to the vault.
        n_judgments: gold supports over all cases.
        skipped_queries: queries of queries.jsonl without a judgment (score > 0) in the split.
        warnings: judgments dropped (unknown document or query, duplicates), one line each.
    """

    cases: list[ImportedCase]
    n_docs: int
    n_judgments: int
    skipped_queries: int
    warnings: tuple[str, ...]


def note_path(doc_id: str) -> str:
    """The vault-relative note path of BEIR document `doc_id` (see the module docstring)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", doc_id.casefold()).strip("-.")[:_SLUG_MAX].strip("-.")
    if slug == doc_id:
        return f"{slug}.md"
    digest = hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:8]
    return f"{slug}-{digest}.md" if slug else f"doc-{digest}.md"


def note_text(title: str | None, text: str) -> str:
    """The note of one document: `# <title>`, a blank line, the text; the text alone without a title."""
    heading = " ".join((title or "").split())
    if not heading:
        return text if text.endswith("\n") or not text else text + "\n"
    return f"# {heading}\n\n{text}" + ("" if text.endswith("\n") else "\n")


def convert(paths: Sequence[Path], options: ImportOptions) -> list[ImportedCase]:
    """Not a plain converter: BEIR writes a vault as it reads the corpus; use `import_beir`."""
    raise BadConfig(Problem(
        "--format beir writes a vault while it reads the corpus: use evalkit.interop.importers.beir.import_beir "
        "(CLI: evalkit import --format beir DIR --split test --vault OUT)",
        field="--format",
    ))


def import_beir(
    folder: str | Path,
    *,
    vault_out: str | Path,
    output: str | Path,
    split: str = "test",
    force: bool = False,
    options: ImportOptions | None = None,
) -> BeirImport:
    """Import the BEIR dataset in `folder`: notes under `vault_out`, the split's queries to `output`.

    Args:
        folder: the BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
        vault_out: the vault folder to write (new or empty; with `force`, one an earlier
            import wrote, recognised by its `.evalkit-import.json`).
        output: the eval set (JSONL) to write.
        split: the qrels file to use, `qrels/<split>.tsv`.
        force: overwrite `output` and replace an imported `vault_out`.
        options: category and extra tags of the cases (`docid_map` is not used).

    Returns:
        BeirImport: counts and warnings.

    Raises:
        InputError: every problem of the input files (file:line); nothing is written.
        BadConfig: `vault_out` or `output` cannot be written (see `_check_targets`).
        BadEvalSet: a case evalkit's loader rejects (said against its queries.jsonl line).
    """
    options = options or ImportOptions()
    folder = Path(folder)
    vault_out, output = Path(vault_out), Path(output)
    corpus, queries, qrels_path = folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv"
    _check_inputs(folder, corpus, queries, qrels_path, split)
    _check_targets(vault_out, output, force)

    problems: list[Problem] = []
    warnings: list[str] = []
    qrels = _read_qrels(qrels_path, problems, warnings)
    wanted, skipped = _read_queries(queries, set(qrels), problems)
    if problems:
        raise InputError(problems)

    # The notes are built out of sight and renamed into place whole, after the eval set is
    # written; with force, an earlier import's folder (_check_targets vouched for it) goes.
    with staged_dir(vault_out, replace=force) as tmp:
        doc_ids = _write_notes(corpus, tmp, problems)
        if problems:
            raise InputError(problems)
        cases: list[ImportedCase] = []
        n_judgments = 0
        for qid, judged in qrels.items():
            if qid not in wanted:
                warnings.append(f"{qrels_path}: query {qid!r} is judged but not in {queries.name}; its judgments are dropped")
        tags = list(dict.fromkeys(["beir", f"beir:{folder.absolute().name}", *options.tags]))
        for qid, (line, text) in wanted.items():
            supports = []
            for doc_id, (score, qline) in qrels[qid].items():
                if doc_id not in doc_ids:
                    warnings.append(f"{qrels_path}:{qline}: document {doc_id!r} is not in {corpus.name}; judgment dropped")
                    continue
                supports.append({"rel_path": note_path(doc_id), "heading_path": "", "relevance": score, "doc_id": doc_id})
            if not supports:
                warnings.append(f"{queries}:{line}: query {qid!r} has no judged document in the corpus; not imported")
                continue
            n_judgments += len(supports)
            case = {
                "id": qid,
                "question": text,
                "answerable": True,
                "category": options.category,
                "tags": tags,
                "gold_supports": supports,
            }
            cases.append(ImportedCase(case, str(queries), len(cases), line=line))
        write_eval_set(cases, output, force=force)
        write_marker(tmp, {
            "written_by": "evalkit import --format beir",
            "sources": [str(folder)],
            "split": split,
            "cases": len(cases),
            "notes": len(doc_ids),
        })
    return BeirImport(cases, len(doc_ids), n_judgments, skipped, tuple(warnings))


def _check_inputs(folder: Path, corpus: Path, queries: Path, qrels: Path, split: str) -> None:
    if not folder.is_dir():
        raise InputError(Problem("BEIR folder not found (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)", path=str(folder)))
    problems = [Problem("not found", path=str(p)) for p in (corpus, queries) if not p.is_file()]
    if not qrels.is_file():
        splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        have = f"; splits here: {', '.join(splits)}" if splits else ""
        problems.append(Problem(f"not found (split {split!r}{have})", path=str(qrels), field="--split"))
    if problems:
        raise InputError(problems)


def _check_targets(vault_out: Path, output: Path, force: bool) -> None:
    """Refuse, before reading anything, a vault folder or eval set that cannot be written."""
    if Path(os.path.abspath(output)).is_relative_to(os.path.abspath(vault_out)):
        raise BadConfig(Problem(
            f"the eval set {str(output)!r} would be inside the vault folder; write it elsewhere",
            path=str(vault_out), field="--vault",
        ))
    if output.exists() and not force:
        raise BadConfig(Problem("already exists; pass --force to overwrite it", path=str(output), field="--output"))
    if vault_out.exists() and not vault_out.is_dir():
        raise BadConfig(Problem("exists and is not a folder", path=str(vault_out), field="--vault"))
    if vault_out.is_dir() and any(vault_out.iterdir()):
        if not force:
            raise BadConfig(Problem("is a non-empty folder; pass --force to replace it", path=str(vault_out), field="--vault"))
        check_replaceable(vault_out, "--vault")


def _jsonl(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line, object) of each non-blank line, read one line at a time; bad lines are problems."""
    for n, item in jsonl_items(path, problems, _add):
        if not isinstance(item, dict):
            _add(problems, Problem(f"expected a JSON object, got {type(item).__name__}", path=str(path), line=n))
            continue
        yield n, item


def _add(problems: list[Problem], problem: Problem) -> None:
    if len(problems) < _MAX_PROBLEMS:
        problems.append(problem)
    elif len(problems) == _MAX_PROBLEMS:
        problems.append(Problem(f"more than {_MAX_PROBLEMS} problems; stopped listing them", path=problem.path))


def _id(item: dict[str, Any], path: Path, line: int, problems: list[Problem]) -> str | None:
    raw = item.get("_id")
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str) or not raw.strip():
        _add(problems, Problem(f"expected a non-empty string, got {raw!r:.60}", path=str(path), line=line, field="_id"))
        return None
    return raw


def _read_qrels(path: Path, problems: list[Problem], warnings: list[str]) -> dict[str, dict[str, tuple[float, int]]]:
    """query id -> {doc id -> (score, line)} for the judgments with score > 0, in file order."""
    qrels: dict[str, dict[str, tuple[float, int]]] = {}
    # bytes, decoded line by line: a bad byte is a problem on its own line, not a crash
    for n, line in iter_lines(path, on_problem=lambda p: _add(problems, p)):
        if not line.strip():
            continue
        fields = line.split("\t")
        if n == 1 and fields[:2] == ["query-id", "corpus-id"]:
            continue
        if len(fields) != 3 or not fields[0].strip() or not fields[1].strip():
            _add(problems, Problem(
                f"expected 3 tab-separated fields (query-id, corpus-id, score), got {len(fields)}",
                path=str(path), line=n,
            ))
            continue
        qid, doc_id, raw_score = (s.strip() for s in fields)
        try:
            score = float(raw_score)
        except ValueError:
            _add(problems, Problem(f"score {raw_score!r} is not a number", path=str(path), line=n))
            continue
        if not math.isfinite(score):  # said here, not later against the query it would label
            _add(problems, Problem(f"score {raw_score!r} is not a finite number", path=str(path), line=n))
            continue
        if score <= 0:
            continue
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            warnings.append(f"{path}:{n}: query {qid!r} judges {doc_id!r} again (line {judged[doc_id][1]} kept)")
            continue
        judged[doc_id] = (int(score) if score.is_integer() else score, n)
    return qrels


def _read_queries(path: Path, judged: set[str], problems: list[Problem]) -> tuple[dict[str, tuple[int, str]], int]:
    """(query id -> (line, text) for the judged queries, count of the other queries)."""
    wanted: dict[str, tuple[int, str]] = {}
    seen: dict[str, int] = {}
    skipped = 0
    for n, item in _jsonl(path, problems):
        qid = _id(item, path, n, problems)
        if qid is None:
            continue
        if qid in seen:
            _add(problems, Problem(f"query id {qid!r} duplicates line {seen[qid]}", path=str(path), line=n, field="_id"))
            continue
        seen[qid] = n
        if qid not in judged:
            skipped += 1
            continue
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            _add(problems, Problem(f"expected a non-empty string, got {text!r:.60}", path=str(path), line=n, field="text"))
            continue
        wanted[qid] = (n, text)
    return wanted, skipped


def _write_notes(corpus: Path, tmp: Path, problems: list[Problem]) -> set[str]:
    """Write one note per corpus line under `tmp`, as the lines are read; the set of doc ids."""
    doc_ids: set[str] = set()
    first_line: dict[str, int] = {}  # note path -> line, to name a duplicate
    for n, item in _jsonl(corpus, problems):
        doc_id = _id(item, corpus, n, problems)
        if doc_id is None:
            continue
        title, text = item.get("title"), item.get("text")
        if title is not None and not isinstance(title, str):
            _add(problems, Problem(f"expected a string, got {title!r:.60}", path=str(corpus), line=n, field="title"))
            continue
        if not isinstance(text, str):
            _add(problems, Problem(f"expected a string, got {text!r:.60}", path=str(corpus), line=n, field="text"))
            continue
        rel = note_path(doc_id)
        if rel in first_line:
            _add(problems, Problem(f"document id {doc_id!r} duplicates line {first_line[rel]}", path=str(corpus), line=n, field="_id"))
            continue
        first_line[rel] = n
        doc_ids.add(doc_id)
        if problems:
            continue  # keep reading to report every problem, but write nothing more
        with open(tmp / rel, "wb") as f:
            f.write(note_text(title, text).encode("utf-8"))
    return doc_ids

"""What every importer shares: the options it is given, the case it returns, the JSONL reader.

The format modules (gno, hindsight, trec, beir) import these from here, never from the
package: the package loads the format modules (`get_converter`), so a format module that
imported it back would close a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import Problem
from evalkit.jsonio import iter_jsonl

__all__ = ["Converter", "ImportOptions", "ImportedCase", "jsonl_items"]


@dataclass(frozen=True)
class ImportOptions:
    """What every importer may be given.

    Attributes:
        docid_map: docid -> gold-support location fields (`rel_path`, `heading_path`,
            line span or `chunk_id`), from `docids.load_docid_map`; None = the format's
            documented rule for unmapped docids.
        category: the category of cases that do not name one.
        tags: tags added to every case (after the case's own).
        relevance_level: --format trec: a judgment is relevant (in the recall set) at this
            grade or above, trec_eval's `-l`; a positive grade below it becomes a graded-only
            support (nDCG only). None: every grade > 0 is relevant.
    """

    docid_map: Mapping[str, Mapping[str, Any]] | None = None
    category: str = "factual"
    tags: tuple[str, ...] = ()
    relevance_level: float | None = None


@dataclass(frozen=True)
class ImportedCase:
    """One converted case and the fixture item it came from (for error messages).

    Attributes:
        case: the eval-set case (a plain dict).
        path / index / line: its fixture file, item index in that file, and 1-based line
            (line-based formats such as JSONL; None for JSON arrays).
        files: notes the case needs in the vault, vault-relative path -> text (hindsight's
            seedFacts); written by `output.write_vault`.
        warnings: what the user should know but that does not stop the import.
    """

    case: dict[str, Any]
    path: str
    index: int
    line: int | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


Converter = Callable[[Sequence[Path], ImportOptions], list[ImportedCase]]


def jsonl_items(
    path: Path, problems: list[Problem], add: Callable[[list[Problem], Problem], None] | None = None
) -> Iterator[tuple[int, Any]]:
    """(1-based line, parsed JSON) of each non-blank line of a JSONL fixture, read one line
    at a time (a corpus is never held whole) by `jsonio.iter_jsonl`: exact line numbers, and
    an unreadable file or a line too long, not UTF-8, not JSON or nested too deeply is a
    problem (`add` files it: a capped list, say); the line is skipped.

    Lines end at "\\n" only: a U+2028 inside a JSON string is not a line break.
    """
    add = add or (lambda ps, p: ps.append(p))
    yield from iter_jsonl(path, on_problem=lambda p: add(problems, p))

"""Importers: another harness's fixtures -> evalkit eval-set cases (`evalkit import`).

One module per format, each with a `convert(paths, options) -> list[ImportedCase]`
function, named in `FORMATS` and imported only when that format is asked for (no
registration as a side effect of import). A new format is one module and one line here.

`import_cases` converts; `write_eval_set` validates the cases with evalkit's own loader
(`dataset.read_eval_set`) and only then writes the JSONL, so an import never leaves a
file that `evalkit run` would refuse.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, BadEvalSet, Problem

__all__ = ["FORMATS", "ImportOptions", "ImportedCase", "get_converter", "import_cases", "write_eval_set"]

# format name -> "module:function" (issues 14/15 add hindsight, trec, beir here).
FORMATS: dict[str, str] = {
    "gno": "evalkit.importers.gno:convert",
}


@dataclass(frozen=True)
class ImportOptions:
    """What every importer may be given.

    Attributes:
        docid_map: docid -> gold-support location fields (`rel_path`, `heading_path`,
            line span or `chunk_id`), from `docids.load_docid_map`; None = the format's
            documented rule for unmapped docids.
        category: the category of cases that do not name one.
        tags: tags added to every case (after the case's own).
    """

    docid_map: Mapping[str, Mapping[str, Any]] | None = None
    category: str = "factual"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImportedCase:
    """One converted case and the fixture item it came from (for error messages)."""

    case: dict[str, Any]
    path: str
    index: int


Converter = Callable[[Sequence[Path], ImportOptions], list[ImportedCase]]


def get_converter(fmt: str) -> Converter:
    """The `convert` function of format `fmt`.

    Raises:
        BadConfig: an unknown format (the message lists the known ones).
    """
    target = FORMATS.get(fmt)
    if target is None:
        raise BadConfig(Problem(f"unknown format {fmt!r}; expected one of {', '.join(sorted(FORMATS))}", field="--format"))
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def import_cases(fmt: str, paths: Sequence[str | Path], options: ImportOptions | None = None) -> list[ImportedCase]:
    """Convert the fixture files `paths` of format `fmt` into eval-set cases (plain dicts).

    Raises:
        InputError: every problem found in the fixtures (file, item index, field).
    """
    if not paths:
        raise BadConfig(Problem("no file to import", field="PATH"))
    return get_converter(fmt)([Path(p) for p in paths], options or ImportOptions())


def dumps_cases(cases: Sequence[ImportedCase]) -> bytes:
    """The JSONL bytes: one case per line, in the house style of eval_set.jsonl."""
    return b"".join(json.dumps(c.case, ensure_ascii=False).encode("utf-8") + b"\n" for c in cases)


def write_eval_set(
    cases: Sequence[ImportedCase],
    output: str | Path,
    *,
    force: bool = False,
    extra_categories: Sequence[str] | None = None,
) -> None:
    """Validate `cases` with `dataset.read_eval_set`, then write them to `output` atomically.

    The JSONL is written to a temporary file beside `output`, loaded with evalkit's own
    eval-set loader, and renamed over `output` only when it loads without a problem; a
    problem is reported against the fixture item the case came from.

    Args:
        cases: from `import_cases`.
        output: the eval set to write.
        force: overwrite an existing `output`.
        extra_categories: categories allowed beyond the built-in ones; None reads evalkit.toml.

    Raises:
        BadConfig: `output` exists and `force` is not set.
        BadEvalSet: a converted case that evalkit's loader rejects.
    """
    from evalkit.dataset import read_eval_set

    output = Path(output)
    if output.exists() and not force:
        raise BadConfig(Problem("already exists; pass --force to overwrite it", path=str(output), field="--output"))
    if not cases:
        raise BadEvalSet(Problem("the fixtures hold no case", field="PATH"))
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(dumps_cases(cases))
            f.flush()
            os.fsync(f.fileno())
        _, problems = read_eval_set([tmp], extra_categories)
        if problems:
            raise BadEvalSet([_locate(p, cases) for p in problems])
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _locate(problem: Problem, cases: Sequence[ImportedCase]) -> Problem:
    """A loader problem (temp file, line N) restated against the fixture item of case N."""
    if problem.line is None or not 1 <= problem.line <= len(cases):
        return Problem(problem.message, field=problem.field)
    c = cases[problem.line - 1]
    return Problem(
        f"{problem.message} (in the converted case {c.case.get('id')!r})",
        path=c.path,
        field=f"[{c.index}]" + (f" -> {problem.field}" if problem.field else ""),
    )

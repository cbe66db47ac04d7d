"""Importers: another harness's fixtures -> evalkit eval-set cases (`evalkit import`).

One module per format, each with a `convert(paths, options) -> list[ImportedCase]`
function, named in `FORMATS` and imported only when that format is asked for (no
registration as a side effect of import). A new format is one module and one line here.
What the formats share (`ImportOptions`, `ImportedCase`, `jsonl_items`) is in `base.py`,
which they import instead of this package (that loads them: the other way would be a cycle).

`import_cases` converts; `output.write_eval_set` validates the cases with evalkit's own
loader (`evalset.load.read_eval_set`) and only then writes the JSONL, so an import never
leaves a file that `evalkit run` would refuse.

Converters write nothing. A format whose fixtures carry the corpus too (hindsight's
seedFacts) returns the notes on each case (`ImportedCase.files`); `output.check_vault_out`
refuses a missing or occupied vault folder before anything is written, and
`output.write_vault` writes the notes after the eval set, into a folder built out of sight
and renamed into place.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from evalkit.errors import BadConfig, Problem
from evalkit.interop.importers.base import Converter, ImportedCase, ImportOptions

__all__ = ["FORMATS", "get_converter", "import_cases"]

# format name -> "module:function" (issues 14/15 add hindsight, trec, beir here).
FORMATS: dict[str, str] = {
    "gno": "evalkit.interop.importers.gno:convert",
    "hindsight": "evalkit.interop.importers.hindsight:convert",
    "beir": "evalkit.interop.importers.beir:convert",  # streams: the CLI calls beir.import_beir
    "trec": "evalkit.interop.importers.trec:convert",  # paths: the topics file, then the qrels files
    "mtrag": "evalkit.interop.importers.mtrag:convert",  # conversations; their passages become notes
}


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

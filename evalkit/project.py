"""evalkit.toml: the project's settings file, read from the working directory.

Its tables are read where they apply: `[eval_set]` by the eval-set loader (extra
categories), `[run]` by run_eval (config.project_run_defaults). This module only finds and
parses the file, so the light modules (dataset, anchorcheck) can read it too.

`parse_toml` is the one bounded TOML parser (evalkit.toml, `--matrix-file`, `--suite`):
tomllib recurses once per level of nested arrays and inline tables, so `a = [[[...]]]` 400
deep was a RecursionError (exit 70); here it is bad input, like JSON nested too deeply.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.jsonio import MAX_DEPTH, read_bytes

PROJECT_CONFIG = "evalkit.toml"
# A project file is a few hundred bytes; this refuses a file given by mistake (a disk image).
MAX_PROJECT_BYTES = 1 << 20


class TomlError(ValueError):
    """Not TOML, or nested deeper than `parse_toml` reads; the message says which."""


def parse_toml(text: str, *, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """`tomllib.loads(text)`, bounded in depth: never a RecursionError.

    Args:
        text: the TOML document.
        max_depth: the most levels of tables, arrays and inline tables (`a = 1` is 1, `a = [1]` 2).

    Raises:
        TomlError: not TOML (tomllib's message, with its line and column), or nested deeper
            than `max_depth`.
    """
    too_deep = f"nested too deeply: more than {max_depth} levels of tables and arrays"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TomlError(str(e)) from None
    except RecursionError:  # the parser's own stack: a few hundred levels
        raise TomlError(too_deep) from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:  # a walk without recursion: the callers' walkers recurse
        value, depth = stack.pop()
        if depth > max_depth:
            raise TomlError(too_deep)
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return doc


def read_project_config(start: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(path, table) of `evalkit.toml` in `start` (the working directory), or None when absent.

    Raises:
        BadConfig: the file cannot be read, is larger than MAX_PROJECT_BYTES, not UTF-8,
            not valid TOML, or nested deeper than MAX_DEPTH.
    """
    path = (start or Path.cwd()) / PROJECT_CONFIG
    if not path.is_file():  # a regular file (or a link to one): a FIFO here is not read, nor waited on
        return None
    data = read_bytes(path, max_bytes=MAX_PROJECT_BYTES, what=PROJECT_CONFIG, error=BadConfig)
    try:
        return path, parse_toml(data.decode("utf-8"))
    except (TomlError, UnicodeDecodeError) as e:
        raise BadConfig(Problem(f"not valid TOML ({e})", path=str(path))) from None

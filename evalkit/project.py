"""evalkit.toml: the project's settings file, read from the working directory.

Its tables are read where they apply: `[eval_set]` by the eval-set loader (extra
categories), `[run]` by run_eval (config.project_run_defaults). This module only finds and
parses the file, so the light modules (dataset, anchorcheck) can read it too.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem

PROJECT_CONFIG = "evalkit.toml"


def read_project_config(start: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(path, table) of `evalkit.toml` in `start` (the working directory), or None when absent.

    Raises:
        BadConfig: the file is not valid TOML (or not UTF-8).
    """
    path = (start or Path.cwd()) / PROJECT_CONFIG
    if not path.is_file():
        return None
    try:
        return path, tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadConfig(Problem(f"not valid TOML ({e})", path=str(path))) from None

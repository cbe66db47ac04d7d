"""`evalkit init`: a starter project in an empty folder, from the installed package alone.

It writes what a first `evalkit run` needs and nothing it would overwrite:

    evalkit.toml      every run setting, commented out at its default ([run], [eval_set]), as
                      evalkit.cli.init.project_config_text writes it
    eval_set.jsonl    a few example cases about the sample notes, one of each kind
    sample_vault/     the sample notes those cases are about (the reference chatbot indexes them)
    .gitignore        the lines that keep note text out of git (appended to one that exists)

The sample notes and cases ship inside the wheel (`evalkit/bundled/`, copied there by
setup.py at build time); in a source checkout they are read from the repository itself.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from evalkit.config import (
    DEFAULT_EVAL_SET,
    DEFAULT_VAULT,
)
from evalkit.errors import BadConfig, Problem
from evalkit.project import PROJECT_CONFIG
from evalkit.store.atomic import SYMLINK_REFUSED, open_no_follow

# One case of each kind the bundled set holds: single note, reasoning, multi-hop with support
# groups, a recency rule, and two unanswerable ones (in-domain and general knowledge).
STARTER_CASE_IDS = ("sv-002", "sv-021", "sv-030", "sv-037", "sv-049", "sv-055")

# What keeps note text out of git (docs/sharing.md, "What to commit"): results.jsonl holds answers and
# chunk text, the HTML reports and TREC topics show them, the judge cache holds prompts.
GITIGNORE_LINES = (
    "# evalkit: files that hold note text, answers or keys",
    "results/*/results.jsonl",
    "results/*/*.tmp",
    "results/*/.lock",
    "results/*/report.html",
    "results/compare-*.html",
    "topics.tsv",
    "results/latest",
    "results/latest.json",
    "cache/",
    ".env",
)


@dataclass
class InitResult:
    """What `init_project` wrote (paths relative to the project folder)."""

    folder: Path
    written: list[str] = field(default_factory=list)
    gitignore_added: list[str] = field(default_factory=list)


def bundled_root() -> Path:
    """The folder holding the bundled `sample_vault/` and `eval_set.jsonl`.

    In an installed wheel that is `evalkit/bundled/` (package data); in a source checkout
    (or an editable install) it is the repository root, where the originals live.
    """
    packaged = Path(str(resources.files("evalkit") / "bundled"))
    if (packaged / DEFAULT_EVAL_SET).is_file():
        return packaged
    checkout = Path(str(resources.files("evalkit"))).parent
    if (checkout / DEFAULT_EVAL_SET).is_file() and (checkout / DEFAULT_VAULT).is_dir():
        return checkout
    raise BadConfig(Problem("the sample notes are missing from this installation of evalkit; reinstall it"))


def starter_cases(root: Path | None = None) -> list[str]:
    """The JSONL lines of STARTER_CASE_IDS, byte for byte as in the bundled eval set."""
    lines = (root or bundled_root()).joinpath(DEFAULT_EVAL_SET).read_text(encoding="utf-8").splitlines()
    by_id = {json.loads(line)["id"]: line for line in lines if line.strip()}
    return [by_id[case_id] for case_id in STARTER_CASE_IDS]


def init_project(folder: Path, config_text: str) -> InitResult:
    """Write a starter project into `folder` (created if missing). Never overwrites a file.

    `config_text` is the evalkit.toml to write (`evalkit.cli.init.project_config_text`: it is
    made from run_eval's flags, which live in the CLI).

    Raises:
        BadConfig: a file or folder it would write exists already (nothing is written).
    """
    folder.mkdir(parents=True, exist_ok=True)
    planned = (PROJECT_CONFIG, DEFAULT_EVAL_SET, DEFAULT_VAULT)
    existing = [name for name in planned if os.path.lexists(folder / name)]
    if existing:
        raise BadConfig(
            [Problem("exists already; evalkit init writes only into a folder without it", path=str(folder / name))
             for name in existing]
        )
    if (folder / ".gitignore").is_symlink():  # appended to below: never through a link
        raise BadConfig(Problem(SYMLINK_REFUSED, path=str(folder / ".gitignore")))
    root = bundled_root()
    result = InitResult(folder=folder)
    vault = root / DEFAULT_VAULT
    for src in [vault, *sorted(vault.rglob("*"))]:  # the umask's modes, not the installation's (copytree kept those)
        dest = folder / DEFAULT_VAULT / src.relative_to(vault)
        if src.is_dir():
            dest.mkdir()
        else:
            shutil.copyfile(src, dest)
    result.written.append(DEFAULT_VAULT + "/")
    (folder / DEFAULT_EVAL_SET).write_text("\n".join(starter_cases(root)) + "\n", encoding="utf-8")
    result.written.append(DEFAULT_EVAL_SET)
    (folder / PROJECT_CONFIG).write_text(config_text, encoding="utf-8")
    result.written.append(PROJECT_CONFIG)
    result.gitignore_added = _extend_gitignore(folder / ".gitignore")
    return result


def _extend_gitignore(path: Path) -> list[str]:
    """Append the GITIGNORE_LINES a .gitignore lacks (every line it has stays). Returns them."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    have = old.splitlines()
    missing = [line for line in GITIGNORE_LINES if line not in have]
    if not [line for line in missing if not line.startswith("#")]:
        return []
    text = "\n".join(missing) + "\n"
    if have:
        text = ("\n" if have[-1].strip() else "") + text
        if not old.endswith("\n"):
            text = "\n" + text
    with os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as f:
        f.write(text)
    return missing

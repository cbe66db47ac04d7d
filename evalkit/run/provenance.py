"""config.json's body: what made a run (inspect's EvalSpec and EvalRevision).

The settings, the eval set, the target and the judge, the versions tuple, the machine, the
git revision, and `config_hash` over the part that changes the results.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalkit import __version__
from evalkit.config import RunSettings, judge_identity
from evalkit.derive import now_utc
from evalkit.evalset.load import EvalSet, git_output
from evalkit.gate.invariants import scorer_identity
from evalkit.run.records import versions_tuple
from evalkit.schema import SCHEMA_VERSION
from evalkit.store.runlog import Met
from evalkit.store.runs import config_hash

__all__ = ["build_config", "git_revision", "reproducibility_knobs"]


def git_revision(cwd: Path) -> dict[str, Any] | None:
    """config.json's `git`: the commit checked out in `cwd` and whether tracked files differ
    from it (`dirty`); None outside a git work tree."""
    commit = git_output(["rev-parse", "HEAD"], cwd)
    if not commit:
        return None
    status = git_output(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {"commit": commit, "dirty": bool(status)}


def reproducibility_knobs(
    settings: RunSettings, target_desc: Mapping[str, Any], judge_desc: Mapping[str, Any]
) -> dict[str, Any]:
    """config.json's `reproducibility`: what makes a rerun give the same records (issue 14).

    `tie_break` and `target_deterministic` are what the target declares in describe()
    (None: not declared, unknown). Kept out of `hashed`: recording them changes no hash.
    """
    judged = judge_desc.get("provider") is not None
    return {
        "seed": settings.seed,
        "top_k": settings.request_k,
        "ks": list(settings.k),
        "tie_break": target_desc.get("tie_break"),
        "timestamps": "UTC",
        "judge_temperature": judge_desc.get("temperature", settings.judge_temperature) if judged else None,
        "target_deterministic": target_desc.get("deterministic"),
    }


def build_config(
    settings: RunSettings,
    eval_set: EvalSet,
    selected: Sequence[tuple[int, str]],
    target_desc: Mapping[str, Any],
    judge_desc: Mapping[str, Any],
    git: dict[str, Any] | None,
) -> dict[str, Any]:
    """config.json's body for a new run: what made it (settings, eval set, target, judge,
    versions, machine, git) and `config_hash` over the result-affecting part (`hashed`).
    `run_id` stays None until the run folder is created; `sessions` is filled per session."""
    from evalkit.run.hardware import hardware_info

    hashed = {
        **settings.hashed(),
        "dataset_version": eval_set.version,
        "judge": judge_identity(judge_desc),
    }
    chash = config_hash(hashed)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": None,  # filled by the caller once the id is known
        "created_at": now_utc(),
        "config_hash": chash,
        "dataset_version": eval_set.version,
        Met.EVAL_SET_COMMIT_HASH: eval_set.commit_hash,
        "eval_set": {
            "paths": list(settings.eval_set),
            "files": eval_set.files,
            "version": eval_set.version,
            # The cases apart from their labels, and the labels' support forms: metrics.json's
            # `cases_version` and `invariants.gold_forms` (compare tells a relabel from another set).
            "cases_version": eval_set.cases_version,
            "gold_forms": list(eval_set.gold_forms),
            "commit_hash": eval_set.commit_hash,
            "n_cases": len(eval_set.cases),
            "n_selected": len(selected),
        },
        "settings": settings.public_dump(),
        "hashed": hashed,
        "reproducibility": reproducibility_knobs(settings, target_desc, judge_desc),
        "target": dict(target_desc),
        "judge": dict(judge_desc),
        "versions": versions_tuple(settings, eval_set, None, judge_desc),
        "versions_observed": False,
        "hardware": hardware_info(),
        "evalkit_version": __version__,
        # What scores this run's records (issue 30): derive_run copies it into metrics.json's invariants.
        "scorer": scorer_identity(),
        "python": platform.python_version(),
        "git": git,
        "sessions": [],
    }

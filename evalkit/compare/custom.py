"""A project's own metrics (rubric judges, Python scorers: `metrics.custom`) in the merge verdict.

Their definitions come from the runs' metrics.json, their per-case values from the records;
each becomes a verdict `Member` exactly as a built-in per-case metric does (its margin, its
direction, its scale, gated or not), so the merge can fail on it. Two runs scored by different
versions of a rubric or scorer are not compared on it (listed in `not_compared`, with why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from evalkit.compare.cases import paired_values
from evalkit.compare.models import DeltaRow
from evalkit.gate.verdict import Member
from evalkit.metrics.custom import custom_definitions, is_custom_name, per_case_values

__all__ = ["custom_members", "split_margins"]

_DEFINING = ("kind", "direction", "scale", "version", "judge")


def split_margins(given: Mapping[str, float | None]) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """`--margin` entries as (built-in ones, custom ones): the custom metrics' names are not
    the registry's, and their scale is known only once the runs are read."""
    builtin = {k: v for k, v in given.items() if not is_custom_name(k)}
    return builtin, {k: v for k, v in given.items() if is_custom_name(k)}


def custom_members(
    metrics_a: Mapping[str, Any], metrics_b: Mapping[str, Any], records_a: Any, records_b: Any,
    paired_ids: Sequence[str], given: Mapping[str, float | None], *, clusters: np.ndarray | None = None,
) -> tuple[list[Member], list[dict[str, str]], list[DeltaRow]]:
    """The verdict members of the custom metrics both runs scored, what could not be
    compared, and each compared metric's overall delta row (its stored means, and the paired
    means the verdict's interval is about; no randomization test: the verdict judges it). `records_*`: callables returning each run's records (read only when a custom
    metric is defined); `given`: custom `--margin` entries (None: left out); `clusters`: each
    paired case's conversation (compare's `_Pairing.cluster`, aligned with `paired_ids`), so a
    run of conversations is resampled by conversation here as for the built-in metrics."""
    defs_a, defs_b = custom_definitions(metrics_a), custom_definitions(metrics_b)
    names = sorted(set(defs_a) | set(defs_b) | set(given))
    if not names:
        return [], [], []
    members: list[Member] = []
    rows: list[DeltaRow] = []
    not_compared: list[dict[str, str]] = []
    wanted = [n for n in names if n in defs_a and n in defs_b]
    values_a = per_case_values(records_a(), wanted) if wanted else {}
    values_b = per_case_values(records_b(), wanted) if wanted else {}
    for name in names:
        da, db = defs_a.get(name), defs_b.get(name)
        if name in given and given[name] is None:
            not_compared.append({"metric": name, "reason": f"left out by --margin {name}=off"})
            continue
        if da is None or db is None:
            gated = name in given or bool((da or db or {}).get("gated"))
            if gated:
                side = "neither run" if da is None and db is None else ("run a only" if db is None else "run b only")
                not_compared.append({"metric": name, "reason": f"not measured by both runs ({side} scored it)"})
            continue
        differ = [f for f in _DEFINING if da.get(f) != db.get(f)]
        if differ:
            shown = ", ".join(f"{f} {da.get(f)!r} vs {db.get(f)!r}" for f in differ)
            not_compared.append({"metric": name, "reason": f"the runs scored it differently ({shown}): score both "
                                 "with the same rubric or scorer"})
            continue
        scale = float(db["scale"])
        margin = given.get(name, db.get("margin"))
        if not isinstance(margin, int | float) or not 0 < float(margin) <= scale:
            not_compared.append({"metric": name, "reason": f"its margin must be in (0, {scale:g}], got {margin!r}"})
            continue
        va, vb = values_a.get(name, {}), values_b.get(name, {})
        both = [cid for cid in paired_ids if cid in va and cid in vb]
        diff, member_clusters = paired_values(np.array([va.get(c, np.nan) for c in paired_ids], dtype=np.float64),
                                              np.array([vb.get(c, np.nan) for c in paired_ids], dtype=np.float64),
                                              clusters)
        direction = "higher_is_better" if db["direction"] == "higher" else "lower_is_better"
        rows.append(_row(name, da, db, va, vb, both, diff, direction))
        members.append(Member(
            metric=name, k=None, direction=direction,
            margin=float(margin), source="--margin" if name in given else "registry", diff=diff, test=None,
            family=name, gated=name in given or bool(db.get("gated", True)), scale=scale, clusters=member_clusters,
        ))
    return members, not_compared, rows


def _row(name: str, da: Mapping[str, Any], db: Mapping[str, Any], va: Mapping[str, float], vb: Mapping[str, float],
         both: Sequence[str], diff: np.ndarray, direction: str) -> DeltaRow:
    mean_a, mean_b = da.get("mean"), db.get("mean")
    delta = mean_b - mean_a if isinstance(mean_a, int | float) and isinstance(mean_b, int | float) else None
    paired = float(diff.mean()) if diff.size else None
    shown = paired if paired is not None else delta
    change = None
    if shown is not None:
        good = shown if direction == "higher_is_better" else -shown
        change = "unchanged" if abs(good) <= 1e-9 else ("better" if good > 0 else "worse")
    return DeltaRow(
        metric=name, scope="overall", k=None, a=mean_a, b=mean_b, delta=delta, n_a=len(va), n_b=len(vb), n=len(both),
        n_changed=int(np.count_nonzero(diff)), paired_delta=paired,
        paired_a=float(np.mean([va[c] for c in both])) if both else None,
        paired_b=float(np.mean([vb[c] for c in both])) if both else None,
        direction=direction, change=change,  # type: ignore[arg-type]
        note="a project's own metric: judged by the verdict, not in the randomization tests' family",
    )

"""The conditions two runs were made under: what their config.json files say differently (with
their index stats, `gate.invariants.corpus_of`, as `index.*` keys: compute adds them), and
whether their latency numbers can be compared (concurrency, target kind, hardware)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from evalkit.compare.models import LatencyReport, LatencyRow
from evalkit.compare.sources import RunSource

__all__ = ["CONFIG_DIFF_IGNORED", "config_diff", "flatten_config", "latency_report"]

# config.json keys that differ between any two runs and say nothing about the system.
CONFIG_DIFF_IGNORED = (
    "run_id", "created_at", "config_hash", "settings.run_id", "settings.resume", "settings.quiet", "settings.json_output",
    "settings.results_dir", "sessions.*.started_at", "sessions.*.wall_s", "sessions.*.pending", "sessions.*.repaired_tail",
    "sessions.*.probe.ms",
)
_HARDWARE_KEYS = ("cpu_model", "logical_cores", "physical_cores", "memory_total_gb", "machine", "os")
_REFERENCE_LATENCY_NOTE = (
    "with the in-process reference chatbot, p50 latency grows from 1.3 ms at concurrency 1 to about 25 ms at 16 "
    "while throughput stays flat"
)


def flatten_config(obj: Any, prefix: str = "") -> dict[str, Any]:
    """config.json as {dotted.key: value}: objects are walked, lists of objects by index
    (`sessions.0.settings.concurrency`), lists of plain values stay one value (`settings.k`)."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            out.update(flatten_config(value, f"{prefix}{key}."))
    elif isinstance(obj, list) and any(isinstance(v, Mapping | list) for v in obj):
        for i, value in enumerate(obj):
            out.update(flatten_config(value, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = obj
    return out


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, list[Any]]:
    """{dotted.key: [a, b]} for every key whose value differs (a missing key is null), sorted;
    keys matching CONFIG_DIFF_IGNORED (run id, timestamps, session wall times) are left out."""
    fa, fb = flatten_config(a), flatten_config(b)
    out = {}
    for key in sorted(set(fa) | set(fb)):
        if any(fnmatch.fnmatchcase(key, pattern) for pattern in CONFIG_DIFF_IGNORED):
            continue
        va, vb = fa.get(key), fb.get(key)
        if va != vb or (key in fa) != (key in fb):
            out[key] = [va, vb]
    return out


def _concurrency(config: Mapping[str, Any]) -> list[Any]:
    found = {
        s["settings"].get("concurrency")
        for s in config.get("sessions") or []
        if isinstance(s, Mapping) and isinstance(s.get("settings"), Mapping)
    }
    found.discard(None)
    if not found:
        found = {(config.get("settings") or {}).get("concurrency")}
    return sorted(found, key=str)


def latency_report(ca: Mapping[str, Any], cb: Mapping[str, Any], a: RunSource, b: RunSource, extra: list[str]) -> LatencyReport:
    """Latency and cost of both runs, with a warning when they are not comparable.

    Latency depends on how the run was made, not only on the system: the runs must have the
    same concurrency (every session's), target kind and hardware (cpu model, cores, memory,
    machine, os in config.json), else `comparable` is False and `warnings` says why. `extra`
    adds warnings from broken invariants (debug timings missing on one side).

    Args:
        ca, cb: the runs' overall aggregate cells (latency, cost, n_cases).
        a, b: the sources (their config.json).
        extra: more warnings.
    """
    warnings: list[str] = []
    differences: dict[str, list[Any]] = {}
    if a.config is None or b.config is None:
        missing = " and ".join(f"run {s}" for s, src in (("a", a), ("b", b)) if src.config is None)
        warnings.append(f"latency may not be comparable: no config.json for {missing} (concurrency, target and hardware unknown)")
    else:
        conc = [_concurrency(a.config), _concurrency(b.config)]
        if conc[0] != conc[1]:
            differences["concurrency"] = [", ".join(map(str, c)) for c in conc]
        kinds = [(src.config.get("target") or {}).get("kind") for src in (a, b)]
        if kinds[0] != kinds[1]:
            differences["target_kind"] = kinds
        for key in _HARDWARE_KEYS:
            ha, hb = ((src.config.get("hardware") or {}).get(key) for src in (a, b))
            if ha != hb:
                differences[f"hardware.{key}"] = [ha, hb]
        if differences:
            said = "; ".join(f"{key} {va} vs {vb}" for key, (va, vb) in differences.items())
            text = f"latency is not comparable: the runs differ in {said}"
            if "concurrency" in differences:
                text += f" ({_REFERENCE_LATENCY_NOTE})"
            warnings.append(text)
    warnings += extra
    rows = []

    def row(metric: str, va: Any, vb: Any, na: Any = None, nb: Any = None) -> None:
        fa = float(va) if isinstance(va, int | float) and not isinstance(va, bool) else None
        fb = float(vb) if isinstance(vb, int | float) and not isinstance(vb, bool) else None
        if fa is None and fb is None:
            return
        rows.append(LatencyRow(metric=metric, a=fa, b=fb, delta=None if fa is None or fb is None else fb - fa, n_a=na, n_b=nb))

    la, lb = ca.get("latency") or {}, cb.get("latency") or {}
    for q in ("p50_ms", "p95_ms", "mean_ms"):
        row(f"latency_{q}", la.get(q), lb.get(q), la.get("n"), lb.get("n"))
    row("suite_wall_ms", la.get("total_ms"), lb.get("total_ms"))

    def throughput(cell: Mapping[str, Any], lat: Mapping[str, Any]) -> float | None:
        total, n = lat.get("total_ms"), cell.get("n_cases")
        return n / (total / 1000.0) if isinstance(total, int | float) and total > 0 and isinstance(n, int) else None

    row("throughput_cases_per_s", throughput(ca, la), throughput(cb, lb))
    for phase in ("folder_selection", "retrieval", "generation", "judge"):
        pa, pb = (la.get("phases") or {}).get(phase) or {}, (lb.get("phases") or {}).get(phase) or {}
        row(f"{phase}_p50_ms", pa.get("p50_ms"), pb.get("p50_ms"), pa.get("n"), pb.get("n"))
    cost_a, cost_b = ca.get("cost") or {}, cb.get("cost") or {}
    row("judge_cost_usd", cost_a.get("judge_total_usd"), cost_b.get("judge_total_usd"))
    row("judge_tokens", cost_a.get("judge_total_tokens"), cost_b.get("judge_total_tokens"))
    return LatencyReport(comparable=not warnings, warnings=warnings, differences=differences, rows=rows)

"""What the studio's pages show, as plain dicts for the templates, and the page renderer.

The views read the eval set through `EvalSetFile` (as the labeler does), decide which chunk
or heading a support covers with the labeler's own session (`LabelSession.support_for`, the
rule its space key uses), say what a run made of a case with `metrics.stages.record_stage`
(the reports' failure stages), and list warnings as `validate --labels` words them
(editing.support_warnings). No Starlette here: the views are tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from evalkit.evalset.anchors import heading_components
from evalkit.store.runlog import Rec, RecConfig
from evalkit.studio.editing import case_version, support_warnings
from evalkit.studio.project import StudioProject, heading_at

__all__ = ["FILTERS", "NOT_FAILED", "case_view", "link", "queue_ids", "queue_view", "render"]

FILTERS = ("all", "unlabeled", "stale", "failed")
# Stages (metrics.stages.STAGES) that are not a failure of the run: nothing to fix in the chatbot.
NOT_FAILED = ("pass", "unlabeled", "unknown")
# A note shown whole is cut here: a 5 MB log file is not read in a browser panel.
MAX_NOTE_LINES = 2000


def link(path: str, **params: Any) -> str:
    """`/case?set=...&id=...`: the parameters that are not None or "" in the query, encoded."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(kept) if kept else "")


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("evalkit.studio", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.globals["link"] = link
    return env


def render(name: str, **context: Any) -> str:
    """Render `templates/<name>` (autoescaped: every text from a note, a case or a run is text)."""
    return _environment().get_template(name).render(**context)


def _stage(record: Mapping[str, Any] | None) -> str | None:
    if not record:
        return None
    from evalkit.metrics.stages import record_stage

    cfg = record.get(Rec.CONFIG) if isinstance(record.get(Rec.CONFIG), Mapping) else {}
    k = cfg.get(RecConfig.K) or len(record.get(Rec.RETRIEVED_CHUNKS) or []) or 1
    return record_stage(record, int(k))


def _unlabeled(case: Mapping[str, Any]) -> bool:
    # the labeler's rule (labeler.choose_cases): answerable, and no gold support yet
    return case.get("answerable") is not False and not case.get("gold_supports")


def queue_rows(project: StudioProject, path: Path, run_id: str | None) -> list[dict[str, Any]]:
    """One row per case (a conversation: one per turn), in file order."""
    from evalkit.authoring.labeling import EvalSetFile

    doc = EvalSetFile(path)
    records = project.run_records(run_id) or {}
    rows = []
    for case_id in doc.ids:
        case = doc.case(case_id)
        stage = _stage(records.get(case_id))
        # stale as `validate --labels` says it: a support anchorcheck finds nowhere in the notes
        stale = any(": stale: " in w for w in support_warnings(case, project.corpus))
        rows.append({
            "id": case_id, "question": str(case.get("question") or ""), "answerable": case.get("answerable") is not False,
            "supports": len(case.get("gold_supports") or []), "unlabeled": _unlabeled(case),
            "source": case.get("label_source"), "stage": stage, "failed": stage is not None and stage not in NOT_FAILED,
            "stale": stale, "version": case_version(case),
            "category": case.get("category") if isinstance(case.get("category"), str) else None,
            "tags": [t for t in case.get("tags") or [] if isinstance(t, str)] if isinstance(case.get("tags"), list) else [],
        })
    return rows


def _filtered(rows: list[dict[str, Any]], filter_: str) -> list[dict[str, Any]]:
    if filter_ == "unlabeled":
        return [r for r in rows if r["unlabeled"]]
    if filter_ == "failed":
        return [r for r in rows if r["failed"]]
    if filter_ == "stale":
        return [r for r in rows if r["stale"]]
    return rows


def queue_ids(project: StudioProject, path: Path, filter_: str, run_id: str | None) -> list[str]:
    """The case ids a queue walks, in file order."""
    return [r["id"] for r in _filtered(queue_rows(project, path, run_id), filter_)]


def queue_view(project: StudioProject, set_name: str, path: Path, filter_: str, run_id: str | None) -> dict[str, Any]:
    """The queue page: the filtered rows, counts, the filters and runs to choose from."""
    filter_ = filter_ if filter_ in FILTERS else "all"
    run_id = run_id if run_id in project.runs() else None
    rows = queue_rows(project, path, run_id)
    shown = _filtered(rows, filter_)
    return {
        "set": set_name, "filter": filter_, "filters": FILTERS, "run": run_id, "runs": project.runs(), "rows": shown,
        "n_all": len(rows), "n_unlabeled": sum(r["unlabeled"] for r in rows), "n_failed": sum(r["failed"] for r in rows),
        "n_stale": sum(r["stale"] for r in rows),
        # what the batch form can drop from the selected cases
        "categories": sorted({r["category"] for r in rows if r["category"]}),
        "tags": sorted({t for r in rows for t in r["tags"]}),
    }


def _covering(doc: Any, case_id: str, items: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """For each chunk-like item {rel_path, heading_path}: the support the labeler's space key
    would drop for it (LabelSession.support_for), or None (it would select it)."""
    from evalkit.authoring.labeler import LabelSession

    session = LabelSession(doc, [case_id])
    session.set_chunks([{"rel_path": i.get("rel_path"), "heading_path": i.get("heading_path"), "rank": n}
                        for n, i in enumerate(items, start=1)])
    return [session.support_for(pos) for pos in range(len(items))]


def case_view(project: StudioProject, set_name: str, path: Path, case_id: str, run_id: str | None, note: str | None,
              query: str, filter_: str = "all", asked: tuple[list[dict[str, Any]], str | None] | None = None) -> dict[str, Any]:
    """The labeling page of one case.

    Args:
        asked: (chunks, error) the chatbot returned when asked now (run "live"); None: the
            chunks come from the stored run `run_id`, if any.

    Raises:
        InputError: no case `case_id` in the file.
    """
    from evalkit.authoring.labeling import EvalSetFile
    from evalkit.authoring.review import case_problems
    from evalkit.evalset.turns import case_turn, turn_id

    doc = EvalSetFile(path)
    case = doc.case(case_id)
    filter_ = filter_ if filter_ in FILTERS else "all"
    live = asked is not None
    run_id = run_id if run_id in project.runs() or live else None
    record = None if live else (project.run_records(run_id) or {}).get(case_id)
    chunks = list(asked[0]) if asked is not None else [c for c in (record or {}).get(Rec.RETRIEVED_CHUNKS) or [] if isinstance(c, Mapping)]
    rows = queue_rows(project, path, None if live else run_id)
    ids = [r["id"] for r in _filtered(rows, filter_)]
    here = ids.index(case_id) if case_id in ids else None
    # the queue's neighbours in file order, also when this case has just left the filter (labeled)
    order = {r["id"]: n for n, r in enumerate(rows)}
    at = order.get(case_id, -1)
    before = [i for i in ids if order[i] < at]
    after = [i for i in ids if order[i] > at]
    supports = [dict(s) for s in case.get("gold_supports") or [] if isinstance(s, Mapping)]
    # "one heading up" (the terminal's `d`) acts on the support covering a place: offered on a
    # support that is the one covering its own anchor, and that has a heading above it
    own = _covering(doc, case_id, supports)
    for i, s in enumerate(supports):
        s["can_go_up"] = own[i] == i and len(heading_components(s.get("heading_path"))) > 1

    outline = project.outline(note)
    headings: list[dict[str, Any]] = []
    lines: list[tuple[int, str, str]] = []
    if outline is not None:
        chains = [c for c in outline.spans if c]
        items = [{"rel_path": note, "heading_path": " > ".join(c)} for c in chains]
        for chain, item, cover in zip(chains, items, _covering(doc, case_id, items), strict=True):
            headings.append({**item, "level": len(chain), "title": chain[-1], "line": outline.spans[chain][0], "covered_by": cover})
        # each line with the heading chain of its piece: a snippet selected there goes to that place
        lines = [(n, text, heading_at(outline, n)) for n, text in enumerate(outline.lines[:MAX_NOTE_LINES], start=1)]

    conversation = None
    place = case_turn(case)
    if place is not None:  # a conversation's turn: its turns, each labeled on its own
        total = case.get("conversation", {}).get("turns")
        conversation = [{"id": t, "question": str(doc.case(t).get("question") or ""), "here": t == case_id}
                        for t in (turn_id(place[0], n) for n in range(1, (total if type(total) is int else 0) + 1))]
    return {
        "set": set_name, "case_id": case_id, "version": case_version(case), "case": case, "line": doc.line_of(case_id),
        "question": str(case.get("question") or ""), "answerable": case.get("answerable") is not False,
        "facts": [str(f) for f in case.get("expected_key_facts") or []],
        "supports": supports, "groups": case.get("required_support_groups") or [],
        "problems": case_problems(case), "warnings": support_warnings(case, project.corpus, chunks if record or live else None),
        "run": run_id, "runs": project.runs(), "record": record, "stage": _stage(record),
        "asked": live, "ask_error": asked[1] if asked is not None else None,
        "answer": str((record or {}).get(Rec.ANSWER) or ""),
        "chunks": [{**c, "covered_by": cover} for c, cover in zip(chunks, _covering(doc, case_id, chunks), strict=True)],
        "filter": filter_, "position": None if here is None else here + 1, "total": len(ids),
        "prev": before[-1] if before else None, "next": after[0] if after else None,
        "notes": project.notes(), "note": note if outline is not None else None, "headings": headings, "lines": lines,
        "cut": outline is not None and len(outline.lines) > MAX_NOTE_LINES,
        "query": query, "hits": project.search(query) if query.strip() else [], "conversation": conversation,
    }


"""MTRAG's human ratings -> a run folder of the rated answers and their human grades.

MTRAG (IBM mt-rag-benchmark, `evaluations/reference_subset_with_human_evaluations.json`)
holds `tasks` (the conversations: `task_id` = `<conversation_id><::><turn>`, `input`, gold
`contexts`, `targets`, `Answerability`, `Collection`), `documents` (the passages' text) and
`evaluations`: one rated answer per task and model (`model_id`, `model_response`), each
aspect rated by annotators, `annotations.<aspect>.<annotator id> = {value: "1".."4",
timestamp}`, on No (1) / Mostly No (2) / Mostly Yes (3) / Yes (4).

`import_ratings(path, results_dir, model_id)` writes `results/<run_id>/`: results.jsonl with
one record per task the model answered (the case as `evalkit import --format mtrag` names
its turn, `<conversation_id>#<turn>`; the answer; the task's gold passages as the retrieved
context, the passages the annotators rated against, with their full text) and
human_grades.jsonl with one grade per (task, annotator), grader `mtrag:<annotator id>`:

- faithfulness -> groundedness, completeness -> correctness (appropriateness and naturalness
  have no evalkit score: kept in the grade's `source.ratings`, not graded);
- values by `GRADE_OF`: Yes 4 -> 5 (the rubric's "all claims supported" / "fully correct"),
  Mostly Yes 3 -> 4 ("most"), Mostly No 2 -> 2 ("major claims unsupported" / "partly
  wrong"), No 1 -> 1 ("contradicts" / "mostly wrong"); 0 ("unrelated") and 3 are not used.
  The map is monotone, so every rank- or category-based agreement (ordinal alpha, Fleiss'
  and unweighted Cohen's kappa, Spearman) equals the one on MTRAG's own 1-4 values.

Judge the run (`judge_answers --run-id ID`) and its metrics.json holds the judge-vs-annotator
agreement, the annotators' agreement and the corrected means (EVAL.md, "Judges").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import InputError, Problem
from evalkit.evalset.turns import turn_id
from evalkit.interop.importers.mtrag import ANSWERABLE, note_of, passage_heading
from evalkit.jsonio import read_json
from evalkit.store.runlog import Rec

__all__ = ["ASPECT_OF", "GRADE_OF", "import_ratings", "rated_run"]

# MTRAG aspect -> the evalkit score it grades.
ASPECT_OF = {"faithfulness": Rec.GROUNDEDNESS, "completeness": Rec.CORRECTNESS}
# MTRAG's 1-4 value -> evalkit's 0-5 grade (the module docstring says why).
GRADE_OF = {1: 1, 2: 2, 3: 4, 4: 5}
HUMAN_ASPECTS = ("faithfulness", "completeness", "appropriateness", "naturalness")
TASK_SEP = "<::>"


def _problem(path: Path, where: str, message: str) -> Problem:
    return Problem(message, path=str(path), field=where)


def _load(path: Path) -> dict[str, Any]:
    data = read_json(path, what="MTRAG ratings")  # the bounded reader: size, depth, UTF-8, line named
    missing = [k for k in ("tasks", "documents", "evaluations") if not isinstance(data.get(k) if isinstance(data, dict) else None, list)]
    if missing:
        raise InputError([_problem(path, k, "expected a list (MTRAG's human evaluations file)") for k in missing])
    return data


def _context(task: Mapping[str, Any], texts: Mapping[str, str]) -> list[dict[str, Any]]:
    collection = str(task.get("Collection") or "mtrag")
    out = []
    for rank, c in enumerate(task.get("contexts") or [], 1):
        doc = str(c.get("document_id"))
        out.append({"chunk_id": doc, "rel_path": note_of(collection, doc), "heading_path": passage_heading(doc),
                    "rank": rank, "text": texts.get(doc) or c.get("text") or "", "text_truncated": False})
    return out


def rated_run(path: str | Path, model_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The records and grade lines of `model_id`'s rated answers, in the file's task order.

    Raises:
        InputError: the file is not MTRAG's human evaluations (named fields), or no answer of
            `model_id` is in it (the models it has are named).
    """
    from evalkit.judges.grades import SCHEMA_VERSION, graded_item

    path = Path(path)
    data = _load(path)
    texts = {str(d.get("document_id")): str(d.get("text") or "") for d in data["documents"] if isinstance(d, dict)}
    tasks = {t.get("task_id"): t for t in data["tasks"] if isinstance(t, dict)}
    models = sorted({str(e.get("model_id")) for e in data["evaluations"] if isinstance(e, dict)})
    if model_id not in models:
        raise InputError([_problem(path, "evaluations[].model_id", f"no answer of model {model_id!r}; the file has {', '.join(models)}")])
    records: list[dict[str, Any]] = []
    lines: list[dict[str, Any]] = []
    problems = []
    for i, ev in enumerate(data["evaluations"]):
        if not isinstance(ev, dict) or ev.get("model_id") != model_id:
            continue
        task = tasks.get(ev.get("task_id"))
        conv, _, turn = str(ev.get("task_id")).partition(TASK_SEP)
        if task is None or not turn.isdigit():
            problems.append(_problem(path, f"evaluations[{i}].task_id", f"no task {ev.get('task_id')!r} in tasks"))
            continue
        cid = turn_id(conv, int(turn))
        messages = [m for m in task.get("input") or [] if isinstance(m, dict)]
        label = (task.get("Answerability") or ["ANSWERABLE"])[0]
        targets = [t.get("text") for t in task.get("targets") or [] if isinstance(t, dict) and t.get("text")]
        case = {"id": cid, "question": messages[-1].get("text") if messages else "",
                "answerable": ANSWERABLE.get(label, True), "expected_answer": targets[0] if targets else None,
                "domain": task.get("Collection"), "tags": ["mtrag", f"mtrag:{str(label).lower()}"],
                "conversation": {"id": conv, "turn": int(turn)},
                "mtrag": {"task_id": ev.get("task_id"), "model_id": model_id}}
        rec = {"schema_version": 1, Rec.CASE_ID: cid, Rec.CASE_INDEX: len(records), "case": case,
               "question": case["question"], "answer": ev.get("model_response") or "",
               "history": [{"role": "user" if m.get("speaker") == "user" else "assistant", "content": m.get("text") or ""}
                           for m in messages[:-1]],
               "retrieved_chunks": _context(task, texts), "references": [],
               Rec.GROUNDEDNESS: None, Rec.CORRECTNESS: None, "abstention": None, "judge_input": None,
               "error": None, Rec.JUDGE_ERRORS: [], Rec.MISSING_FIELDS: []}
        records.append(rec)
        item = graded_item(rec)
        ann = ev.get("annotations") or {}
        graders = sorted({a for aspect in HUMAN_ASPECTS for a in (ann.get(aspect) or {})})
        for who in graders:
            raw = {aspect: (ann.get(aspect) or {}).get(who) for aspect in HUMAN_ASPECTS}
            raw = {k: v for k, v in raw.items() if isinstance(v, dict)}
            grade: dict[str, Any] = {"schema_version": SCHEMA_VERSION, Rec.CASE_ID: cid, "grader": f"mtrag:{who}", **item}
            for aspect, kind in ASPECT_OF.items():
                v = raw.get(aspect, {}).get("value")
                if v is not None:
                    if str(v) not in ("1", "2", "3", "4"):
                        problems.append(_problem(path, f"evaluations[{i}].annotations.{aspect}.{who}.value",
                                                 f"expected 1-4, got {v!r}"))
                        continue
                    grade[kind] = GRADE_OF[int(v)]
            if not any(k in grade for k in ASPECT_OF.values()):
                continue
            stamps = [r.get("timestamp") for r in raw.values() if isinstance(r.get("timestamp"), int | float)]
            grade["graded_at"] = (datetime.fromtimestamp(max(stamps), timezone.utc).isoformat(timespec="seconds")
                                  if stamps else None)
            grade["source"] = {"dataset": "mtrag", "scale": [1, 4],
                               "ratings": {k: int(v["value"]) for k, v in raw.items() if str(v.get("value")) in "1234"}}
            lines.append(grade)
    if problems:
        raise InputError(problems)
    return records, lines


def import_ratings(path: str | Path, results_dir: str | Path, model_id: str, *, run_id: str | None = None,
                   force: bool = False) -> Path:
    """Write the run folder of `model_id`'s rated answers (see the module docstring).

    Args:
        path: MTRAG's human evaluations JSON.
        results_dir: where run folders live.
        model_id: the model whose answers become the run (`reference`, `gpt-4o`, ...).
        run_id: the folder's name; default `mtrag-<model_id>` (slugged).
        force: replace an existing folder of that name.

    Returns:
        The run folder.

    Raises:
        InputError: the ratings file's problems, or the folder exists without `force`.
    """
    import re

    from evalkit.judges.grades import GRADES_FILE
    from evalkit.store.atomic import staged_dir

    records, lines = rated_run(path, model_id)
    run_id = run_id or "mtrag-" + re.sub(r"[^A-Za-z0-9._-]+", "-", model_id)
    final = Path(results_dir) / run_id
    if final.exists() and any(final.iterdir()) and not force:
        raise InputError([Problem(f"{final} exists; give --force to replace it", path=str(final))])
    # The context is the task's gold passages: K is the most any task has.
    k = max((len(r["retrieved_chunks"]) for r in records), default=1) or 1
    config = {"run_id": run_id, "settings": {"k": [k]}, "source": {"dataset": "mtrag", "file": str(path), "model_id": model_id}}
    # Built out of sight and put in place whole: a killed import leaves no half run.
    with staged_dir(final, replace=force) as folder:
        (folder / "config.json").write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
        (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
        (folder / GRADES_FILE).write_bytes(b"".join(orjson.dumps(g) + b"\n" for g in lines))
    return final

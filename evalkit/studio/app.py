"""The studio's routes: server-rendered pages (Jinja2, autoescaped) and JSON doors for writes.

    GET  /                                  the eval sets, runs, and candidates to review
    GET  /queue?set=&filter=&run=           the cases of one eval set (all, unlabeled, stale, failed in a run)
    GET  /case?set=&id=&run=&note=&q=       label one case: question, gold, a run's (or a live) chunks, the notes
    POST /api/edit                          one edit (editing.edit_case): 200 the case now, 409 a conflict,
                                            422 a refused edit
    GET  /fixes?set=                        anchorcheck's suggested anchors for the stale supports (fixing.py)
    POST /api/fixes                         write them into the set's next version, as validate --fix does
    POST /api/accept-top                    label the unlabeled cases (or the selected `ids`) with the chatbot's top
                                            N chunks, as label --accept-top [--ids] does (fixing.accept_top_now)
    GET  /rename?set=&from=&to=             move a renamed note's anchors: the supports of `from`, planned to `to`
    POST /api/rename                        write them into the set's next version (fixing.write_rename)
    POST /api/drop                          drop a category or a tag from the selected cases, in place
                                            (fixing.drop_from_cases): 200, 409 a case changed meanwhile
    GET  /grades?run=&grader=&filter=&n=&seed=   a run's answers to grade (grading.py)
    GET  /grade?run=&id=&grader=&filter=    grade one answer: groundedness and correctness, 0-5
    POST /api/grade                         one grade (grading.save_grade, through judges.grades): 200 the
                                            line written, 409 the run changed since the page loaded
    GET  /pairs?a=&b=&reviewer=&filter=     two runs' changed cases (compare's flips and drift) to review side by side
    GET  /pair?a=&b=&id=&reviewer=&filter=  one case: run a's answer beside run b's; a, b or equal (pairs.py)
    POST /api/pair                          one choice (pairs.save_choice, through compare.pairwise): 200 the
                                            line written, 409 an answer changed since the page loaded
    GET  /review, /review/case?id=          generated candidates (reviewing.py), when given
    POST /api/review                        one decision (reviewing.decide, through review.ReviewSession):
                                            200 the new version written, 409 decided meanwhile
    GET  /static/<name>                     the bundled script and stylesheet (a fixed list)

Everything a page shows comes from `StudioProject`, which finds files by name only; the
`Guard` middleware (guard.py) decides who gets here at all. Starlette is imported here, and
this module only when `evalkit serve-studio` runs.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from evalkit.errors import InputError
from evalkit.store.runlog import Rec
from evalkit.studio.asking import LIVE, LiveTarget
from evalkit.studio.editing import Conflict, EditRefused, edit_case
from evalkit.studio.fixing import (
    Busy,
    PlanChanged,
    accept_top_now,
    drop_from_cases,
    fix_view,
    rename_view,
    write_fixes,
    write_rename,
)
from evalkit.studio.grading import (
    GRADE_FILTERS,
    SAMPLE,
    GradeConflict,
    grade_rows,
    grade_view,
    save_grade,
    shown_ids,
)
from evalkit.studio.guard import Guard, csrf_value
from evalkit.studio.pairs import (
    PAIR_FILTERS,
    PairConflict,
    pair_rows,
    pair_view,
    save_choice,
)
from evalkit.studio.project import StudioProject
from evalkit.studio.reviewing import AlreadyDecided, decide, review_rows, review_view
from evalkit.studio.views import case_view, queue_view, render

__all__ = ["create_app"]

STATIC = {"studio.js": "text/javascript; charset=utf-8", "studio.css": "text/css; charset=utf-8"}
# An edit is a few hundred bytes; this refuses anything that is not one before parsing it.
MAX_EDIT_BYTES = 1 << 20


def create_app(project: StudioProject, *, token: str, port: int, live: LiveTarget | None = None) -> Guard:
    """The studio as an ASGI app: the routes behind the Guard.

    Args:
        project: what it serves.
        token: this start's secret (the printed URL carries it).
        port: the port it listens on (the Host and Origin it answers to).
        live: the chatbot a case page may ask now (run "live"), or None.
    """
    csrf = csrf_value(token)

    def page(name: str, **context: Any) -> HTMLResponse:
        return HTMLResponse(render(name, csrf=csrf, sets=project.set_names(), **context))

    async def home(request: Request) -> Response:
        return page("home.html.j2", title="evalkit studio", runs=project.runs(), vault=str(project.vault or ""),
                    review=project.review is not None)

    async def queue(request: Request) -> Response:
        q = request.query_params
        path = project.eval_set(q.get("set"))
        if path is None:
            return _missing("no such eval set")
        view = await run_in_threadpool(queue_view, project, q.get("set", ""), path, q.get("filter") or "all", q.get("run") or None)
        view["live"] = live.name if live is not None else None
        return page("queue.html.j2", title=f"queue: {view['set']}", view=view)

    async def case(request: Request) -> Response:
        q = request.query_params
        path = project.eval_set(q.get("set"))
        if path is None:
            return _missing("no such eval set")
        run_id = q.get("run") or None
        asked = None
        if run_id == LIVE and live is not None:
            try:
                asked = await live.chunks(path, q.get("id", ""))
            except InputError:
                return _missing("no such case")
        try:
            view = await run_in_threadpool(case_view, project, q.get("set", ""), path, q.get("id", ""), run_id,
                                           q.get("note") or None, q.get("q") or "", q.get("filter") or "all", asked)
        except InputError:
            return _missing("no such case")
        view["live"] = live.name if live is not None else None
        return page("case.html.j2", title=f"{view['case_id']}: label", view=view)

    async def grades(request: Request) -> Response:
        q = request.query_params
        run_id = q.get("run")
        if run_id not in project.runs():
            return _missing("no such run")
        grader, sample = q.get("grader") or "", _sample(q)
        filter_ = q.get("filter") if q.get("filter") in GRADE_FILTERS else "sample"
        rows = await run_in_threadpool(grade_rows, project, run_id, grader)
        ids = set(await run_in_threadpool(shown_ids, project, run_id, rows, filter_, sample))
        return page("grades.html.j2", title=f"grade: {run_id}", view={
            "run": run_id, "grader": grader, "filter": filter_, "filters": GRADE_FILTERS, "n": sample[0], "seed": sample[1],
            "rows": [r for r in rows if r["id"] in ids], "n_all": len(rows), "n_graded": sum(r["status"] == "graded" for r in rows)})

    async def grade(request: Request) -> Response:
        q = request.query_params
        run_id = q.get("run")
        if run_id not in project.runs():
            return _missing("no such run")
        view = await run_in_threadpool(grade_view, project, run_id, q.get("id", ""), q.get("grader") or "", q.get("filter") or "sample",
                                       _sample(q))
        if view is None:
            return _missing("no answer of that case to grade")
        return page("grade.html.j2", title=f"{view['case_id']}: grade", view=view)

    async def save(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("run", "id", "grader")) \
                or not isinstance(data.get("item"), dict):
            return JSONResponse({"error": "a grade is {run, id, grader, groundedness, correctness, item}"}, status_code=400)
        if data["run"] not in project.runs():
            return JSONResponse({"error": "no such run"}, status_code=404)
        try:
            line = await run_in_threadpool(save_grade, project, data["run"], data["id"], data["grader"].strip(),
                                           data.get(Rec.GROUNDEDNESS), data.get(Rec.CORRECTNESS), data["item"])
        except GradeConflict as e:
            return JSONResponse({"conflict": True, "error": _text(e), "current": e.item}, status_code=409)
        except InputError as e:  # bad grades, no such case, the run busy with another command
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        return JSONResponse({"line": line})

    def two_runs(q: Any) -> tuple[str, str] | None:
        a, b, runs = q.get("a"), q.get("b"), project.runs()
        return (a, b) if a in runs and b in runs and a != b else None

    async def pairs(request: Request) -> Response:
        q = request.query_params
        ab = two_runs(q)
        if ab is None:
            return _missing("choose two different runs of the results folder")
        reviewer = q.get("reviewer") or ""
        filter_ = q.get("filter") if q.get("filter") in PAIR_FILTERS else PAIR_FILTERS[0]
        try:
            rows = await run_in_threadpool(pair_rows, project, *ab, reviewer, filter_)
        except InputError as e:
            return _missing(f"these runs cannot be compared: {_text(e)}")
        return page("pairs.html.j2", title=f"review: {ab[0]} vs {ab[1]}", view={
            "a": ab[0], "b": ab[1], "reviewer": reviewer, "filter": filter_, "filters": PAIR_FILTERS, "rows": rows,
            "n_done": sum(r["status"] in ("a", "b", "equal") for r in rows)})

    async def pair(request: Request) -> Response:
        q = request.query_params
        ab = two_runs(q)
        if ab is None:
            return _missing("choose two different runs of the results folder")
        try:
            view = await run_in_threadpool(pair_view, project, *ab, q.get("id", ""), q.get("reviewer") or "", q.get("filter") or "")
        except InputError as e:
            return _missing(f"these runs cannot be compared: {_text(e)}")
        if view is None:
            return _missing("the two runs do not both hold that case")
        return page("pair.html.j2", title=f"{view['case_id']}: a or b", view=view)

    async def choose(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("a", "b", "id", "reviewer", "choice")) \
                or not isinstance(data.get("shown"), dict):
            return JSONResponse({"error": "a choice is {a, b, id, reviewer, choice, shown}"}, status_code=400)
        if two_runs(data) is None:
            return JSONResponse({"error": "no such pair of runs"}, status_code=404)
        try:
            line = await run_in_threadpool(save_choice, project, data["a"], data["b"], data["id"], data["reviewer"].strip(),
                                           data["choice"], data["shown"])
        except PairConflict as e:
            return JSONResponse({"conflict": True, "error": _text(e), "current": e.now}, status_code=409)
        except InputError as e:  # a bad choice, no such case, run b busy, the disk refused
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        return JSONResponse({"line": line})

    async def fixes(request: Request) -> Response:
        name = request.query_params.get("set")
        path = project.eval_set(name)
        if path is None:
            return _missing("no such eval set")
        view = await run_in_threadpool(fix_view, path, project.vault)
        return page("fixes.html.j2", title=f"fix stale anchors: {name}", view={**view, "set": name})

    async def write_fix(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("set", "digest")):
            return JSONResponse({"error": "a fix is {set, digest}"}, status_code=400)
        path = project.eval_set(data["set"])
        if path is None:
            return JSONResponse({"error": "no such eval set"}, status_code=404)
        try:
            written = await run_in_threadpool(lambda: write_fixes(path, project.vault, data["digest"], results_dir=project.results_dir))
        except PlanChanged as e:
            return JSONResponse({"conflict": True, "error": _text(e)}, status_code=409)
        except InputError as e:
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        project.add_eval_set(written)  # the new version is ours: it can be labeled now
        return JSONResponse({"written": project.set_name(written)})

    async def accept_top(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        ids = data.get("ids") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("set"), str) or type(data.get("n")) is not int or not 1 <= data["n"] <= 50 \
                or (ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids))):
            return JSONResponse({"error": "a batch label is {set, n: 1-50, ids?: [case id]}"}, status_code=400)
        path = project.eval_set(data["set"])
        if path is None or live is None:
            return JSONResponse({"error": "no such eval set" if path is None else "no chatbot to ask"}, status_code=404)
        try:
            done = await accept_top_now(path, live, data["n"], results_dir=project.results_dir, ids=ids)
        except Busy as e:
            return JSONResponse({"conflict": True, "error": _text(e)}, status_code=409)
        except InputError as e:
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        return JSONResponse(done)

    async def rename(request: Request) -> Response:
        q = request.query_params
        path = project.eval_set(q.get("set"))
        if path is None:
            return _missing("no such eval set")
        view = await run_in_threadpool(rename_view, path, project.notes(), q.get("from") or "", q.get("to") or "")
        return page("rename.html.j2", title=f"move a note's anchors: {q.get('set')}", view={**view, "set": q.get("set")})

    async def write_renamed(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("set", "from", "to", "digest")):
            return JSONResponse({"error": "a rename is {set, from, to, digest}"}, status_code=400)
        path = project.eval_set(data["set"])
        if path is None:
            return JSONResponse({"error": "no such eval set"}, status_code=404)
        try:
            written = await run_in_threadpool(lambda: write_rename(path, project.notes(), data["from"], data["to"], data["digest"],
                                                                   results_dir=project.results_dir))
        except PlanChanged as e:
            return JSONResponse({"conflict": True, "error": _text(e)}, status_code=409)
        except InputError as e:
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        project.add_eval_set(written)
        return JSONResponse({"written": project.set_name(written)})

    async def drop(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        versions = data.get("versions") if isinstance(data, dict) else None
        what = {k: data.get(k) for k in ("category", "tag")} if isinstance(data, dict) else {}
        if not isinstance(data, dict) or not isinstance(data.get("set"), str) or not isinstance(versions, dict) \
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items()) \
                or not all(v is None or isinstance(v, str) for v in what.values()):
            return JSONResponse({"error": "a drop is {set, versions: {case id: version}, category? | tag?}"}, status_code=400)
        path = project.eval_set(data["set"])
        if path is None:
            return JSONResponse({"error": "no such eval set"}, status_code=404)
        try:
            done = await run_in_threadpool(lambda: drop_from_cases(path, versions, **what, results_dir=project.results_dir))
        except Conflict as e:
            return JSONResponse({"conflict": True, "error": _text(e), "current": e.current, "version": e.version}, status_code=409)
        except InputError as e:  # no such case, a frozen file, the file changed on disk, the disk refused
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        return JSONResponse(done)

    async def review(request: Request) -> Response:
        if project.review is None:
            return _missing("no candidates to review: start with --candidates FILE --into EVAL_SET")
        view = await run_in_threadpool(review_rows, project.review)
        return page("review.html.j2", title="review candidates", view=view)

    async def review_case(request: Request) -> Response:
        if project.review is None:
            return _missing("no candidates to review")
        view = await run_in_threadpool(review_view, project.review, request.query_params.get("id", ""), project.corpus)
        if view is None:
            return _missing("no such candidate")
        return page("candidate.html.j2", title=f"{view['case_id']}: review", view=view)

    async def decide_one(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if project.review is None:
            return JSONResponse({"error": "no candidates to review"}, status_code=404)
        facts = data.get("facts") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("id", "decision")) \
                or not isinstance(data.get("question", ""), str) or not isinstance(data.get("reviewer", ""), str) \
                or (facts is not None and not (isinstance(facts, list) and all(isinstance(f, str) for f in facts))):
            return JSONResponse({"error": "a decision is {id, decision, question?, facts?, reviewer?}"}, status_code=400)
        try:
            done = await run_in_threadpool(lambda: decide(project.review, data["id"], data["decision"], question=data.get("question"),
                                                          facts=facts, reviewer=data.get("reviewer") or None))
        except AlreadyDecided as e:
            return JSONResponse({"conflict": True, "error": _text(e)}, status_code=409)
        except InputError as e:
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        return JSONResponse(done)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return _missing("no such file")
        text = resources.files("evalkit.studio").joinpath("static", name).read_bytes()
        return Response(text, media_type=STATIC[name])

    async def edit(request: Request) -> Response:
        data = await _json_body(request)
        if isinstance(data, Response):
            return data
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("set", "id", "version", "op")):
            return JSONResponse({"error": "an edit is {set, id, version, op, args}"}, status_code=400)
        path = project.eval_set(data["set"])
        if path is None:
            return JSONResponse({"error": "no such eval set"}, status_code=404)
        args = data.get("args") if isinstance(data.get("args"), dict) else {}
        try:
            done = await run_in_threadpool(edit_case, path, data["id"], data["version"], data["op"], args,
                                           results_dir=project.results_dir, corpus=project.corpus)
        except Conflict as e:
            return JSONResponse({"conflict": True, "error": _text(e), "current": e.current, "version": e.version}, status_code=409)
        except EditRefused as e:
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=422)
        except InputError as e:  # no such case, a frozen file, the file changed on disk meanwhile
            return JSONResponse({"error": _text(e), "problems": [p.message for p in e.problems]}, status_code=409)
        return JSONResponse({"case": done.case, "version": done.version, "written": done.written, "warnings": done.warnings})

    async def os_refused(request: Request, exc: Exception) -> Response:
        # A write the OS refused (a full disk, an I/O error) in any route: the page says why;
        # the atomic writers left the file as it was.
        e = exc if isinstance(exc, OSError) else OSError(str(exc))
        where = f": {e.filename}" if e.filename else ""
        return JSONResponse({"error": f"not written: {e.strerror or e}{where}"}, status_code=507)

    app = Starlette(exception_handlers={OSError: os_refused}, routes=[
        Route("/", home),
        Route("/queue", queue),
        Route("/case", case),
        Route("/static/{name}", static),
        Route("/grades", grades),
        Route("/grade", grade),
        Route("/api/edit", edit, methods=["POST"]),
        Route("/api/grade", save, methods=["POST"]),
        Route("/pairs", pairs),
        Route("/pair", pair),
        Route("/api/pair", choose, methods=["POST"]),
        Route("/fixes", fixes),
        Route("/api/fixes", write_fix, methods=["POST"]),
        Route("/api/accept-top", accept_top, methods=["POST"]),
        Route("/rename", rename),
        Route("/api/rename", write_renamed, methods=["POST"]),
        Route("/api/drop", drop, methods=["POST"]),
        Route("/review", review),
        Route("/review/case", review_case),
        Route("/api/review", decide_one, methods=["POST"]),
    ])
    return Guard(app, token=token, port=port)


async def _json_body(request: Request) -> Any:
    """The request's JSON body, or the Response refusing it (too large, not JSON)."""
    body = await request.body()
    if len(body) > MAX_EDIT_BYTES:
        return JSONResponse({"error": "an edit is at most 1 MB"}, status_code=413)
    try:
        return json.loads(body)
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, status_code=400)


def _sample(q: Any) -> tuple[int, int]:
    """(n, seed) of the grading sample from the query (`label --grade-answers`' defaults)."""
    def number(name: str, default: int, low: int) -> int:
        v = q.get(name) or ""
        return max(low, int(v)) if v.lstrip("-").isdigit() and len(v) < 10 else default

    return number("n", SAMPLE[0], 1), number("seed", SAMPLE[1], 0)  # numpy's seeds are not negative


def _missing(what: str) -> Response:
    return Response(what + "\n", status_code=404, media_type="text/plain; charset=utf-8")


def _text(e: InputError) -> str:
    return "; ".join(str(p) for p in e.problems)

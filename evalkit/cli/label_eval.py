"""label_eval.py: maintain an eval set's gold labels (the non-interactive modes).

--validate     check every gold support against the notes and the target's retrieval
--fix          --validate, then write anchorcheck's suggested paths into a new version
               (both are aliases of `evalkit validate --labels / --fix`: validate.check_labels)
--accept-top N label cases with the target's top N chunks ("label_source": "auto")
--review-auto  the cases marked label_source auto / generated: in a terminal, walk them in the
               labeler; piped, list them
--review-auto --eval-set CANDIDATES --into EVAL_SET [--output NEW] [--vault DIR] [--reviewer NAME]
               review `evalkit generate` candidates one by one with line prompts
               ([a]ccept [e]dit [r]eject [s]kip [q]uit; evalkit/authoring/review.py): decisions go to
               <candidates stem>.review.jsonl as they are made (a rerun resumes), and the
               accepted cases are appended to a new version of EVAL_SET (default
               <stem>.v<N+1>.jsonl; EVAL_SET itself is never written)
--grade-answers --run-id ID   grade a seeded sample of a run's answers 0-5 (plain prompts;
               grades go to results/ID/human_grades.jsonl; evalkit/judges/grades.py)

(no mode)      the full-screen interactive labeler (evalkit/authoring/labeler.py, cli/label_app.py)

No command destroys labels: an existing --output is refused unless --force, which first copies
it to <file>.bak (.bak.1, ... when taken); the labeler and --new go on in an --output an
earlier session of the same command wrote (rerun = resume), and --review-auto --into appends
to its new version. Every prompt asks a bad answer again.

Exit 0 ok, 1 stale labels (or fixes declined), 2 bad input (or no terminal for the
labeler), 3 the target failed on some cases (--accept-top).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_INCOMPLETE,
    EXIT_INPUT,
    PANEL_TARGET,
    PanelledCommand,
    eval_set_option,
    exit_on_known_errors,
    force_option,
    load_dotenv_once,
    plain_metavars,
    printable,
    results_dir_option,
    selection_options,
    settings_default,
    target_options,
)
from evalkit.cli.validate import build_target_from, request_settings, said_backup, with_target
from evalkit.store.runlog import Rec

DEFAULT_VAULT = Path(settings_default("vault"))

app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    help="Maintain gold labels: --accept-top N (auto-label from the target's top chunks), --review-auto (walk or list auto / generated labels; "
    "with --into EVAL_SET: accept / edit / reject generated candidates into a new version of EVAL_SET), "
    "--grade-answers --run-id ID (grade a run's answers 0-5 for judge_answers' agreement), --new (add a case); "
    "no mode flag opens the full-screen interactive labeler (a terminal is needed). --validate (stale anchors) and "
    "--fix (new version with the suggested paths) are aliases of `evalkit validate --labels` and `--fix`. "
    "Exit 0 ok, 1 stale labels, 2 bad input, 3 target failures.",
)

_MODE = "Modes"
_F = "Files"
_S = "Selection (labeler)"
_T = PANEL_TARGET
_G = "Grading (--grade-answers)"
_TARGET = target_options(
    _T, vault_help="Notes folder: read directly for anchor checks, and indexed by the in-process reference chatbot."
)
_SELECT = selection_options(_S)


@app.command(cls=PanelledCommand)
def main(
    validate: bool = typer.Option(False, "--validate", help="Check every gold support against the notes and the target's retrieval; exit 1 when any is stale (alias of evalkit validate --labels).", rich_help_panel=_MODE),
    fix: bool = typer.Option(False, "--fix", help="Validate, then write the suggested file and heading paths into a new version (after a y/N question; alias of evalkit validate --fix).", rich_help_panel=_MODE),
    accept_top: Optional[int] = typer.Option(None, "--accept-top", min=1, metavar="N", help="Label each unlabeled answerable case (or --ids) with the target's top N chunks, marked label_source=auto.", rich_help_panel=_MODE),
    new: bool = typer.Option(
        False, "--new", rich_help_panel=_MODE,
        help="Add a case: asks for its question, answerable, category, difficulty and tags, appends it with a fresh id, then (in a terminal) opens the labeler on it.",
    ),
    review_auto: bool = typer.Option(
        False, "--review-auto", rich_help_panel=_MODE,
        help="Review the cases marked label_source=auto (--accept-top) or generated (evalkit generate): in a terminal, walk only them "
        "in the labeler; piped, list them. With --into: accept / edit / reject each candidate at a line prompt, accepted ones "
        "go to a new version of --into.",
    ),
    grade_answers: bool = typer.Option(False, "--grade-answers", help="Grade a seeded sample of --run-id's answers for groundedness and correctness 0-5 (plain prompts; grades go to the run's human_grades.jsonl).", rich_help_panel=_MODE),
    eval_set: Optional[list[Path]] = eval_set_option("Eval set file (or folder for --validate / --review-auto); repeatable.", _F),
    output: Optional[Path] = typer.Option(
        None, "--output", rich_help_panel=_F,
        help="Write here instead (--fix default: <stem>.v2.jsonl; --accept-top default: in place; --review-auto --into: the new "
        "version, default <into stem>.v<N+1>.jsonl). One that exists is refused unless --force, except that rerunning the same "
        "command goes on in it: the labeler and --new edit and append to it (when it holds every id of --eval-set), "
        "--review-auto --into appends to it.",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before writing --fix's new version.", rich_help_panel=_F),
    force: bool = force_option(" (the old file is first copied to <file>.bak, or .bak.1, ... when taken: never lost)", _F),
    into: Optional[Path] = typer.Option(
        None, "--into", rich_help_panel=_F,
        help="--review-auto: the eval set the accepted candidates of --eval-set are added to; they go to a new version of it "
        "(--output, default <stem>.v<N+1>.jsonl), it is never written. Decisions are logged in <candidates stem>.review.jsonl (a rerun resumes).",
    ),
    reviewer: Optional[str] = typer.Option(None, "--reviewer", help="--review-auto --into: your name, stored with each decision in the review log.", rich_help_panel=_F),
    results_dir: Path = results_dir_option(_F),
    ids: Optional[list[str]] = typer.Option(None, "--ids", help="Only these case ids (comma-separated or repeated), for --accept-top and the labeler.", rich_help_panel=_S),
    all_cases: bool = typer.Option(False, "--all", help="Labeler: after the unlabeled answerable cases, walk every other case too.", rich_help_panel=_S),
    category: Optional[list[str]] = _SELECT["category"],
    tag: Optional[list[str]] = _SELECT["tag"],
    api_url: Optional[str] = _TARGET["api_url"],
    target: Optional[str] = _TARGET["target"],
    vault: Optional[Path] = _TARGET["vault"],
    param: Optional[list[str]] = _TARGET["param"],
    timeout: Optional[float] = _TARGET["timeout"],
    retries: Optional[int] = _TARGET["retries"],
    k: Optional[int] = typer.Option(None, "--k", min=1, help="Chunks to ask the target for per question (default: 50 for --validate / --fix, 20 in the labeler).", rich_help_panel=_T),
    no_retrieval: bool = typer.Option(False, "--no-retrieval", help="--validate: look at the notes only, do not ask the target.", rich_help_panel=_T),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="--grade-answers: the run whose answers to grade.", rich_help_panel=_G),
    sample: int = typer.Option(20, "--sample", min=1, help="--grade-answers: how many answers the seeded sample holds.", rich_help_panel=_G),
    seed: int = typer.Option(0, "--seed", help="--grade-answers: the sample's seed (same seed = same sample, so a rerun resumes it).", rich_help_panel=_G),
    grader: Optional[str] = typer.Option(None, "--grader", help="--grade-answers: your name, stored with each grade.", rich_help_panel=_G),
    plan_width: Optional[float] = typer.Option(
        None, "--plan-width", min=1e-9, rich_help_panel=_G,
        help="--grade-answers: grade nothing; print how many more graded cases would narrow each corrected (PPI++) "
        "interval to this width, and which cases to grade next (a seeded uniform draw, --seed).",
    ),
) -> None:
    """Label the gold supports of EVAL_SET. No mode flag opens the full-screen interactive
    labeler (it needs a terminal) on its unlabeled answerable cases; a mode flag below runs
    that job instead: --validate, --fix, --accept-top and --review-auto (piped) print or
    write without asking; --fix asks y/N; --new, --review-auto --into and --grade-answers
    ask at line prompts; --new and --review-auto (in a terminal) then open the labeler.
    --validate and --fix are aliases of `evalkit validate --labels` and `--fix`.

    Nothing replaces a file of labels: an existing --output is refused unless --force (the
    old file is kept as <file>.bak); rerunning the same labeler or --new command goes on in
    its --output. Every prompt asks a bad answer again.

    Exit 0 ok, 1 stale labels (--validate), 2 bad input, 3 target failures.
    """
    load_dotenv_once()
    with exit_on_known_errors():
        timeout, retries = request_settings(timeout, retries)
    modes = [name for name, on in (("--validate", validate), ("--fix", fix), ("--accept-top", accept_top is not None), ("--review-auto", review_auto), ("--grade-answers", grade_answers), ("--new", new)) if on]
    if force and (modes == ["--validate"] or grade_answers):
        with exit_on_known_errors():
            from evalkit.errors import BadConfig, Problem

            raise BadConfig(Problem(f"--force replaces an existing --output; {modes[0] if modes == ['--validate'] else '--grade-answers'} "
                                    "writes none", field="--force"))
    if into is not None or reviewer is not None:
        if not review_auto or len(modes) > 1:
            with exit_on_known_errors():
                from evalkit.errors import BadConfig, Problem

                flag = "--into" if into is not None else "--reviewer"
                raise BadConfig(Problem(f"{flag} goes with --review-auto alone (review candidates into a new version), got "
                                        + (", ".join(modes) or "no mode"), field=flag))
        if into is None:
            with exit_on_known_errors():
                from evalkit.errors import BadConfig, Problem

                raise BadConfig(Problem("--reviewer goes with --review-auto --into EVAL_SET", field="--reviewer"))
        _review_candidates(eval_set or [], into, output=output, results_dir=results_dir, vault=vault, reviewer=reviewer, force=force)
        return
    if grade_answers:
        _grade_answers(modes, run_id, results_dir, sample, seed, grader, plan_width)
        return
    paths = eval_set or [Path(p) for p in settings_default("eval_set")]
    if new:
        if len(modes) > 1:
            with exit_on_known_errors():
                from evalkit.errors import BadConfig, Problem

                raise BadConfig(Problem(f"give one mode, got {', '.join(modes)}", field="--new"))
        added = _new_case(paths, output=output, results_dir=results_dir, force=force)
        if sys.stdin.isatty() and sys.stdout.isatty():
            _label_interactively([output or paths[0]], output=None, results_dir=results_dir, ids=[added], all_cases=False,
                                 category=None, tag=None, k=k or 20,
                                 make_target=lambda: build_target_from(target, api_url, vault, timeout, retries, param), vault=vault)
        else:
            print(f"evalkit: label it with: python scripts/label_eval.py --eval-set {shlex.quote(str(output or paths[0]))} --ids {added}")
        return
    if review_auto and len(modes) == 1 and sys.stdin.isatty() and sys.stdout.isatty():
        # In a terminal, review means walking those cases in the labeler; editing one
        # removes its auto mark. Piped, the list below is printed instead.
        with exit_on_known_errors():
            from evalkit.authoring import labeling

            # With an --output an earlier review saved, the cases still marked are read from it.
            marked = [labeling.open_version(paths[0], output, force=force)[0].path] if len(paths) == 1 and output is not None else paths
            auto = [case["id"] for _, _, case in labeling.auto_labeled(marked)]
        if not auto:
            print("evalkit: no case is marked label_source: auto")
            return
        _label_interactively(paths, output=output, results_dir=results_dir, ids=auto, all_cases=False, category=None, tag=None,
                             k=k or 20, make_target=lambda: build_target_from(target, api_url, vault, timeout, retries, param), vault=vault,
                             force=force)
        return
    if not modes:
        wanted = [i.strip() for item in ids or [] for i in item.split(",") if i.strip()]
        _label_interactively(paths, output=output, results_dir=results_dir, ids=wanted, all_cases=all_cases, category=category, tag=tag,
                             k=k or 20, make_target=lambda: build_target_from(target, api_url, vault, timeout, retries, param), vault=vault,
                             force=force)
        return
    with exit_on_known_errors():
        from evalkit.authoring import labeling
        from evalkit.errors import BadConfig, Problem
        from evalkit.targets import build_target, parse_param_options

        if len(modes) > 1 and set(modes) != {"--validate", "--fix"}:
            raise BadConfig(Problem(f"give one mode, got {', '.join(modes)}", field=modes[1]))
        params = parse_param_options(param or [])

        def make_target() -> Any:
            return build_target(target=target, api_url=api_url, vault=vault or DEFAULT_VAULT, timeout=timeout, retries=retries, rps=None, params=params)

        if review_auto:
            _print_auto(labeling.auto_labeled(paths))
            return
        if accept_top is not None:
            if len(paths) != 1:
                raise BadConfig(Problem("--accept-top writes one eval set file; give one --eval-set", field="--eval-set"))
            wanted = [i.strip() for item in ids or [] for i in item.split(",") if i.strip()]
            result = with_target(
                make_target,
                lambda t: labeling.accept_top(
                    paths[0], t, accept_top, ids=wanted or None, output=output, results_dir=results_dir, force=force,
                    on_case=lambda cid, anchors: print(f"labeled {cid}: " + "; ".join(f"{a['rel_path']} > {a['heading_path']}" for a in anchors)),
                ),
            )
            _print_accept(result)
            if result.failed:
                raise typer.Exit(EXIT_INCOMPLETE)
            return

    # --validate / --fix: `evalkit validate --labels / --fix`, the same code.
    from evalkit.cli.validate import check_labels

    check_labels(
        paths, vault=vault, api_url=api_url, target=target, param=param, timeout=timeout, retries=retries, k=k,
        no_retrieval=no_retrieval, fix=fix, output=output, yes=yes, force=force, results_dir=results_dir,
    )


def _grade_answers(modes: list[str], run_id: str | None, results_dir: Path, sample: int, seed: int, grader: str | None,
                   plan_width: float | None = None) -> None:
    """--grade-answers: the seeded sample's ungraded cases, one prompt at a time, then the agreement."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.judges import grades
        from evalkit.store.runs import RunDir

        if len(modes) > 1:
            raise BadConfig(Problem(f"give one mode, got {', '.join(modes)}", field=modes[1]))
        if not run_id:
            raise BadConfig(Problem("--grade-answers needs --run-id ID (the run whose answers to grade)", field="--run-id"))
        run = RunDir.open(results_dir, run_id)
        if plan_width is not None:
            _print_plan(grades.plan_grading(run, plan_width, seed=seed))
            return
        cases = grades.sample_cases(run, sample, seed, grader=grader)

        def ask(prompt: str) -> str | None:
            print(prompt, end="", flush=True)
            line = sys.stdin.readline()
            return line if line else None  # "" = end of input

        if not cases:
            print(f"evalkit: every case of the sample (--sample {sample} --seed {seed}) is graded")
            outcome = grades.GradingOutcome()
        else:
            outcome = grades.grade_cases(run, cases, ask=ask, show=print, grader=grader)
            print(f"\nevalkit: {len(outcome.graded)} graded, {len(outcome.skipped)} skipped, "
                  f"{len(cases) - len(outcome.graded) - len(outcome.skipped)} left; grades in {grades.grades_path(run)}")
        _print_agreement(grades.agreement(run))


def _print_plan(plan: dict[str, Any]) -> None:
    for kind in Rec.JUDGED:
        p = plan.get(kind)
        if p is None:
            print(f"evalkit: {kind}: no corrected interval to plan from (needs 2+ graded and 1+ ungraded scored cases)")
        elif p["n_needed"] is None:
            print(f"evalkit: {kind}: width {p['width_now']:.3f} now; even grading every case would not reach {p['width']:g}")
        else:
            print(f"evalkit: {kind}: width {p['width_now']:.3f} now with {p['n_labeled']} graded; "
                  f"{p['n_needed']} graded ({p['n_more']} more) would bring it to {p['width']:g}")
    if plan["next"]:
        print("evalkit: grade next: " + ", ".join(printable(c) for c in plan["next"]))


def _print_agreement(agree: dict[str, dict[str, Any]]) -> None:
    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    parts = [f"{kind} kappa {f(a['kappa_quadratic'])}, MAE {f(a['mae'])}, n {a['n']}" for kind, a in agree.items()]
    print("evalkit: judge vs human: " + "; ".join(parts))


def _ask(prompt: str) -> str:
    """One answer from stdin (piped input works); end of input is an error."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if not line:
        raise typer.Exit(EXIT_INPUT)
    return line.strip()


def _ask_until(prompt: str, check: Callable[[str], str | None]) -> str:
    """Ask until `check(answer)` finds nothing wrong (it returns why an answer is refused)."""
    while True:
        answer = _ask(prompt)
        why = check(answer)
        if why is None:
            return answer
        print(printable(f"evalkit: {why}; asked again"))


def _yes_no(answer: str, default: str | None = None) -> bool | None:
    """y / yes / n / no (any case; blank = `default`) as a bool; None for anything else."""
    a = answer.strip().lower() or (default or "")
    return True if a in ("y", "yes") else False if a in ("n", "no") else None


DIFFICULTIES = ("easy", "medium", "hard")


def _new_case(paths: list[Path], *, output: Path | None, results_dir: Path, force: bool = False) -> str:
    """--new: ask for the case (each answer checked at its prompt and asked again when bad),
    append it with a fresh id, say which. Returns the id."""
    with exit_on_known_errors():
        from evalkit.authoring import labeling
        from evalkit.errors import BadConfig, Problem

        if len(paths) != 1:
            raise BadConfig(Problem("--new adds to one eval set file; give one --eval-set", field="--eval-set"))
        # Before any question: an --output that cannot be written (frozen, or not a version
        # of --eval-set) is refused now, not after the answers are typed.
        dest = output or paths[0]
        labeling.check_writable(dest, results_dir, source=paths[0])
        labeling.open_version(paths[0], output, force=force)
        allowed = labeling.allowed_categories(dest)
        question = _ask_until("question: ", lambda a: None if a else "the question must not be blank")
        answerable = _yes_no(_ask_until("answerable (do the notes hold the answer)? [Y/n]: ",
                                        lambda a: None if _yes_no(a, "y") is not None else f"answer y or n, got {a!r}"), "y")
        category = _ask_until(f"category ({', '.join(allowed)}; blank = none): ",
                              lambda a: None if not a or a in allowed else f"unknown category {a!r}; one of {', '.join(allowed)}, or blank") or None
        difficulty = _ask_until("difficulty (easy, medium, hard; blank = none): ",
                                lambda a: None if a.lower() in ("", *DIFFICULTIES) else f"unknown difficulty {a!r}; easy, medium, hard or blank").lower()
        tags = [t.strip() for t in _ask("tags (comma-separated; blank = none): ").split(",") if t.strip()]
        case_id, written = labeling.new_case(
            paths[0], question=question, answerable=bool(answerable), category=category, difficulty=difficulty or None,
            tags=tags, output=output, results_dir=results_dir, force=force, on_backup=said_backup,
        )
    print(f"evalkit: added {case_id} to {written}")
    if answerable:
        # Issue 43: without them a judge has nothing to check an answer against (EVAL.md, rule 7).
        print(f"evalkit: warning: {case_id} has no expected_key_facts: its correctness is unscoreable (null) until "
              "you add the facts a correct answer states (the labeler's facts field)", file=sys.stderr)
    return case_id


def _read(prompt: str) -> str | None:
    """One line from stdin, stripped; None at the end of input."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    return line.strip() if line else None


def _review_candidates(paths: list[Path], into: Path, *, output: Path | None, results_dir: Path, vault: Path | None, reviewer: str | None,
                       force: bool = False) -> None:
    """--review-auto --into: line prompts over the undecided candidates, then the new version (evalkit/authoring/review.py)."""
    with exit_on_known_errors():
        from evalkit.authoring import review
        from evalkit.errors import BadConfig, Problem

        if len(paths) != 1:
            raise BadConfig(Problem("--review-auto --into reviews one candidates file; give one --eval-set", field="--eval-set"))
        session = review.ReviewSession(paths[0], into, output=output, results_dir=results_dir, reviewer=reviewer, force=force)
        corpus = None
        if vault is not None:
            from evalkit.evalset.anchorcheck import corpus_from_vault

            corpus = corpus_from_vault(vault)
        pending = session.pending()
        done = len(session.candidates_all) - len(pending)
        print(printable(f"evalkit: {len(pending)} candidate(s) to review" + (f" ({done} decided before, in {session.log})" if done else "")
                        + f"; accepted cases go to {session.dest} ({into} is never written)"))

        def choose(candidate: dict[str, Any], n: int, total: int) -> Any:
            _show_candidate(candidate, n, total, session, corpus)
            while True:
                answer = _read("[a]ccept [e]dit [r]eject [s]kip [q]uit? ")
                if answer is None:
                    print()
                    return None
                key = answer.lower()[:1]
                if key in ("a", "r", "s", "q"):
                    return review.Choice({"a": "accept", "r": "reject", "s": "skip", "q": "quit"}[key])  # type: ignore[arg-type]
                if key == "e":
                    edited = _edit_candidate(candidate, session.into)
                    return None if edited is None else review.Choice("accept", edited)
                print(printable(f"answer a, e, r, s or q, got {answer!r}; asked again"))

        summary = review.run_review(session, choose)
    said_backup(session.dest, session.backed_up)
    _print_review_summary(summary, session)


def _show_candidate(case: dict[str, Any], n: int, total: int, session: Any, corpus: Any) -> None:
    from evalkit.authoring import review
    p = lambda text: print(printable(text))  # noqa: E731 - user text never drives the terminal
    print()
    p(f"[{n}/{total}] {case['id']}")
    p(f"  question:    {case.get('question')}")
    p(f"  answerable:  {'yes' if case.get('answerable') else 'no'}   category: {case.get('category') or '-'}   difficulty: {case.get('difficulty') or '-'}")
    facts = case.get("expected_key_facts") or []
    p("  key facts:   " + ("; ".join(map(str, facts)) if facts else "(none)"))
    supports = case.get("gold_supports") or []
    if not supports:
        p("  supports:    (none)")
    for i, s in enumerate(supports):
        p(f"  support [{i}]: {s.get('rel_path')} > {s.get('heading_path') or ''}")
        for snip in s.get("snippets") or []:
            p(f"      snippet: {snip!r}")
        if corpus is not None:
            text = review.section_preview(corpus, s)
            if text is None:
                p("      (not found in the vault)")
            else:
                for line in text.splitlines():
                    p(f"      | {line}")
    tags = case.get("tags") or []
    p("  tags:        " + (", ".join(map(str, tags)) if tags else "(none)"))
    if "unretrievable" in tags:
        p("  flag:        UNRETRIEVABLE: the reference retriever did not find it in its top 50")
    if case.get("notes"):
        p(f"  notes:       {case['notes']}")
    if session.in_into(case["id"]):
        p(f"  note:        {session.into} already has id {case['id']}: accepting it adds nothing (duplicate)")


def _read_until(prompt: str, check: Callable[[str], str | None]) -> str | None:
    """Ask until `check(answer)` finds nothing wrong (it returns why an answer is refused);
    None at the end of input."""
    while True:
        answer = _read(printable(prompt))
        if answer is None:
            return None
        why = check(answer)
        if why is None:
            return answer
        print(printable(f"  {why}; asked again"))


def _edit_candidate(candidate: dict[str, Any], into: Path | None = None) -> dict[str, Any] | None:
    """Ask field by field (Enter keeps the value shown; a bad answer is asked again at its
    prompt) until the case validates; None at the end of input."""
    from evalkit.authoring import labeling, review

    allowed = labeling.allowed_categories(into)
    case = dict(candidate)
    print("edit (Enter keeps the value in [brackets]; '-' clears a field):")
    while True:
        question = _read(printable(f"  question [{case.get('question', '')}]: "))
        if question is None:
            return None
        facts_now = case.get("expected_key_facts") or []
        facts = _read(printable(f"  expected key facts (';'-separated) [{'; '.join(map(str, facts_now))}]: "))
        if facts is None:
            return None
        category = _read_until(f"  category ({', '.join(allowed)}; '-' = none) [{case.get('category') or ''}]: ",
                               lambda a: None if a in ("", "-", *allowed) else f"unknown category {a!r}; one of {', '.join(allowed)}, '-' or Enter")
        if category is None:
            return None
        difficulty = _read_until(f"  difficulty (easy, medium, hard; '-' = none) [{case.get('difficulty') or ''}]: ",
                                 lambda a: None if a.lower() in ("", "-", *DIFFICULTIES) else f"unknown difficulty {a!r}; easy, medium, hard, '-' or Enter")
        if difficulty is None:
            return None
        answerable = None
        while answerable is None:
            a = _read(f"  answerable (y/n) [{'y' if case.get('answerable') else 'n'}]: ")
            if a is None:
                return None
            a = a.lower()[:1]
            answerable = case.get("answerable") if a == "" else {"y": True, "n": False}.get(a)
            if answerable is None:
                print("  answer y or n; asked again")
        if not answerable and case.get("gold_supports"):
            print(f"  note: an unanswerable case has no gold supports: its {len(case['gold_supports'])} support(s) are dropped")
        case = review.apply_edits(
            case,
            question=question or None,
            key_facts=None if facts == "" else [] if facts == "-" else [f.strip() for f in facts.split(";") if f.strip()],
            category=review.KEEP if category == "" else None if category == "-" else category,
            difficulty=review.KEEP if difficulty == "" else None if difficulty == "-" else difficulty.lower(),
            answerable=answerable,
        )
        problems = review.case_problems(case)
        if not problems:
            return case
        for problem in problems:
            print(printable(f"  invalid: {problem}"))
        print("  edit again:")


def _print_review_summary(summary: Any, session: Any) -> None:
    edited = f" ({summary.edited} edited)" if summary.edited else ""
    print(f"\nevalkit: this session: {summary.accepted} accepted{edited}, {summary.rejected} rejected, {summary.skipped} skipped; "
          f"{summary.left} left")
    for case_id in summary.duplicates:
        print(printable(f"evalkit: duplicate_id: {case_id} is already in {session.into}; not added"))
    if summary.dest is not None and not summary.changed:
        print(printable(f"evalkit: {summary.dest} is up to date: the lines of {session.into} + {summary.appended} reviewed case(s); "
                        f"run `evalkit lock {summary.dest}` to freeze it"))
    elif summary.dest is not None:
        print(printable(f"evalkit: wrote {summary.dest}: the lines of {session.into} + {summary.appended} reviewed case(s); "
                        f"check it, then run `evalkit lock {summary.dest}` to freeze it"))
    else:
        print("evalkit: no accepted case to add; nothing written")
    if summary.left:
        print(printable(f"evalkit: decisions are in {session.log}; rerun the same command to go on"))


def _label_interactively(paths: list[Path], *, output: Path | None, results_dir: Path, ids: list[str], all_cases: bool,
                         category: list[str] | None, tag: list[str] | None, k: int, make_target: Callable[[], Any], vault: Path | None,
                         force: bool = False) -> None:
    """Open the session (freeze check, case choice) before any UI, then run the Textual app."""
    import os

    with exit_on_known_errors():
        from evalkit.authoring.labeler import open_session
        from evalkit.errors import BadConfig, Problem

        if len(paths) != 1:
            raise BadConfig(Problem("the labeler edits one eval set file; give one --eval-set", field="--eval-set"))
        session = open_session(paths[0], output=output, results_dir=results_dir, ids=ids or None, all_cases=all_cases, category=category, tag=tag,
                               force=force)
        if output is not None and session.doc.path.resolve() == output.resolve() and output.resolve() != paths[0].resolve():
            print(printable(f"evalkit: going on in {output} (an earlier session's new version of {paths[0]}); --force starts it again"))
        if not (sys.stdin.isatty() and sys.stdout.isatty()) or os.environ.get("TERM") == "dumb":
            raise BadConfig(Problem("the interactive labeler needs a terminal (stdin and stdout a tty); for scripts use --validate, --fix or --accept-top", field="--eval-set"))
        try:
            from evalkit.cli.label_app import LabelApp
        except ImportError as e:  # pragma: no cover - textual is a dependency
            raise BadConfig(Problem(f"the interactive labeler needs textual ({e}); pip install 'textual>=0.80'")) from None
        t = make_target()
        if getattr(t, "name", None) == "reference" and getattr(t, "vault", None) is not None:
            from evalkit.evalset.anchorcheck import corpus_from_vault

            session.corpus = corpus_from_vault(t.vault)
        elif vault is not None:
            from evalkit.evalset.anchorcheck import corpus_from_vault

            session.corpus = corpus_from_vault(vault)
        app_ = LabelApp(session, t, k)
        app_.run()
    said_backup(app_.saved_to, session.backed_up)
    if app_.saved_to is not None:
        again = "rerun it without --force to go on" if force and output is not None else "rerun the same command to go on"
        print(printable(f"evalkit: saved {app_.saved_to}; {again}"))
    elif session.dirty:
        print("evalkit: quit without saving", file=sys.stderr)


def _print_accept(result: Any) -> None:
    for cid, why in result.skipped:
        print(printable(f"skipped {cid}: {why}"))
    for cid, why in result.failed:
        print(printable(f"failed {cid}: {why}"), file=sys.stderr)
    if result.written is not None:
        said_backup(result.written, result.backed_up)
        print(f"evalkit: {len(result.labeled)} cases auto-labeled in {result.written}; review them with --review-auto")
    else:
        print("evalkit: no case to label (every answerable case has gold supports; use --ids to relabel)")


def _print_auto(cases: list[tuple[str, int, dict]]) -> None:
    for path, line, case in cases:
        print(printable(f"{path}:{line}: {case['id']}: {case['question']}"))
        for i, s in enumerate(case.get("gold_supports", [])):
            print(printable(f"    [{i}] {s.get('rel_path')} > {s.get('heading_path') or ''}"))
    print(f"evalkit: {len(cases)} auto-labeled case" + ("" if len(cases) == 1 else "s") + "; to review generated candidates into a new version of an eval set: --review-auto --into EVAL_SET")


plain_metavars(app)

"""The docs' example outputs, made by the commands they show (issue 43 item 6).

    python docs/tools/examples.py            # check: exit 1, naming page and block, when a block is stale
    python docs/tools/examples.py --write    # run every marked command and rewrite the stale blocks
    python docs/tools/examples.py --write docs/comparing.md   # only the examples of these pages

A fenced block that shows a command's output (info string `text`, `console`, `markdown` or
none) in README.md, EVAL.md or docs/*.md is marked by the HTML comment right above it (invisible on
GitHub and on the site), one of:

    <!-- example: python scripts/compare_runs.py a b --format markdown
    in: sample-pair
    exit: 1
    -->

    <!-- illustrative: needs a real LLM judge -->

    <!-- generated-by: tests/unit/test_results_db.py -->

An `example` is run: its command (more with `run: COMMAND` lines, their outputs one after
the other), in the folder of its session `in: NAME` (default: a session of its own), and
the block must be what it prints. Options: `exit: N` (or one code per command; default 0),
`stderr: yes` (stderr after stdout; `first`: before it), `prompt: yes` (the block shows
`$ COMMAND` above each output), `copy: PATH` (a file or folder of this checkout copied
into its own session, repeatable), `head: N` (each command's first N lines), `grep: REGEX`
(only the lines it matches, searched), `from: REGEX` and `until: REGEX` (from the first line
matching one to the next line matching the other, both kept), `excerpt: yes`
(the block is a cut: its lines appear in the output in this order, a line `…` standing for
lines left out; `--write` cannot re-cut one, it names it), `columns: N` (COLUMNS, default 80:
what rich assumes when piped), `mask: REGEX` (this block's own varying part, such as a
latency column). A session is declared once, on any page:

    <!-- example-setup sample-pair
    python scripts/run_eval.py --run-id a --quiet
    python scripts/run_eval.py --run-id b --param abstain_threshold=0.5 --quiet
    -->

and is a fresh temporary folder holding copies of this checkout's eval_set.jsonl,
eval_set_sanity.jsonl, sample_vault/ and scripts/, where its setup commands run (each must
exit 0; `copy: PATH` lines copy more of this checkout), then its examples, in page order
(README.md, EVAL.md, then docs/*.md by name). Commands are
`python ...` (this interpreter, this checkout first on PYTHONPATH) or `evalkit ...`, split as
a shell would but run without one. No target is given to them, so they evaluate the reference
chatbot in process over the copied sample_vault (run_eval's default target). `serve: failing`
on a setup starts the tests' fault server answering HTTP 500 to everything
(tests/integration/fault_server.py `start_fault_server`), and `http://localhost:8080` in
the session's commands means it. The
environment is the tests' (tests/support.py `clean_env`): no API key, no endpoint, no proxy.
`illustrative` marks an output that cannot be produced offline (a real LLM judge, a remote
chatbot) or is a hypothetical case; docs/tools/hooks.py shows its reason on the site.
`generated-by` names the test that already runs the block's command and compares its output
(made from that test's own data, older than this tool); it must name the page.

What may differ between the docs and a run, and nothing else (both sides are normalized the
same way before they are compared, and `--write` keeps a block whose normalized text already
matches, so the pages do not churn):

- run ids made from the clock (`20260102T030405Z-1a2b3c`) and ISO timestamps;
- the session's temporary folder (written as a relative path: `results/a`, not `/tmp/.../results/a`)
  and the loopback server's port;
- durations: every number on a line that names a timing (latency, `_ms`, ` ms`, wall time,
  throughput, p50/p95), and the spaces and rule characters (`─`) rich pads a table with,
  since a wider latency widens its column;
- a block's own `mask:`, which the page shows beside it: the matrix table's p50/p95 column, and
  the breaker's counts of failed tries and of cases not asked, which depend on how many
  requests were in flight when it stopped (machine load).

Everything else, every metric, count, id and word, must be equal.
tests/integration/test_docs_examples.py runs the check; tests/unit/test_docs_examples_marked.py
holds every output block to a marker.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_LANGS = ("", "text", "console", "markdown")
MARKERS = ("<!-- example:", "<!-- illustrative:", "<!-- generated-by:")
COPIED = ("eval_set.jsonl", "eval_set_sanity.jsonl", "sample_vault", "scripts")
SERVED_URL = "http://localhost:8080"
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_OPTION = re.compile(r"^(\w+):\s*(.*)$")


def pages() -> list[Path]:
    """README.md, EVAL.md (the site's metrics page), then docs/*.md by name; docs/cli.md is made
    and checked by cli_reference.py."""
    return [ROOT / "README.md", ROOT / "EVAL.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]


@dataclass
class Block:
    """One fenced block of a page: lines [start, end) are its content (0-based)."""

    page: Path
    start: int
    end: int
    indent: str
    info: str
    marker: str | None  # the HTML comment right above the fence, or None

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{name}:{self.start}"  # the fence's line, 1-based

    @property
    def is_output(self) -> bool:
        return (self.info.split() or [""])[0] in OUTPUT_LANGS


@dataclass
class Example:
    block: Block
    commands: list[str]
    session: str
    exits: list[int]
    stderr: str = "no"  # "yes": after stdout; "first": before it
    prompt: bool = False
    copies: list[str] = field(default_factory=list)
    head: int | None = None
    grep: str | None = None
    start: str | None = None  # from:
    until: str | None = None
    excerpt: bool = False
    columns: int = 80
    masks: list[str] = field(default_factory=list)


@dataclass
class Session:
    name: str
    commands: list[str] = field(default_factory=list)
    serve: str = ""  # "failing": a server answering HTTP 500 to everything
    copies: list[str] = field(default_factory=list)
    where: str = ""


def _comment_above(lines: list[str], fence: int) -> str | None:
    """The HTML comment ending on the last non-blank line above `fence`, or None."""
    i = fence - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0 or not lines[i].rstrip().endswith("-->"):
        return None
    end = i
    while i >= 0 and "<!--" not in lines[i]:
        i -= 1
    return "\n".join(line.strip() for line in lines[i:end + 1]) if i >= 0 else None


def blocks(page: Path) -> Iterator[Block]:
    """The page's fenced blocks (a fence inside a longer fence is content, not a block)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent = m.group("fence"), m.group("indent")
        close = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        yield Block(page, i + 1, j, indent, m.group("info").strip(), _comment_above(lines, i))
        i = j + 1


def _body(comment: str, head: str) -> list[str]:
    """The comment's lines after `<!-- head`, without the closing `-->`."""
    text = comment.strip().removeprefix("<!--").removesuffix("-->").strip().removeprefix(head)
    return [line.strip() for line in text.splitlines()]


def collect(only: list[Path] | None = None) -> tuple[dict[str, Session], list[Example], list[str]]:
    """Every session and example of the pages, and the problems found reading them."""
    sessions: dict[str, Session] = {}
    examples: list[Example] = []
    problems: list[str] = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"<!-- example-setup (\S+)\n(.*?)-->", text, flags=re.S):
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            if m.group(1) in sessions:
                problems.append(f"{where}: session {m.group(1)!r} is declared twice (first at {sessions[m.group(1)].where})")
            session = Session(m.group(1), where=where)
            for line in (s.strip() for s in m.group(2).splitlines()):
                if line.startswith("serve: "):
                    session.serve = line.removeprefix("serve: ")
                    if session.serve != "failing":
                        problems.append(f"{where}: `serve: {session.serve}`: only `serve: failing` is known")
                elif line.startswith("copy: "):
                    session.copies.append(line.removeprefix("copy: "))
                elif line:
                    session.commands.append(line)
            sessions[session.name] = session
        if only is not None and page not in only:
            continue
        for block in blocks(page):
            if block.marker is None or not block.marker.startswith("<!-- example:"):
                continue
            lines = _body(block.marker, "example:")
            ex = Example(block, [lines[0]], f"own:{block.where}", [])
            for line in lines[1:]:
                opt = _OPTION.match(line)
                if opt is None:
                    problems.append(f"{block.where}: marker line {line!r} is not `key: value`")
                    continue
                key, value = opt.groups()
                if key == "run":
                    ex.commands.append(value)
                elif key == "in":
                    ex.session = value
                elif key == "exit":
                    ex.exits = [int(v) for v in value.split()]
                elif key == "stderr":
                    ex.stderr = value
                elif key in ("prompt", "excerpt"):
                    setattr(ex, key, value == "yes")
                elif key == "copy":
                    ex.copies.append(value)
                elif key in ("head", "columns"):
                    setattr(ex, key, int(value))
                elif key == "grep":
                    ex.grep = value
                elif key == "from":
                    ex.start = value
                elif key == "until":
                    ex.until = value
                elif key == "mask":
                    ex.masks.append(value)
                else:
                    problems.append(f"{block.where}: unknown marker option {key!r}")
            if not ex.session.startswith("own:") and ex.session not in sessions:
                problems.append(f"{block.where}: no `<!-- example-setup {ex.session}` on any page")
            examples.append(ex)
    return sessions, examples, problems


def unmarked(among: list[Path] | None = None) -> list[str]:
    """Output blocks with neither an `example` nor an `illustrative` marker (of `among`, default every page)."""
    return [f"{b.where}: an output block ({b.info or 'no language'}) with no <!-- example: ... --> "
            f"or <!-- illustrative: ... --> or <!-- generated-by: TEST --> above it"
            for page in among or pages() for b in blocks(page)
            if b.is_output and not (b.marker and b.marker.startswith(MARKERS))]


def generated_by() -> list[tuple[Block, str]]:
    """Each block marked `generated-by`, with the test file it names."""
    return [(b, b.marker.removeprefix("<!-- generated-by:").removesuffix("-->").strip())
            for page in pages() for b in blocks(page) if b.marker and b.marker.startswith(MARKERS[2])]


# --------------------------------------------------------------------------- normalizing

_RUN_ID = re.compile(r"\b\d{8}T\d{6}Z-[0-9a-f]{6}\b")
_STAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
TIMING = re.compile(r"\blatency|_ms\b|\bms\b|\bwall\b|\bthroughput|per_s\b|\bp50\b|\bp95\b", re.I)
_NUMBER = re.compile(r"(?<![\w@.])[+-]?\d[\d,]*(?:\.\d+)?|±0")  # not the 5 of Recall@5, the 50 of p50
_PAD = re.compile(r" {2,}|([─━═]){2,}")


def normalize(text: str, masks: list[str]) -> list[str]:
    """The lines of `text` with what may vary replaced (module docstring)."""
    out = []
    for line in text.rstrip("\n").splitlines():
        for mask in masks:
            line = re.sub(mask, "<masked>", line)
        line = _STAMP.sub("<time>", _RUN_ID.sub("<run-id>", line))
        if TIMING.search(line):
            line = _NUMBER.sub("<t>", line)
        out.append(_PAD.sub(lambda m: m.group(1) or " ", line).rstrip())
    return out


def is_excerpt_of(shown: list[str], produced: list[str]) -> bool:
    """Each run of shown lines between `…` lines appears in `produced`, in order."""
    runs: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == "…":
            runs.append([])
        else:
            runs[-1].append(line)
    at = 0
    for run in (r for r in runs if r):
        while at + len(run) <= len(produced) and produced[at:at + len(run)] != run:
            at += 1
        if at + len(run) > len(produced):
            return False
        at += len(run)
    return True


# --------------------------------------------------------------------------- running


def _argv(command: str, url: str | None) -> list[str]:
    words = shlex.split(command, comments=True)
    if url:
        words = [w.replace(SERVED_URL, url) for w in words]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    if words[0] == "evalkit":
        return [sys.executable, "-c", "from evalkit.cli.main import app; app(prog_name='evalkit')", *words[1:]]
    raise ValueError(f"only `python ...` and `evalkit ...` commands run: {command!r}")


def _on_path() -> None:
    """This checkout importable (tests/ is no package installed): for tests.support and the fault server."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


def _env(columns: int) -> dict[str, str]:
    _on_path()
    from tests.support import clean_env

    return clean_env({"COLUMNS": str(columns), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})


@dataclass
class Outcome:
    example: Example
    produced: str = ""
    problem: str = ""  # a command that failed or exited otherwise than the marker says


def _run(command: str, folder: Path, url: str | None, columns: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(command, url), cwd=folder, env=_env(columns), capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)


def _cut(lines: list[str], ex: Example) -> list[str]:
    """The lines `from:` ... `until:` and `grep:` keep."""
    if ex.start is not None:
        lines = lines[next((i for i, line in enumerate(lines) if re.search(ex.start, line)), len(lines)):]
    if ex.until is not None:
        lines = lines[:next((i + 1 for i, line in enumerate(lines) if re.search(ex.until, line)), len(lines))]
    return [line for line in lines if ex.grep is None or re.search(ex.grep, line)]


def _relative(text: str, folder: Path, url: str | None) -> str:
    text = text.replace(f"{folder}/", "").replace(str(folder), ".")
    return text.replace(url, SERVED_URL) if url else text


def run_session(name: str, session: Session | None, examples: list[Example]) -> list[Outcome]:
    """Set up the session's folder, run its examples in order; the outcomes, in that order."""
    with tempfile.TemporaryDirectory(prefix="evalkit-example-") as tmp:
        folder = Path(tmp).resolve()
        extra = [*(session.copies if session else []), *(c for ex in examples for c in ex.copies)]
        for item in (*COPIED, *extra):
            src = ROOT / item
            (folder / item).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy)(src, folder / item)
        stop, url = None, None
        if session is not None and session.serve == "failing":
            _on_path()
            from tests.integration.fault_server import start_fault_server

            url, stop = start_fault_server({"*": "500"})
        try:
            for command in session.commands if session else []:
                done = _run(command, folder, url, 80)
                if done.returncode != 0:
                    return [Outcome(ex, problem=f"session {name} ({session.where}): `{command}` exited "
                                                f"{done.returncode}: {done.stderr.strip()[-800:]}") for ex in examples]
            outcomes = []
            for ex in examples:
                outcome, parts = Outcome(ex), []
                for i, command in enumerate(ex.commands):
                    done = _run(command, folder, url, ex.columns)
                    want = ex.exits[i] if i < len(ex.exits) else (ex.exits[-1] if ex.exits else 0)
                    if done.returncode != want:
                        outcome.problem = (f"`{command}` exited {done.returncode}, the marker says {want}: "
                                           f"{done.stderr.strip()[-800:]}")
                    text = {"yes": done.stdout + done.stderr, "first": done.stderr + done.stdout}.get(ex.stderr,
                                                                                                      done.stdout)
                    lines = _relative(text, folder, url).rstrip("\n").splitlines()
                    parts += [f"$ {command}"] if ex.prompt else []
                    lines = _cut(lines, ex)
                    parts += [line.rstrip() for line in lines[:ex.head]]
                outcome.produced = "\n".join(parts) + "\n"
                outcomes.append(outcome)
            return outcomes
        finally:
            if stop is not None:
                stop()


def run_all(only: list[Path] | None = None) -> tuple[list[Outcome], list[str]]:
    sessions, examples, problems = collect(only)
    by_session: dict[str, list[Example]] = {}
    for ex in examples:
        by_session.setdefault(ex.session, []).append(ex)
    outcomes = []
    for name, group in by_session.items():
        outcomes += run_session(name, sessions.get(name), group)
    return outcomes, problems


def shown(block: Block) -> str:
    lines = block.page.read_text(encoding="utf-8").splitlines()[block.start:block.end]
    return "\n".join(line.removeprefix(block.indent) for line in lines) + "\n"


def stale(outcome: Outcome) -> str | None:
    """Why the block is not what its command prints (a diff), or None when it is."""
    ex = outcome.example
    if outcome.problem:
        return f"{ex.block.where}: {outcome.problem}"
    doc, out = normalize(shown(ex.block), ex.masks), normalize(outcome.produced, ex.masks)
    if ex.excerpt:
        if is_excerpt_of(doc, out):
            return None
        return (f"{ex.block.where}: the excerpt's lines are not in what `{ex.commands[0]}` prints, in order; "
                f"re-cut it by hand from:\n{outcome.produced}")
    if doc == out:
        return None
    diff = "\n".join(difflib.unified_diff(doc, out, "docs", "command", lineterm="", n=1))
    return (f"{ex.block.where}: the block is not what `{' ; '.join(ex.commands)}` prints "
            f"(python docs/tools/examples.py --write {ex.block.page.name if ex.block.page.name == 'README.md' else 'docs/' + ex.block.page.name} "
            f"rewrites it; then read the prose around it):\n{diff}")


def write(outcomes: list[Outcome]) -> list[str]:
    """Rewrite each stale block with its output; the examples that could not be rewritten."""
    left: list[str] = []
    edits: dict[Path, list[Outcome]] = {}
    for outcome in outcomes:
        why = stale(outcome)
        if why is None:
            continue
        if outcome.problem or outcome.example.excerpt:
            left.append(why)
        else:
            edits.setdefault(outcome.example.block.page, []).append(outcome)
    for page, todo in edits.items():
        lines = page.read_text(encoding="utf-8").splitlines()
        for outcome in sorted(todo, key=lambda o: -o.example.block.start):  # bottom up: line numbers hold
            b = outcome.example.block
            new = [(b.indent + line) if line else "" for line in outcome.produced.rstrip("\n").splitlines()]
            lines[b.start:b.end] = new
        page.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {len(todo)} block(s) of {page.relative_to(ROOT)}")
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite stale blocks")
    parser.add_argument("pages", nargs="*", type=Path, help="only these pages' examples (default: all)")
    args = parser.parse_args(argv)
    only = [p.resolve() for p in args.pages] or None
    outcomes, problems = run_all(only)
    problems += unmarked()
    if args.write:
        problems += write(outcomes)
    else:
        problems += [why for why in map(stale, outcomes) if why]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(outcomes)} example(s) run, {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

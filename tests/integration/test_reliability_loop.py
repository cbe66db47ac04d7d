"""Fault-injection loops (issue 29): kill at random points, corrupt random bytes, race N
writers, each with a fixed seed, and check that no entry is lost, no command exits 70 or
prints a traceback, and nothing is written outside the folders a loop gave its commands.

Every command runs as a subprocess through `AUDIT` (below), which records each write the
process makes (open for writing, rename, mkdir, remove, symlink, sqlite connect, ...) and
the folder of each child process it starts, through Python's audit hooks. HOME and TMPDIR
point into the loop's sandbox; a write outside the sandbox, or into its HOME, is an outside
write. The figures of the whole module go to `<pytest basetemp>/reliability_tally.json`
(`test_tally`, last), and docs/development.md#reliability quotes them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalkit.derive.summary import render_run_summary
from evalkit.judges.cache import JudgeCache, source_problem
from evalkit.store.runs import RunDir, resolve_run_id
# The hand-built run folder and the OpenAI-compatible judge of the judge_answers tests.
from tests.integration.test_judge_answers_cli import RUN_ID as JUDGED_RUN, judge_server, run_dir  # noqa: F401

# One worker runs the loops in file order, so the tally (`test_tally`) sees all of them.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("reliability")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"

# Trial counts: the module takes about half a minute on 2 busy cores. EVALKIT_FAULT_SCALE=N
# runs N times as many trials (the same seeds, longer sequences) for a deeper search.
SCALE = int(os.environ.get("EVALKIT_FAULT_SCALE", "1"))
KILL_TRIALS, KILLS_PER_TRIAL = 4 * SCALE, 3
CORRUPT_TRIALS = 3 * SCALE  # per file kind
RACE_TRIALS, WRITERS = 2 * SCALE, 6

# The module's figures: test_tally writes and checks them.
# faults: kills that landed, files corrupted, writers racing; audited_writes: every write the
# audit hook saw (outside_writes of them were outside the loop's folder).
TALLY: dict[str, Any] = {"trials": 0, "faults": 0, "losses": 0, "exit_70s": 0, "audited_writes": 0, "outside_writes": 0,
                         "loops": {}}

# A command under audit: python -c AUDIT LOG GO PRELOAD TARGET ARGS... TARGET is a script
# (run as __main__) or Python code; GO ("-" for none) is a file to wait for after PRELOAD's
# modules ("-" for none) are imported, so that N writers start their work together.
AUDIT = r'''
import os, sys
log, go, preload, target, *argv = sys.argv[1:]
_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_ONE = {"os.remove", "os.rmdir", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree",
        "tempfile.mkstemp", "tempfile.mkdtemp", "sqlite3.connect"}
_SECOND = {"os.symlink", "os.link", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move"}

def _note(event, path):
    if path is None or isinstance(path, int):
        return  # a file descriptor: its open was noted
    path = os.fsdecode(os.fspath(path))
    if event == "sqlite3.connect" and path.startswith("file:"):
        if "mode=ro" in path:
            return
        from urllib.parse import unquote, urlsplit
        path = unquote(urlsplit(path).path)
    os.write(_fd, f"{event}\t{os.path.abspath(path)}\n".encode("utf-8", "backslashreplace"))

def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & _WRITE:
            _note(event, path)
    elif event == "os.rename":  # os.replace too
        _note(event, args[0]), _note(event, args[1])
    elif event == "os.mkdir":
        if not isinstance(args[0], int) and not os.path.lexists(args[0]):  # mkdir(exist_ok=True) makes nothing
            _note(event, args[0])
    elif event in _ONE:
        _note(event, args[0])
    elif event in _SECOND:
        _note(event, args[1])
    elif event == "subprocess.Popen":  # a child writes where it runs (git in a checkout)
        _note(f"child {args[0]}", args[2] if args[2] is not None else os.getcwd())

sys.addaudithook(_hook)
if preload != "-":
    import importlib
    for name in preload.split(","):
        importlib.import_module(name)
if go != "-":
    import time
    open(f"{go}.{os.getpid()}.ready", "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
if target.endswith(".py"):
    import runpy
    sys.argv = [target, *argv]
    runpy.run_path(target, run_name="__main__")
else:
    sys.argv = ["-c", *argv]
    exec(compile(target, "<child>", "exec"), {"__name__": "__main__"})
'''


@dataclass
class Sandbox:
    """A loop's folder: every command runs in it, with HOME and TMPDIR inside it."""

    root: Path
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.log = self.root / "audit.log"
        for sub in ("home", "tmp"):
            (self.root / sub).mkdir(parents=True)

    def env(self) -> dict[str, str]:
        home = self.root / "home"
        return {
            **os.environ, "HOME": str(home), "TMPDIR": str(self.root / "tmp"), "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", "COLUMNS": "200",
        }

    def start(self, target: str | Path, *args: object, go: Path | None = None, preload: str = "-",
              stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
        """Start `target` (a script under scripts/ by name, or Python code) under audit."""
        what = str(SCRIPTS / target) if isinstance(target, str) and target.endswith(".py") else str(target)
        argv = [sys.executable, "-c", AUDIT, str(self.log), str(go or "-"), preload, what, *map(str, args)]
        return subprocess.Popen(argv, cwd=self.root, env=self.env(), stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, target: str | Path, *args: object, input: str | None = None) -> tuple[int, str, str]:
        """Run `target` to its end: (exit code, stdout, stderr), counted in the tally."""
        proc = self.start(target, *args, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        out, err = proc.communicate(input, timeout=120)
        return checked(proc.returncode, err), out, err

    def writes(self) -> list[str]:
        """Every audited write: `<event>\t<absolute path>`."""
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def outside_writes(self) -> list[str]:
        """Audited writes outside the sandbox, or into its HOME."""
        home = self.root / "home"
        found = []
        for line in self.writes():
            path = Path(os.path.realpath(line.split("\t", 1)[1]))
            if str(path) == os.devnull:
                continue
            if not path.is_relative_to(self.root) or path.is_relative_to(home):
                found.append(line)
        return found


def checked(rc: int, stderr: str) -> int:
    """Count an exit 70 or a traceback in the tally; returns `rc`."""
    if rc == 70 or "Traceback" in stderr:
        TALLY["exit_70s"] += 1
    return rc


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """The test's folder as a Sandbox; afterwards, no write outside it and TMPDIR empty."""
    box = Sandbox(tmp_path)
    yield box
    outside = box.outside_writes()
    TALLY["audited_writes"] += len(box.writes())
    TALLY["outside_writes"] += len(outside)
    assert outside == [], "written outside the loop's folder:\n" + "\n".join(outside[:20])
    assert list((box.root / "tmp").iterdir()) == [], "temp files left in TMPDIR"


def _count(loop: str, *, trials: int = 0, faults: int = 0, losses: int = 0) -> None:
    cell = TALLY["loops"].setdefault(loop, {})
    for key, n in (("trials", trials), ("faults", faults), ("losses", losses)):
        cell[key] = cell.get(key, 0) + n
        TALLY[key] += n


def _no_traceback(rc: int, err: str, what: str) -> None:
    assert rc != 70 and "Traceback" not in err, f"{what}: exit {rc}\n{err}"


def _eval_set(path: Path, copies: int = 1, limit: int | None = None) -> list[str]:
    """The bundled eval set (`copies` times, ids suffixed) written to `path`; the ids."""
    cases = [json.loads(line) for line in MAIN_SET.read_text(encoding="utf-8").splitlines() if line.strip()][:limit]
    out = [{**c, "id": f"{c['id']}-{n}"} if copies > 1 else c for n in range(copies) for c in cases]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in out), encoding="utf-8")
    return [c["id"] for c in out]


def _run_args(es: Path, results: Path, run_id: str, *extra: object) -> list[object]:
    return ["--eval-set", es, "--vault", VAULT, "--retrieval-only", "--results-dir", results, "--run-id", run_id,
            "--quiet", *extra]


def _ids(run: Path) -> list[str]:
    return [json.loads(line)["test_case_id"] for line in (run / "results.jsonl").read_bytes().splitlines()]


def _run_is_whole(run: Path, ids: list[str]) -> int:
    """Lost or duplicated cases of a finished run (0 when each case is there once), after
    checking that its derived files agree with metrics.json and no temp file is left."""
    found = _ids(run)
    lost = len(set(ids) - set(found)) + (len(found) - len(set(found)))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["total_tests"] == len(ids)
    assert json.loads((run / "results.json").read_text())["metrics"] == metrics
    # Sorted: a run renders from its metrics in memory, whose latency rows may come in another order.
    summary = (run / "summary.md").read_text(encoding="utf-8").splitlines()
    assert sorted(summary) == sorted((render_run_summary(RunDir(run)) + "\n").splitlines())
    names = sorted(p.name for p in run.iterdir())
    assert names == [".writer.lock", "config.json", "metrics.json", "results.json", "results.jsonl", "summary.md"], names
    return lost


def test_the_audit_sees_writes_outside(tmp_path: Path) -> None:
    # The check of the loops below, checked: a write beside the sandbox, one into its HOME
    # and a child started elsewhere are found; the sandbox's own files are not.
    box = Sandbox(tmp_path / "box")
    code = """
import os, subprocess, sys
from pathlib import Path
Path(sys.argv[1]).write_text("x"); os.remove(sys.argv[1])
(Path.home() / "rc").write_text("x")
Path("inside").write_text("x")
subprocess.run(["true"], cwd=sys.argv[2], check=True)
"""
    rc, _, err = box.run(code, tmp_path / "beside", tmp_path)
    assert rc == 0, err
    assert [line.split("\t")[0] for line in box.outside_writes()] == ["open", "os.remove", "open", "child true"]
    assert len(box.writes()) == 5


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_run_eval_in_a_git_checkout_leaves_its_index_alone(sandbox: Sandbox) -> None:
    # The audit sees git start, not what git writes: this checks the one file git would.
    es = sandbox.root / "eval_set.jsonl"
    ids = _eval_set(es, limit=2)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "eval_set.jsonl"], ["commit", "-qm", "eval set"]):
        subprocess.run([*git, *cmd], cwd=sandbox.root, check=True, capture_output=True)
    index = sandbox.root / ".git" / "index"
    os.utime(es, ns=(es.stat().st_atime_ns, es.stat().st_mtime_ns + 10**9))  # as after a checkout or an edit undone
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    rc, _, err = sandbox.run("run_eval.py", *_run_args(es, sandbox.root / "results", "r"))
    assert rc == 0, err
    assert _run_is_whole(sandbox.root / "results" / "r", ids) == 0
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


# --------------------------------------------------------------------------- a. kill


def _state(run: Path) -> tuple[int, int, int]:
    """(results.jsonl's size, config.json's and metrics.json's mtimes): what a run_eval has
    written so far."""
    def stat(name: str, attr: str) -> int:
        try:
            return int(getattr((run / name).stat(), attr))
        except FileNotFoundError:
            return -1

    return stat("results.jsonl", "st_size"), stat("config.json", "st_mtime_ns"), stat("metrics.json", "st_mtime_ns")


def _kill_at_random(proc: subprocess.Popen[str], rng: random.Random, run: Path) -> None:
    """SIGKILL `proc` at a random point: mostly a delay after its first write to the run
    (config.json or a record), so that kills land while it asks and derives; sometimes a
    delay after its start, which may land before it wrote anything."""
    if rng.random() < 0.8:
        before, finished = _state(run), (run / "metrics.json").exists()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None and _state(run) == before:
            time.sleep(0.001)
        # Asking 354 cases takes about 0.2 s here, deriving them 0.05 s (all a finished run redoes).
        delay = rng.uniform(0.0, 0.05 if finished else 0.15)
    else:
        delay = rng.uniform(0.0, 0.5)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)


def _phase(before: tuple[int, int, int], run: Path, n_cases: int) -> str:
    """Where a killed run_eval was, from what it wrote (`_state` at its start, the folder at
    its kill): nothing yet; asking (fewer than `n_cases` records); or past its last case."""
    if _state(run) == before:
        return "before any write"
    lines = (run / "results.jsonl").read_bytes().count(b"\n") if (run / "results.jsonl").exists() else 0
    return "asking" if lines < n_cases else "after the last case"


def test_kill_at_random_points_then_resume(sandbox: Sandbox) -> None:
    rng = random.Random(2901)
    es = sandbox.root / "eval_set.jsonl"
    ids = _eval_set(es, copies=6)
    results = sandbox.root / "results"
    for trial in range(KILL_TRIALS):
        run_id = f"killed-{trial}"
        run = results / run_id
        kills = 0
        for attempt in range(KILLS_PER_TRIAL + 20):
            # After a kill: resume the run once it has a config.json, else start it again.
            args = (["--resume", run_id, "--results-dir", results, "--quiet"] if (run / "config.json").exists()
                    else _run_args(es, results, run_id))
            before = _state(run)
            proc = sandbox.start("run_eval.py", *args)
            if kills < KILLS_PER_TRIAL:
                _kill_at_random(proc, rng, run)
            _, err = proc.communicate(timeout=120)
            rc = checked(proc.returncode, err)
            _no_traceback(rc, err, f"trial {trial} attempt {attempt}")
            if rc == -signal.SIGKILL:
                kills += 1
                phases = TALLY["loops"].setdefault("kill", {}).setdefault("phases", {})
                phase = _phase(before, run, len(ids))
                phases[phase] = phases.get(phase, 0) + 1
                continue
            # Killed at any point, the next command carries on: never an exit 2 over debris.
            assert rc == 0, f"trial {trial} attempt {attempt} after {kills} kills: exit {rc}\n{err}"
            if kills >= KILLS_PER_TRIAL:
                break
        assert kills == KILLS_PER_TRIAL
        lost = _run_is_whole(run, ids)
        assert resolve_run_id(results, "latest") == run_id
        assert sorted(p.name for p in results.iterdir()) == sorted(["latest", *(f"killed-{t}" for t in range(trial + 1))])
        _count("kill", trials=1, faults=kills, losses=lost)
        assert lost == 0


def test_a_run_killed_before_its_config_json_starts_again(sandbox: Sandbox) -> None:
    # Found while building the kill loop (a kill rarely lands in that window): a run_eval
    # killed while writing its first file left only `.config.json.<x>.tmp`; a fresh run then
    # said "already exists; use --resume", and --resume "config.json is missing".
    es = sandbox.root / "eval_set.jsonl"
    ids = _eval_set(es, limit=4)
    results = sandbox.root / "results"
    (results / "r").mkdir(parents=True)
    (results / "r" / ".config.json.k1ll3d.tmp").write_text('{"run_id": "r", "crea')
    rc, _, err = sandbox.run("run_eval.py", *_run_args(es, results, "r"))
    assert rc == 0, err
    assert _run_is_whole(results / "r", ids) == 0
    _count("kill", trials=1, faults=1)


# --------------------------------------------------------------------------- b. corrupt


def _corrupt(path: Path, rng: random.Random, lo: int = 0, hi: int | None = None) -> list[int]:
    """Overwrite 1-8 random bytes of `path` in [lo, hi) with other values; the offsets.

    Half the time the new bytes are printable ASCII, so that the file stays UTF-8 and the
    damage reaches the JSON parser, or the values, rather than the decoder.
    """
    data = bytearray(path.read_bytes())
    hi = len(data) if hi is None else hi
    offsets = sorted({rng.randrange(lo, hi) for _ in range(rng.randint(1, 8))})
    text = rng.random() < 0.5
    for off in offsets:
        new = data[off]
        while new == data[off]:
            new = rng.randrange(0x20, 0x7F) if text else rng.randrange(256)
        data[off] = new
    path.write_bytes(bytes(data))
    return offsets


def _reported(rc: int, err: str, name: str, what: str) -> None:
    """Exit 0 (recovered, or the bytes changed nothing that matters), or exit 2 whose lines
    are evalkit's own, the first naming the damaged file."""
    _no_traceback(rc, err, what)
    print(f"{what}: exit {rc}", *err.strip().splitlines()[:3], sep="\n  ")
    assert rc in (0, 2), f"{what}: exit {rc}\n{err}"
    if rc == 2:
        lines = err.strip().splitlines()
        assert lines and name in lines[0] and all(line.startswith("evalkit: ") for line in lines), f"{what}:\n{err}"
        assert len(lines) <= 21, f"{what}: {len(lines)} lines"


def test_corrupt_run_files(sandbox: Sandbox) -> None:
    rng = random.Random(2902)
    es = sandbox.root / "eval_set.jsonl"
    _eval_set(es)
    pristine = sandbox.root / "pristine"
    rc, _, err = sandbox.run("run_eval.py", *_run_args(es, pristine, "base"))
    assert rc == 0, err
    readers = {
        "results.jsonl": [("score_retrieval.py", "--run-id", "base"), ("run_eval.py", "--resume", "base", "--quiet")],
        "metrics.json": [("score_retrieval.py", "--run-id", "base"), ("report.py", "--run-id", "base")],
        "config.json": [("score_retrieval.py", "--run-id", "base"), ("run_eval.py", "--resume", "base", "--quiet"),
                        ("report.py", "--run-id", "base")],
    }
    codes: dict[str, list[int]] = {}
    for name, commands in readers.items():
        for trial in range(CORRUPT_TRIALS):
            results = sandbox.root / f"{name}-{trial}"
            shutil.copytree(pristine, results, symlinks=True)
            target = results / "base" / name
            lo = hi = None
            if name == "results.jsonl":  # the bytes of one line, its newline kept
                data = target.read_bytes()
                starts = [0, *(i + 1 for i, b in enumerate(data) if b == ord("\n"))][:-1]
                line = rng.randrange(len(starts))
                lo, hi = starts[line], data.index(b"\n", starts[line])
            offsets = _corrupt(target, rng, lo or 0, hi)
            script, *args = rng.choice(commands)
            rc, _, err = sandbox.run(script, *args, "--results-dir", results)
            _reported(rc, err, name, f"{name} bytes {offsets}, {script}")
            codes.setdefault(name, []).append(rc)
            _count("corrupt", trials=1, faults=1)
    print("corrupt run files, exit codes:", codes)


def test_corrupt_eval_sets_lock(sandbox: Sandbox) -> None:
    rng = random.Random(2903)
    sets = sandbox.root / "sets"
    es = sets / "eval_set.v1.jsonl"
    _eval_set(es, limit=6)
    rc, _, err = sandbox.run("lock_eval_set.py", es, "--run-id", "base")
    assert rc == 0, err
    pristine = (sets / "eval_sets.lock").read_bytes()
    readers = [("run_eval.py", *_run_args(es, sandbox.root / "results", "RUN", "--limit", "2")),
               ("lock_eval_set.py", "--list", sets), ("lock_eval_set.py", es)]
    codes = []
    for trial in range(CORRUPT_TRIALS):
        (sets / "eval_sets.lock").write_bytes(pristine)
        offsets = _corrupt(sets / "eval_sets.lock", rng)
        script, *args = rng.choice(readers)
        rc, _, err = sandbox.run(script, *(f"t{trial}" if a == "RUN" else a for a in args))
        _reported(rc, err, "eval_sets.lock", f"eval_sets.lock bytes {offsets}, {script}")
        codes.append(rc)
        _count("corrupt", trials=1, faults=1)
    print("corrupt eval_sets.lock, exit codes:", codes)


def test_corrupt_judge_cache(sandbox: Sandbox, run_dir: Path, judge_server: str) -> None:  # noqa: F811
    rng = random.Random(2904)
    cache = sandbox.root / "cache" / "judge_cache.sqlite"
    judge = ("--run-id", JUDGED_RUN, "--results-dir", run_dir, "--judge-model", "local@build-test", "--judge-base-url",
             judge_server, "--cache-path", cache, "--allow-truncated-context", "--quiet")
    rc, _, err = sandbox.run("judge_answers.py", *judge)
    assert rc == 0, err
    filler = JudgeCache(cache)  # more pages than six judgments fill, so that bytes land in data too
    for i in range(300):
        filler.put(f"filler-{i}", {"score": i % 6, "reasoning": "x" * 200}, kind="groundedness", model="m", prompt_version="p")
    filler.close()
    pristine = cache.read_bytes()
    stats = f"import sys; from evalkit.cli.main import app; sys.argv = ['evalkit', 'cache', 'stats', {str(cache)!r}]; app()"
    codes = []
    for trial in range(2 * CORRUPT_TRIALS):
        for old in cache.parent.iterdir():
            old.unlink()
        cache.write_bytes(pristine)
        # Half the trials in the first page: SQLite's header and the schema.
        offsets = _corrupt(cache, rng, 0, 4096 if rng.random() < 0.5 else None)
        if trial % 2:  # only reads: a damaged file is reported and left as it is
            rc, _, err = sandbox.run(stats)
            _reported(rc, err, str(cache), f"judge cache bytes {offsets}, evalkit cache stats")
        else:  # judges with it: a damaged file is moved aside and the run goes on
            rc, _, err = sandbox.run("judge_answers.py", *judge)
            _no_traceback(rc, err, f"judge cache bytes {offsets}, judge_answers.py")
            assert rc == 0, f"judge cache bytes {offsets}: exit {rc}\n{err}"
            assert source_problem(cache) is None  # the cache left behind is a sound one
        codes.append(rc)
        _count("corrupt", trials=1, faults=1)
    print("corrupt judge cache, exit codes:", codes)


def _candidates(path: Path, n: int) -> list[str]:
    """`n` candidates, as `evalkit generate` writes them (the bundled cases, new ids)."""
    cases = [json.loads(line) for line in MAIN_SET.read_text(encoding="utf-8").splitlines()[10 : 10 + n]]
    out = [{**c, "id": f"gen-{i:02d}", "label_source": "generated", "tags": [*c.get("tags", []), "generated"]}
           for i, c in enumerate(cases)]
    path.write_text("".join(json.dumps(c) + "\n" for c in out), encoding="utf-8")
    return [c["id"] for c in out]


def _review_files(root: Path, n: int) -> tuple[Path, Path, list[str]]:
    """(candidates, into, candidate ids) in `root`: n candidates, into = 4 bundled cases."""
    root.mkdir(parents=True, exist_ok=True)
    cand, into = root / "candidates.jsonl", root / "eval_set.v1.jsonl"
    into.write_text("".join(MAIN_SET.read_text(encoding="utf-8").splitlines(keepends=True)[:4]), encoding="utf-8")
    return cand, into, _candidates(cand, n)


def test_corrupt_review_log(sandbox: Sandbox) -> None:
    rng = random.Random(2905)
    cand, into, _ = _review_files(sandbox.root / "review", 6)
    review = ("label_eval.py", "--review-auto", "--eval-set", cand, "--into", into, "--results-dir", sandbox.root / "results")
    rc, _, err = sandbox.run(*review, input="a\nr\na\nr\n")  # four decisions, then the end of input
    assert rc == 0, err
    log = cand.with_name("candidates.review.jsonl")
    pristine = log.read_bytes()
    assert pristine.count(b"\n") == 4
    codes = []
    for trial in range(CORRUPT_TRIALS):
        log.write_bytes(pristine)
        into.with_name("eval_set.v2.jsonl").unlink(missing_ok=True)
        offsets = _corrupt(log, rng)
        rc, _, err = sandbox.run(*review, input="")
        _reported(rc, err, str(log), f"review log bytes {offsets}")
        codes.append(rc)
        _count("corrupt", trials=1, faults=1)
    print("corrupt review log, exit codes:", codes)


def test_a_damaged_accepted_case_in_the_review_log_is_named_there(sandbox: Sandbox) -> None:
    # Found by the loop above (EVALKIT_FAULT_SCALE=8): two bytes turned an accepted case's
    # "difficulty" into "diMficulty", which the log's check let through; the new version was
    # written with it, then refused, naming eval_set.v2.jsonl:6 and not the log's line.
    cand, into, _ = _review_files(sandbox.root / "review", 3)
    review = ("label_eval.py", "--review-auto", "--eval-set", cand, "--into", into, "--results-dir", sandbox.root / "results")
    rc, _, err = sandbox.run(*review, input="r\na\n")
    assert rc == 0, err
    log = cand.with_name("candidates.review.jsonl")
    lines = log.read_bytes().splitlines(keepends=True)
    assert b'"difficulty"' in lines[1]
    log.write_bytes(lines[0] + lines[1].replace(b'"difficulty"', b'"diMficulty"'))
    dest = into.with_name("eval_set.v2.jsonl")
    dest.unlink()
    rc, _, err = sandbox.run(*review, input="")
    assert rc == 2
    assert err.splitlines() == [
        f"evalkit: {log}:2: accepted case 'gen-01' does not validate: diMficulty: unknown field 'diMficulty'; "
        "did you mean 'difficulty'?",
        "evalkit: fix or delete the review log's lines named above, then rerun",
    ]
    assert not dest.exists() and sorted(p.name for p in dest.parent.iterdir()) == sorted(
        ["candidates.jsonl", "candidates.review.jsonl", "eval_set.v1.jsonl"])
    _count("corrupt", trials=1, faults=1)


# --------------------------------------------------------------------------- c. race


def _together(sandbox: Sandbox, go: Path, starts: list[tuple[Any, ...]], preload: str) -> list[subprocess.Popen[str]]:
    """Start every command and let them go at once, when each has imported `preload` and
    waits on `go` (it says so with a `<go>.<pid>.ready` file)."""
    procs = [sandbox.start(*cmd, go=go, preload=preload) for cmd in starts]
    deadline = time.monotonic() + 60
    while len(list(go.parent.glob(f"{go.name}.*.ready"))) < len(procs) and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break  # one failed before the start: reported by the caller
        time.sleep(0.01)
    go.touch()
    return procs


def _race(sandbox: Sandbox, go: Path, starts: list[tuple[Any, ...]], preload: str) -> None:
    """Run the commands together (`_together`); each must end with exit 0."""
    for p in _together(sandbox, go, starts, preload):
        _, err = p.communicate(timeout=120)
        rc = checked(p.returncode, err)
        _no_traceback(rc, err, "a racing writer")
        assert rc == 0, err


def test_race_eval_sets_lock(sandbox: Sandbox) -> None:
    for trial in range(RACE_TRIALS):
        sets = sandbox.root / f"sets-{trial}"
        files = []
        for i in range(WRITERS):
            f = sets / f"set{i}.v1.jsonl"
            _eval_set(f, limit=i + 1)
            files.append(f)
        _race(sandbox, sandbox.root / f"go-lock-{trial}",
              [("lock_eval_set.py", f, "--run-id", f"run-{f.stem}") for f in files], "evalkit.cli.lock_eval_set")
        manifest = json.loads((sets / "eval_sets.lock").read_text())
        lost = len({f.name for f in files} - set(manifest["eval_sets"]))
        _count("race", trials=1, faults=WRITERS, losses=lost)
        assert lost == 0, sorted(manifest["eval_sets"])


def test_race_run_eval_finishers_point_latest(sandbox: Sandbox) -> None:
    es = sandbox.root / "eval_set.jsonl"
    ids = _eval_set(es, limit=8)
    for trial in range(RACE_TRIALS):
        results = sandbox.root / f"results-{trial}"
        runs = [f"w{i}" for i in range(WRITERS)]
        _race(sandbox, sandbox.root / f"go-runs-{trial}", [("run_eval.py", *_run_args(es, results, r)) for r in runs],
              "evalkit.cli.run_eval,evalkit.run.runner,evalkit.reference.chatbot")
        lost = sum(_run_is_whole(results / r, ids) for r in runs)
        latest = resolve_run_id(results, "latest")
        assert latest in runs and (results / latest / "metrics.json").is_file()
        assert sorted(p.name for p in results.iterdir()) == sorted(["latest", *runs])  # no temp link left
        _count("race", trials=1, faults=WRITERS, losses=lost)
        assert lost == 0


POINTER = """
import sys
from pathlib import Path
from evalkit.store.runs import point_latest
results, run_id = Path(sys.argv[1]), sys.argv[2]
for _ in range(150):
    assert point_latest(results, run_id) is not None
"""


def test_race_pointers_never_leave_latest_dangling(sandbox: Sandbox) -> None:
    # N processes point `latest` over and over while this one reads it: every read finds a run.
    for trial in range(RACE_TRIALS):
        results = sandbox.root / f"results-{trial}"
        runs = [f"p{i}" for i in range(WRITERS)]
        for r in runs:
            (results / r).mkdir(parents=True)
        procs = _together(sandbox, sandbox.root / f"go-point-{trial}", [(POINTER, results, r) for r in runs],
                          "evalkit.store.runs")
        reads, misses, seen = 0, [], False
        while any(p.poll() is None for p in procs):
            try:
                found = resolve_run_id(results, "latest")
                assert found in runs, found
                seen = True
            except Exception as e:  # noqa: BLE001 - any failure of a read is the finding
                if seen:  # (before the first pointer, no latest is right)
                    misses.append(repr(e))
            reads += 1
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert checked(p.returncode, err) == 0, err
        assert sorted(p.name for p in results.iterdir()) == sorted(["latest", *runs])
        _count("race", trials=1, faults=WRITERS, losses=len(misses))
        assert misses == [], f"{len(misses)} of {reads} reads failed: {misses[:3]}"


CACHE_WRITER = """
import sys
from pathlib import Path
from evalkit.judges.cache import JudgeCache
cache = JudgeCache(Path(sys.argv[1]))
for i in range(int(sys.argv[3])):
    cache.put(f"{sys.argv[2]}-{i}", {"score": 3}, kind="groundedness", model="m", prompt_version="p")
cache.close()
"""


def test_race_judge_cache_writers(sandbox: Sandbox) -> None:
    n, puts = 4, 150
    for trial in range(RACE_TRIALS):
        cache = sandbox.root / f"cache-{trial}" / "judge_cache.sqlite"
        _race(sandbox, sandbox.root / f"go-cache-{trial}", [(CACHE_WRITER, cache, f"w{i}", puts) for i in range(n)],
              "evalkit.judges.cache")
        reader = JudgeCache(cache)
        try:
            lost = n * puts - reader.count()
        finally:
            reader.close()
        _count("race", trials=1, faults=n, losses=lost)
        assert lost == 0


REVIEWER = """
import sys
from evalkit.authoring.review import ReviewSession
cand, into, results, mine = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
session = ReviewSession(cand, into, results_dir=results, reviewer=mine[0])
by_id = {c["id"]: c for c in session.pending()}
session.accept(by_id[mine[0]])
session.reject(by_id[mine[1]])
session.write()  # as a review session does when it ends
"""


def test_race_reviewers_of_one_candidates_file(sandbox: Sandbox) -> None:
    for trial in range(RACE_TRIALS):
        cand, into, ids = _review_files(sandbox.root / f"review-{trial}", 2 * WRITERS)
        mine = [ids[2 * i : 2 * i + 2] for i in range(WRITERS)]
        _race(sandbox, sandbox.root / f"go-review-{trial}",
              [(REVIEWER, cand, into, sandbox.root / "results", ",".join(m)) for m in mine], "evalkit.authoring.review")
        log = [json.loads(line) for line in cand.with_name("candidates.review.jsonl").read_text().splitlines()]
        new = [json.loads(line)["id"] for line in into.with_name("eval_set.v2.jsonl").read_text().splitlines()[4:]]
        lost = len(set(ids) - {d["id"] for d in log}) + len({m[0] for m in mine} - set(new))
        _count("race", trials=1, faults=WRITERS, losses=lost)
        assert lost == 0, f"log {sorted(d['id'] for d in log)}, new version {sorted(new)}"


# --------------------------------------------------------------------------- the figures


def test_tally(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.getbasetemp() / "reliability_tally.json"
    out.write_text(json.dumps(TALLY, indent=2) + "\n")
    print("reliability tally:", json.dumps(TALLY))
    assert TALLY["losses"] == TALLY["exit_70s"] == TALLY["outside_writes"] == 0, TALLY

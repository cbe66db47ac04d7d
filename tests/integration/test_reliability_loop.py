"""Fault-injection loops (issues 29, 38): kill at random points, corrupt random bytes, race N
writers, and fail every command that writes at a random write (SIGKILL, ENOSPC, EIO, a real
full disk), each with a fixed seed, and check that no entry is lost, no command exits 70 or
prints a traceback, and nothing is written outside the folders a loop gave its commands.

Every command runs as a subprocess through `AUDIT` (below), which records each write the
process makes (open for writing, rename, mkdir, remove, symlink, sqlite connect, ...) and
the folder of each child process it starts, through Python's audit hooks. HOME and TMPDIR
point into the loop's sandbox; a write outside the sandbox, or into its HOME, is an outside
write. The figures of the whole module go to `<pytest basetemp>/reliability_tally.json`
(`test_tally`, last), and docs/development.md#reliability quotes them.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalkit.derive.summary import render_run_summary
from evalkit.judges.cache import JudgeCache, source_problem
from evalkit.judges.grades import read_grades, sample_cases
from evalkit.report.html.run import render_run_report
from evalkit.store.runs import WRITER_LOCK, RunDir, resolve_run_id
# The hand-built run folder and the OpenAI-compatible judge of the judge_answers tests.
from tests.integration.test_judge_answers_cli import RUN_ID as JUDGED_RUN, judge_server, run_dir  # noqa: F401
from tests.support import bundled_cases, bundled_lines

# One worker runs the loops in file order, so the tally (`test_tally`) sees all of them.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("reliability")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"
RUN_FILES = ("config.json", "metrics.json", "results.json", "results.jsonl", "summary.md")  # a finished run's

# Trial counts: the module takes about a minute and a half on 2 busy cores (7 minutes at
# EVALKIT_FAULT_SCALE=8). EVALKIT_FAULT_SCALE=N runs N times as many trials (the same seeds,
# longer sequences) for a deeper search.
SCALE = int(os.environ.get("EVALKIT_FAULT_SCALE", "1"))
KILL_TRIALS, KILLS_PER_TRIAL = 4 * SCALE, 3
CORRUPT_TRIALS = 3 * SCALE  # per file kind
RACE_TRIALS, WRITERS = 2 * SCALE, 6
WRITER_TRIALS = SCALE  # per command that writes (section d), the fault kinds taking turns

# The module's figures: test_tally writes and checks them.
# faults: kills that landed, files corrupted, writers racing, write faults that struck (the
# writers loop, by kind and by command); audited_writes: every write the audit hook saw
# (outside_writes of them were outside the loop's folder).
TALLY: dict[str, Any] = {"trials": 0, "faults": 0, "losses": 0, "exit_70s": 0, "audited_writes": 0, "outside_writes": 0,
                         "loops": {}}

# A command under audit: python -c AUDIT LOG GO PRELOAD FAULT TARGET ARGS... TARGET is a
# script (run as __main__) or Python code; GO ("-" for none) is a file to wait for after
# PRELOAD's modules ("-" for none) are imported, so that N writers start their work together.
#
# FAULT ("-" for none) is a fault at the write layer, `<kind>:<n>`, striking at the command's
# n-th write: an open for writing, a rename, a folder or link made, an fsync, or a write of
# results.jsonl's lines (RunDir's ResultsWriter: the failing write puts half its bytes first,
# as a full disk does). `kill:<n>` SIGKILLs the process there; `eio:<n>` fails that one write
# with OSError(EIO); `enospc:<n>` fails it with OSError(ENOSPC), and every later write too
# (a disk stays full), renames and removals aside. `count:<file>` writes the number of writes
# to <file> at exit, so that a loop can pick n among them.
AUDIT = r'''
import errno, os, signal, sys
log, go, preload, fault, target, *argv = sys.argv[1:]
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

_kind, _, _at = fault.partition(":") if fault != "-" else ("", "", "")
_strike_at = int(_at) if _kind in ("kill", "eio", "enospc") else 0
_writes = 0

def _strike(what, path):
    """Count one write; at the planned one, the fault: "kill", or the OSError to raise. The
    first strike is logged (`fault <kind> at <what>`), so that the loop knows it landed."""
    global _writes
    _writes += 1
    if _writes == _strike_at:
        os.write(_fd, f"fault {_kind} at {what}\t{path or os.getcwd()}\n".encode("utf-8", "backslashreplace"))
    if _kind == "kill" and _writes == _strike_at:
        return "kill"
    if _kind == "eio" and _writes == _strike_at:
        return OSError(errno.EIO, os.strerror(errno.EIO), path)
    if _kind == "enospc" and (_writes == _strike_at or (_writes > _strike_at and what != "rename")):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return None

def _write(what, path):
    fault = _strike(what, path)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault is not None:
        raise fault

def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & _WRITE:
            _note(event, path)
            if _kind and not isinstance(path, int):
                _write("open", path)
    elif event == "os.rename":  # os.replace too
        _note(event, args[0]), _note(event, args[1])
        if _kind:
            _write("rename", args[1])
    elif event == "os.mkdir":
        if not isinstance(args[0], int) and not os.path.lexists(args[0]):  # mkdir(exist_ok=True) makes nothing
            _note(event, args[0])
            if _kind:
                _write("mkdir", args[0])
    elif event in _ONE:
        _note(event, args[0])
    elif event in _SECOND:
        _note(event, args[1])
        if _kind and event in ("os.symlink", "os.link"):
            _write("link", args[1])
    elif event == "subprocess.Popen":  # a child writes where it runs (git in a checkout)
        _note(f"child {args[0]}", args[2] if args[2] is not None else os.getcwd())

if _kind:  # Python picks its temp folder (a probe file) at the first use; here, before any fault
    import tempfile
    tempfile.gettempdir()
sys.addaudithook(_hook)
if _kind:
    import atexit
    _fsync = os.fsync

    def _fsync_counted(fd):
        _write("fsync", None)
        return _fsync(fd)

    os.fsync = _fsync_counted
    if _kind == "count":
        atexit.register(lambda: (lambda n: open(_at, "w").write(str(n)))(_writes))  # this open not counted
    from evalkit.store import runs as _runs

    class _Lines:
        """results.jsonl as a ResultsWriter holds it: each write counted; the one struck
        writes half its bytes first (a torn line), then dies or fails."""

        def __init__(self, f, path):
            self._f, self._path = f, path

        def write(self, data):
            fault = _strike("write", self._path)
            if fault is not None:
                self._f.write(data[: len(data) // 2])
                self._f.flush()
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise fault
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

    _init = _runs.ResultsWriter.__init__

    def _init_counted(self, path, *args, **kwargs):
        _init(self, path, *args, **kwargs)
        self._f = _Lines(self._f, str(path))

    _runs.ResultsWriter.__init__ = _init_counted
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

    def argv(self, target: str | Path, *args: object, go: Path | None = None, preload: str = "-",
             fault: str = "-") -> list[str]:
        """The command line that runs `target` (a script under scripts/ by name, or Python
        code) under audit, with `fault` (see AUDIT) at its write layer."""
        what = str(SCRIPTS / target) if isinstance(target, str) and target.endswith(".py") else str(target)
        return [sys.executable, "-c", AUDIT, str(self.log), str(go or "-"), preload, fault, what, *map(str, args)]

    def start(self, target: str | Path, *args: object, go: Path | None = None, preload: str = "-",
              fault: str = "-", stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
        """Start `target` under audit (`argv`)."""
        return subprocess.Popen(self.argv(target, *args, go=go, preload=preload, fault=fault), cwd=self.root,
                                env=self.env(), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, target: str | Path, *args: object, input: str | None = None, fault: str = "-") -> tuple[int, str, str]:
        """Run `target` to its end: (exit code, stdout, stderr), counted in the tally."""
        proc = self.start(target, *args, fault=fault, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        out, err = proc.communicate(input, timeout=120)
        return checked(proc.returncode, err), out, err

    def writes(self) -> list[str]:
        """Every audited write: `<event>\t<absolute path>`."""
        return [line for line in self._log() if not line.startswith("fault ")]

    def struck(self) -> list[str]:
        """The faults that struck (AUDIT's FAULT): `fault <kind> at <write>\t<path>`."""
        return [line for line in self._log() if line.startswith("fault ")]

    def _log(self) -> list[str]:
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
    left = [p for p in (box.root / "tmp").iterdir() if not (_TEMPDIR_PROBE.fullmatch(p.name) and _is_probe(p))]
    assert left == [], "temp files left in TMPDIR"


# Python's tempfile, the first time a process asks for its temp folder, writes "blat" to a
# file with an 8-character random name there and removes it at once
# (tempfile._get_default_tempdir); a SIGKILL at random can strike between the two (seen once
# in four CI runs). Such a probe is not a temp file of evalkit's; anything else left in
# TMPDIR is.
_TEMPDIR_PROBE = re.compile(r"[a-z0-9_]{8}")


def _is_probe(path: Path) -> bool:
    return path.is_file() and not path.is_symlink() and path.read_bytes() in (b"", b"blat")


def _count(loop: str, *, trials: int = 0, faults: int = 0, losses: int = 0) -> None:
    cell = TALLY["loops"].setdefault(loop, {})
    for key, n in (("trials", trials), ("faults", faults), ("losses", losses)):
        cell[key] = cell.get(key, 0) + n
        TALLY[key] += n


def _no_traceback(rc: int, err: str, what: str) -> None:
    assert rc != 70 and "Traceback" not in err, f"{what}: exit {rc}\n{err}"


def _eval_set(path: Path, copies: int = 1, limit: int | None = None) -> list[str]:
    """The bundled eval set (`copies` times, ids suffixed) written to `path`; the case ids (a
    conversation's turns are cases `id#n`)."""
    cases = [json.loads(line) for line in MAIN_SET.read_text(encoding="utf-8").splitlines() if line.strip()][:limit]
    out = [{**c, "id": f"{c['id']}-{n}"} if copies > 1 else c for n in range(copies) for c in cases]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in out), encoding="utf-8")
    return [cid for c in out
            for cid in ([f"{c['id']}#{t}" for t in range(1, len(c["turns"]) + 1)] if "turns" in c else [c["id"]])]


def _run_args(es: Path, results: Path, run_id: str, *extra: object) -> list[object]:
    return ["--eval-set", es, "--vault", VAULT, "--retrieval-only", "--results-dir", results, "--run-id", run_id,
            "--quiet", *extra]


def _ids(run: Path) -> list[str]:
    return [json.loads(line)["test_case_id"] for line in (run / "results.jsonl").read_bytes().splitlines()]


def _run_is_whole(run: Path, ids: list[str], extra: tuple[str, ...] = (), *, settled: bool = True) -> int:
    """Lost or duplicated cases of a finished run (0 when each case is there once), after
    checking that its derived files agree with metrics.json (report.html too, when it has
    one) and that no temp file is left; `extra`: its files beyond run_eval's five.
    `settled=False` (a command that went on after a failed write): the records only, since
    the derived files may wait for the next command (`.derive-pending`)."""
    found = _ids(run)
    lost = len(set(ids) - set(found)) + (len(found) - len(set(found)))
    if not settled:
        return lost
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["total_tests"] == len(ids)
    assert json.loads((run / "results.json").read_text())["metrics"] == metrics
    # Sorted: a run renders from its metrics in memory, whose latency rows may come in another order.
    summary = (run / "summary.md").read_text(encoding="utf-8").splitlines()
    assert sorted(summary) == sorted((render_run_summary(RunDir(run)) + "\n").splitlines())
    if (run / "report.html").exists():
        assert _page(run / "report.html") == _page(render_run_report(RunDir(run))), f"{run}/report.html is stale"
    # And the writer lock's file, kept once made (a merged run, staged whole, has none).
    names = sorted(p.name for p in run.iterdir() if p.name != WRITER_LOCK)
    assert names == sorted([*RUN_FILES, *extra]), names
    return lost


def _page(page: Path | str) -> str:
    """A run's report page without the time it was made."""
    text = page.read_text(encoding="utf-8") if isinstance(page, Path) else page
    return re.sub(r"report made \S+ by", "report made by", text)


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


def _kill_and_finish(sandbox: Sandbox, rng: random.Random, es: Path, results: Path, run_id: str, n_cases: int,
                     *extra: object) -> int:
    """run_eval of `es` SIGKILLed KILLS_PER_TRIAL times at random moments, each time resumed
    once it has a config.json (else started again), then left to finish; the kills landed."""
    run = results / run_id
    kills = 0
    for attempt in range(KILLS_PER_TRIAL + 20):
        # After a kill: resume the run once it has a config.json, else start it again.
        args = (["--resume", run_id, "--results-dir", results, "--quiet"] if (run / "config.json").exists()
                else _run_args(es, results, run_id, *extra))
        before = _state(run)
        proc = sandbox.start("run_eval.py", *args)
        if kills < KILLS_PER_TRIAL:
            _kill_at_random(proc, rng, run)
        _, err = proc.communicate(timeout=120)
        rc = checked(proc.returncode, err)
        _no_traceback(rc, err, f"{run_id} attempt {attempt}")
        if rc == -signal.SIGKILL:
            kills += 1
            phases = TALLY["loops"].setdefault("kill", {}).setdefault("phases", {})
            phase = _phase(before, run, n_cases)
            phases[phase] = phases.get(phase, 0) + 1
            continue
        # Killed at any point, the next command carries on: never an exit 2 over debris.
        assert rc == 0, f"{run_id} attempt {attempt} after {kills} kills: exit {rc}\n{err}"
        if kills >= KILLS_PER_TRIAL:
            break
    return kills


def test_kill_at_random_points_then_resume(sandbox: Sandbox) -> None:
    rng = random.Random(2901)
    es = sandbox.root / "eval_set.jsonl"
    ids = _eval_set(es, copies=6)
    results = sandbox.root / "results"
    for trial in range(KILL_TRIALS):
        run_id = f"killed-{trial}"
        kills = _kill_and_finish(sandbox, rng, es, results, run_id, len(ids))
        assert kills == KILLS_PER_TRIAL
        lost = _run_is_whole(results / run_id, ids)
        assert resolve_run_id(results, "latest") == run_id
        assert sorted(p.name for p in results.iterdir()) == sorted(["latest", *(f"killed-{t}" for t in range(trial + 1))])
        _count("kill", trials=1, faults=kills, losses=lost)
        assert lost == 0


def _turns_sent(run: Path) -> dict[str, tuple[Any, Any]]:
    return {r["test_case_id"]: (r["history"], r["answer"]) for r in map(json.loads, (run / "results.jsonl").read_bytes().splitlines())}


def test_kill_conversations_at_random_points_then_resume(sandbox: Sandbox) -> None:
    # Issue 40: a run of conversations (live history) killed mid-conversation and resumed
    # loses and duplicates no turn, and each turn is sent what the fault-free run sent it.
    rng = random.Random(2911)
    _conv_prepare(sandbox.root)
    es, results, ids = sandbox.root / "conv.jsonl", sandbox.root / "results", _conv_ids()
    rc, _, err = sandbox.run("run_eval.py", *_run_args(es, sandbox.root / "ref", "ref", "--concurrency", 3))
    assert rc == 0, err
    want = _turns_sent(sandbox.root / "ref" / "ref")
    for trial in range(KILL_TRIALS):
        run = results / f"conv-{trial}"
        kills = _kill_and_finish(sandbox, rng, es, results, run.name, len(ids), "--concurrency", 3)
        lost = _run_is_whole(run, ids)
        assert _turns_sent(run) == want
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


# --------------------------------------------------------------------------- d. every writer

# Every command that writes, driven in a trial folder copied from the same inputs: the
# command with a fault at a random point, then what its user does next (the same command
# again, or run_eval --resume), then the checks: nothing lost, the change made once, the
# derived files in step with metrics.json, no debris. The kinds take turns per command:
# SIGKILL at a random write, ENOSPC from a random write on (the disk stays full), EIO at one
# random write, and a real full disk (a tmpfs with a random number of bytes left; injected
# ENOSPC where no tmpfs can be mounted). The random write is one of those the command makes
# without a fault (counted by a first run, which is also what a trial is compared with).
FAULT_KINDS = ("kill", "enospc", "eio", "full")
BUNDLED_IDS = [c["id"] for c in bundled_cases()]  # a conversation's turns are cases `id#n`
HINDSIGHT = ROOT / "tests" / "data" / "hindsight" / "assistant-baseline.v1.jsonl"
INIT = "import sys; from evalkit.cli.main import app; sys.argv = ['evalkit', 'init', *sys.argv[1:]]; app()"
EMBED = "import sys; from evalkit.cli.main import app; sys.argv = ['evalkit', 'embed', *sys.argv[1:]]; app()"
GRADES = "3\n4\n" * 6  # label_eval --grade-answers --sample 6: groundedness, correctness per case
# What a killed or failed write may leave and the next command must clear: write_atomic's
# `.<name>.<random>.tmp`, write_together's `.<name>.new` and `.commit`, a stage, the mark.
_DEBRIS = re.compile(r"\..+\.tmp|\..+\.new|\.commit(\.tmp)?|\.derive-pending")
# What a SIGKILL may leave for good outside a run folder, as store/atomic.py says: write_atomic's
# temp file beside its target, or a stage (the next stage made in that folder removes it).
_KILLED_WRITE = re.compile(r"\..+\.[^.]+\.tmp|\..+\.[^.]+\.stage\.tmp")


MATRIX = """\
[presets.flat]
params = {bm25_b = 0}

[presets.plain]
params = {}
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every writer's trial starts from (a copy): the bundled eval set; `base`, a
    retrieval-only run (answers stored, not judged) with its report.html, so that a re-score
    re-renders it; `s1` and `s2`, the set's two shards; `sets/`, an eval set to lock beside
    one locked already; `review/`, six candidates and the set they go into."""
    root = tmp_path_factory.mktemp("writer-inputs")
    es, results = root / "eval_set.jsonl", root / "results"
    _eval_set(es)
    env = {**os.environ, "HOME": str(root), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    for cmd in (("run_eval.py", *_run_args(es, results, "base")),
                ("run_eval.py", *_run_args(es, results, "s1", "--shard", "1/2")),
                ("run_eval.py", *_run_args(es, results, "s2", "--shard", "2/2")),
                ("report.py", "--run-id", "base", "--results-dir", results),
                ("lock_eval_set.py", root / "sets" / "other.v1.jsonl", "--run-id", "base")):
        if cmd[0] == "lock_eval_set.py":
            _eval_set(root / "sets" / "other.v1.jsonl", limit=3)
            _eval_set(root / "sets" / "eval_set.v1.jsonl", limit=6)
            _review_files(root / "review", 6)
        done = subprocess.run([sys.executable, str(SCRIPTS / cmd[0]), *map(str, cmd[1:])], cwd=root, env=env,
                              check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        assert done.returncode == 0, done.stderr
    # validate --fix: the notes with sv-002's heading renamed, so that one label is fixed.
    shutil.copytree(VAULT, root / "fix" / "vault")
    note = root / "fix" / "vault" / "personal" / "recipes" / "Sourdough.md"
    note.write_text(note.read_text(encoding="utf-8").replace("\n## The starter\n", "\n## Our starter\n"), encoding="utf-8")
    _eval_set(root / "fix" / "eval_set.jsonl")
    # merge --cache: two judge caches, 40 judgments each, 10 of them in both.
    for name, first in (("a", 0), ("b", 30)):
        cache = JudgeCache(root / "caches" / f"{name}.sqlite")
        try:
            for i in range(first, first + 40):
                cache.put(f"key-{i}", {"score": i % 5}, kind="groundedness", model="m", prompt_version="p")
        finally:
            cache.close()
    (root / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    # label_eval --accept-top and --new: the bundled set with its first 6 answerable cases unlabeled.
    cases = [json.loads(line) for line in MAIN_SET.read_text(encoding="utf-8").splitlines() if line.strip()]
    for case in [c for c in cases if c.get("answerable")][:6]:
        del case["gold_supports"]
    (root / "label").mkdir()
    (root / "label" / "eval_set.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return root


@dataclass(frozen=True)
class Writer:
    """A command that writes, as a trial drives it in its folder `root` (a copy of `inputs`)."""

    name: str
    command: Callable[[Path], tuple[Any, ...]]  # (script or code, *arguments)
    # (root, the fault-free run's root, inputs, settled) -> lost entries, asserting the rest;
    # settled=False: right after the faulted command exited 0, before anything else ran.
    check: Callable[[Path, Path, Path, bool], int]
    # What its user does next, told the faulted command's exit code; default: the command
    # again, which must exit 0.
    again: Callable[[Sandbox, Path, Writer, int], None] | None = None
    stdin: str | None = None
    # What the trial's folder needs beyond the inputs, made before the command (not audited).
    prepare: Callable[[Path], None] | None = None


def _must_pass(sandbox: Sandbox, *cmd: Any, input: str | None = None) -> None:
    rc, _, err = sandbox.run(*cmd, input=input)
    _no_traceback(rc, err, f"after the fault: {cmd[0]}")
    assert rc == 0, f"after the fault: {cmd[0]} exit {rc}\n{err}"


def _again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    _must_pass(sandbox, *w.command(root), input=w.stdin)


def _tree(folder: Path, skip: re.Pattern[str] | None = None) -> dict[str, bytes | str]:
    """Every file under `folder` by relative path: its bytes, or where a link points."""
    out: dict[str, bytes | str] = {}
    if not folder.exists():
        return out
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if skip is not None and skip.search(rel):
            continue
        if p.is_symlink():
            out[rel] = os.readlink(p)
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "<folder>"
    return out


def _unchanged(root: Path, inputs: Path, *names: str) -> None:
    """The files `names` (relative) are as the inputs had them."""
    for name in names:
        assert (root / name).read_bytes() == (inputs / name).read_bytes(), f"{name} changed"


def _no_debris(root: Path, *, killed: bool) -> list[str]:
    """Nothing a fault left is there, but (after a SIGKILL) what store/atomic.py allows a
    kill to leave outside a run folder: those, which are returned. A run folder (a folder with
    a config.json) is settled by the next command that opens it, so it holds none."""
    left = [p for p in root.rglob("*") if _DEBRIS.fullmatch(p.name)]
    allowed = [p for p in left if killed and _KILLED_WRITE.fullmatch(p.name) and not (p.parent / "config.json").exists()]
    assert not set(left) - set(allowed), f"left behind: {[str(p.relative_to(root)) for p in left]}"
    return [str(p.relative_to(root)) for p in allowed]


def _base(root: Path) -> Path:
    return root / "results" / "base"


# ---- the writers: command, follow-up, checks


def _run_eval_cmd(root: Path) -> tuple[Any, ...]:
    return ("run_eval.py", *_run_args(root / "eval_set.jsonl", root / "fresh", "r"))


def _run_eval_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    # Resumed once it has a config.json, else started again (as the kill loop does).
    if (root / "fresh" / "r" / "config.json").exists():
        _must_pass(sandbox, "run_eval.py", "--resume", "r", "--results-dir", root / "fresh", "--quiet")
    else:
        _again(sandbox, root, w, rc)


def _run_eval_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    lost = _run_is_whole(root / "fresh" / "r", BUNDLED_IDS, settled=settled)
    if settled:
        assert resolve_run_id(root / "fresh", "latest") == "r"
    return lost


# Conversations (issue 40): the bundled three, four times over (12 conversations, 28 turns),
# asked with live history, so a resumed turn is sent the answers stored before the fault.


def _conv_prepare(root: Path) -> None:
    lines = [json.loads(line) for line in bundled_lines(turns=True)]
    with open(root / "conv.jsonl", "w", encoding="utf-8") as f:
        for n in range(4):
            for conv in lines:
                f.write(json.dumps({**conv, "id": f"{conv['id']}-{n}"}) + "\n")


def _conv_ids() -> list[str]:
    lines = [json.loads(line) for line in bundled_lines(turns=True)]
    return [f"{c['id']}-{n}#{t}" for n in range(4) for c in lines for t in range(1, len(c["turns"]) + 1)]


def _conv_cmd(root: Path) -> tuple[Any, ...]:
    return ("run_eval.py", *_run_args(root / "conv.jsonl", root / "conv", "c", "--concurrency", 3))


def _conv_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    if (root / "conv" / "c" / "config.json").exists():
        _must_pass(sandbox, "run_eval.py", "--resume", "c", "--results-dir", root / "conv", "--quiet")
    else:
        _again(sandbox, root, w, rc)


def _conv_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    """Every turn once; settled, each turn was sent the history and gave the answer the
    fault-free run's did (a resumed conversation went on from its first unfinished turn)."""
    run = root / "conv" / "c"
    if not settled and not (run / "results.jsonl").exists():
        return 0
    lost = _run_is_whole(run, _conv_ids(), settled=settled)
    if settled:
        assert _turns_sent(run) == _turns_sent(ref / "conv" / "c")
    return lost


def _rescore_cmd(*flags: Any) -> Callable[[Path], tuple[Any, ...]]:
    def cmd(root: Path) -> tuple[Any, ...]:
        return (*flags[:1], "--run-id", "base", "--results-dir", root / "results", *flags[1:], "--quiet")
    return cmd


def _rescore_check(view: Callable[[dict[str, Any]], Any]) -> Callable[[Path, Path, Path, bool], int]:
    """A re-scoring's check: the run whole, and every record's `view` (what the command
    changes) as the fault-free run made it."""
    def check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
        run = _base(root)
        lost = _run_is_whole(run, BUNDLED_IDS, ("report.html",), settled=settled)
        got = {r["test_case_id"]: view(r) for r in map(json.loads, (run / "results.jsonl").read_bytes().splitlines())}
        want = {r["test_case_id"]: view(r) for r in map(json.loads, (_base(ref) / "results.jsonl").read_bytes().splitlines())}
        assert got == want, f"records differ from the fault-free run's: {sorted(k for k in want if got.get(k) != want[k])[:5]}"
        if settled:
            theirs, mine = (json.loads((d / "metrics.json").read_text()) for d in (_base(ref), run))
            for key in ("ks", "total_tests"):
                assert mine[key] == theirs[key], key
        return lost
    return check


def _score_view(record: dict[str, Any]) -> Any:
    return (record.get("retrieval_metrics") or {}).get("at_k")


def _abstention_view(record: dict[str, Any]) -> Any:
    return record.get("abstention")


def _judge_view(record: dict[str, Any]) -> Any:
    return [(record.get(kind) or {}).get("score") for kind in ("groundedness", "correctness")]


def _grade_cmd(root: Path) -> tuple[Any, ...]:
    return ("label_eval.py", "--grade-answers", "--run-id", "base", "--results-dir", root / "results", "--sample", 6)


def _grade_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    run = _base(root)
    lines = (run / "human_grades.jsonl").read_bytes().splitlines() if (run / "human_grades.jsonl").exists() else []
    ids = [json.loads(line)["test_case_id"] for line in lines]
    want = set(read_grades(RunDir(_base(ref))))
    assert len(want) == 6 and read_grades(RunDir(run)).keys() <= want
    _unchanged(root, inputs, *(f"results/base/{n}" for n in (*RUN_FILES, "report.html")))
    if not settled:
        return len(ids) - len(set(ids))
    assert sample_cases(RunDir(run), 6, 0) == []  # the sample is graded
    return len(want - set(ids)) + len(ids) - len(set(ids))


def _import_cmd(root: Path) -> tuple[Any, ...]:
    out = root / "imported"
    return ("import_cases.py", "--format", "hindsight", HINDSIGHT, "-o", out / "cases.jsonl", "--vault-out", out / "notes")


def _import_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    # The import replaces what an earlier one wrote only with --force (it keeps a .bak).
    out = root / "imported"
    force = ("--force",) if (out / "cases.jsonl").exists() or (out / "notes").exists() else ()
    _must_pass(sandbox, *w.command(root), *force)


def _import_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    mine, theirs = (_tree(r / "imported", re.compile(r"\.bak(\.\d+)?$")) for r in (root, ref))
    lost = len(set(theirs) - set(mine))
    assert mine == theirs, sorted(set(mine) ^ set(theirs)) or [k for k in mine if mine[k] != theirs[k]]
    return lost


def _init_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    if rc == 0:
        return  # the project is there (checked), and a rerun refuses to write over it
    rc, _, err = sandbox.run(INIT, root / "proj")
    _no_traceback(rc, err, "evalkit init again")
    # Killed after it put a piece in place (the notes, then eval_set.jsonl, evalkit.toml): each
    # piece is whole and exactly what init writes, so the rerun counts it as done and finishes.
    assert rc == 0, f"evalkit init again: exit {rc}\n{err}"


def _init_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    mine, theirs = _tree(root / "proj"), _tree(ref / "proj")
    assert mine == theirs, sorted(set(mine) ^ set(theirs)) or [k for k in mine if mine[k] != theirs[k]]
    return len(set(theirs) - set(mine))


def _lock_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    mine, theirs, before = (json.loads((r / "sets" / "eval_sets.lock").read_text())["eval_sets"] for r in (root, ref, inputs))
    assert mine["other.v1.jsonl"] == before["other.v1.jsonl"]
    def timeless(entries: dict[str, Any]) -> dict[str, Any]:
        return {name: {k: v for k, v in entry.items() if k != "locked_at"} for name, entry in entries.items()}

    assert timeless(mine) == timeless(theirs)
    return len(set(theirs) - set(mine))


def _review_cmd(root: Path) -> tuple[Any, ...]:
    review = root / "review"
    return ("label_eval.py", "--review-auto", "--eval-set", review / "candidates.jsonl", "--into",
            review / "eval_set.v1.jsonl", "--results-dir", root / "results")


def _review_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    mine, theirs = root / "review", ref / "review"
    logged = [json.loads(line)["id"] for line in (mine / "candidates.review.jsonl").read_bytes().splitlines()]
    _unchanged(root, inputs, "review/candidates.jsonl", "review/eval_set.v1.jsonl")
    if settled:
        assert (mine / "eval_set.v2.jsonl").read_bytes() == (theirs / "eval_set.v2.jsonl").read_bytes()
        assert sorted(p.name for p in mine.iterdir() if not _DEBRIS.fullmatch(p.name)) == sorted(
            p.name for p in theirs.iterdir())
    want = [json.loads(line)["id"] for line in (theirs / "candidates.review.jsonl").read_bytes().splitlines()]
    return len(set(want) - set(logged)) + len(logged) - len(set(logged)) if settled else len(logged) - len(set(logged))


def _merge_cmd(root: Path) -> tuple[Any, ...]:
    return ("merge.py", "s1", "s2", "--run-id", "merged", "--results-dir", root / "results")


def _merge_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    if not (root / "results" / "merged").exists():
        _again(sandbox, root, w, rc)
    else:  # put in place whole; a derived file a failed write left out, the next command that opens it makes
        _must_pass(sandbox, "report.py", "--run-id", "merged", "--results-dir", root / "results", "-o", root / "merged.html")


def _merge_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    _unchanged(root, inputs, *(f"results/{run}/{n}" for run in ("s1", "s2") for n in RUN_FILES))
    return _run_is_whole(root / "results" / "merged", BUNDLED_IDS, settled=settled)


def _redact_cmd(root: Path) -> tuple[Any, ...]:
    return ("redact.py", "--run-id", "base", "--results-dir", root / "results", "--salt", "s")


def _redact_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    if not (root / "results" / "base-redacted").exists():  # else it was put in place whole
        _again(sandbox, root, w, rc)


def _redact_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    mine, theirs = (r / "results" / "base-redacted" for r in (root, ref))
    # The same salt: the same bytes, but for the time it was made (redaction.json, results.json).
    assert sorted(p.name for p in mine.iterdir()) == sorted(p.name for p in theirs.iterdir())
    for name in ("config.json", "metrics.json", "results.jsonl", "summary.md"):
        assert (mine / name).read_bytes() == (theirs / name).read_bytes(), name
    _unchanged(root, inputs, *(f"results/base/{n}" for n in (*RUN_FILES, "report.html")))
    found = _ids(mine)
    return len(set(BUNDLED_IDS) - set(found)) + len(found) - len(set(found))


def _report_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    _unchanged(root, inputs, *(f"results/base/{n}" for n in RUN_FILES))
    return _run_is_whole(_base(root), BUNDLED_IDS, ("report.html",))


def _export_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    _unchanged(root, inputs, *(f"results/base/{n}" for n in (*RUN_FILES, "report.html")))
    mine, theirs = _tree(_base(root) / "trec-anchor"), _tree(_base(ref) / "trec-anchor")
    assert mine == theirs, sorted(set(mine) ^ set(theirs)) or [k for k in mine if mine[k] != theirs[k]]
    return len(set(theirs) - set(mine))


def _embed_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    """embeddings.json: whole (an atomic write) and the fault-free run's numbers; the run's
    own files untouched; report.html re-rendered with the analysis (once settled)."""
    _unchanged(root, inputs, *(f"results/base/{n}" for n in RUN_FILES))
    if not settled and not (_base(root) / "embeddings.json").exists():
        return 0
    mine, theirs = (json.loads((_base(r) / "embeddings.json").read_text(encoding="utf-8")) for r in (root, ref))
    mine.pop("computed_at"), theirs.pop("computed_at")
    assert mine == theirs
    return _run_is_whole(_base(root), BUNDLED_IDS, ("report.html", "embeddings.json"), settled=settled) + \
        len(set(BUNDLED_IDS) - {c["id"] for c in mine["cases"]})


def _generate_cmd(root: Path) -> tuple[Any, ...]:
    return ("generate_cases.py", "--vault", VAULT, "-o", root / "gen" / "candidates.jsonl")


def _generate_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    # It writes over an earlier output (and its report) only with --force.
    force = ("--force",) if any((root / "gen").glob("candidates*.json*")) else ()
    _must_pass(sandbox, *w.command(root), *force)


def _generate_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    # The report names the output by its path, which is the trial's.
    # A kill inside write_atomic leaves its temp file (outside a run folder nothing sweeps it:
    # docs/development.md; _no_debris lists it in the tally).
    mine, theirs = ({k: v.replace(str(r).encode(), b"ROOT") if isinstance(v, bytes) else v
                     for k, v in _tree(r / "gen", re.compile(r"\.bak(\.\d+)?$")).items()
                     if not _KILLED_WRITE.fullmatch(Path(k).name)} for r in (root, ref))
    assert mine == theirs, sorted(set(mine) ^ set(theirs)) or [k for k in mine if mine[k] != theirs[k]]
    return len(set(theirs) - set(mine))


def _fix_cmd(root: Path) -> tuple[Any, ...]:
    fix = root / "fix"
    return ("validate.py", "--eval-set", fix / "eval_set.jsonl", "--vault", fix / "vault", "--fix", "--yes",
            "--no-retrieval", "--results-dir", root / "results")


def _fix_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    force = ("--force",) if (root / "fix" / "eval_set.v2.jsonl").exists() else ()
    _must_pass(sandbox, *w.command(root), *force)


def _fix_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    _unchanged(root, inputs, "fix/eval_set.jsonl")
    mine, theirs = (r / "fix" / "eval_set.v2.jsonl" for r in (root, ref))
    assert mine.read_bytes() == theirs.read_bytes()
    found = [c["id"] for c in bundled_cases(mine)]  # a conversation's turns, `id#n`
    return len(set(BUNDLED_IDS) - set(found)) + len(found) - len(set(found))


def _cache_cmd(root: Path) -> tuple[Any, ...]:
    caches = root / "caches"
    return ("merge.py", "--cache", caches / "a.sqlite", "--cache", caches / "b.sqlite", "--into", caches / "into.sqlite")


def _cache_rows(path: Path) -> dict[str, Any]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT key, kind, model, prompt_version, value FROM judgments").fetchall()
    finally:
        db.close()
    return {row[0]: row[1:] for row in rows}


def _cache_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    _unchanged(root, inputs, "caches/a.sqlite", "caches/b.sqlite")
    mine, theirs = (_cache_rows(r / "caches" / "into.sqlite") for r in (root, ref))
    assert len(theirs) == 70
    assert mine == {k: v for k, v in theirs.items() if k in mine}
    return len(set(theirs) - set(mine))


def _repro_prepare(root: Path) -> None:
    # A run of the trial's own eval set: a reproduction reads the eval set (and asks git about
    # its folder) where the run's config.json says it was, which must be inside the trial.
    env = {**os.environ, "HOME": str(root), "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, str(SCRIPTS / "run_eval.py"), *map(str, _run_args(
        root / "eval_set.jsonl", root / "rp", "base"))], cwd=root, env=env, check=False, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr


def _repro_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    assert sorted(p.name for p in (root / "rp" / "base").iterdir()) == sorted([*RUN_FILES, WRITER_LOCK])
    made = sorted(p for p in (root / "rp").iterdir() if p.name.startswith("base-repro"))
    assert made, "no reproduction run"
    # The last reproduction is a whole run; one a fault stopped is left as a run stopped
    # part-way (resumable: a torn last line is settled by the next command that opens it),
    # its whole records each there once.
    *stopped, last = sorted(made, key=lambda p: int(p.name.rpartition("-")[2]) if p.name[-1].isdigit() else 0)
    for run in stopped:
        raw = (run / "results.jsonl").read_bytes() if (run / "results.jsonl").exists() else b""
        found = [json.loads(line)["test_case_id"] for line in raw.split(b"\n")[:-1]]
        assert len(found) == len(set(found)) and set(found) <= set(BUNDLED_IDS), run.name
    return _run_is_whole(last, BUNDLED_IDS, settled=settled)


def _matrix_cmd(root: Path) -> tuple[Any, ...]:
    return ("run_eval.py", *_run_args(root / "eval_set.jsonl", root / "mx", "m", "--matrix-file", root / "matrix.toml"))


def _matrix_ok(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    lost = _matrix_check(root, ref, inputs, settled)
    if settled:
        mine, theirs = (json.loads((r / "mx" / "m.matrix.json").read_text()) for r in (root, ref))
        assert [r["values"] for r in mine["rows"]] == [r["values"] for r in theirs["rows"]]
    return lost


def _matrix_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    # Its user runs the same command with --resume once any of its runs has begun, else again.
    begun = (root / "mx").exists() and any(p.name.startswith("m-") for p in (root / "mx").iterdir())
    _must_pass(sandbox, *w.command(root), *(("--resume", "m") if begun else ()))


def _matrix_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    lost = 0
    for preset in ("flat", "plain"):
        run, theirs = root / "mx" / f"m-{preset}", ref / "mx" / f"m-{preset}"
        if not settled and not run.exists():
            continue
        lost += _run_is_whole(run, BUNDLED_IDS, settled=settled)
        if settled:
            a, b = (json.loads((d / "config.json").read_text())["settings"].get("params") for d in (run, theirs))
            assert a == b, preset
    return lost


def _accept_top_cmd(root: Path) -> tuple[Any, ...]:
    return ("label_eval.py", "--accept-top", 3, "--eval-set", root / "label" / "eval_set.jsonl", "--vault", VAULT,
            "--results-dir", root / "results")


def _label_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    """The eval set labeled in place as the fault-free run did it (before it, as it was)."""
    mine, theirs, before = ((r / "label" / "eval_set.jsonl").read_bytes() for r in (root, ref, inputs))
    assert mine == theirs or (not settled and mine == before)
    if settled:
        assert [p.name for p in (root / "label").iterdir() if not _KILLED_WRITE.fullmatch(p.name)] == ["eval_set.jsonl"]
    found = [json.loads(line)["id"] for line in mine.splitlines()]
    want = [json.loads(line)["id"] for line in theirs.splitlines()]
    return len(set(want) - set(found)) + len(found) - len(set(found)) if settled else len(found) - len(set(found))


NEW_CASE = "How long do I proof the loaf?\ny\n\n\n\n"  # question, answerable, no category, difficulty, tags


def _new_cmd(root: Path) -> tuple[Any, ...]:
    return ("label_eval.py", "--new", "--eval-set", root / "label" / "eval_set.jsonl", "--results-dir", root / "results")


def _new_again(sandbox: Sandbox, root: Path, w: Writer, rc: int) -> None:
    # Its user adds the case again unless the set holds it (a kill may strike after the write).
    if "How long do I proof the loaf?" not in (root / "label" / "eval_set.jsonl").read_text(encoding="utf-8"):
        _again(sandbox, root, w, rc)


# The studio (evalkit serve-studio) as a browser drives it, in one process: its app behind the
# Guard, through Starlette's in-process client (a server's socket adds nothing to what is
# written). A session labels the unlabeled cases of label/eval_set.jsonl with their bundled
# gold's first support, grades three answers of `base`, and picks b for three cases that
# `base2` answered otherwise; each step skips what is done, as a person reopening the studio
# would. A refused request ends it: `evalkit: <why>` and exit 2.
STUDIO_SESSION = r'''
import json, sys, warnings
from pathlib import Path
# Starlette 1.x warns that its test client will move to httpx2: not evalkit's line on stderr.
warnings.filterwarnings("ignore", message=r".*starlette\.testclient.*")
from starlette.testclient import TestClient
from evalkit.authoring.labeling import EvalSetFile
from evalkit.compare.pairwise import answer_sha256, latest_choices, read_choice_lines
from evalkit.judges.grades import graded_item, read_grades
from evalkit.store.runs import RunDir
from evalkit.studio.app import create_app
from evalkit.studio.editing import case_version
from evalkit.studio.guard import csrf_value
from evalkit.studio.project import StudioProject

root, vault, gold_file = map(Path, sys.argv[1:4])
label = root / "label" / "eval_set.jsonl"
project = StudioProject([label], vault, root / "results", root=root / "label")
base = "http://127.0.0.1:8799"
client = TestClient(create_app(project, token="fault-loop", port=8799), base_url=base, follow_redirects=False)
client.get("/?token=fault-loop")
headers = {"origin": base, "x-studio-csrf": csrf_value("fault-loop")}

def post(url, body):
    r = client.post(url, json=body, headers=headers)
    if r.status_code != 200:
        print(f"evalkit: {url}: {r.json().get('error')}", file=sys.stderr)
        sys.exit(2)

gold = {c["id"]: c for c in map(json.loads, filter(str.strip, gold_file.read_text(encoding="utf-8").splitlines()))}
doc = EvalSetFile(label)
for cid in doc.ids:
    case = doc.case(cid)
    supports = gold.get(cid, {}).get("gold_supports") or []
    if case.get("answerable") is False or case.get("gold_supports") or not supports:
        continue
    s = supports[0]
    post("/api/edit", {"set": "eval_set.jsonl", "id": cid, "version": case_version(case), "op": "toggle",
                       "args": {"rel_path": s["rel_path"], "heading_path": s.get("heading_path") or ""}})
run = RunDir.open(root / "results", "base")
graded = read_grades(run)
for record in [r for r in run.read_results() if (r.get("answer") or "").strip() and not r.get("error")][:3]:
    cid = record["test_case_id"]
    if "studio" not in graded.get(cid, {}):
        post("/api/grade", {"run": "base", "id": cid, "grader": "studio", "groundedness": 3, "correctness": 4,
                            "item": graded_item(record)})
chosen = latest_choices(read_choice_lines(RunDir.open(root / "results", "base2")), "base", "base2")
a = {r["test_case_id"]: r for r in run.read_results()}
for record in RunDir.open(root / "results", "base2").read_results():
    cid = record["test_case_id"]
    if answer_sha256(record) != answer_sha256(a.get(cid)) and "studio" not in chosen.get(cid, {}):
        post("/api/pair", {"a": "base", "b": "base2", "id": cid, "reviewer": "studio", "choice": "b",
                           "shown": {"answer_a_sha256": answer_sha256(a[cid]), "answer_b_sha256": answer_sha256(record)}})
'''


def _studio_prepare(root: Path) -> None:
    # base2: base with three answers changed, for the side-by-side review
    shutil.copytree(_base(root), root / "results" / "base2")
    path = root / "results" / "base2" / "results.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for r in [r for r in records if (r.get("answer") or "").strip() and not r.get("error")][:3]:
        r["answer"] = "Another answer: " + r["answer"]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _studio_cmd(root: Path) -> tuple[Any, ...]:
    return (STUDIO_SESSION, root, VAULT, MAIN_SET)


def _jsonl_ids(path: Path, key: str = "test_case_id") -> list[str]:
    return [json.loads(line)[key] for line in path.read_bytes().splitlines()] if path.exists() else []


def _studio_check(root: Path, ref: Path, inputs: Path, settled: bool) -> int:
    """The eval set: each line as the fault-free session wrote it, or (before it settles) as it
    was; the grades and choices: each once, of the cases the fault-free session did."""
    mine, theirs, before = ((r / "label" / "eval_set.jsonl").read_bytes().splitlines() for r in (root, ref, inputs))
    assert len(mine) == len(theirs) and all(m == t or (not settled and m == b) for m, t, b in zip(mine, theirs, before, strict=True))
    _unchanged(root, inputs, *(f"results/base/{n}" for n in RUN_FILES))
    lost = sum(m != t for m, t in zip(mine, theirs, strict=True)) if settled else 0
    for name, run in (("human_grades.jsonl", "base"), ("pairwise_review.jsonl", "base2")):
        ids, want = (_jsonl_ids(r / "results" / run / name) for r in (root, ref))
        assert len(want) == 3 and set(ids) <= set(want), name
        lost += len(ids) - len(set(ids)) + (len(set(want) - set(ids)) if settled else 0)
    return lost


WRITING_COMMANDS = [
    Writer("run_eval", _run_eval_cmd, _run_eval_check, _run_eval_again),
    Writer("score_retrieval", _rescore_cmd("score_retrieval.py", "--k", 3), _rescore_check(_score_view)),
    Writer("score_abstention", _rescore_cmd("score_abstention.py", "--classifier", "heuristic"),
           _rescore_check(_abstention_view)),
    Writer("judge_answers", _rescore_cmd("judge_answers.py", "--judge-provider", "heuristic"), _rescore_check(_judge_view)),
    Writer("label_eval --grade-answers", _grade_cmd, _grade_check, stdin=GRADES),
    Writer("label_eval --review-auto", _review_cmd, _review_check, stdin="a\n" * 6),
    Writer("lock_eval_set", lambda root: ("lock_eval_set.py", root / "sets" / "eval_set.v1.jsonl", "--run-id", "r"),
           _lock_check),
    Writer("import", _import_cmd, _import_check, _import_again),
    Writer("init", lambda root: (INIT, root / "proj"), _init_check, _init_again),
    Writer("merge", _merge_cmd, _merge_check, _merge_again),
    Writer("merge --cache", _cache_cmd, _cache_check),
    Writer("run_eval --matrix-file", _matrix_cmd, _matrix_ok, _matrix_again),
    Writer("run_eval (conversations)", _conv_cmd, _conv_check, _conv_again, prepare=_conv_prepare),
    Writer("redact", _redact_cmd, _redact_check, _redact_again),
    Writer("report", lambda root: ("report.py", "--run-id", "base", "--results-dir", root / "results"), _report_check),
    Writer("export", lambda root: ("export.py", "--run-id", "base", "--results-dir", root / "results"), _export_check),
    Writer("embed", lambda root: (EMBED, "--run-id", "base", "--results-dir", root / "results"), _embed_check),
    Writer("generate", _generate_cmd, _generate_check, _generate_again),
    Writer("validate --fix", _fix_cmd, _fix_check, _fix_again),
    Writer("reproduce", lambda root: ("repro.py", "--run-id", "base", "--results-dir", root / "rp", "--quiet"),
           _repro_check, prepare=_repro_prepare),
    Writer("label_eval --accept-top", _accept_top_cmd, _label_check),
    Writer("label_eval --new", _new_cmd, _label_check, _new_again, stdin=NEW_CASE),
    Writer("serve-studio", _studio_cmd, _studio_check, prepare=_studio_prepare),
]


# A real full disk: in a user and mount namespace of its own (no privilege needed where the
# kernel allows unprivileged user namespaces), a tmpfs is mounted on the trial folder, its
# inputs copied in, and all but `free` bytes filled; the command runs; then the filler goes
# and the folder is copied out as the command left it, onto the real disk at the same path.
FULL_DISK = r'''
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
disk = spec["disk"]
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={spec['size']}", "tmpfs", disk], check=True)
subprocess.run(["cp", "-a", spec["inputs"] + "/.", disk], check=True)
filler = os.path.join(disk, ".filler")
try:
    with open(filler, "wb", buffering=0) as f:
        st = os.statvfs(disk)
        left = st.f_bavail * st.f_frsize - spec["free"]
        while left > 0:
            left -= f.write(b"\0" * min(left, 1 << 20))
except OSError:
    pass
stdin = {"input": spec["stdin"]} if spec["stdin"] is not None else {"stdin": subprocess.DEVNULL}
proc = subprocess.run(spec["argv"], cwd=spec["cwd"], env=spec["env"], capture_output=True, text=True, timeout=120, **stdin)
os.remove(filler)
subprocess.run(["cp", "-a", disk + "/.", spec["out"]], check=True)
with open(spec["result"], "w") as f:
    json.dump({"rc": proc.returncode, "stderr": proc.stderr}, f)
'''
NAMESPACE = ["unshare", "--user", "--map-root-user", "--mount"]


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory: pytest.TempPathFactory) -> bool:
    """Whether a tmpfs can be mounted in a namespace here (FULL_DISK)."""
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path_factory.mktemp("tmpfs-probe")
    done = subprocess.run([*NAMESPACE, "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                          check=False, capture_output=True, timeout=60)
    return done.returncode == 0


def _on_a_full_disk(sandbox: Sandbox, root: Path, w: Writer, free: int) -> tuple[int, str]:
    """Run `w` in `root` on a tmpfs with `free` bytes left (FULL_DISK); (exit code, stderr)."""
    staged, out, result = (root.with_name(f"{root.name}.{x}") for x in ("in", "out", "json"))
    root.rename(staged)
    root.mkdir()
    out.mkdir()
    spec = {"disk": str(root), "inputs": str(staged), "out": str(out), "size": 256 << 20, "free": free,
            "argv": sandbox.argv(*w.command(root)), "env": sandbox.env(), "cwd": str(sandbox.root), "stdin": w.stdin,
            "result": str(result)}
    subprocess.run([*NAMESPACE, sys.executable, "-c", FULL_DISK, json.dumps(spec)], check=True, timeout=300,
                   stdin=subprocess.DEVNULL)
    root.rmdir()
    out.rename(root)
    shutil.rmtree(staged)
    done = json.loads(result.read_text())
    result.unlink()
    return checked(done["rc"], done["stderr"]), done["stderr"]


def _killed_after(sandbox: Sandbox, command: tuple[Any, ...], stdin: str | None, delay: float) -> tuple[int, str]:
    """Run `command`, SIGKILLed `delay` seconds after it starts unless it ended: (exit code, stderr)."""
    proc = sandbox.start(*command, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
    try:
        proc.communicate(stdin, timeout=delay)
    except subprocess.TimeoutExpired:
        proc.kill()
    _, err = proc.communicate(timeout=120)
    return checked(proc.returncode, err), err


def _written_since(root: Path, since_ns: int) -> int:
    """Bytes, in 4 KiB pages, of the files under `root` changed since `since_ns`."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in root.rglob("*")
               if p.is_file() and not p.is_symlink() and p.stat().st_mtime_ns >= since_ns)


def _says_why(err: str, kind: str, what: str) -> None:
    """An exit 2 after a failed write: evalkit's own lines, one naming the OS's reason."""
    reason = os.strerror(errno.EIO if kind == "eio" else errno.ENOSPC)
    lines = [line for line in err.strip().splitlines() if not line.startswith(" ")]
    assert lines and all(line.startswith("evalkit: ") for line in lines), f"{what}:\n{err}"
    assert reason in err, f"{what}: the reason ({reason}) is not said:\n{err}"


@pytest.mark.parametrize("w", WRITING_COMMANDS, ids=[w.name.replace(" --", "-") for w in WRITING_COMMANDS])
def test_every_writer_under_faults(sandbox: Sandbox, inputs: Path, full_disk: bool, w: Writer) -> None:
    index = WRITING_COMMANDS.index(w)
    rng = random.Random(2910 + index)
    ref = sandbox.root / "ref"
    shutil.copytree(inputs, ref, symlinks=True)
    if w.prepare is not None:
        w.prepare(ref)
    count, since = sandbox.root / "writes.count", time.time_ns()
    rc, _, err = sandbox.run(*w.command(ref), input=w.stdin, fault=f"count:{count}")
    took = (time.time_ns() - since) / 1e9  # where a timed kill may strike (no limit asserted)
    assert rc == 0, err
    writes, need = int(count.read_text()), _written_since(ref, since)
    cell = TALLY["loops"].setdefault("writers", {})
    cell["full disk"] = "a tmpfs" if full_disk else "injected ENOSPC (no tmpfs could be mounted)"
    for trial in range(WRITER_TRIALS):
        kind = FAULT_KINDS[(index + trial) % len(FAULT_KINDS)]
        if kind == "full" and not full_disk:
            kind = "enospc"
        if writes == 0:
            # All its writes are SQLite's, which the write layer cannot reach: a SIGKILL at a
            # random moment, or a real full disk.
            kind = "full" if kind != "kill" and full_disk else "kill"
        root = sandbox.root / f"trial-{trial}"
        shutil.copytree(inputs, root, symlinks=True)
        if w.prepare is not None:
            w.prepare(root)
        struck = len(sandbox.struck())
        if kind == "full":
            free = rng.randint(0, need)
            where = f"{free:,} of the {need:,} bytes it writes free"
            rc, err = _on_a_full_disk(sandbox, root, w, free)
            landed = rc != 0 or os.strerror(errno.ENOSPC) in err
        elif writes == 0:
            delay = rng.uniform(0, took)
            where = f"{delay:.2f} s in"
            rc, err = _killed_after(sandbox, w.command(root), w.stdin, delay)
            landed = rc == -signal.SIGKILL
        else:
            n = rng.randint(1, writes)
            where = f"write {n} of {writes}"
            rc, _, err = sandbox.run(*w.command(root), input=w.stdin, fault=f"{kind}:{n}")
            landed = len(sandbox.struck()) > struck
        what = f"{w.name}, trial {trial}: {kind} at {where}"
        _no_traceback(rc, err, what)
        print(f"{what}: exit {rc}", *err.strip().splitlines()[:2], sep="\n  ")
        if kind == "kill":
            assert rc in (0, -signal.SIGKILL), f"{what}: exit {rc}\n{err}"
        else:
            assert rc in (0, 2), f"{what}: exit {rc}\n{err}"
        if rc == 2:
            _says_why(err, kind, what)
        lost = w.check(root, ref, inputs, False) if rc == 0 else 0  # went on: it did its job
        (w.again or _again)(sandbox, root, w, rc)
        lost += w.check(root, ref, inputs, True)
        if kept := _no_debris(root, killed=rc == -signal.SIGKILL):
            cell.setdefault("left by a kill outside a run folder", []).append(f"{w.name}: {', '.join(kept)}")
        _count("writers", trials=1, faults=int(landed), losses=lost)
        for group, name, n in (("trials_by_kind", kind, 1), ("by_kind", kind, int(landed)),
                               ("by_command", w.name, int(landed))):
            cell.setdefault(group, {}).setdefault(name, 0)
            cell[group][name] += n
        assert lost == 0, what
        shutil.rmtree(root)


# --------------------------------------------------------------------------- e. two commands on one run

# Commands that change one run, released at once (issue 38 items 3, 4): one takes the run's
# writer lock and each other one is refused, exit 2 naming the holder, or comes after it;
# a refused one, run again alone, finds the run free. No update is lost: every record holds
# what each command alone would have made of it.
RUN_RACE_TRIALS = SCALE  # per race
RUN_RACES = {
    "score_retrieval and judge_answers": ("score", "judge"),
    "score_abstention and score_retrieval": ("abstention", "score"),
    "three run_eval --resume": ("resume", "resume", "resume"),
}
RUN_CHANGERS: dict[str, Callable[[Path], tuple[Any, ...]]] = {
    "score": _rescore_cmd("score_retrieval.py", "--k", 3),
    "judge": _rescore_cmd("judge_answers.py", "--judge-provider", "heuristic"),
    "abstention": _rescore_cmd("score_abstention.py", "--classifier", "heuristic"),
    "resume": lambda root: ("run_eval.py", "--resume", "base", "--results-dir", root / "results", "--quiet"),
}
RUN_CHANGES = {"score": _score_view, "judge": _judge_view, "abstention": _abstention_view}
RACE_PRELOAD = "evalkit.cli.score_retrieval,evalkit.cli.judge_answers,evalkit.cli.score_abstention,evalkit.cli.run_eval"


def _cut_back(run: Path, keep: int) -> None:
    """`run` as a run_eval killed after `keep` records leaves it."""
    lines = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run / "results.jsonl").write_bytes(b"".join(lines[:keep]))
    for name in ("metrics.json", "summary.md", "results.json"):
        (run / name).unlink()


@pytest.mark.parametrize("race", list(RUN_RACES), ids=lambda race: race.replace(" ", "-"))
def test_race_commands_on_one_run(sandbox: Sandbox, inputs: Path, race: str) -> None:
    rng = random.Random(2920 + list(RUN_RACES).index(race))
    keys = RUN_RACES[race]
    refs = {}
    for key in sorted(set(keys) & set(RUN_CHANGES)):  # what each command alone makes of the run
        refs[key] = sandbox.root / f"ref-{key}"
        shutil.copytree(inputs, refs[key], symlinks=True)
        _must_pass(sandbox, *RUN_CHANGERS[key](refs[key]))
    source = inputs
    if "resume" in keys:  # a run of the sandbox's own eval set: a resume runs git where that is
        source = sandbox.root / "made"
        _eval_set(source / "eval_set.jsonl")
        _must_pass(sandbox, "run_eval.py", *_run_args(source / "eval_set.jsonl", source / "results", "base"))
    for trial in range(RUN_RACE_TRIALS):
        root = sandbox.root / f"race-{trial}"
        shutil.copytree(source, root, symlinks=True)
        if "resume" in keys:
            _cut_back(_base(root), rng.randrange(len(BUNDLED_IDS)))
        procs = _together(sandbox, sandbox.root / f"go-{trial}", [RUN_CHANGERS[k](root) for k in keys], RACE_PRELOAD)
        refused = []
        for key, proc in zip(keys, procs):
            _, err = proc.communicate(timeout=120)
            rc = checked(proc.returncode, err)
            _no_traceback(rc, err, f"{race}, trial {trial}: {key}")
            assert rc in (0, 2), f"{race}, trial {trial}: {key} exit {rc}\n{err}"
            if rc == 2:
                assert "is being changed by" in err.splitlines()[0], f"{race}, trial {trial}: {key}\n{err}"
                refused.append(key)
        assert len(refused) < len(keys), f"{race}, trial {trial}: every one refused"
        for key in refused:  # what its user does next
            _must_pass(sandbox, *RUN_CHANGERS[key](root))
        run = _base(root)
        lost = _run_is_whole(run, BUNDLED_IDS, ("report.html",) if (run / "report.html").exists() else ())
        records = [json.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
        for key, ref in refs.items():
            want = {r["test_case_id"]: RUN_CHANGES[key](r) for r in map(json.loads, (_base(ref) / "results.jsonl").read_bytes().splitlines())}
            lost += sum(RUN_CHANGES[key](r) != want[r["test_case_id"]] for r in records)
        _count("race", trials=1, faults=len(keys), losses=lost)
        cell = TALLY["loops"]["race"]
        cell["refused"] = cell.get("refused", 0) + len(refused)
        print(f"{race}, trial {trial}: refused {refused or 'none'}")
        assert lost == 0, f"{race}, trial {trial}: {lost} records lost an update (refused: {refused})"
        shutil.rmtree(root)


# --------------------------------------------------------------------------- the figures


def test_tally(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = tmp_path_factory.getbasetemp() / "reliability_tally.json"
    out.write_text(json.dumps(TALLY, indent=2) + "\n")
    print("reliability tally:", json.dumps(TALLY))
    assert TALLY["losses"] == TALLY["exit_70s"] == TALLY["outside_writes"] == 0, TALLY

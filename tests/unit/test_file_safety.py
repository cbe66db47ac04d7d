"""Issue 29 item 8's rule: no file is written through a symbolic link evalkit did not make, run
folder names that break the run-id rule are never printed raw, and a configured key leaves in
none of its encoded or spaced-out forms.

A link planted where evalkit appends or changes a file in place is refused (one line, exit 2 at
the CLI); where it replaces a file whole (`write_atomic`, a rename) the link itself is replaced.
Either way the link's target keeps its bytes and its mode, and a dangling link's target is
never created. Modes under the umask, writer by writer: tests/integration/test_file_modes.py.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.errors import BadConfig, RunNotFound, redact, redact_data
from evalkit.store.atomic import write_atomic
from evalkit.store.runs import RESULTS_FILE, RunDir, RunFolderError, list_runs, point_latest

ROOT = Path(__file__).resolve().parents[2]
THEIRS = b"someone else's file\n"


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


class Victim:
    """A folder outside the one evalkit writes to: a file in it (mode 0600), and a name in it
    that does not exist (what a dangling link points at)."""

    def __init__(self, tmp_path: Path):
        self.folder = tmp_path / "outside"
        self.folder.mkdir()
        self.file = self.folder / "theirs.txt"
        self.file.write_bytes(THEIRS)
        self.file.chmod(0o600)
        self.missing = self.folder / "not-yet.txt"

    def plant(self, at: Path, *, dangling: bool = False) -> Path:
        at.parent.mkdir(parents=True, exist_ok=True)
        at.symlink_to(self.missing if dangling else self.file)
        return at

    def untouched(self) -> bool:
        return (self.file.read_bytes() == THEIRS and stat.S_IMODE(self.file.stat().st_mode) == 0o600
                and sorted(p.name for p in self.folder.iterdir()) == ["theirs.txt"])


@pytest.fixture
def victim(tmp_path: Path) -> Victim:
    return Victim(tmp_path)


def _run(tmp_path: Path, records: int = 2) -> RunDir:
    run = RunDir.create(tmp_path / "results", "r1")
    run.results_path.write_text("".join(json.dumps({"test_case_id": f"c{i}", "case_index": i}) + "\n" for i in range(records)))
    return run


# ---------------------------------------------------------------- replaced whole: the link goes, its target stays


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_write_atomic_replaces_a_link_and_never_takes_its_targets_mode(tmp_path, victim, umask_022, dangling) -> None:
    # regression: write_atomic took the mode of the link's target (stat follows links): a link to
    # someone's 0600 file made our metrics.json 0600, a link to a 0755 one made it executable.
    path = victim.plant(tmp_path / "w" / "metrics.json", dangling=dangling)
    write_atomic(path, b"{}\n")
    assert not path.is_symlink() and path.read_bytes() == b"{}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # by hand: 0666 & ~0022, not the target's 0600
    assert victim.untouched()


def _config(run: RunDir) -> Path:
    run.write_config({"run_id": "r1"})
    return run.config_path


def _metrics(run: RunDir) -> Path:
    run.write_metrics({"aggregate_metrics": {}})
    return run.metrics_path


def _summary(run: RunDir) -> Path:
    run.write_summary("# r1\n")
    return run.path / "summary.md"


def _rewrite(run: RunDir) -> Path:
    run.rewrite_results([{"test_case_id": "c0", "case_index": 0}])
    return run.results_path


def _together(run: RunDir) -> Path:
    run.write_together(results=[{"test_case_id": "c0", "case_index": 0}], metrics={"a": 1}, config={"run_id": "r1"})
    return run.results_path


def _lock(run: RunDir) -> Path:
    from evalkit.evalset.lock import LOCK_NAME, lock_eval_set

    es = run.path.parent.parent / "es.jsonl"
    es.write_text(json.dumps({"id": "q1", "question": "Why?", "answerable": False}) + "\n")
    lock_eval_set(es)
    return es.parent / LOCK_NAME


def _import_output(run: RunDir) -> Path:
    from evalkit.interop.importers import import_cases
    from evalkit.interop.importers.output import write_eval_set

    out = run.path.parent.parent / "imported.jsonl"
    write_eval_set(import_cases("gno", [ROOT / "tests" / "data" / "gno" / "queries.json"]), out, force=True, extra_categories=[])
    return out


@pytest.mark.parametrize("write", [_config, _metrics, _summary, _rewrite, _together, _lock, _import_output],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_file_replaced_whole_replaces_a_planted_link(tmp_path, victim, umask_022, write: Callable[[RunDir], Path]) -> None:
    run = _run(tmp_path)
    names = {_config: "config.json", _metrics: "metrics.json", _summary: "summary.md", _rewrite: RESULTS_FILE,
             _together: RESULTS_FILE, _lock: "eval_sets.lock", _import_output: "imported.jsonl"}
    where = {_lock: tmp_path, _import_output: tmp_path}.get(write, run.path)
    (where / names[write]).unlink(missing_ok=True)
    # A link to a file at eval_sets.lock is read as the manifest (reading through a link is fine)
    # and refused as not JSON; a dangling one is no manifest yet.
    link = victim.plant(where / names[write], dangling=write is _lock)
    path = write(run)
    assert path == link and not path.is_symlink() and path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert victim.untouched()


def test_latest_replaces_a_planted_link(tmp_path, victim) -> None:
    run = _run(tmp_path)
    victim.plant(tmp_path / "results" / "latest")
    assert point_latest(tmp_path / "results", "r1") == tmp_path / "results" / "latest"
    assert os.readlink(tmp_path / "results" / "latest") == "r1" and run.path.is_dir()
    assert victim.untouched()


@pytest.mark.parametrize("name", [".results.jsonl.new", ".metrics.json.new", ".commit.tmp"])
def test_write_together_never_writes_through_a_link_at_its_temp_names(tmp_path, victim, name) -> None:
    # regression: its staged files and commit marker were opened with open(..., "wb"), which
    # follows a link (dangling: the target was created outside the run folder)
    run = _run(tmp_path)
    victim.plant(run.path / name, dangling=True)
    run.write_together(results=[{"test_case_id": "c0", "case_index": 0}], metrics={"a": 1})
    assert [r["test_case_id"] for r in run.iter_results()] == ["c0"] and run.read_metrics() == {"a": 1}
    assert victim.untouched() and not (run.path / name).exists()


# ---------------------------------------------------------------- appended or changed in place: refused


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_results_jsonl_is_never_appended_through_a_link(tmp_path, victim, dangling) -> None:
    # regression: ResultsWriter opened results.jsonl with open(path, "ab"), following the link
    run = _run(tmp_path, records=0)
    run.results_path.unlink()
    victim.plant(run.results_path, dangling=dangling)
    with pytest.raises(RunFolderError, match="symbolic link") as e:
        run.append_result({"test_case_id": "c9", "case_index": 9})
    assert str(run.results_path) in str(e.value)
    assert victim.untouched()


def test_results_jsonl_is_never_repaired_through_a_link(tmp_path, victim) -> None:
    # regression: repair_tail truncated the link's target in place (open(path, "rb+"))
    run = _run(tmp_path, records=0)
    run.results_path.unlink()
    victim.file.chmod(0o600)
    victim.file.write_bytes(THEIRS + b"a torn last line")
    victim.plant(run.results_path)
    with pytest.raises(RunFolderError, match="symbolic link"):
        run.repair_tail()
    assert victim.file.read_bytes() == THEIRS + b"a torn last line"


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_human_grades_are_never_appended_through_a_link(tmp_path, victim, dangling) -> None:
    # regression: append_grade opened human_grades.jsonl "ab+" through the link, and cut its
    # target's last line when that did not end in a newline
    from evalkit.judges import grades

    run = _run(tmp_path)
    victim.plant(grades.grades_path(run), dangling=dangling)
    with pytest.raises(RunFolderError, match="symbolic link"):
        grades.append_grade(run, {"test_case_id": "c0", "groundedness": 4, "correctness": 5})
    assert victim.untouched()


def test_the_judge_batch_lock_is_never_opened_through_a_link(tmp_path, victim) -> None:
    # regression: os.open(O_RDWR | O_CREAT) through a dangling link created its target
    from evalkit.judges.batch import LOCK_FILE, _locked

    run = _run(tmp_path)
    victim.plant(run.path / LOCK_FILE, dangling=True)
    with pytest.raises(OSError, match="symbolic link"):
        with _locked(run.path):
            pass
    assert victim.untouched()


def test_the_review_log_is_never_appended_through_a_link_planted_mid_review(tmp_path, victim) -> None:
    # The session refuses a link it finds at the start (tests/unit/test_review.py); one planted
    # after that is refused by the append itself (O_NOFOLLOW).
    from evalkit.authoring import review

    cand, into = tmp_path / "cand.jsonl", tmp_path / "set.jsonl"
    case = {"id": "gen-1", "question": "What?", "answerable": True, "category": "factual",
            "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}], "label_source": "generated"}
    cand.write_text(json.dumps(case) + "\n")
    into.write_text(json.dumps({"id": "e1", "question": "Who?", "answerable": False}) + "\n")
    session = review.ReviewSession(cand, into, results_dir=tmp_path / "results")
    victim.plant(review.log_path(cand), dangling=True)
    with pytest.raises(BadConfig, match="symbolic link"):
        session.reject(session.pending()[0])
    assert victim.untouched()


@pytest.mark.parametrize("suffix", ["", "-wal"])
def test_the_judge_cache_is_never_opened_through_a_link(tmp_path, victim, suffix) -> None:
    # regression: SQLite followed the link and wrote the cache (and its -wal) beside the target
    from evalkit.judges.cache import JudgeCache

    path = tmp_path / "cache" / "judge_cache.sqlite"
    victim.plant(Path(f"{path}{suffix}"), dangling=True)
    with pytest.raises(BadConfig, match="symbolic link") as e:
        JudgeCache(path)
    assert f"{path}{suffix}: " in str(e.value)
    assert victim.untouched()


def test_the_step_summary_is_never_appended_through_a_link(tmp_path, victim) -> None:
    from evalkit.report.compare import append_step_summary

    link = victim.plant(tmp_path / "summary.md")
    with pytest.raises(OSError, match="symbolic link"):
        append_step_summary("# compare\n", {"GITHUB_STEP_SUMMARY": str(link)})
    assert victim.untouched()
    real = tmp_path / "real.md"
    assert append_step_summary("# compare\n", {"GITHUB_STEP_SUMMARY": str(real)}) == real
    assert real.read_text() == "# compare\n"


def test_init_refuses_a_gitignore_that_is_a_link_before_writing_anything(tmp_path, victim) -> None:
    from evalkit.authoring.starter import init_project

    project = tmp_path / "p"
    victim.plant(project / ".gitignore")
    with pytest.raises(BadConfig, match="symbolic link"):
        init_project(project, "[run]\n")
    assert sorted(p.name for p in project.iterdir()) == [".gitignore"]
    assert victim.untouched()


def test_a_new_run_is_never_made_through_a_link_in_its_place(tmp_path, victim) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r1").symlink_to(victim.folder, target_is_directory=True)
    with pytest.raises(RunFolderError, match="symbolic link"):
        RunDir.create(tmp_path / "results", "r1")
    assert victim.untouched()


def test_resume_through_a_linked_results_file_exits_2_in_one_line(tmp_path, victim) -> None:
    # The CLI's side of the rule: a planted results.jsonl is read (reading through a link is
    # fine), and the first append is refused, with one line naming it, exit 2.
    from evalkit import run_eval
    from evalkit.cli.run_eval import app

    results = tmp_path / "results"
    args = {"run_id": "r", "results_dir": str(results), "retrieval_only": True, "vault": str(ROOT / "sample_vault"),
            "limit": 3, "quiet": True}
    run_eval(str(ROOT / "eval_set.jsonl"), **args)
    first = (results / "r" / RESULTS_FILE).read_bytes().splitlines(keepends=True)[0]
    victim.file.write_bytes(first)
    victim.file.chmod(0o600)
    (results / "r" / RESULTS_FILE).unlink()
    victim.plant(results / "r" / RESULTS_FILE)
    res = CliRunner().invoke(app, ["--resume", "r", "--results-dir", str(results)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and str(results / "r" / RESULTS_FILE) in lines[0], res.stderr
    assert victim.file.read_bytes() == first


# ---------------------------------------------------------------- hostile folder names


HOSTILE = ["a\nb", "red\x1b[31m", "tab\there", "-rf", ".hidden", "x" * 129]


def test_folders_that_break_the_run_id_rule_are_never_listed(tmp_path) -> None:
    for name in [*HOSTILE, "good-run"]:
        (tmp_path / name).mkdir()
    assert list_runs(tmp_path) == ["good-run"]
    with pytest.raises(RunNotFound) as e:
        RunDir.open(tmp_path, "missing")
    assert "(latest runs: good-run)" in str(e.value)


def test_the_cli_says_a_missing_run_in_one_printable_line(tmp_path) -> None:
    from evalkit.cli.score_retrieval import app

    for name in [*HOSTILE, "good-run"]:
        (tmp_path / name).mkdir()
    res = CliRunner().invoke(app, ["--run-id", "missing", "--results-dir", str(tmp_path)])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "\x1b" not in res.stderr and "\t" not in res.stderr, repr(res.stderr)
    assert "latest runs: good-run)" in res.stderr


def test_latest_pointing_at_a_hostile_name_is_no_run(tmp_path) -> None:
    (tmp_path / "a\nb").mkdir()
    os.symlink("a\nb", tmp_path / "latest")
    with pytest.raises(RunNotFound) as e:
        RunDir.open(tmp_path, "latest")
    assert "a\nb" not in str(e.value)


# ---------------------------------------------------------------- the key scrubber

# No known key shape, so only the environment rule catches them; the second has characters
# that percent-encoding changes (the first encodes to itself).
KEYS = {"OPENAI_API_KEY": "sk-test-Zq8vN3kP0wLr5Tt2YhXb", "EVAL_API_KEY": "p4ss/w0rd+with=odd&chars"}


def _forms(key: str) -> dict[str, str]:
    """The key as a server or a reply might echo it, computed here independently.

    "Spaced out" means whitespace or dashes between its characters: one space each, groups of
    four split by spaces or dashes, wrapped over two indented lines, tabs."""
    raw = key.encode()
    return {
        "url": urllib.parse.quote(key, safe=""),
        "url-form": urllib.parse.quote_plus(key),
        "base64-cut": base64.b64encode(raw).decode()[:20],
        "spaced": " ".join(key),
        "groups": " ".join(key[i : i + 4] for i in range(0, len(key), 4)),
        "dashed-groups": "-".join(key[i : i + 4] for i in range(0, len(key), 4)),
        "wrapped": key[:11] + "\n      " + key[11:],
        "tabs": "\t".join(key),
        **{name: encode(prefix + raw).decode() for name, (encode, _, prefix) in _BLOBS.items()},
    }


# base64 blobs holding the key: (encode, decode, the bytes before the key)
_BLOBS = {
    "base64": (base64.b64encode, base64.b64decode, b""),
    "base64-url": (base64.urlsafe_b64encode, base64.urlsafe_b64decode, b""),
    "basic-header": (base64.b64encode, base64.b64decode, b"user:"),  # the key 5 bytes into the blob
    "basic-no-user": (base64.b64encode, base64.b64decode, b":"),  # 1 byte in
}


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def _key_bytes_left(name: str, out: str) -> int:
    """How many of the key's bytes can be decoded from what is left of blob `name` in `out`."""
    _, decode, prefix = _BLOBS[name]
    before, _, after = out.removeprefix("echo: ").removesuffix(" end").partition("***")
    head = decode(before) if before else b""
    tail = decode(after) if after.strip("=") else b""
    assert head.startswith(prefix)
    return len(head) - len(prefix) + len(tail)


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_every_encoded_and_spaced_out_form_of_a_configured_key_is_redacted(keys, key) -> None:
    # issue 29 item 8. A base64 blob holding the key at another byte offset (a Basic header)
    # was missed: only the key's own base64 was scrubbed. Inside a blob, the 4-character
    # groups at either end also hold a neighbour's bits: those (at most 2 key bytes) may stay.
    for name, form in _forms(key).items():
        out = redact(f"echo: {form} end")
        assert form not in out and "***" in out, (name, out)
        if name in _BLOBS:
            assert _key_bytes_left(name, out) <= 4, (name, out)
        else:
            assert out == "echo: *** end", (name, out)


def test_the_forms_are_redacted_in_json_written_to_files(keys) -> None:
    # redact_data is what the judge cache stores and what a judge reply becomes in results.jsonl
    values = [form for key in KEYS.values() for form in _forms(key).values()]
    cleaned = json.dumps(redact_data({"raw": values, "nested": {"reason": " / ".join(values)}}))
    for key in KEYS.values():
        for name, form in _forms(key).items():
            assert form not in cleaned, name
    assert redact("an ordinary reply - with dashes, spaces and base64 dGV4dA==") == \
        "an ordinary reply - with dashes, spaces and base64 dGV4dA=="

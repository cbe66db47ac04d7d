"""What many test modules need: start a run by any of its doors, build cases, make result folders.

    from tests.support import make_case, run_eval_api, run_eval_cli, write_eval_set, write_run

Runs. A run is started with the same words whichever door a test goes through: keyword
settings are run_eval.py's flags with `-` -> `_` (`eval_set=`, `results_dir=`, `k=[1, 3]`,
`retrieval_only=True`, `params={"top_k": 3}`), paths may be `Path`s.

- `run_eval_api(**settings)`: the library, `evalkit.run_eval`; returns its RunResult.
- `run_eval_cli(*args, **settings)`: run_eval.py's typer app in this process (CliRunner);
  returns click's Result (`exit_code`, `stdout`, `stderr`). `args` are command-line words
  put before the settings' flags; `app=` another typer app (the `evalkit` front door, with
  "run" as the first word).
- `run_eval_script(*args, **settings)`: scripts/run_eval.py in a child process, waited for;
  `start_run_eval_script(...)` the same, left running (for a kill or a Ctrl-C).
- `run_args(**settings)`: the command line those settings make.

Nothing here picks a setting for the test: the defaults are run_eval's own, so a test says
retrieval_only, no_probe, retries and the rest where they matter to it.

Cases: `make_case(id, **fields)` is one eval-set line (answerable, no gold support unless
given); `eval_case(...)` validates it into an EvalCase; `write_eval_set(path, cases)`.
`bundled_cases()` is eval_set.jsonl as the harness reads it (a conversation's line becomes
one case per turn, `id#n`); `bundled_lines(turns=...)` its raw lines, only the single
questions (False) or only the conversations (True).

Result folders: `write_run(results, run_id, records)` writes a run folder (results.jsonl and a
config.json) as the judge, label and report tests start from; `read_records(run_dir)` reads
a run's records back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUN_EVAL_SCRIPT = ROOT / "scripts" / "run_eval.py"

# --------------------------------------------------------------------------- runs


def run_args(**settings: Any) -> list[str]:
    """run_eval.py's argv for `settings`: `name=value` -> `--name value` (`_` -> `-`).

    True gives the bare flag; False and None leave it out; a list or tuple repeats the flag
    once per item (`k=[5, 10]`, `eval_set=[a, b]`); `params` (a dict) gives `--param key=value`
    per entry.
    """
    argv: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif name == "params":
            for key, item in value.items():
                argv += ["--param", f"{key}={item}"]
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


def run_eval_api(**settings: Any) -> Any:
    """Start a run through the library door (`evalkit.run_eval`); returns its RunResult."""
    from evalkit import run_eval

    return run_eval(**settings)


def run_eval_cli(*args: Any, app: Any = None, env: Mapping[str, str] | None = None,
                 catch_exceptions: bool = False, **settings: Any) -> Any:
    """Start a run through run_eval.py's typer app in this process (click's CliRunner).

    Args:
        *args: command-line words before the settings' flags ("run" first for the `evalkit` app).
        app: the typer app to invoke (default run_eval.py's).
        env: environment variables for the invocation (e.g. {"COLUMNS": "200"}).
        catch_exceptions: False (the default) lets an unexpected exception reach the test with
            its traceback; caught, it would read as exit code 1, which is also "gate failed".
        **settings: run settings, as `run_args` spells them.

    Returns:
        click.testing.Result: `exit_code`, `stdout`, `stderr`, `output`.
    """
    from typer.testing import CliRunner

    if app is None:
        from evalkit.cli.run_eval import app
    words = [*map(str, args), *run_args(**settings)]
    return CliRunner().invoke(app, words, env=dict(env) if env else None, catch_exceptions=catch_exceptions)


def _script_argv(args: tuple[Any, ...], settings: dict[str, Any]) -> list[str]:
    return [sys.executable, str(RUN_EVAL_SCRIPT), *map(str, args), *run_args(**settings)]


# What a test's environment never holds (tests/conftest.py scrubs it for every test): real keys,
# a developer's endpoints, proxies.
SCRUB_PREFIXES = ("OPENAI_", "ANTHROPIC_", "EVAL_API_URL", "EVAL_API_KEY", "EMBEDDINGS_", "ANSWER_", "EVALKIT_JUDGE")
SCRUB_PROXY = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without keys, endpoints and proxies (as every test sees it), plus `extra`:
    for a child process started outside pytest's fixtures (docs/tools/examples.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB_PREFIXES) and k not in SCRUB_PROXY}
    return {**env, "NO_PROXY": "127.0.0.1,localhost", **(extra or {})}


def _script_env(env: Mapping[str, str] | None) -> dict[str, str]:
    # Loopback servers only: no proxy; unbuffered, so a parent watching the output sees it.
    return {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1", **(env or {})}


def run_eval_script(*args: Any, cwd: Path = ROOT, env: Mapping[str, str] | None = None, timeout: float = 300,
                    **settings: Any) -> subprocess.CompletedProcess[str]:
    """Run scripts/run_eval.py in a child process and wait for it (text output captured).

    `timeout` only bounds the wait for a stuck child; it is not a time limit on the run.
    """
    return subprocess.run(_script_argv(args, settings), cwd=cwd, env=_script_env(env), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def start_run_eval_script(*args: Any, cwd: Path = ROOT, env: Mapping[str, str] | None = None,
                          **settings: Any) -> subprocess.Popen[str]:
    """Start scripts/run_eval.py in a child process and return it running (stdout and stderr
    piped, as text): for tests that kill or interrupt a run."""
    return subprocess.Popen(_script_argv(args, settings), cwd=cwd, env=_script_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


# --------------------------------------------------------------------------- cases


def make_case(case_id: str | int = "c1", **fields: Any) -> dict[str, Any]:
    """One eval-set line: `{"id", "question", "answerable": True}` and `fields` over them.

    An int id `i` is spelled "c<i>". The question defaults to one naming the id, so every case
    of a set asks something different. No gold support unless `gold_supports=` is given.
    """
    cid = f"c{case_id}" if isinstance(case_id, int) else case_id
    return {"id": cid, "question": f"question {cid}?", "answerable": True, **fields}


def eval_case(case_id: str | int = "c1", **fields: Any) -> Any:
    """`make_case(...)` validated into an `evalkit.schema.EvalCase`."""
    from evalkit.schema import EvalCase

    return EvalCase.model_validate(make_case(case_id, **fields))


def bundled_cases(path: Path | None = None) -> list[dict[str, Any]]:
    """The bundled eval set's cases as run_eval reads them: each conversation turn its own
    case (`sv-conv-01#2`), every field with its default, in file order."""
    from evalkit.evalset.load import load_eval_set

    return [c.model_dump(mode="json") for c in load_eval_set([path or ROOT / "eval_set.jsonl"]).cases]


def bundled_lines(path: Path | None = None, *, turns: bool | None = None) -> list[str]:
    """The bundled eval set's raw lines; `turns=False` the single questions, `True` the conversations."""
    lines = (path or ROOT / "eval_set.jsonl").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and (turns is None or ("turns" in json.loads(line)) == turns)]


def write_eval_set(path: Path, cases: Iterable[Mapping[str, Any]]) -> Path:
    """Write `cases` as an eval set (one JSON object a line) at `path`; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- result folders

_K5: Any = object()


def write_run(results: Path, run_id: str, records: Iterable[Mapping[str, Any]],
              config: Mapping[str, Any] | None = _K5) -> Path:
    """Write a run folder `results/run_id/` with `records` as results.jsonl; returns `results`.

    config.json is `config` when given, `{"run_id", "settings": {"k": [5]}}` by default (what
    the judge and label commands read of it), and not written at all with `config=None`.
    """
    run = results / run_id
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if config is _K5:
        config = {"run_id": run_id, "settings": {"k": [5]}}
    if config is not None:
        (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return results


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run folder's results.jsonl, in file order."""
    with open(Path(run_dir) / "results.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """`handler` served on 127.0.0.1 at a free port, in a daemon thread, for the block; its
    port is `server.server_address[1]`. Request threads are daemons too, so a handler that
    hangs on purpose cannot hold the test's exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def docs_examples_tool() -> Any:
    """docs/tools/examples.py as a module (it is a script, not part of the package), loaded once."""
    if "docs_examples" not in sys.modules:  # dataclasses look their module up in sys.modules
        spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "docs" / "tools" / "examples.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["docs_examples"] = module
        spec.loader.exec_module(module)
    return sys.modules["docs_examples"]

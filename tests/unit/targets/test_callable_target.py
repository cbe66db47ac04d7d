"""CallableTarget and `python:module:function` specs (in process, no sockets)."""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from evalkit.errors import InputError, TargetError
from evalkit.schema import AskRequest, AskResponse
from evalkit.targets.python import CallableTarget, load_callable

ANSWER = {"answer": "hi", "references": [], "abstained": False}


def ask(target: CallableTarget, **req: Any) -> Any:
    req.setdefault("question", "q?")
    return asyncio.run(target.ask(AskRequest(**req)))


def test_sync_function_gets_the_request_dict_with_debug() -> None:
    seen: list[dict] = []

    def bot(request: dict) -> dict:
        seen.append(request)
        return ANSWER

    result = ask(CallableTarget(bot, params={"temperature": 0}), k=3)
    assert result.response.answer == "hi"
    assert seen == [
        {
            "question": "q?",
            "k": 3,
            "folder_mode": "off",
            "vaults": [],
            "folders": [],
            "rerank_weights": {"vector": 0.7, "lexical": 0.3},
            "options": {"temperature": 0},
            "debug": True,
        }
    ]
    assert result.missing_fields[:1] == ["debug"]


def test_async_function_is_awaited() -> None:
    async def bot(request: dict) -> dict:
        await asyncio.sleep(0)
        return {**ANSWER, "answer": f"async {request['question']}"}

    assert ask(CallableTarget(bot)).response.answer == "async q?"


def test_async_callable_object_is_awaited() -> None:
    class Bot:
        async def __call__(self, request: dict) -> dict:
            return ANSWER

    assert ask(CallableTarget(Bot())).response.answer == "hi"


def test_sync_function_runs_off_the_event_loop_thread() -> None:
    import threading

    loop_thread = threading.get_ident()
    threads: list[int] = []

    def bot(request: dict) -> dict:
        threads.append(threading.get_ident())
        return ANSWER

    ask(CallableTarget(bot))
    assert threads and threads[0] != loop_thread


def test_model_dump_objects_are_accepted() -> None:
    def bot(request: dict) -> AskResponse:
        return AskResponse(answer="from pydantic", abstained=True, abstain_reason="none")

    result = ask(CallableTarget(bot))
    assert result.response.answer == "from pydantic"
    assert result.response.abstained is True


def test_exception_in_the_function_is_a_target_error() -> None:
    def bot(request: dict) -> dict:
        raise RuntimeError("index not loaded")

    with pytest.raises(TargetError) as e:
        ask(CallableTarget(bot, name="python:bot:ask"))
    assert e.value.kind == "exception"
    assert e.value.detail == "python:bot:ask raised RuntimeError: index not loaded"


@pytest.mark.parametrize(
    ("value", "got"), [(42, "number"), ("text", "string"), (None, "null"), ([ANSWER], "array")]
)
def test_bad_return_values_are_invalid_response(value: Any, got: str) -> None:
    with pytest.raises(TargetError) as e:
        ask(CallableTarget(lambda request: value))
    assert e.value.kind == "invalid_response"
    assert f"not an object (got {got})" in e.value.detail


def test_missing_answer_in_return_value() -> None:
    with pytest.raises(TargetError) as e:
        ask(CallableTarget(lambda request: {"references": []}))
    assert e.value.kind == "invalid_response"
    assert "answer: Field required" in e.value.detail


def test_timeout() -> None:
    async def slow(request: dict) -> dict:
        await asyncio.sleep(5)
        return ANSWER

    with pytest.raises(TargetError) as e:
        ask(CallableTarget(slow, timeout=0.01))
    assert e.value.kind == "timeout"
    assert "0.01s" in e.value.detail


def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    name = f"userbot_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_from_spec_imports_and_uses_index_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = write_module(
        tmp_path,
        monkeypatch,
        """
        def ask(request):
            return {"answer": "module " + request["question"]}

        def index_stats():
            return {"docs_processed": 7}
        """,
    )
    target = CallableTarget.from_spec(f"{name}:ask")
    assert target.name == f"python:{name}:ask"
    assert ask(target).response.answer == "module q?"
    cov = asyncio.run(target.index_stats())
    assert cov is not None and cov.docs_processed == 7
    assert target.describe()["target"] == f"python:{name}:ask"


def test_from_spec_dotted_attribute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = write_module(
        tmp_path,
        monkeypatch,
        """
        class Bot:
            def ask(self, request):
                return {"answer": "method"}

        bot = Bot()
        """,
    )
    assert ask(CallableTarget.from_spec(f"{name}:bot.ask")).response.answer == "method"
    assert asyncio.run(CallableTarget.from_spec(f"{name}:bot.ask").index_stats()) is None


def test_from_spec_file_path(tmp_path: Path) -> None:
    path = tmp_path / "filebot.py"
    path.write_text("def ask(request):\n    return {'answer': 'from file'}\n")
    assert ask(CallableTarget.from_spec(f"{path}:ask")).response.answer == "from file"


@pytest.mark.parametrize("form", ["path", "module"])
def test_both_spec_forms_import_the_modules_beside_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    # Issue 43: `python:path/bot.py:ask` could not import helpers.py beside bot.py, while
    # `python:bot:ask` (run from that folder) could. Names are unique: modules stay in sys.modules.
    tag = uuid.uuid4().hex[:8]
    folder = tmp_path / "mybot"
    folder.mkdir()
    (folder / f"helpers_{tag}.py").write_text("WORD = 'from a sibling'\n")
    (folder / f"lazy_{tag}.py").write_text("WORD = 'imported at call time'\n")
    (folder / f"bot_{tag}.py").write_text(
        f"import helpers_{tag}\n"
        "def ask(request):\n"
        f"    import lazy_{tag}\n"
        f"    return {{'answer': helpers_{tag}.WORD + ', ' + lazy_{tag}.WORD}}\n"
    )
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # whatever the load adds is undone
    if form == "path":
        monkeypatch.chdir(tmp_path)  # not the file's folder
        spec = f"mybot/bot_{tag}.py:ask"
    else:
        monkeypatch.chdir(folder)
        spec = f"bot_{tag}:ask"
    assert ask(CallableTarget.from_spec(spec)).response.answer == "from a sibling, imported at call time"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("justamodule", "expected python:package.module:function"),
        (":ask", "expected python:package.module:function"),
        ("no_such_module_xyz:ask", "no module named 'no_such_module_xyz'"),
        ("json:no_such_function", "module 'json' has no attribute 'no_such_function'"),
        ("json:JSONDecoder", "is a class"),
        ("json:__name__", "is a str"),
        ("missing/file.py:ask", "file not found"),
    ],
)
def test_bad_specs_are_input_errors(spec: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        load_callable(spec)
    assert message in str(e.value)
    assert e.value.problems[0].field == "--target"


def test_module_that_fails_to_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = write_module(tmp_path, monkeypatch, "import not_installed_dependency_xyz\n")
    with pytest.raises(InputError) as e:
        load_callable(f"{name}:ask")
    msg = str(e.value)
    assert f"cannot import '{name}'" in msg and "not_installed_dependency_xyz" in msg

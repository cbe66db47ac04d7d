"""CallableTarget: a chatbot that is a Python function (`--target python:pkg.module:function`)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem, TargetError
from evalkit.net.ratelimit import RateLimiter
from evalkit.schema import AskRequest, IndexingCoverage
from evalkit.targets.base import AskResult, parse_ask_response, request_dict
from evalkit.targets.workers import DaemonThreads, RaisedInWorker, WorkerFailed, WorkerProcesses

_FIELD = "--target"


def load_callable(spec: str) -> tuple[Callable[..., Any], Any]:
    """Import `pkg.module:function` (or `path/to/file.py:function`) and return it with its module.

    The attribute may be dotted (`module:bot.ask` for a method of a module-level object).
    The current directory is importable, as it is for `python -m`; a file's own folder is
    too (first on sys.path, as `python path/to/file.py` puts it), so either form imports
    the modules beside the file.

    Raises:
        InputError: bad spec, module not importable, attribute missing or not callable.
    """
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise InputError(
            Problem(f"expected python:package.module:function, got 'python:{spec}'", field=_FIELD)
        )
    try:
        module = _import_module(module_part)
    except InputError:
        raise
    except Exception as e:  # the user's module raised while importing: show where
        last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
        where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
        raise InputError(
            Problem(f"cannot import '{module_part}': {type(e).__name__}: {e}{where}", field=_FIELD)
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(
                Problem(f"module '{module_part}' has no attribute '{attr}'", field=_FIELD)
            )
        obj = getattr(obj, part)
    if inspect.isclass(obj) or not callable(obj):
        what = "a class" if inspect.isclass(obj) else f"a {type(obj).__name__}"
        raise InputError(
            Problem(
                f"'{module_part}:{attr}' is {what}; point at a function taking the request dict",
                field=_FIELD,
            )
        )
    return obj, module


def _import_module(name: str) -> Any:
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise InputError(Problem("file not found", path=name, field=_FIELD))
        # As `python path/bot.py` would: the file's folder first on sys.path, so that it imports
        # the modules beside it (`import helpers`), at load or later, as `python:bot:ask` run
        # from that folder does. Kept there: a function may import them when it is called.
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        mod_name = f"evalkit_target_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        if module_spec is None or module_spec.loader is None:
            raise InputError(Problem("cannot load as a Python module", path=name, field=_FIELD))
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        module_spec.loader.exec_module(module)
        return module
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        # `python scripts/run_eval.py` puts scripts/ first on sys.path, not the cwd;
        # appended (not prepended) so a user's file never shadows an installed package.
        sys.path.append(cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and (name == e.name or name.startswith(e.name + ".")):
            raise InputError(
                Problem(f"no module named '{e.name}' (is it installed or in the current directory?)", field=_FIELD)
            ) from None
        raise


class CallableTarget:
    """Calls a Python function with the request dict (the JSON body plus "debug": True).

    The function returns the response as a dict or an object with `model_dump()`.
    Sync functions run in worker threads of the target's own pool, so they don't stall the
    event loop and `--concurrency N` calls run at once (asyncio's default pool holds
    min(32, cores + 4) threads: 6 on a 2-core machine, whatever --concurrency said); async
    functions are awaited. If the function raises, that case is recorded as a
    TargetError of kind "exception" (the system failed on it) and the run goes on.
    The threads are daemons: one stuck in a call that never returns is abandoned at the
    timeout (a new thread takes the next call) and cannot keep the process from exiting.

    Threads share one core for Python code (the GIL), so a function that computes rather
    than waits (a local retriever in pure Python) gains nothing from more of them. With
    `processes=N` (`--target-processes N`) a sync function runs in N worker processes
    instead, each importing its module once (spawned: nothing of the run's own process is
    inherited); the request goes to them and the answer comes back pickled. A worker that
    dies (os._exit, a segfault) fails only the case it was running, with its exit code in
    the detail; one that overruns the timeout is killed; either is replaced for the next
    case. What the function raises comes back as text (type, message), so an exception that
    cannot be unpickled is an error of its case like any other.

    Args:
        fn: the chatbot function.
        name: how the target is named in results (default: the function's qualname).
        timeout: seconds per call, or None. A sync function that overruns keeps running in
            its (daemon) thread; only the wait is abandoned. In a worker process, the process
            is killed; the wait for a free worker process does not count.
        rps: at most this many calls per second; None = no limit.
        params: free `--param key=value` options, put into the request's `options`.
        index_stats_fn: optional zero-argument function returning the indexing_coverage dict.
        concurrency: the most calls of a sync function at once (the run's --concurrency);
            None: up to MAX_THREADS. Threads start as calls need them.
        processes: run a sync function in this many worker processes instead of threads;
            needs `spec` (what each process imports). None: threads.
        spec: `pkg.module:function` or `path.py:function`, as `from_spec` was given it.
    """

    MAX_THREADS = 256

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        timeout: float | None = None,
        rps: float | None = None,
        params: dict[str, Any] | None = None,
        index_stats_fn: Callable[[], Any] | None = None,
        concurrency: int | None = None,
        processes: int | None = None,
        spec: str | None = None,
    ):
        if processes is not None:
            if spec is None:
                raise ValueError("processes needs the spec each worker process imports")
            if _is_async(fn):
                raise InputError(Problem(
                    f"--target-processes runs a sync function in worker processes; python:{spec} is async "
                    "(its calls already overlap in the run's event loop): leave --target-processes out",
                    field="--target-processes",
                ))
        self.fn = fn
        # Asked once, not per call (inspect's checks cost a few microseconds a case).
        self._fn_is_async = _is_async(fn)
        self.concurrency = concurrency
        self.processes = processes
        self._spec = spec
        self._threads: DaemonThreads | None = None
        self._workers: WorkerProcesses | None = None
        self.name = name or f"python:{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        self.timeout = timeout
        self.rps = rps or None
        self.params = dict(params or {})
        self._limiter = RateLimiter(rps) if rps else None
        self._index_stats_fn = index_stats_fn

    @classmethod
    def from_spec(cls, spec: str, **kwargs: Any) -> CallableTarget:
        """Build from `pkg.module:function` (without the `python:` prefix).

        If the module also defines a callable `index_stats()`, it is used for the
        indexing-coverage stats.
        """
        fn, module = load_callable(spec)
        stats = getattr(module, "index_stats", None)
        kwargs.setdefault("index_stats_fn", stats if callable(stats) and stats is not fn else None)
        return cls(fn, name=f"python:{spec}", spec=spec, **kwargs)

    def _in_processes(self, fn: Callable[..., Any]) -> bool:
        return self.processes is not None and fn is self.fn

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._fn_is_async if fn is self.fn else _is_async(fn):
            result = await fn(*args)
        else:
            if self._threads is None:
                self._threads = DaemonThreads(self.concurrency or self.MAX_THREADS, "evalkit-target")
            if self._in_processes(fn):
                if self._workers is None:
                    self._workers = WorkerProcesses(self.processes or 1, _load_in_worker, self._spec or "", list(sys.path))
                # a thread waits for the worker's answer and enforces the timeout (killing the worker)
                call = functools.partial(self._workers.call, *args, self.timeout)
            else:
                # as asyncio.to_thread, which runs in the loop's default pool: the caller's context goes along
                call = functools.partial(contextvars.copy_context().run, fn, *args)
            future = self._threads.submit(call)
            try:
                result = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                self._threads.abandon(future)  # at the timeout: the thread may be stuck for good
                raise
        if type(result) is not dict and inspect.isawaitable(result):  # a dict, the usual answer, is not
            result = await result
        return result

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """Call the function once.

        Raises:
            TargetError: "exception" if it raised, "timeout" if it overran,
                "invalid_response" if it returned something that is not the contract.
        """
        if self._limiter is not None:
            await self._limiter.acquire()
        payload = request_dict(request, self.params)
        try:
            if self.timeout and not self._in_processes(self.fn):
                # asyncio.timeout, not wait_for: on 3.11 wait_for wraps the call in a task of its own
                async with asyncio.timeout(self.timeout):
                    result = await self._call(self.fn, payload)
            else:
                result = await self._call(self.fn, payload)
        except TargetError:
            raise
        except RaisedInWorker as e:
            raise TargetError("exception", f"{self.name} raised {e.type_name}: {e.message}") from None
        except WorkerFailed as e:
            raise TargetError(e.kind, f"{self.name}: {e.detail}") from None  # type: ignore[arg-type]
        except TimeoutError as e:
            # asyncio.timeout's TimeoutError carries no message; a user's TimeoutError usually does.
            detail = str(e) or (f"no answer within {self.timeout:g}s" if self.timeout else "TimeoutError")
            raise TargetError("timeout", f"{self.name}: {detail}") from None
        except Exception as e:
            raise TargetError("exception", f"{self.name} raised {type(e).__name__}: {e}") from None
        return parse_ask_response(_to_dict(result), request, source=f"{self.name} return value")

    async def index_stats(self) -> IndexingCoverage | None:
        """From the module's `index_stats()` when there is one; None otherwise or on error."""
        if self._index_stats_fn is None:
            return None
        try:
            raw = _to_dict(await self._call(self._index_stats_fn))
            return IndexingCoverage.model_validate(raw)
        except Exception:
            return None

    def describe(self) -> dict:
        """Target settings for config.json."""
        out = {
            "kind": "python",
            "target": self.name,
            "timeout_s": self.timeout,
            "rps": self.rps,
            "params": dict(self.params),
        }
        if self.processes is not None:
            out["processes"] = self.processes
        return out

    async def aclose(self) -> None:
        """Release the worker threads and processes. A call that overran its timeout may still
        be running in a thread: it is not waited for (the threads are daemons). Worker processes
        are stopped: idle ones exit, busy ones are killed. A user's `aclose`/`close` is theirs
        to call."""
        if self._workers is not None:
            self._workers.close()
            self._workers = None
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None


def _load_in_worker(spec: str) -> Callable[[Any], Any]:
    """In a worker process (`processes=`): the function, imported once, answering plain data
    (it travels back pickled)."""
    fn, _ = load_callable(spec)
    return lambda payload: _to_dict(fn(payload))


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _to_dict(result: Any) -> Any:
    """A dict as is, a pydantic-like object through model_dump(); anything else unchanged
    (parse_ask_response then says what it was)."""
    if type(result) is dict:
        return result
    dump = getattr(result, "model_dump", None)
    if callable(dump) and not isinstance(result, dict):
        try:
            return dump(mode="json")
        except TypeError:  # model_dump() without a mode parameter (not pydantic)
            return dump()
    return result

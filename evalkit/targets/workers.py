"""Where a sync `python:` target's calls run: daemon threads, or worker processes that are
replaced when one dies or hangs (issue 38 items 1 and 2).

concurrent.futures did both jobs before, and failed the run in two ways. Its thread pool's
threads are joined at interpreter exit, so one call that never returned kept run_eval alive
after every file was written. Its process pool breaks as a whole when one worker dies
(`os._exit`, a segfault, an exception that pickles but cannot be unpickled): every later case
was recorded as `BrokenProcessPool`, and a hung worker held its place for the rest of the run.

Here a worker process runs one call at a time, so when it dies only the case it was running
fails, with the exit code in the reason; a call past its timeout kills the process; the next
call starts a new one. Whatever the function raises is sent back as plain text (type name,
message, traceback), never as the exception object.
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import threading
import traceback
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

# A worker process that has not finished importing the target's module in this long (or the
# per-call timeout, if longer) is stopped: an import that hangs must not hold the run either.
START_TIMEOUT_S = 60.0
# At close, idle workers are asked to exit (their atexit handlers run); those still alive
# after this long are killed.
CLOSE_GRACE_S = 5.0


class _Job(Future):
    """A submitted call, with what `DaemonThreads` needs to know about its thread."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]):
        super().__init__()
        self.fn = fn
        self.args = args
        self.finished = False  # the call returned or raised (set under the pool's lock)
        self.abandoned = False  # its caller stopped waiting while it ran


class DaemonThreads:
    """Daemon worker threads for blocking calls, started as calls need them.

    Unlike concurrent.futures.ThreadPoolExecutor, whose threads are joined at interpreter exit,
    a thread stuck in a call that never returns cannot keep the process alive. A call whose
    caller stopped waiting (`abandon`, at its timeout) no longer counts against `max_threads`:
    the next call gets a thread of its own instead of waiting behind it, and the stuck thread
    ends when its call returns, if ever.

    `submit` returns a concurrent.futures.Future (asyncio.wrap_future awaits it).
    """

    def __init__(self, max_threads: int, name: str = "evalkit-target"):
        self._max = max_threads
        self._name = name
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._taking = 0  # threads that take calls (not counting abandoned ones)
        self._started = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        if self._closed:
            raise RuntimeError("DaemonThreads is closed")
        job = _Job(fn, args)
        self._queue.put(job)
        if self._idle.acquire(blocking=False):
            return job  # an idle thread takes it
        with self._lock:
            if self._taking < self._max:
                self._taking += 1
                self._started += 1
                threading.Thread(target=self._work, name=f"{self._name}_{self._started}", daemon=True).start()
        return job

    def abandon(self, future: Future) -> None:
        """The caller stopped waiting for `future`: cancelled if it has not started; if it is
        running, its thread stops counting, so a new one can take the next call."""
        if future.cancel() or not isinstance(future, _Job):
            return
        with self._lock:
            if not future.finished and not future.abandoned:
                future.abandoned = True
                self._taking -= 1

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                self._idle.release()
                job = self._queue.get()
            if job is None:
                return
            if not job.set_running_or_notify_cancel():
                continue
            try:
                result = job.fn(*job.args)
            except BaseException as e:  # as ThreadPoolExecutor: the caller decides what it means
                job.set_exception(e)
            else:
                job.set_result(result)
            with self._lock:
                job.finished = True
                if job.abandoned:
                    return  # already replaced
            del job

    def shutdown(self) -> None:
        """Cancel the calls not started and let idle threads end; running calls are not waited for."""
        self._closed = True
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
        with self._lock:
            for _ in range(self._taking):
                self._queue.put(None)


class RaisedInWorker(Exception):
    """What the target's function raised in a worker process, as text: the exception itself may
    not survive the trip back (one whose __init__ takes two arguments pickles but does not
    unpickle, and broke concurrent.futures' pool)."""

    def __init__(self, type_name: str, message: str, traceback_text: str = ""):
        super().__init__(type_name, message, traceback_text)
        self.type_name = type_name
        self.message = message
        self.traceback_text = traceback_text


class WorkerFailed(Exception):
    """A call in a worker process got no answer: the process died, hung past the timeout,
    could not start, or the answer could not travel back. `kind` is the TargetError kind."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class _Worker:
    def __init__(self, process: Any, conn: Any):
        self.process = process
        self.conn = conn


_POOLS: weakref.WeakSet[WorkerProcesses] = weakref.WeakSet()
_ATEXIT = False


def _kill_all_workers() -> None:
    # Runs before multiprocessing's own exit handler (registered earlier, so run later), which
    # joins every live child: a hung worker of a pool nobody closed must not hold the exit.
    for pool in list(_POOLS):
        pool.close(grace=0.0)


class WorkerProcesses:
    """Up to `n` spawned worker processes, each running one call of the target at a time.

    `call` blocks (run it in a thread). A worker imports the function once, through
    `load(spec)` (a module-level function: it travels by name), with the run's `sys.path`.

    Args:
        n: worker processes at most (`--target-processes`).
        load: `load(spec)` in the worker returns the function to call with each payload; what
            the function returns must pickle.
        spec: what `load` is given.
        path: the run's sys.path, for the workers.
    """

    def __init__(self, n: int, load: Callable[[str], Callable[[Any], Any]], spec: str, path: list[str]):
        global _ATEXIT
        import multiprocessing
        import multiprocessing.util  # its exit handler is registered now, so ours (later) runs first

        self._ctx = multiprocessing.get_context("spawn")
        self._load = load
        self._spec = spec
        self._path = list(path)
        self._slots = threading.Semaphore(n)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._closed = False
        _POOLS.add(self)
        if not _ATEXIT:
            atexit.register(_kill_all_workers)
            _ATEXIT = True

    def call(self, payload: Any, timeout: float | None) -> Any:
        """Run the function on `payload` in a worker; its return value.

        Waiting for a free worker does not count against `timeout`: the timeout is the call's.

        Raises:
            RaisedInWorker: the function raised.
            WorkerFailed: no answer (the worker died, overran `timeout` and was killed, could
                not start, or its answer could not be sent back).
        """
        from multiprocessing.connection import wait

        with self._slots:
            worker = self._ready_worker(payload, timeout)
            ready = wait([worker.conn, worker.process.sentinel], timeout)
            if not ready:
                self._stop(worker)
                raise WorkerFailed(
                    "timeout", f"no answer within {timeout:g}s; its worker process was stopped and replaced"
                )
            try:
                reply = worker.conn.recv() if worker.conn in ready else None
            except (EOFError, OSError):
                reply = None
            except Exception as e:  # the answer arrived whole but does not unpickle here
                self._give_back(worker)
                raise WorkerFailed(
                    "invalid_response",
                    f"its answer cannot be read back from the worker process ({_describe(e)}); "
                    "return plain data (dicts, lists, strings, numbers) or a pydantic model",
                ) from None
            if reply is None:
                raise WorkerFailed("exception", f"the target's worker process died ({self._reap(worker)}) "
                                                "during this case; a new one takes the next")
            self._give_back(worker)
        status, *rest = reply
        if status == "ok":
            return rest[0]
        if status == "raised":
            raise RaisedInWorker(*rest)
        raise WorkerFailed("invalid_response", f"its answer cannot be sent back from the worker process "
                                               f"({rest[0]}); return plain data or a pydantic model")

    def _ready_worker(self, payload: Any, timeout: float | None) -> _Worker:
        """An idle worker (or a new one) that has been sent `payload`. A worker found dead before
        it took the request is not this case's failure: another is tried."""
        for _ in range(3):
            worker = self._take(timeout)
            try:
                worker.conn.send(payload)
            except (BrokenPipeError, ConnectionResetError, EOFError):
                self._reap(worker)
                continue
            except Exception as e:  # the payload does not pickle (a request is plain data: our bug)
                self._give_back(worker)
                raise WorkerFailed("exception", f"the request cannot be sent to the worker process: {_describe(e)}") from e
            return worker
        raise WorkerFailed("exception", "the target's worker processes died before taking the request, 3 times")

    def _take(self, timeout: float | None) -> _Worker:
        while True:
            with self._lock:
                if self._closed:
                    raise WorkerFailed("exception", "the target was closed")
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                return self._start(max(START_TIMEOUT_S, timeout or 0.0))
            if worker.process.is_alive():
                return worker
            self._reap(worker)  # died while idle (a thread of the target's own, say)

    def _start(self, start_timeout: float) -> _Worker:
        from multiprocessing.connection import wait

        parent_conn, child_conn = self._ctx.Pipe()
        process = self._ctx.Process(
            target=_worker_main, args=(child_conn, self._load, self._spec, self._path),
            name="evalkit-target-worker",
        )
        process.start()
        child_conn.close()
        worker = _Worker(process, parent_conn)
        with self._lock:
            self._all.add(worker)
            closed = self._closed
        if closed:
            self._stop(worker)
            raise WorkerFailed("exception", "the target was closed")
        if not wait([parent_conn, process.sentinel], start_timeout):
            self._stop(worker)
            raise WorkerFailed("timeout", f"its worker process did not load {self._spec} within {start_timeout:g}s")
        try:
            status, detail = parent_conn.recv()
        except (EOFError, OSError):
            raise WorkerFailed(
                "exception", f"the target's worker process died while loading {self._spec} ({self._reap(worker)})"
            ) from None
        if status != "ready":
            self._stop(worker)
            raise WorkerFailed("exception", f"the target's worker process cannot load {self._spec}: {detail}")
        return worker

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(worker)
                return
        self._stop(worker)

    def _stop(self, worker: _Worker) -> None:
        """Kill the worker (it hung, or the pool closed) and reap it."""
        try:
            worker.process.kill()
        except (OSError, ValueError):
            pass
        self._reap(worker)

    def _reap(self, worker: _Worker) -> str:
        """Forget a dead (or killed) worker; how it ended, e.g. "exit code -11 / SIGSEGV"."""
        worker.process.join(CLOSE_GRACE_S)
        code = worker.process.exitcode
        worker.conn.close()
        try:
            worker.process.close()
        except ValueError:  # still running (join gave up): leave it to the OS
            pass
        with self._lock:
            self._all.discard(worker)
        return exit_reason(code)

    def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Stop every worker: idle ones are told to exit (closing their pipe) and given `grace`
        seconds; busy ones, and any still alive after that, are killed. Never waits for a call."""
        from multiprocessing.connection import wait

        with self._lock:
            self._closed = True
            idle = set(self._idle)
            workers = list(self._all)
            self._idle.clear()
        for worker in workers:
            if worker in idle:
                worker.conn.close()
            else:
                _kill(worker)
        alive = [w for w in workers if _alive(w)]
        if alive and grace > 0:
            wait([w.process.sentinel for w in alive], grace)
        for worker in workers:
            if _alive(worker):
                _kill(worker)
            try:
                worker.process.join(1.0)
            except (AssertionError, ValueError):
                pass


def _alive(worker: _Worker) -> bool:
    try:
        return worker.process.is_alive()
    except ValueError:  # closed: reaped already
        return False


def _kill(worker: _Worker) -> None:
    try:
        worker.process.kill()
    except (OSError, ValueError, AttributeError):
        pass


def exit_reason(code: int | None) -> str:
    """A process's exit code as people read it: "exit code 3", "exit code -11 / SIGSEGV"."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"exit code {code} / {signal.Signals(-code).name}"
        except ValueError:
            return f"exit code {code} / signal {-code}"
    return f"exit code {code}"


def _describe(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # a __str__ that raises
        text = "(no message)"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# --------------------------------------------------------------------------- in the worker


def _worker_main(conn: Any, load: Callable[[str], Callable[[Any], Any]], spec: str, path: list[str]) -> None:
    """A worker process: load the function, then answer one payload at a time until the pipe
    closes. Every reply is plain data: ("ok", value), ("raised", type name, message,
    traceback) or ("unsendable", reason)."""
    import multiprocessing
    import sys

    # Ctrl-C reaches the whole process group; the run's process handles it and stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:  # the run's process died (SIGKILL): do not outlive it in a hung call
        threading.Thread(target=_exit_with, args=(parent.sentinel,), daemon=True).start()
    sys.path[:] = path
    try:
        fn = load(spec)
    except BaseException as e:
        conn.send(("error", _describe(e)))
        return
    conn.send(("ready", None))
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[Any, ...] = ("ok", fn(payload))
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: they are the case's
            try:
                message = str(e)
            except Exception:
                message = "(no message)"
            reply = ("raised", type(e).__name__, message, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as e:  # the answer does not pickle; nothing was written yet
            conn.send(("unsendable", _describe(e)))


def _exit_with(sentinel: Any) -> None:
    from multiprocessing.connection import wait

    wait([sentinel])
    os._exit(0)

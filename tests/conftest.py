"""Suite-wide hygiene: no real keys, no proxies, no network by accident."""

from __future__ import annotations

import os

import pytest

from tests.support import SCRUB_PREFIXES, SCRUB_PROXY

# The ranx cross-checks run ranx's metric code as plain Python: the same source numba would
# compile (ranx uses no fastmath), without the minute a cold numba spends compiling it in every
# new virtual environment. NUMBA_DISABLE_JIT=0 pytest ... runs them compiled.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(SCRUB_PREFIXES) or name in SCRUB_PROXY:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ranx cross-checks (marked xdist_group("ranx")) run first, on one xdist worker.

    They are the suite's longest single tests (SciFact's BM25 run). Started first, they overlap
    the rest of the suite instead of trailing it; with the JIT on (NUMBA_DISABLE_JIT=0), ranx's
    kernels compile once, on one worker, not once per worker.
    """
    def is_ranx(item: pytest.Item) -> bool:
        mark = item.get_closest_marker("xdist_group")
        return mark is not None and (mark.args or [mark.kwargs.get("name")])[0] == "ranx"

    items.sort(key=lambda item: not is_ranx(item))  # stable: the rest keep their order


# Tests must never leave files in the checkout: a run gated against a baseline locks the eval
# set it read in an eval_sets.lock beside it, so a test that gates with the repository's own
# eval_set.jsonl would write one here. The controller (not an xdist worker) checks at the end.
_REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
_STRAYS = ("eval_sets.lock",)
_BEFORE: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _BEFORE.update(name for name in _STRAYS if (_REPO / name).exists())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):
        return
    strays = [name for name in _STRAYS if (_REPO / name).exists() and name not in _BEFORE]
    if strays:
        print(f"\ntests left {', '.join(strays)} in the checkout: a test gated with the repository's own eval set")
        session.exitstatus = 1

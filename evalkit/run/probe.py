"""One request before the first case: is the target there, and does it speak the contract?

Without it, an unreachable URL or a server that is not a chatbot turns every case into an
error, and the run writes a folder of zeros. The probe sends the first case's request
once, with no retries and a short timeout (its answer is not recorded; the case is asked
again in the run), and stops the run with one line (exit 2) when:

- the target cannot be reached (connection refused, DNS, TLS) or does not answer in time;
- it answers 404/405 (no /api/v1/ask there), 401/403 (credentials), or another 4xx (it
  rejects a contract request, e.g. an unknown vault);
- it answers something that is not the contract's JSON.

An answer that is the contract's JSON but breaks one of its rules (`evalkit.targets.contract`:
heading paths without `#` levels, repeated chunk ids, ...) does not stop the run: the probe
records the broken rules under `contract` and the run prints them before the first case.

A 429 passes: the target is there and speaks HTTP; the run's own rate limiting and
retries handle it. A 5xx, or an exception raised by a python-callable target, passes too,
recorded as `{"ok": false, ...}`: the target is there and speaks the contract, and the
failure may belong to this one question; the run records each failing case, and a target
that fails them all ends as an incomplete run (exit 3). The probe's question is not an eval case and nothing of it is stored.
Replayed logs (no live system) are not probed, nor the in-process reference chatbot (our
own code) unless a scope is sent, which it may refuse (an unknown vault), or a --param, which it may not know. `--no-probe` skips it, e.g. for a target that bills every question.
"""

from __future__ import annotations

from typing import Any

from evalkit.errors import BadConfig, Problem, TargetError
from evalkit.schema import AskRequest
from evalkit.targets.contract import check_answer, chunks_of

__all__ = ["PROBE_QUESTION", "probe_target", "probe_failure"]

PROBE_QUESTION = "What is in these notes?"
PROBE_TIMEOUT_S = 10.0


def probe_failure(error: TargetError, where: str, flag: str = "--api-url") -> Problem:
    """The one line that says why the target cannot be used, and what to check."""
    status = error.status
    if error.kind == "connect":
        msg = f"cannot reach {where}: {error.detail}"
    elif error.kind == "timeout":
        msg = f"{where} did not answer a probe request: {error.detail}"
    elif error.kind == "invalid_response":
        msg = f"{where} does not speak the /api/v1/ask contract: {error.detail}"
    elif status in (404, 405):
        msg = f"{where} has no /api/v1/ask (HTTP {status}): is it the API's base URL?"
    elif status in (401, 403):
        msg = f"{where} refused the request (HTTP {status}): check EVAL_API_KEY"
    elif status is not None and status < 500:
        msg = f"{where} rejected a contract request (HTTP {status}): {error.detail}"
    elif status is not None:
        msg = f"{where} is failing (HTTP {status} to a probe request): {error.detail}"
    else:
        msg = f"{where} failed a probe request ({error.kind}): {error.detail}"
    return Problem(msg + " (--no-probe skips this check)", field=flag)


async def probe_target(settings: Any, target: Any, first_case: Any = None) -> dict[str, Any] | None:
    """Ask the target one question before the run. Returns what config.json records
    ({"ok", "ms", "attempts"}), or None when this target is not probed.

    Args:
        settings: the run's RunSettings.
        target: the run's target (used as is for a python callable; an HTTP target is
            probed through a twin with no retries, so a dead URL fails in seconds).
        first_case: the first case to run: the probe sends its request (with its scope
            under `--send-scope`, so a vault the target does not serve is found before the
            run, not 59 times). Without one, a generic question.

    Raises:
        BadConfig: the target cannot be used (see the module docstring).
    """
    import time

    kind = settings.hashed()["target_kind"]
    if settings.no_probe or kind == "replay" or (kind == "reference" and settings.send_scope == "none" and not settings.params):
        return None
    if first_case is not None:
        from evalkit.run.records import build_request

        # The first case's own request: a question the system is meant to handle, so a
        # failure says something about the target, not about an odd probe question.
        request = build_request(first_case, settings)
    else:
        request = AskRequest(
            question=PROBE_QUESTION, k=1, folder_mode=settings.folder_mode, options=dict(settings.params), debug=True
        )
    twin = None
    if kind in ("http", "https"):
        from evalkit.targets import build_target

        twin = build_target(
            target=settings.target,
            api_url=settings.api_url or None,
            vault=settings.vault,
            timeout=min(settings.timeout, PROBE_TIMEOUT_S),
            retries=0,
            rps=None,
            params=dict(settings.params),
            max_response_bytes=settings.max_response_bytes,
        )
    desc = (twin or target).describe()
    if desc.get("api_url"):
        where, flag = f"the target at {desc['api_url']}", "--api-url"
    elif kind == "reference":
        where, flag = f"the reference chatbot over {desc.get('vault')}", "--vault"
    else:
        where, flag = f"the target {desc.get('target') or settings.target}", "--target"
    t0 = time.perf_counter()
    try:
        answer = await (twin or target).ask(request, case_id=None)
    except TargetError as e:
        ms = round((time.perf_counter() - t0) * 1000, 3)
        if e.kind == "http_error" and e.status == 429:
            return {"ok": True, "ms": ms, "status": 429}
        if e.kind == "exception" or (e.kind == "http_error" and (e.status is None or e.status >= 500)):
            return {"ok": False, "ms": ms, "error": e.to_record()}
        raise BadConfig(probe_failure(e, str(where), flag)) from None
    finally:
        if twin is not None:
            await twin.aclose()
    out: dict[str, Any] = {"ok": True, "ms": round((time.perf_counter() - t0) * 1000, 3)}
    # The answer speaks the contract's JSON; does it keep the contract's rules (heading path
    # form, unique ids, ranks, relative paths)? Said before the run, not after a 0.
    broken = check_answer(chunks_of(answer.response))
    if broken:
        out["contract"] = broken
    # A target may name the request options it does not know (`debug.ignored_options`, as the
    # reference chatbot does): a --param that changes nothing is said before the run.
    ignored = getattr(answer.response.debug, "ignored_options", None) if answer.response.debug else None
    if isinstance(ignored, list) and ignored:
        out["ignored_options"] = [str(o) for o in ignored]
    return out
